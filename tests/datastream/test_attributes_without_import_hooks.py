"""A transformation's operator attributes do not depend on what was imported before: a fresh
interpreter that imports only the user API sees a co_group over EndOfStreamWindows emit only at
end of input and sort its backlog, as the planner does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys
    from slipstream.datastream import StreamExecutionEnvironment
    from slipstream.datastream.window import EndOfStreamWindows, TumblingEventTimeWindows

    env = StreamExecutionEnvironment.get_execution_environment()
    a, b = env.from_collection([(1, "a")]), env.from_collection([(1, "b")])

    def co_group(assigner):
        return a.co_group(b).where(lambda r: r[0]).equal_to(lambda r: r[0]).window(assigner) \\
            .apply(lambda xs, ys: [len(list(xs)) + len(list(ys))]).get_transformation()

    operators_loaded_before = "slipstream.operators" in sys.modules
    end_of_stream, tumbling = co_group(EndOfStreamWindows.get()), co_group(TumblingEventTimeWindows.of(10))
    print(json.dumps({
        "operators_loaded_before": operators_loaded_before,
        "end_of_stream": [end_of_stream.get_is_output_on_eof(), end_of_stream.get_has_internal_sorter()],
        "tumbling": [tumbling.get_is_output_on_eof(), tumbling.get_has_internal_sorter()],
    }))
""")


def test_a_co_group_over_end_of_stream_windows_emits_at_end_in_a_fresh_interpreter() -> None:
    environment = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                            env=environment, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"operators_loaded_before": False, "end_of_stream": [True, True], "tumbling": [False, True]}

"""pyarrow imports pandas (when installed) on its first conversion of Python values, half a second:
a checkpointing job has it done in its own thread as checkpointing starts, never in the thread that
writes the first checkpoint while the stream goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pandas")  # installed with the spark extra, as in the project's environment

JOB = textwrap.dedent("""
    import sys, threading

    importers = []

    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name == "pandas":
                importers.append(threading.current_thread().name)
            return None

    sys.meta_path.insert(0, Watch())
    from slipstream.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(10)
    env.get_checkpoint_config().set_checkpoint_storage_dir(sys.argv[1]).set_async_write_threshold(0)
    env.from_collection(list(range(20_000))).key_by(lambda x: x % 1000).reduce(lambda a, b: a + b) \\
        .add_sink(lambda value: None)
    result = env.execute("warm")
    assert result.get_accumulator_result("checkpoints")["completed"] >= 1
    print(importers)
""")


def test_pandas_is_imported_in_the_jobs_thread_not_the_checkpoint_writers(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-c", JOB, str(tmp_path / "chk")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "['MainThread']"

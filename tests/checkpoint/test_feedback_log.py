"""Checkpoints in cycles (FLINK-3257): a loop head's task logs what comes back round the loop
between forwarding a barrier and receiving it back (``runtime.checkpoint.feedback_log``), and
a restore replays that log first. Killed processes: ``test_loop_kills.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from slipstream.datastream import StreamExecutionEnvironment

pytestmark = pytest.mark.one_process("its fault injector fails once by an attribute of its function, which a restarted "
                                     "worker gets afresh")


class FailOnceAt:
    """Raises the first time it sees ``record`` (the same object keeps its memory across restarts)."""

    def __init__(self, record: tuple) -> None:
        self.record = record
        self.seen = 0

    def __call__(self, record: tuple) -> tuple:
        if record == self.record:
            self.seen += 1
            if self.seen == 1:
                raise RuntimeError(f"injected failure at {record}")
        return record


def committed_lines(directory: Any) -> Counter:
    lines: Counter = Counter()
    for path in directory.iterdir() if directory.exists() else ():
        if not path.name.startswith((".", "_")):
            lines.update(path.read_text().splitlines())
    return lines


def checkpointed_loop_job(tmp_path: Any, n: int, fail: Callable[[tuple], tuple], parallelism: int,
                          seed: int) -> StreamExecutionEnvironment:
    from slipstream.datastream import RestartStrategies
    from slipstream.datastream.connectors.file_system import FileSink
    from slipstream.datastream.connectors.number_seq import NumberSequenceSource
    from slipstream.datastream.formats.base import Encoder

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, batch_size=8, channel_capacity=2, quantum=2, backlog_sorting=False)
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval_records(150)
    config.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))

    def countdown(records):  # type: ignore[no-untyped-def]
        stepped = records.map(fail).uid("hook").map(lambda r: (r[0], r[1] - 1, r[2] + 1)).uid("step")
        return stepped.filter(lambda r: r[1] > 0).uid("again").rebalance(), \
            stepped.filter(lambda r: r[1] <= 0).uid("done")

    (env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
     .map(lambda x: (x, x % 9 + 1, 0)).uid("rounds")
     .iterate(countdown)
     .map(lambda r: f"{r[0]},{r[2]}").uid("format")
     .sink_to(FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()).uid("sink"))
    return env


@pytest.mark.parametrize("parallelism,seed", [(1, 0), (2, 3), (3, 8)])
def test_a_checkpointed_loop_restarts_exactly_once(tmp_path: Any, parallelism: int, seed: int) -> None:
    """A failure inside the loop body restores the latest checkpoint: the records that were going
    round at that checkpoint come back from the head's log, nothing twice."""
    n = 1500
    fail = FailOnceAt((n // 2, 2, n // 2 % 9 + 1 - 2))
    env = checkpointed_loop_job(tmp_path, n, fail, parallelism, seed)
    result = env.execute("loop-restart")
    stats = result.get_accumulator_result("checkpoints")
    assert stats["restarts"] == 1 and stats["restored_from"] is not None and fail.seen >= 2
    assert committed_lines(tmp_path / "out") == Counter(f"{x},{x % 9 + 1}" for x in range(1, n + 1))

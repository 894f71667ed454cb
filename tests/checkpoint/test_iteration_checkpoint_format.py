"""Checkpoints of iterations and loops keep their persisted form: old checkpoints restore.

The termination protocol's commands and an iteration's round decisions are enums in the
code; what a checkpoint holds of them is their value, the plain string it always was.
``fixtures/iteration-chk`` holds checkpoints of :func:`build` written by the code before
those enums (commit a612b9c): the job ran with a checkpoint every 20 clock ticks of a clock
that moves 1 ms each time it is read, and three checkpoints were kept, taken while epochs
ran with commands queued at heads — ``inject`` (chk 33), ``release`` (chk 48, at the loop
in the body) and ``terminate`` (chk 51, the last round decided). Restoring each gives the
same final line as an uninterrupted run.
"""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from slipstream.datastream import OutputTag, ProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    IterationListener,
    iterate_bounded_streams_until_termination,
)
from slipstream.runtime.checkpoint.iteration_region import REGION_KIND
from slipstream.runtime.checkpoint.storage import CheckpointStorage

FIXTURES = Path(__file__).parent / "fixtures" / "iteration-chk"
CHECKPOINTS = ["chk-000033", "chk-000048", "chk-000051"]
N = 120
DATA = [1000 + x for x in range(1, 11)]
DONE = OutputTag("done")
RESULTS: list[Any] = []


def rounds(x: int) -> int:
    """How many epochs ``x`` goes round the iteration."""
    return x % 5 + 1


def laps(x: int) -> int:
    """How often ``x`` goes round the loop inside the body in every epoch."""
    return x % 3


class Step(ProcessFunction, IterationListener):
    """Sync: keeps the epoch's records; at the epoch watermark sends them round, or out at their last round."""

    def __init__(self) -> None:
        self.waiting: list[tuple[int, int]] = []

    def process_element(self, value: tuple[int, int], ctx: Any) -> None:
        self.waiting.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        for x, left in self.waiting:
            if left > 1:
                collector.collect((x, left - 1))
            else:
                context.output(DONE, (epoch_watermark, x))
        self.waiting = []


class Total(ProcessFunction, IterationListener):
    """At parallelism 1: what left the iteration, written once when it ends."""

    def __init__(self) -> None:
        self.count, self.total, self.last_epoch = 0, 0, 0

    def process_element(self, value: tuple[int, int], ctx: Any) -> None:
        epoch, x = value
        self.count, self.total, self.last_epoch = self.count + 1, self.total + x, max(self.last_epoch, epoch)

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        collector.collect((self.count, self.total, self.last_epoch))


def build(env: StreamExecutionEnvironment) -> None:
    """Numbers go round ``rounds(x)`` epochs (a variable, and a data stream), each epoch first round a
    loop ``laps(x)`` times; a criteria stream runs beside the feedback; one line leaves at the end."""

    def lap(records: Any) -> tuple[Any, Any]:
        stepped = records.map(lambda r: (r[0], r[1], r[2] - 1)).uid("lap")
        return stepped.filter(lambda r: r[2] > 0).uid("lap-again"), stepped.filter(lambda r: r[2] <= 0).uid("lap-out")

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        entering = variables.get(0).union(data.get(0)).map(lambda r: (r[0], r[1], laps(r[0]))).uid("laps")
        looped = entering.iterate(lap).map(lambda r: r[:2]).uid("laps-done")
        stepped = looped.process(Step()).uid("step")
        total = stepped.get_side_output(DONE).global_().process(Total()).uid("total").set_parallelism(1)
        return IterationBodyResult([stepped], [total], stepped.map(lambda r: r).uid("criteria"))

    numbers = env.from_collection([(x, rounds(x)) for x in range(1, N + 1)]).uid("numbers").set_parallelism(2)
    data = env.from_collection([(x, rounds(x)) for x in DATA]).uid("data")
    outputs = iterate_bounded_streams_until_termination(DataStreamList.of(numbers), DataStreamList.of(data), body)
    outputs.get(0).add_sink(collect).uid("sink")


def collect(line: tuple[int, int, int]) -> None:
    """The sink: a module function, so every copy of the job appends to the one list."""
    RESULTS.append(line)


def expected() -> tuple[int, int, int]:
    """The line of an uninterrupted run, in plain Python."""
    numbers = list(range(1, N + 1)) + DATA
    return len(numbers), sum(numbers), max(rounds(x) for x in numbers)


# the jobs below (the env fixture's): streaming at parallelism 2, in small batches through short channels
pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING), pytest.mark.parallelisms(2),
              pytest.mark.configure(batch_size=8, channel_capacity=2, quantum=2)]


class TickClock:
    """Processing time that moves 1 ms every time it is read: checkpoints every few scheduler turns."""

    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        self.now += 1
        return self.now

    def is_manual(self) -> bool:
        return True


class AsWritten:
    """Stands in for RoundRecord while a checkpoint is read: keeps the state as it was written."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.state = state


class AsWrittenUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("slipstream.runtime.termination", "RoundRecord"):
            return AsWritten
        return super().find_class(module, name)


def persisted_strings(path: Path) -> tuple[list[Any], list[Any]]:
    """The queued commands and the round decisions of the iteration checkpointed at ``path``, as written."""
    checkpoint = CheckpointStorage(str(path.parent)).read_verified(str(path), None)
    (entry,) = [e for e in checkpoint.manifest.operators.values() if e.kind == REGION_KIND]
    data = checkpoint.files[entry.subtasks[0].operator]
    assert b"HeadCommand" not in data and b"RoundDecision" not in data and b"HeadRole" not in data
    state = AsWrittenUnpickler(io.BytesIO(data)).load()
    commands = [command for task in state["tasks"] if "commands" in task["protocol"]
                for command, _ in task["protocol"]["commands"]]
    return commands, [r.state["decision"] for r in state["coordinator"][0]["progress"]["rounds"]]


def test_the_fixtures_hold_commands_and_decisions_as_strings() -> None:
    """What the restore test must read: every command and both decisions, persisted as plain strings."""
    commands, decisions = [], []
    for name in CHECKPOINTS:
        more_commands, more_decisions = persisted_strings(FIXTURES / name)
        commands, decisions = commands + more_commands, decisions + more_decisions
    assert set(commands) == {"inject", "release", "terminate"} and {type(c) for c in commands} == {str}
    assert set(decisions) == {"next", "terminate"} and {type(d) for d in decisions} == {str}


@pytest.mark.parametrize("name", CHECKPOINTS)
@pytest.mark.seeds(0, 5)
def test_an_iteration_checkpoint_written_before_the_enums_restores_to_the_uninterrupted_result(
        env: StreamExecutionEnvironment, tmp_path: Path, name: str) -> None:
    RESULTS.clear()
    shutil.copytree(FIXTURES, tmp_path / "chk")
    build(env)
    env.execute("restored", restore_from=str(tmp_path / "chk" / name))
    assert [expected()] == RESULTS


@pytest.mark.seeds(0)
def test_checkpoints_write_commands_and_decisions_as_the_strings_they_always_were(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    """A run checkpointing every 20 ticks gives the oracle, and its checkpoints hold plain strings."""
    RESULTS.clear()
    env.configure(clock=TickClock())
    env.get_checkpoint_config().set_checkpoint_interval(20).set_checkpoint_storage_dir(
        str(tmp_path / "chk")).set_num_retained_checkpoints(1000)
    build(env)
    env.execute("checkpointed")
    assert [expected()] == RESULTS
    commands, decisions = [], []
    for path in sorted((tmp_path / "chk").glob("chk-*")):
        more_commands, more_decisions = persisted_strings(path)
        commands, decisions = commands + more_commands, decisions + more_decisions
    assert {"inject", "terminate"} <= set(commands) and {type(c) for c in commands} == {str}
    assert set(decisions) == {"next", "terminate"} and {type(d) for d in decisions} == {str}

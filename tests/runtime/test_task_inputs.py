"""A task reads higher-priority channels first (feedback-first in loops), round robin within a priority."""

from slipstream.datastream.transformations import MapTransformation
from slipstream.operators.base import OperatorContext, StreamOperator
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.channels import Channel
from slipstream.testing import ManualClock
from slipstream.runtime.task import InputChannel, StreamTask, TaskProcessingTimeService


class Recorder(StreamOperator):
    """Remembers the first value of each batch it is given."""

    def __init__(self) -> None:
        super().__init__(MapTransformation(id=0, name="recorder"))
        self.seen: list = []

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        self.seen.append(batch.values[0])


def make_task(priorities: list[int]) -> tuple[StreamTask, list[Channel], Recorder]:
    clock = ManualClock()
    timers = TaskProcessingTimeService(clock)
    recorder = Recorder()
    recorder.setup(OperatorContext("recorder", None, 0, 1, 128, output=None,  # type: ignore[arg-type]
                                   processing_time_service=timers,
                                   metrics={"records_in": 0, "records_out": 0}))
    channels = [Channel(100) for _ in priorities]
    inputs = [InputChannel(channel, 0, priority=p) for channel, p in zip(channels, priorities)]
    return StreamTask("t", 0, [recorder], inputs, [], timers, clock, quantum=100), channels, recorder


def test_higher_priority_channel_is_drained_first() -> None:
    task, (regular, feedback), recorder = make_task([0, 1])
    for i in range(3):
        regular.push(RecordBatch([f"r{i}"]))
        feedback.push(RecordBatch([f"f{i}"]))
    task.step()
    assert recorder.seen == ["f0", "f1", "f2", "r0", "r1", "r2"]


def test_equal_priorities_alternate() -> None:
    task, (a, b), recorder = make_task([0, 0])
    for i in range(2):
        a.push(RecordBatch([f"a{i}"]))
        b.push(RecordBatch([f"b{i}"]))
    task.step()
    assert recorder.seen == ["a0", "b0", "a1", "b1"]

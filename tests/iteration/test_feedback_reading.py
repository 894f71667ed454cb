"""Feedback reading (FLIP-15 / issue 6): feedback-first by default; ``FEEDBACK_FIRST_WHEN_FULL``
reads the feedback first only while its in-memory buffer is at its budget. The head's reading
order differs; what the body sees does not (feedback waits at the head for its round)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import (
    MapFunction,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from slipstream.datastream.iteration import (
    DataStreamList,
    FeedbackReading,
    IterationBodyResult,
    IterationConfig,
    IterationListener,
    Iterations,
)
from slipstream.errors import InvalidProgramError
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.channels import Channel, SpillingChannel
from slipstream.runtime.clock import SystemClock
from slipstream.runtime.loop_task import IterationHeadTask
from slipstream.runtime.task import InputChannel, StreamTask, TaskProcessingTimeService

DONE = OutputTag("done")
ORDER: list[tuple[int, int]] = []  # what the body's first operator saw, in order
READ: list[tuple[int, int]] = []   # what the iteration head read, in order: (input index, record)
EPOCHS: list[int] = []


class Seen(MapFunction):
    def map(self, value: tuple[int, int]) -> tuple[int, int]:
        ORDER.append(value)
        return value


class Step(ProcessFunction, IterationListener):
    """Async: each record (i, r) goes round until r = 3."""

    def process_element(self, value: tuple[int, int], ctx: Any) -> Any:
        i, r = value
        return [(DONE, (i, r + 1))] if r + 1 >= 3 else [(i, r + 1)]

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        EPOCHS.append(epoch_watermark)


@pytest.fixture(autouse=True)
def _record_head_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def dispatch(task: IterationHeadTask, source: Any, element: Any, original: Any = IterationHeadTask._dispatch) -> None:
        if type(element) is RecordBatch:
            READ.extend((source.input_index, record) for record in element.values)
        original(task, source, element)

    monkeypatch.setattr(IterationHeadTask, "_dispatch", dispatch)


def run(reading: FeedbackReading, budget: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]], Counter,
                                                        list[int]]:
    ORDER.clear()
    READ.clear()
    EPOCHS.clear()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1) \
        .configure(scheduler_seed=3, batch_size=2, channel_capacity=2, quantum=1)
    env.runtime_options.channel_memory_budget = budget

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        step = variables.get(0).map(Seen()).process(Step())
        return IterationBodyResult([step], [step.get_side_output(DONE)])

    config = IterationConfig.new_builder().set_feedback_reading(reading).build()
    outputs = Iterations.iterate_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection([(i, 0) for i in range(60)])), DataStreamList.of(), config, body)
    got: Counter = Counter()
    outputs.get(0).add_sink(lambda record: got.update([record]))
    env.execute("feedback-reading")
    return list(READ), list(ORDER), got, list(EPOCHS)


def last_input(read: list[tuple[int, int]]) -> int:
    """Where the head read the last record of the iteration's input (not fed back)."""
    return max(position for position, (input_index, _) in enumerate(read) if input_index == 0)


def test_reading_order_differs_results_do_not() -> None:
    first_read, first_order, first_got, first_epochs = run(FeedbackReading.FEEDBACK_FIRST, budget=100_000)
    full_read, full_order, full_got, full_epochs = run(FeedbackReading.FEEDBACK_FIRST_WHEN_FULL, budget=100_000)
    assert first_read != full_read and sorted(first_read) == sorted(full_read)
    # the feedback waits at the head for its round, however it was read: the body sees the same
    assert first_order == full_order
    assert first_got == full_got == Counter((i, 3) for i in range(60))
    assert first_epochs == full_epochs == [1, 2, 3]
    # feedback-first reads what comes back before taking in more input; when-full (large
    # budget) takes its input in sooner
    assert last_input(full_read) < last_input(first_read)
    # with a tiny budget the feedback is "full" whenever it holds a record: it is read first,
    # exactly as feedback-first reads at that budget (which splits batches to fit it)
    tiny_read, tiny_order, tiny_got, _ = run(FeedbackReading.FEEDBACK_FIRST_WHEN_FULL, budget=1)
    assert tiny_got == first_got and tiny_order == first_order
    assert tiny_read == run(FeedbackReading.FEEDBACK_FIRST, budget=1)[0] != full_read


def test_a_feedback_channel_is_preferred_only_at_its_budget() -> None:
    regular = InputChannel(Channel(8, "in"), 0)
    feedback = InputChannel(SpillingChannel(2, "fb"), 1, first_when_full=True)
    task = StreamTask("t", 0, [object()], [regular, feedback], [],  # type: ignore[list-item]
                      TaskProcessingTimeService(SystemClock()), SystemClock(), 1)
    regular.channel.push(RecordBatch([1]))
    regular.channel.push(RecordBatch([2]))
    feedback.channel.push(RecordBatch(["a"]))
    assert not feedback.channel.is_at_budget()
    chosen = [task._choose_input(), task._choose_input()]  # in turn: one of each
    assert set(map(id, chosen)) == {id(regular), id(feedback)}
    feedback.channel.push(RecordBatch(["b"]))
    assert feedback.channel.is_at_budget()
    assert task._choose_input() is feedback  # at its budget: first


def test_config_checks() -> None:
    assert IterationConfig().get_feedback_reading() is FeedbackReading.FEEDBACK_FIRST
    with pytest.raises(InvalidProgramError, match="FeedbackReading"):
        IterationConfig.new_builder().set_feedback_reading("when full")  # type: ignore[arg-type]

"""Feedback reading (FLIP-15 / issue 6): feedback-first by default; ``FEEDBACK_FIRST_WHEN_FULL``
reads the feedback first only while its in-memory buffer is at its budget. The reading order
differs, the results do not."""

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
from slipstream.runtime.task import InputChannel, StreamTask, TaskProcessingTimeService

DONE = OutputTag("done")
ORDER: list[tuple[int, int]] = []  # what the body's first operator saw, in order
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


def run(reading: FeedbackReading, budget: int) -> tuple[list[tuple[int, int]], Counter, list[int]]:
    ORDER.clear()
    EPOCHS.clear()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1) \
        .configure(scheduler_seed=3, batch_size=2, channel_capacity=1, quantum=1)
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
    return list(ORDER), got, list(EPOCHS)


def last_input(order: list[tuple[int, int]]) -> int:
    """Where the last record of the iteration's input (not fed back) was read."""
    return max(position for position, (_, r) in enumerate(order) if r == 0)


def test_reading_order_differs_results_do_not() -> None:
    first_order, first_got, first_epochs = run(FeedbackReading.FEEDBACK_FIRST, budget=100_000)
    full_order, full_got, full_epochs = run(FeedbackReading.FEEDBACK_FIRST_WHEN_FULL, budget=100_000)
    assert first_order != full_order
    assert sorted(first_order) == sorted(full_order)
    assert first_got == full_got == Counter((i, 3) for i in range(60))
    assert first_epochs[0] == full_epochs[0] == 1  # async: how many epochs a run takes depends on timing
    # feedback-first finishes what goes round before taking in more input; when-full (large
    # budget) takes its input in sooner
    assert last_input(full_order) < last_input(first_order)
    # with a tiny budget the feedback is "full" whenever it holds a record: read first again
    tiny_order, tiny_got, _ = run(FeedbackReading.FEEDBACK_FIRST_WHEN_FULL, budget=1)
    assert tiny_got == first_got and sorted(tiny_order) == sorted(first_order)
    assert last_input(full_order) < last_input(tiny_order)


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

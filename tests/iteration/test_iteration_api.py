"""The iteration API: names (seed's and Flink ML's), per-round operators, and the graph-time checks."""

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
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBody,
    IterationBodyResult,
    IterationConfig,
    IterationListener,
    Iterations,
    OperatorLifeCycle,
    ReplayableDataStreamList,
    iterate_and_replay_bounded_streams_until_termination,
    iterate_bounded_streams_until_termination,
    iterate_unbounded_streams,
)
from slipstream.errors import InvalidProgramError

SUMS = OutputTag("sums")
CONTINUE = OutputTag("continue")


def env(parallelism: int = 2) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism) \
        .configure(channel_capacity=2, quantum=2)


def test_data_stream_lists() -> None:
    e = env()
    a, b = e.from_collection([1]), e.from_collection([2])
    streams = DataStreamList.of(a, b)
    assert streams.size() == 2 and streams.get(1) is b and streams.get_data_streams() == [a, b]
    with pytest.raises(InvalidProgramError, match="no index 2"):
        streams.get(2)
    replayable = ReplayableDataStreamList.replay(a).and_not_replay(b)
    assert replayable.get_replayed_data_streams() == [a] and replayable.get_non_replayed_data_streams() == [b]
    assert ReplayableDataStreamList.not_replay(b).and_replay(a).replayed == [a]
    assert IterationConfig.new_builder().set_operator_life_cycle(OperatorLifeCycle.PER_ROUND).build() \
        .get_operator_life_cycle() is OperatorLifeCycle.PER_ROUND


class SumPerRound(ProcessFunction, IterationListener):
    """Sums what it sees; a per-round instance starts from zero every round."""

    def __init__(self) -> None:
        self.total = 0

    def process_element(self, value: Any, ctx: Any) -> None:
        self.total += value if isinstance(value, int) else 0

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        context.output(SUMS, (epoch_watermark, self.total))


class Count(MapFunction, IterationListener):
    def map(self, value: Any) -> Any:
        return value

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if epoch_watermark < 3:
            collector.collect(epoch_watermark + 1)


@pytest.mark.parametrize("style", ["seed", "flink_ml", "for_each_round"])
def test_replayed_data_reaches_a_fresh_operator_every_round(style: str) -> None:
    e = env(2)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        counter = variables.get(0).flat_map(lambda v: []).map(Count(), output_type=int)
        if style == "for_each_round":
            summed = IterationBody.for_each_round(data, lambda d: d.get(0).process(SumPerRound()).set_parallelism(1))
            sums = summed.get(0).get_side_output(SUMS)
        else:
            sums = data.get(0).process(SumPerRound()).set_parallelism(1).get_side_output(SUMS)
        return IterationBodyResult([counter.filter(lambda v: True)], [sums])

    init = DataStreamList.of(e.from_collection([0]).set_parallelism(e.get_parallelism()))
    counter_body = body

    class Body(IterationBody):
        def process(self, variable_streams: DataStreamList, data_streams: DataStreamList) -> IterationBodyResult:
            return counter_body(variable_streams, data_streams)

    data = e.from_collection([1, 2, 3, 4])
    if style == "seed":
        outputs = iterate_and_replay_bounded_streams_until_termination(init, DataStreamList.of(data), Body())
    else:
        life_cycle = OperatorLifeCycle.PER_ROUND if style == "flink_ml" else OperatorLifeCycle.ALL_ROUND
        outputs = Iterations.iterate_bounded_streams_until_termination(
            init, ReplayableDataStreamList.replay(data),
            IterationConfig.new_builder().set_operator_life_cycle(life_cycle).build(), body)
    got = sorted(outputs.get(0).execute_and_collect())
    # Count feeds back in rounds 1 and 2, not 3: three rounds, each summing the whole replayed data
    # afresh (an ALL_ROUND operator would have summed 10, 20, 30)
    assert got == [(1, 10), (2, 10), (3, 10)]


class AsyncStep(ProcessFunction, IterationListener):
    """Async: sends ``(x, left - 1)`` round at once; reports how many records this instance saw,
    and when the iteration ended."""

    def __init__(self) -> None:
        self.seen = 0

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        context.output(SUMS, ("terminated", self.seen))

    def process_element(self, value: tuple[int, int], ctx: Any) -> Any:
        self.seen += 1
        x, left = value
        return [(x, left - 1)] if left > 1 else []

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        context.output(SUMS, (epoch_watermark, self.seen))


@pytest.mark.parametrize("parallelism,seed", [(1, 0), (2, 1), (3, 5)])
def test_a_per_round_instance_gets_exactly_its_epochs_records_even_when_async(parallelism: int, seed: int) -> None:
    """Record x goes round x % 5 + 1 times, sent back from process_element (async). Each round's
    instance sees exactly the records of its epoch: the heads hold the feedback until the round
    starts (otherwise every record would go round within round 1, before its epoch watermark)."""
    e = env(parallelism).configure(scheduler_seed=seed, channel_capacity=2, quantum=2, batch_size=4)
    numbers = [(x, x % 5 + 1) for x in range(300)]

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        stepped = variables.get(0).process(AsyncStep())
        return IterationBodyResult([stepped], [stepped.get_side_output(SUMS)])

    config = IterationConfig.new_builder().set_operator_life_cycle(OperatorLifeCycle.PER_ROUND).build()
    outputs = Iterations.iterate_bounded_streams_until_termination(
        DataStreamList.of(e.from_collection(numbers).set_parallelism(parallelism)), ReplayableDataStreamList.not_replay(),
        config, body)
    seen: Counter = Counter()
    terminated = []
    for epoch, count in outputs.get(0).execute_and_collect():
        if epoch == "terminated":
            terminated.append(count)
        else:
            seen[epoch] += count
    assert seen == Counter({epoch: sum(1 for _, rounds in numbers if rounds >= epoch) for epoch in range(1, 6)})
    # the end reaches every subtask once, through the instance of a round that never runs
    assert terminated == [0] * parallelism


def test_listener_feedback_rounds_and_termination_without_criteria() -> None:
    e = env(3)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        step = variables.get(0).flat_map(lambda v: []).map(Count())
        return IterationBodyResult(DataStreamList.of(step), DataStreamList.of(step))

    out = iterate_bounded_streams_until_termination(
        DataStreamList.of(e.from_collection([0]).set_parallelism(3)), DataStreamList.of(), body)
    # each of 3 subtasks emits 2 at epoch 1 and 3 at epoch 2; at epoch 3 nothing: the iteration ends
    assert sorted(out.get(0).execute_and_collect()) == [2, 2, 2, 3, 3, 3]


def good_body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
    return IterationBodyResult([variables.get(0).map(lambda v: v)], [])


@pytest.mark.parametrize("case,message", [
    ("count", "returned 2 feedback stream"),
    ("parallelism", "has parallelism 1, but initial variable stream 0"),
    ("unbounded", "needs bounded inputs"),
    ("source", "has no sources"),
    ("sink", "has no sinks"),
    ("outside", "from outside the iteration"),
    ("result", "must return an IterationBodyResult"),
    ("nested", "iterations nested in loops or iterations are not supported yet"),
    ("foreign output", "must be built inside the iteration body"),
])
def test_graph_time_checks(case: str, message: str) -> None:
    e = env(2)
    outside = e.from_collection([5])
    init = DataStreamList.of(e.from_collection([1, 2]).set_parallelism(2))
    data = DataStreamList.of(e.from_collection([3]))

    def body(variables: DataStreamList, data_streams: DataStreamList) -> Any:
        v = variables.get(0)
        if case == "count":
            return IterationBodyResult([v.map(lambda x: x), v.map(lambda x: x)], [])
        if case == "parallelism":
            return IterationBodyResult([v.map(lambda x: x).set_parallelism(1)], [])
        if case == "source":
            e.from_collection([1])
        if case == "sink":
            v.print()
        if case == "outside":
            outside.map(lambda x: x)
        if case == "result":
            return v
        if case == "nested":  # a loop inside a body is fine (test_loops_in_iterations); an iteration is not
            iterate_bounded_streams_until_termination(DataStreamList.of(v), DataStreamList.of(), good_body)
        if case == "foreign output":
            return IterationBodyResult([v.map(lambda x: x)], [outside])
        return IterationBodyResult([v.map(lambda x: x)], [])

    with pytest.raises(InvalidProgramError, match=message):
        if case == "unbounded":
            live = e.from_source(IteratorSource([1, 2], bounded=False), None, "live")
            iterate_bounded_streams_until_termination(init, DataStreamList.of(live), good_body)
        else:
            iterate_bounded_streams_until_termination(init, data, body)


def test_unbounded_iteration_accepts_live_data_and_ends_once_its_inputs_did() -> None:
    e = env(2)
    live = e.from_source(IteratorSource(list(range(10)), bounded=False), None, "live")

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        doubled = data.get(0).map(lambda x: x * 2)
        return IterationBodyResult([variables.get(0).filter(lambda v: False)], [doubled])

    out = iterate_unbounded_streams(DataStreamList.of(e.from_collection([0]).set_parallelism(2)), DataStreamList.of(live),
                                    body)
    assert sorted(out.get(0).execute_and_collect()) == [x * 2 for x in range(10)]

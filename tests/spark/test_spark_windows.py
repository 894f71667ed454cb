"""The Spark runner's windows (a window operator as a keyed process function, run with Spark's
state and timers) give what the embedded window operator gives. Run here as a keyed process
function on the embedded runtime, so late elements, allowed lateness and the late-data side
output are driven exactly by a TestStream's watermarks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import OutputTag, StreamExecutionEnvironment
from slipstream.datastream.window import ProcessWindowFunction, SlidingEventTimeWindows, TumblingEventTimeWindows
from slipstream.spark_runner.windows import EventTimeWindows
from slipstream.testing import CollectingSink, TestStream, TimestampedValue

LATE = OutputTag("late")


class Figures(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        elements = list(elements)
        yield key, context.window().start, len(elements), sum(e[1] for e in elements)


def stream() -> TestStream:
    """Three keys in order, then elements late by various amounts between the watermarks."""
    test = TestStream()
    test.add_elements(*(TimestampedValue((k, ts), ts) for ts in range(0, 40, 2) for k in "xyz"))
    test.advance_watermark_to(39)
    test.add_elements(TimestampedValue(("x", 35), 35), TimestampedValue(("y", 12), 12),  # late, within / past 10
                      TimestampedValue(("z", 28), 28))
    test.advance_watermark_to(45)
    test.add_elements(TimestampedValue(("x", 33), 33), TimestampedValue(("z", 41), 41))
    test.advance_watermark_to(100)
    return test


def windowed(env: StreamExecutionEnvironment, assigner: Any, lateness: int) -> Any:
    return env.from_source(stream(), None, "events").key_by(lambda r: r[0]).window(assigner) \
        .allowed_lateness(lateness).side_output_late_data(LATE)


def run(build: Any) -> tuple[Counter, list]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(show_progress=False)
    results, late = CollectingSink(), CollectingSink()
    out = build(env)
    out.sink_to(results)
    out.get_side_output(LATE).sink_to(late)
    env.execute()
    return Counter(results.values), sorted(late.values)


@pytest.mark.parametrize("assigner", [TumblingEventTimeWindows.of(10), SlidingEventTimeWindows.of(10, 5)],
                         ids=["tumbling", "sliding"])
@pytest.mark.parametrize("lateness", [0, 10])
@pytest.mark.parametrize("kind", ["reduce", "process", "aggregate"])
def test_windows_as_a_process_function_give_the_window_operators_output(assigner, lateness, kind):
    from slipstream.datastream.functions import AggregateFunction

    class Count(AggregateFunction):
        def create_accumulator(self):
            return 0

        def add(self, value, accumulator):
            return accumulator + 1

        def get_result(self, accumulator):
            return accumulator

        def merge(self, a, b):
            return a + b

    def operator(env: StreamExecutionEnvironment) -> Any:
        stream = windowed(env, assigner, lateness)
        if kind == "reduce":
            return stream.reduce(lambda a, b: (a[0], a[1] + b[1]))
        if kind == "process":
            return stream.process(Figures())
        return stream.aggregate(Count())

    def as_process_function(env: StreamExecutionEnvironment) -> Any:
        window = operator(env)
        transformation = window._transformation
        return env.from_source(stream(), None, "events").key_by(lambda r: r[0]) \
            .process(EventTimeWindows(transformation)).name("windows as a process function")

    expected = run(operator)
    assert expected[1], "some elements are late past the lateness"
    assert run(as_process_function) == expected

"""The window operator applies the default ``EventTimeTrigger``'s rules itself for event-time windows
that do not merge and have no evictor. A trigger of a subclass is called as any user trigger is, so
the two paths must give the same outputs, late records, watermarks and timers on any input: a
hypothesis search over disordered inputs, allowed lateness, window kinds and functions."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slipstream.datastream.functions import ReduceFunction, as_function
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.transformations import WindowTransformation
from slipstream.datastream.window import (
    EventTimeTrigger,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from slipstream.testing import OperatorHarness

LATE = OutputTag("late")


class CalledEventTimeTrigger(EventTimeTrigger):
    """``EventTimeTrigger`` itself, but not of its exact type: the operator calls it."""


class Contents(ProcessWindowFunction):
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        window = context.window()
        yield key, window.start, window.end, sorted(value for _, value in elements)


def harness(assigner: Any, kind: str, lateness: int, trigger: Any) -> OperatorHarness:
    function = Contents() if kind == "process" else \
        as_function(lambda a, b: (a[0], a[1] + b[1]), ReduceFunction, "reduce", 2, "test")
    return OperatorHarness(WindowTransformation(
        id=1, name="Window", key_selectors=[lambda r: r[0]], assigner=assigner, trigger=trigger, evictor=None,
        allowed_lateness=lateness, late_data_tag=LATE, function_kind=kind, function=function, window_function=None))


def run(steps: list[tuple[str, Any]], assigner: Any, kind: str, lateness: int, trigger: Any) -> tuple[Any, ...]:
    h = harness(assigner, kind, lateness, trigger)
    for what, item in steps:
        if what == "records":
            h.process_elements(item)
        else:
            h.process_watermark(item)
    h.end_input()
    operator: Any = h.operator
    return (h.get_output(), h.get_side_output(LATE), operator.timers.num_event_time_timers(),
            h.metrics.get("num_late_records_dropped"))


events = st.lists(st.tuples(st.tuples(st.sampled_from("abc"), st.integers(1, 9)), st.integers(0, 120)),
                  min_size=1, max_size=12)
steps = st.lists(st.one_of(st.tuples(st.just("records"), events), st.tuples(st.just("watermark"),
                                                                             st.integers(-1, 130))),
                 min_size=1, max_size=12).map(
    # watermarks only rise, as the operator's input guarantees
    lambda items: [(what, item) for n, (what, item) in enumerate(items)
                   if what == "records" or item > max([w for k, w in items[:n] if k == "watermark"], default=-2)])
assigners = st.sampled_from([TumblingEventTimeWindows.of(10), TumblingEventTimeWindows.of(25),
                             SlidingEventTimeWindows.of(30, 10), SlidingEventTimeWindows.of(20, 15)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, assigners, st.sampled_from(["process", "reduce"]), st.sampled_from([0, 5, 40]))
def test_the_inlined_trigger_does_what_calling_it_does(steps: list[tuple[str, Any]], assigner: Any, kind: str,
                                                       lateness: int) -> None:
    inlined = run(steps, assigner, kind, lateness, EventTimeTrigger.create())
    called = run(steps, assigner, kind, lateness, CalledEventTimeTrigger())
    assert inlined == called


def test_only_the_exact_default_trigger_is_inlined() -> None:
    def inlined(trigger: Any) -> bool:
        h = harness(TumblingEventTimeWindows.of(10), "process", 0, trigger)
        operator: Any = h.operator
        return operator._process_element == operator._process_element_by_event_time

    assert inlined(None)  # the assigner's default trigger
    assert inlined(EventTimeTrigger.create())
    assert not inlined(CalledEventTimeTrigger())

"""WindowOperator driven directly: records, watermarks and a manual processing-time clock in,
collected output compared with plain-Python oracles."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any, Callable

import pytest

from slipstream.datastream.functions import AggregateFunction, ReduceFunction, as_function
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.time import MAX_TIMESTAMP, Watermark
from slipstream.datastream.transformations import WindowTransformation
from slipstream.datastream.window import (
    AllWindowFunction,
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowFunction,
)
from slipstream.errors import UserFunctionError
from slipstream.testing import OperatorHarness, Record


def first(record: Any) -> Any:
    return record[0]


def window_harness(assigner: Any, *, kind: str = "process", function: Any = None,
                   window_function: Any = None, trigger: Any = None, evictor: Any = None,
                   allowed_lateness: int = 0, late_data_tag: OutputTag | None = None,
                   key_selector: Callable[[Any], Any] = first, **options: Any) -> OperatorHarness:
    """A harness of the window operator these arguments describe."""
    return OperatorHarness(WindowTransformation(
        id=1, name="Window", key_selectors=[key_selector], assigner=assigner, trigger=trigger,
        evictor=evictor, allowed_lateness=allowed_lateness, late_data_tag=late_data_tag,
        function_kind=kind, function=function, window_function=window_function), **options)


def add_values(a: tuple, b: tuple) -> tuple:
    return (a[0], a[1] + b[1])


class SumWithWindow(ProcessWindowFunction):
    """Emits (key, window start, window end, sum of values, count)."""

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        window = context.window()
        values = [e[1] for e in elements]
        yield (key, window.start, window.end, sum(values), len(values))


def disordered_events(seed: int, n: int = 300, keys: str = "abc", disorder: int = 40,
                      step: int = 7) -> list[tuple[tuple[str, int], int]]:
    """Events whose timestamps are at most ``disorder`` behind the largest seen so far."""
    rng = random.Random(seed)
    events, high = [], 0
    for i in range(n):
        high += rng.randint(0, step)
        ts = max(0, high - rng.randint(0, disorder))
        events.append(((rng.choice(keys), rng.randint(1, 9)), ts))
    return events


def feed_with_watermarks(h: OperatorHarness, events: list, lag: int, chunk: int = 10) -> None:
    """Push events in chunks, each followed by the watermark ``max timestamp - lag``."""
    high = 0
    for i in range(0, len(events), chunk):
        part = events[i:i + chunk]
        h.process_elements(part)
        high = max([high] + [ts for _, ts in part])
        h.process_watermark(high - lag)


# -- event-time tumbling and sliding ------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_tumbling_event_time_reduce_matches_oracle_on_disordered_input(seed: int) -> None:
    events = disordered_events(seed)
    h = window_harness(TumblingEventTimeWindows.of(50), kind="reduce",
                function=as_function(add_values, ReduceFunction, "reduce", 2, "test"))
    feed_with_watermarks(h, events, lag=41)
    h.end_input()
    oracle: dict[tuple[str, int], int] = defaultdict(int)
    for (key, value), ts in events:
        oracle[(key, ts - ts % 50)] += value
    got = {(value[0], ts - 49): value[1] for value, ts in h.output.records}
    assert got == dict(oracle)
    assert len(h.output.records) == len(oracle)
    assert h.metrics["num_late_records_dropped"] == 0


@pytest.mark.parametrize("seed", range(3))
def test_sliding_event_time_process_matches_oracle(seed: int) -> None:
    events = disordered_events(seed, n=200)
    h = window_harness(SlidingEventTimeWindows.of(60, 20), function=SumWithWindow())
    feed_with_watermarks(h, events, lag=41)
    h.end_input()
    oracle: Counter = Counter()
    counts: Counter = Counter()
    for (key, value), ts in events:
        for start in range(ts - ts % 20 - 40, ts + 1, 20):
            oracle[(key, start, start + 60)] += value
            counts[(key, start, start + 60)] += 1
    got = {(k, s, e): total for k, s, e, total, _ in (v for v, _ in h.output.records)}
    assert got == dict(oracle)
    assert all(ts == e - 1 for (_, _, e, _, _), ts in h.output.records)


def test_results_precede_the_watermark_that_fired_them() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow())
    h.process_elements([(("a", 1), 3), (("a", 2), 12)]).process_watermark(9)
    assert h.get_output() == [Record(("a", 0, 10, 1, 1), 9), Watermark(9)]


# -- lateness -----------------------------------------------------------------------------------
def test_late_element_is_dropped_and_counted_without_side_output() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow())
    h.process_element(("a", 1), 5).process_watermark(15).process_elements([(("a", 100), 7), (("a", 2), 16)]).end_input()
    assert [v for v, _ in h.output.records] == [("a", 0, 10, 1, 1), ("a", 10, 20, 2, 1)]
    assert h.metrics["num_late_records_dropped"] == 1


def test_late_element_goes_to_side_output_with_its_timestamp() -> None:
    tag = OutputTag("late")
    h = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow(), late_data_tag=tag)
    h.process_element(("a", 1), 5).process_watermark(15).process_element(("a", 100), 7).end_input()
    assert h.get_side_output(tag) == [(("a", 100), 7)]
    assert h.metrics["num_late_records_dropped"] == 0


def test_allowed_lateness_refires_window_then_drops_after_cleanup() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow(), allowed_lateness=5)
    h.process_element(("a", 1), 2).process_watermark(9)            # fires [0, 10) with 1
    h.process_element(("a", 2), 3)                          # late but within lateness: re-fires with 3
    h.process_watermark(13).process_element(("a", 4), 4)            # still within: re-fires with 7
    h.process_watermark(14)                                # cleanup at 9 + 5 = 14
    h.process_element(("a", 8), 5).end_input()                    # too late: dropped
    assert [v for v, _ in h.output.records] == [
        ("a", 0, 10, 1, 1), ("a", 0, 10, 3, 2), ("a", 0, 10, 7, 3)]
    assert h.metrics["num_late_records_dropped"] == 1


def test_element_late_for_some_sliding_windows_only_is_kept() -> None:
    h = window_harness(SlidingEventTimeWindows.of(20, 10), function=SumWithWindow())
    h.process_element(("a", 1), 15).process_watermark(19)           # [0, 20) fired; [10, 30) open
    h.process_element(("a", 2), 12).end_input()                   # late for [0, 20), on time for [10, 30)
    assert sorted(v for v, _ in h.output.records) == [("a", 0, 20, 1, 1), ("a", 10, 30, 3, 2)]
    assert h.metrics["num_late_records_dropped"] == 0


# -- sessions -----------------------------------------------------------------------------------
def session_oracle(events: list, gap: int) -> Counter:
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (key, value), ts in events:
        by_key[key].append((ts, value))
    result: Counter = Counter()
    for key, items in by_key.items():
        items.sort()
        start, end, total = items[0][0], items[0][0] + gap, 0
        for ts, value in items:
            if ts > end:  # windows [t, t + gap) merge while they overlap or touch
                result[(key, start, end)] = total
                start, total = ts, 0
            end = max(end, ts + gap)
            total += value
        result[(key, start, end)] = total
    return result


@pytest.mark.parametrize("seed", range(5))
def test_event_time_sessions_match_oracle(seed: int) -> None:
    events = disordered_events(seed, n=250, step=12, disorder=30)
    gap = 15
    h = window_harness(EventTimeSessionWindows.with_gap(gap), function=SumWithWindow())
    # the watermark lags by more than disorder + gap, so no element can reach a fired session
    feed_with_watermarks(h, events, lag=30 + gap + 1)
    h.end_input()
    got = Counter({(k, s, e): total for k, s, e, total, _ in (v for v, _ in h.output.records)})
    assert got == session_oracle(events, gap)
    assert len(h.output.records) == len(got)


class Average(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: tuple, accumulator: tuple[int, int]) -> tuple[int, int]:
        return (accumulator[0] + value[1], accumulator[1] + 1)

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


def test_session_aggregate_merges_accumulators_when_a_bridge_arrives() -> None:
    h = window_harness(EventTimeSessionWindows.with_gap(10), kind="aggregate", function=Average(),
                window_function=as_function(lambda key, window, avgs: [(key, window, *avgs)],
                                            WindowFunction, "apply", 3, "test"))
    h.process_elements([(("a", 2), 0), (("a", 4), 25)])          # two sessions: [0, 10) and [25, 35)
    h.process_element(("a", 6), 12)                         # [12, 22) — touches neither yet
    h.process_element(("a", 12), 15)                        # [15, 25) touches [25, 35): all but [0, 10) merge
    h.end_input()
    assert h.output.records == [(("a", TimeWindow(0, 10), 2.0), 9),
                                (("a", TimeWindow(12, 35), 22 / 3), 34)]


def test_dynamic_gap_session() -> None:
    h = window_harness(EventTimeSessionWindows.with_dynamic_gap(lambda record: record[1]),
                function=SumWithWindow())
    h.process_elements([(("a", 10), 0), (("a", 1), 9), (("a", 1), 11)]).end_input()
    assert [v for v, _ in h.output.records] == [("a", 0, 10, 11, 2), ("a", 11, 12, 1, 1)]


# -- count windows ------------------------------------------------------------------------------
def test_tumbling_count_window_fires_every_size_elements_and_drops_the_partial_rest() -> None:
    h = window_harness(CountTumblingWindowAssigner.of(3), kind="reduce",
                function=as_function(add_values, ReduceFunction, "reduce", 2, "test"))
    h.process_values([*[("a", i) for i in range(8)], *[("b", 10)] * 3]).end_input()
    assert [v for v, _ in h.output.records] == [("a", 3), ("a", 12), ("b", 30)]
    assert all(ts == MAX_TIMESTAMP for _, ts in h.output.records)


@pytest.mark.parametrize("size,slide", [(3, 1), (2, 1), (4, 2), (2, 3), (5, 5)])
def test_sliding_count_window_matches_pyflink_semantics(size: int, slide: int) -> None:
    values = list(range(1, 12))
    h = window_harness(CountSlidingWindowAssigner.of(size, slide),
                function=as_function(lambda key, window, xs: [[x[1] for x in xs]],
                                     WindowFunction, "apply", 3, "test"), kind="apply")
    h.process_values([("a", v) for v in values]).end_input()
    # window i holds elements i*slide .. i*slide+size-1 and fires once complete
    oracle = [values[i * slide:i * slide + size] for i in range(len(values))
              if i * slide + size <= len(values)]
    assert sorted(v for v, _ in h.output.records) == sorted(oracle)


def test_global_windows_with_count_trigger_and_count_evictor_slide_like_java_flink() -> None:
    h = window_harness(GlobalWindows.create(), kind="reduce", trigger=CountTrigger.of(2),
                evictor=CountEvictor.of(3),
                function=as_function(add_values, ReduceFunction, "reduce", 2, "test"))
    h.process_values([("a", v) for v in (1, 2, 3, 4, 5, 6, 7)]).end_input()
    # fires every 2 elements over the last 3: sums of [1,2], [2,3,4], [4,5,6]
    assert [v for v, _ in h.output.records] == [("a", 3), ("a", 9), ("a", 15)]


# -- processing time ----------------------------------------------------------------------------
def test_tumbling_processing_time_windows_follow_the_clock() -> None:
    h = window_harness(TumblingProcessingTimeWindows.of(100), function=SumWithWindow(), start_time_ms=5)
    h.process_values([("a", 1), ("b", 2)])
    h.set_processing_time(50)
    h.process_values([("a", 3)])
    h.set_processing_time(99)                          # fires [0, 100)
    first_round = sorted(v for v, _ in h.output.records)
    h.set_processing_time(100)
    h.process_values([("a", 4)])                        # lands in [100, 200), still open at the end
    h.end_input()
    assert first_round == [("a", 0, 100, 4, 2), ("b", 0, 100, 2, 1)]
    assert sorted(v for v, _ in h.output.records[2:]) == [("a", 100, 200, 4, 1)]


def test_processing_time_windows_fire_at_end_of_input_only_once() -> None:
    h = window_harness(TumblingProcessingTimeWindows.of(100), function=SumWithWindow())
    h.process_values([("a", 1)]).end_input()
    h.set_processing_time(1_000)
    assert [v for v, _ in h.output.records] == [("a", 0, 100, 1, 1)]


def test_processing_time_sessions_merge_and_close_after_gap() -> None:
    h = window_harness(ProcessingTimeSessionWindows.with_gap(10), function=SumWithWindow())
    h.process_values([("a", 1)])
    h.set_processing_time(8)
    h.process_values([("a", 2)])                        # [8, 18) merges with [0, 10)
    h.set_processing_time(17)                          # session [0, 18) fires at 17
    h.set_processing_time(30)
    h.process_values([("a", 5)]).end_input()                  # [30, 40) fired at end of input
    assert [v for v, _ in h.output.records] == [("a", 0, 18, 3, 2), ("a", 30, 40, 5, 1)]


# -- triggers and functions ---------------------------------------------------------------------
def test_continuous_event_time_trigger_fires_early_and_at_the_end() -> None:
    h = window_harness(TumblingEventTimeWindows.of(100), function=SumWithWindow(),
                trigger=ContinuousEventTimeTrigger.of(30))
    h.process_element(("a", 1), 5).process_watermark(30).process_element(("a", 2), 40).process_watermark(60).end_input()
    # early firings at 30, 60 and 90, then the final one at the window's end (99)
    assert [(v[3], ts) for v, ts in h.output.records] == [(1, 99), (3, 99), (3, 99), (3, 99)]


class CountingFirings(ProcessWindowFunction):
    """Counts its firings per window in window state and all firings per key in global state."""

    firings = ValueStateDescriptor("firings")
    total = ValueStateDescriptor("total")

    def __init__(self) -> None:
        self.cleared: list[TimeWindow] = []

    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Any) -> Any:
        per_window = context.window_state().get_state(self.firings)
        per_window.update((per_window.value() or 0) + 1)
        per_key = context.global_state().get_state(self.total)
        per_key.update((per_key.value() or 0) + 1)
        yield (key, context.window().start, per_window.value(), per_key.value())

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        self.cleared.append(context.window())
        context.window_state().get_state(self.firings).clear()


def test_process_window_function_has_per_window_and_global_state_and_clear() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=CountingFirings(), allowed_lateness=10)
    h.process_element(("a", 1), 1).process_watermark(9).process_elements([(("a", 1), 2), (("a", 1), 12)])
    h.end_input()
    assert [v for v, _ in h.output.records] == [("a", 0, 1, 1), ("a", 0, 2, 2), ("a", 10, 1, 3)]
    assert h.operator.transformation.function.cleared == [TimeWindow(0, 10), TimeWindow(10, 20)]  # its own copy


class SideOutputting(ProcessAllWindowFunction):
    tag = OutputTag("big")

    def process(self, context: ProcessAllWindowFunction.Context, elements: Any) -> Any:
        for e in elements:
            if e[1] > 5:
                yield self.tag, e
        context.output(self.tag, ("count", len(list(elements))))
        yield sum(e[1] for e in elements)


def test_all_window_process_function_with_side_outputs() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=SideOutputting(), key_selector=lambda _: 0)
    h.process_elements([(("a", 1), 1), (("b", 7), 2), (("c", 9), 11)]).end_input()
    assert h.output.records == [(8, 9), (9, 19)]
    assert h.get_side_output(SideOutputting.tag) == [
        (("b", 7), 9), (("count", 2), 9), (("c", 9), 19), (("count", 1), 19)]


def test_all_window_function_apply() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), kind="apply", key_selector=lambda _: 0,
                function=as_function(lambda window, xs: [(window.start, len(list(xs)))],
                                     AllWindowFunction, "apply", 2, "test"))
    h.process_elements([(("a", 1), 1), (("b", 7), 2), (("c", 9), 11)]).end_input()
    assert [v for v, _ in h.output.records] == [(0, 2), (10, 1)]


def test_failing_window_function_names_key_and_window() -> None:
    def boom(key: Any, window: Any, xs: Any) -> Any:
        raise RuntimeError("kaput")

    h = window_harness(TumblingEventTimeWindows.of(10), kind="apply",
                function=as_function(boom, WindowFunction, "apply", 3, "test"))
    h.process_element(("a", 1), 1)
    with pytest.raises(UserFunctionError, match=r"key 'a', window TimeWindow\(start=0, end=10\).*kaput"):
        h.process_watermark(20)


def test_failing_reduce_names_the_record() -> None:
    def boom(a: Any, b: Any) -> Any:
        raise ValueError("bad reduce")

    h = window_harness(TumblingEventTimeWindows.of(10), kind="reduce",
                function=as_function(boom, ReduceFunction, "reduce", 2, "test"))
    h.process_element(("a", 1), 1)
    with pytest.raises(UserFunctionError, match=r"record \('a', 2\).*bad reduce"):
        h.process_element(("a", 2), 2)


def test_event_time_window_without_timestamps_fails_clearly() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow())
    with pytest.raises(UserFunctionError, match="assign_timestamps_and_watermarks"):
        h.process_values([("a", 1)])


def test_timers_survive_snapshot_and_restore() -> None:
    h = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow())
    h.process_elements([(("a", 1), 1), (("b", 2), 15)])
    restored = window_harness(TumblingEventTimeWindows.of(10), function=SumWithWindow(), restore=h.snapshot())
    restored.end_input()
    assert sorted(v for v, _ in restored.output.records) == [("a", 0, 10, 1, 1), ("b", 10, 20, 2, 1)]

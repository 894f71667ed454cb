"""Window assigners, triggers, evictors and the merging window set, as pure logic."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.datastream.state import ReducingStateDescriptor, State, StateDescriptor
from slipstream.datastream.time import MAX_TIMESTAMP, Duration, Time
from slipstream.datastream.window import (
    CountEvictor,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    MergingWindowAssigner,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimestampedValue,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
)
from slipstream.errors import InvalidProgramError
from slipstream.operators.window import MergingWindowSet
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend


class FakeRuntimeContext:
    def __init__(self, backend: HeapKeyedStateBackend) -> None:
        self.backend = backend

    def get_state(self, descriptor: StateDescriptor) -> State:
        return self.backend.get_state(descriptor)


class FakeAssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, now: int = 0) -> None:
        self.now = now
        self.backend = HeapKeyedStateBackend(max_parallelism=128)
        self.backend.set_current_key("k")

    def get_current_processing_time(self) -> int:
        return self.now

    def get_runtime_context(self) -> Any:
        return FakeRuntimeContext(self.backend)


class FakeTriggerContext(Trigger.TriggerContext):
    def __init__(self, watermark: int = -(2 ** 63), now: int = 0) -> None:
        self.watermark = watermark
        self.now = now
        self.event_timers: set[int] = set()
        self.processing_timers: set[int] = set()
        self.backend = HeapKeyedStateBackend(max_parallelism=128)
        self.backend.set_current_key("k")
        self.window: Any = None

    def get_current_processing_time(self) -> int:
        return self.now

    def get_metric_group(self) -> Any:
        return {}

    def get_current_watermark(self) -> int:
        return self.watermark

    def register_processing_time_timer(self, time: int) -> None:
        self.processing_timers.add(time)

    def register_event_time_timer(self, time: int) -> None:
        self.event_timers.add(time)

    def delete_processing_time_timer(self, time: int) -> None:
        self.processing_timers.discard(time)

    def delete_event_time_timer(self, time: int) -> None:
        self.event_timers.discard(time)

    def get_partitioned_state(self, state_descriptor: StateDescriptor) -> State:
        state = self.backend.get_state(state_descriptor, namespaced=True)
        state.set_current_namespace(self.window)
        return state


# -- time windows -------------------------------------------------------------------------------
def test_time_window_basics() -> None:
    window = TimeWindow(0, 10)
    assert window.max_timestamp() == 9
    assert window.intersects(TimeWindow(10, 20)) and not window.intersects(TimeWindow(11, 20))
    assert window.cover(TimeWindow(5, 30)) == TimeWindow(0, 30)
    assert sorted([TimeWindow(5, 6), TimeWindow(0, 10), TimeWindow(0, 5)]) == \
        [TimeWindow(0, 5), TimeWindow(0, 10), TimeWindow(5, 6)]
    assert {TimeWindow(1, 2), TimeWindow(1, 2)} == {TimeWindow(1, 2)}
    assert CountWindow(3).max_timestamp() == GlobalWindow.get().max_timestamp() == MAX_TIMESTAMP


@pytest.mark.parametrize("timestamp,offset,start", [
    (0, 0, 0), (9, 0, 0), (10, 0, 10), (-1, 0, -10), (-10, 0, -10), (-11, 0, -20),
    (2, 3, -7), (3, 3, 3), (12, 3, 3), (13, 3, 13), (12, -3, 7),
])
def test_tumbling_window_start_hand_computed(timestamp: int, offset: int, start: int) -> None:
    assert TumblingEventTimeWindows.of(10, offset).assign_windows("x", timestamp, None) == \
        [TimeWindow(start, start + 10)]


def test_sizes_accept_time_duration_and_millis() -> None:
    for size in (Time.seconds(5), Duration.of_seconds(5), 5000):
        assert TumblingEventTimeWindows.of(size).assign_windows("x", 7300, None) == [TimeWindow(5000, 10000)]
    assert repr(SlidingEventTimeWindows.of(Time.minutes(1), Time.seconds(10))) == \
        "SlidingEventTimeWindows(60000, 10000)"


@pytest.mark.parametrize("make", [
    lambda: TumblingEventTimeWindows.of(0),
    lambda: TumblingEventTimeWindows.of(10, 10),
    lambda: SlidingEventTimeWindows.of(10, 0),
    lambda: SlidingEventTimeWindows.of(0, 5),
    lambda: SlidingProcessingTimeWindows.of(10, 5, 5),
    lambda: EventTimeSessionWindows.with_gap(0),
    lambda: CountTumblingWindowAssigner.of(0),
    lambda: CountSlidingWindowAssigner.of(3, 0),
    lambda: CountTrigger.of(0),
])
def test_invalid_parameters_are_refused_at_once(make: Any) -> None:
    with pytest.raises(InvalidProgramError):
        make()


def test_bad_size_type_names_itself() -> None:
    with pytest.raises(TypeError, match="window size"):
        TumblingEventTimeWindows.of(1.5)


def test_event_time_assigner_refuses_records_without_timestamp() -> None:
    with pytest.raises(ValueError, match="assign_timestamps_and_watermarks"):
        SlidingEventTimeWindows.of(10, 5).assign_windows("x", None, None)


def test_processing_time_assigners_use_the_clock_not_the_timestamp() -> None:
    ctx = FakeAssignerContext(now=1234)
    assert TumblingProcessingTimeWindows.of(100).assign_windows("x", 5, ctx) == [TimeWindow(1200, 1300)]
    assert SlidingProcessingTimeWindows.of(100, 50).assign_windows("x", 5, ctx) == \
        [TimeWindow(1200, 1300), TimeWindow(1150, 1250)]
    assert ProcessingTimeSessionWindows.with_gap(10).assign_windows("x", 5, ctx) == [TimeWindow(1234, 1244)]
    assert not TumblingProcessingTimeWindows.of(100).is_event_time()
    assert isinstance(TumblingProcessingTimeWindows.of(100).get_default_trigger(), ProcessingTimeTrigger)
    assert isinstance(TumblingEventTimeWindows.of(100).get_default_trigger(), EventTimeTrigger)


@given(timestamp=st.integers(-10 ** 9, 10 ** 9), slide=st.integers(1, 500), factor=st.integers(1, 8),
       offset_fraction=st.floats(-0.99, 0.99))
def test_sliding_windows_with_size_a_multiple_of_slide_hold_each_timestamp_exactly_size_over_slide_times(
        timestamp: int, slide: int, factor: int, offset_fraction: float) -> None:
    offset = int(slide * offset_fraction)
    windows = SlidingEventTimeWindows.of(slide * factor, slide, offset).assign_windows("x", timestamp, None)
    assert len(windows) == len(set(windows)) == factor
    for window in windows:
        assert window.start <= timestamp < window.end
        assert window.end - window.start == slide * factor
        assert (window.start - offset) % slide == 0


@given(timestamp=st.integers(-10 ** 6, 10 ** 6), size=st.integers(1, 300), slide=st.integers(1, 300))
def test_sliding_windows_are_exactly_the_aligned_windows_containing_the_timestamp(
        timestamp: int, size: int, slide: int) -> None:
    windows = SlidingEventTimeWindows.of(size, slide).assign_windows("x", timestamp, None)
    brute_force = {TimeWindow(start, start + size)
                   for start in range(timestamp - size - slide, timestamp + slide)
                   if start % slide == 0 and start <= timestamp < start + size}
    assert set(windows) == brute_force
    assert len(windows) == len(brute_force)


@given(timestamp=st.integers(-10 ** 9, 10 ** 9), size=st.integers(1, 10 ** 6))
def test_tumbling_window_contains_timestamp(timestamp: int, size: int) -> None:
    [window] = TumblingEventTimeWindows.of(size).assign_windows("x", timestamp, None)
    assert window.start <= timestamp < window.end and window.start % size == 0


# -- merging ------------------------------------------------------------------------------------
class Collect(MergingWindowAssigner.MergeCallback):
    def __init__(self) -> None:
        self.merges: list[tuple[list[TimeWindow], TimeWindow]] = []

    def merge(self, to_be_merged: Any, merge_result: TimeWindow) -> None:
        self.merges.append((sorted(to_be_merged), merge_result))


def test_merge_windows_reports_only_groups_that_merge() -> None:
    collect = Collect()
    TimeWindow.merge_windows([TimeWindow(0, 10), TimeWindow(20, 30), TimeWindow(10, 15),
                              TimeWindow(40, 50), TimeWindow(45, 46)], collect)
    assert collect.merges == [([TimeWindow(0, 10), TimeWindow(10, 15)], TimeWindow(0, 15)),
                              ([TimeWindow(40, 50), TimeWindow(45, 46)], TimeWindow(40, 50))]


def union_of_intervals(windows: list[TimeWindow]) -> set[TimeWindow]:
    """Oracle: overlapping or touching intervals form one session."""
    result: list[TimeWindow] = []
    for window in sorted(windows):
        if result and window.start <= result[-1].end:
            result[-1] = TimeWindow(result[-1].start, max(result[-1].end, window.end))
        else:
            result.append(window)
    return set(result)


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40)), min_size=1, max_size=40))
def test_merging_window_set_keeps_the_union_of_sessions_whatever_the_arrival_order(
        starts_and_gaps: list[tuple[int, int]]) -> None:
    assigner = EventTimeSessionWindows.with_gap(10)
    windows = [TimeWindow(start, start + gap) for start, gap in starts_and_gaps]
    merging = MergingWindowSet(assigner, {})
    state_of: dict[TimeWindow, list[TimeWindow]] = {}   # state window -> the input windows it holds

    def on_merge(result: Any, merged: list, state_window: Any, merged_state_windows: list) -> None:
        for source in merged_state_windows:
            state_of.setdefault(state_window, []).extend(state_of.pop(source, []))

    for window in windows:
        actual = merging.add_window(window, on_merge)
        assert actual.start <= window.start and window.end <= actual.end
        state_of.setdefault(merging.get_state_window(actual), []).append(window)
    assert set(merging.mapping) == union_of_intervals(windows)
    # every input window's state ended up in exactly the state window of the session covering it
    for session, state_window in merging.mapping.items():
        assert all(session.start <= w.start and w.end <= session.end for w in state_of[state_window])
    assert sum(len(held) for held in state_of.values()) == len(windows)


def test_dynamic_gap_sessions_use_the_extracted_gap() -> None:
    assigner = EventTimeSessionWindows.with_dynamic_gap(lambda element: element * 10)
    assert assigner.assign_windows(3, 100, None) == [TimeWindow(100, 130)]
    with pytest.raises(ValueError, match="positive"):
        assigner.assign_windows(0, 100, None)


# -- count windows ------------------------------------------------------------------------------
def test_count_tumbling_assigner_numbers_elements_per_key() -> None:
    ctx = FakeAssignerContext()
    assigner = CountTumblingWindowAssigner.of(3)
    assert [assigner.assign_windows("x", None, ctx) for _ in range(7)] == \
        [[CountWindow(0)]] * 3 + [[CountWindow(1)]] * 3 + [[CountWindow(2)]]
    ctx.backend.set_current_key("other")
    assert assigner.assign_windows("x", None, ctx) == [CountWindow(0)]


@given(size=st.integers(1, 8), slide=st.integers(1, 8), n=st.integers(1, 40))
def test_count_sliding_assigner_puts_element_i_into_windows_covering_it(
        size: int, slide: int, n: int) -> None:
    ctx = FakeAssignerContext()
    assigner = CountSlidingWindowAssigner.of(size, slide)
    for index in range(n):
        ids = {w.id for w in assigner.assign_windows("x", None, ctx)}
        assert ids == {i for i in range(index + 1) if i * slide <= index < i * slide + size}


def test_global_windows() -> None:
    assert GlobalWindows.create().assign_windows("x", None, None) == [GlobalWindow.get()]
    assert isinstance(GlobalWindows.create().get_default_trigger(), NeverTrigger)


# -- triggers -----------------------------------------------------------------------------------
def test_event_time_trigger() -> None:
    trigger, window = EventTimeTrigger.create(), TimeWindow(0, 10)
    ctx = FakeTriggerContext(watermark=5)
    assert trigger.on_element("x", 3, window, ctx) is TriggerResult.CONTINUE
    assert ctx.event_timers == {9}
    assert trigger.on_event_time(9, window, ctx) is TriggerResult.FIRE
    assert trigger.on_event_time(8, window, ctx) is TriggerResult.CONTINUE
    ctx.watermark = 9
    assert trigger.on_element("x", 3, window, ctx) is TriggerResult.FIRE  # a late firing
    trigger.clear(window, ctx)
    assert ctx.event_timers == set()


def test_processing_time_trigger() -> None:
    trigger, window = ProcessingTimeTrigger.create(), TimeWindow(0, 10)
    ctx = FakeTriggerContext()
    assert trigger.on_element("x", None, window, ctx) is TriggerResult.CONTINUE
    assert ctx.processing_timers == {9}
    assert trigger.on_processing_time(9, window, ctx) is TriggerResult.FIRE


def test_count_trigger_counts_per_window_and_purging_wraps_it() -> None:
    ctx = FakeTriggerContext()
    trigger = PurgingTrigger.of(CountTrigger.of(2))
    results = []
    for window in (CountWindow(0), CountWindow(1), CountWindow(0), CountWindow(0), CountWindow(1)):
        ctx.window = window
        results.append(trigger.on_element("x", None, window, ctx))
    assert results == [TriggerResult.CONTINUE, TriggerResult.CONTINUE, TriggerResult.FIRE_AND_PURGE,
                       TriggerResult.CONTINUE, TriggerResult.FIRE_AND_PURGE]
    assert repr(trigger) == "PurgingTrigger(CountTrigger(2))"


def test_trigger_result_flags() -> None:
    assert [(r.is_fire(), r.is_purge()) for r in TriggerResult] == \
        [(False, False), (True, True), (True, False), (False, True)]


# -- evictors -----------------------------------------------------------------------------------
def elements(*stamped: tuple[str, int | None]) -> list[TimestampedValue]:
    return [TimestampedValue(v, t) for v, t in stamped]


def test_count_evictor_keeps_the_last_elements_before_or_after() -> None:
    contents = elements(("a", 1), ("b", 2), ("c", 3))
    CountEvictor.of(2).evict_before(contents, 3, GlobalWindow.get(), None)
    assert [e.value for e in contents] == ["b", "c"]
    after = CountEvictor.of(1, do_evict_after=True)
    after.evict_before(contents, 2, GlobalWindow.get(), None)
    assert len(contents) == 2
    after.evict_after(contents, 2, GlobalWindow.get(), None)
    assert [e.value for e in contents] == ["c"]


def test_time_evictor_keeps_elements_within_size_of_the_newest() -> None:
    contents = elements(("a", 1), ("b", 5), ("c", 11), ("d", 8))
    TimeEvictor.of(5).evict_before(contents, 4, GlobalWindow.get(), None)
    assert [e.value for e in contents] == ["c", "d"]
    untimed = elements(("a", None), ("b", None))
    TimeEvictor.of(5).evict_before(untimed, 2, GlobalWindow.get(), None)
    assert len(untimed) == 2


def test_state_descriptors_of_triggers_are_usable_by_the_heap_backend() -> None:
    backend = HeapKeyedStateBackend(max_parallelism=128)
    backend.set_current_key("k")
    state = backend.get_state(CountTrigger.of(3).state_desc, namespaced=True)
    assert isinstance(CountTrigger.of(3).state_desc, ReducingStateDescriptor)
    state.set_current_namespace(CountWindow(0))
    state.add(1)
    state.add(1)
    assert state.get() == 2

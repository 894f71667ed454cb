"""Windows end to end: tumbling, sliding, session, count, all-window and processing-time windows,
allowed lateness and late-data side outputs, each checked against a plain-Python oracle across
parallelisms and scheduler seeds.

Most jobs here read out-of-order events whose disorder stays within the watermark bound, so no
record is ever late and the result cannot depend on how the scheduler interleaves subtasks: a
window fires only once the watermark has passed its end, and every record of it arrived before.
The lateness tests instead model the watermark exactly (see ``late_oracle``).
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Iterable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream import (
    AggregateFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.datastream.time import Time
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import (
    AllWindowFunction,
    CountWindow,
    EventTimeSessionWindows,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowFunction,
)
from slipstream.errors import InvalidProgramError
from slipstream.testing import ManualClock

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 5, 11]

Event = tuple[str, int, int]
"""(key, event timestamp in ms, value)."""

pytestmark = pytest.mark.configure(batch_size=3, channel_capacity=2, backlog_sorting=False)


def make_env(parallelism: int, seed: int, batch_size: int = 3) -> StreamExecutionEnvironment:
    """The module's configure marker, for the property tests (hypothesis runs many examples in one
    test, so they cannot share the env fixture): small batches through short channels, record by
    record (backlog sorting: test_backlog_modes.py)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    return env.configure(scheduler_seed=seed, batch_size=batch_size, channel_capacity=2, backlog_sorting=False)


def strategy(bound: int) -> WatermarkStrategy:
    return (WatermarkStrategy.for_bounded_out_of_orderness(bound)
            .with_timestamp_assigner(lambda event, _ts: event[1]))


def out_of_order_events(n: int, bound: int, seed: int, keys: str = "abcd") -> list[Event]:
    """Events whose timestamps (multiples of 10) are never more than ``bound`` below any earlier one.

    A base time rises by 10 per event (sometimes jumping, to open gaps between sessions);
    each timestamp is the base plus up to ``bound``, so it is at least the largest earlier
    timestamp minus ``bound``: with ``for_bounded_out_of_orderness(bound)`` nothing is late.
    """
    rng = random.Random(seed)
    events, base = [], 0
    for _ in range(n):
        base += 10 if rng.random() < 0.9 else 300
        events.append((rng.choice(keys), base + 10 * rng.randint(0, bound // 10), rng.randint(1, 50)))
    assert all(ts >= max(e[1] for e in events[:i]) - bound for i, (_, ts, _) in enumerate(events) if i)
    return events


def event_source(env: StreamExecutionEnvironment, events: list[Event], bound: int) -> Any:
    """The events with timestamps and watermarks, read in slices by every source subtask."""
    return env.from_source(CollectionSource(events), strategy(bound), "events")


def tumbling_start(ts: int, size: int, offset: int = 0) -> int:
    return ts - (ts - offset) % size


def sliding_starts(ts: int, size: int, slide: int) -> list[int]:
    last = ts - ts % slide
    return list(range(last, ts - size, -slide))


EVENTS = out_of_order_events(150, bound=60, seed=42)


# -- tumbling, sliding and session windows in event time -----------------------------------------
class WithTimestamp(ProcessFunction):
    """Pairs each record with its event timestamp, to check what windows stamp on their results."""

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value, ctx.timestamp()


@pytest.mark.workers(1, 2)
def test_tumbling_event_time_reduce(env: StreamExecutionEnvironment) -> None:
    got = list(
        event_source(env, EVENTS, 60)
        .map(lambda e: (e[0], tumbling_start(e[1], 100), e[2]))
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(100)))
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
        .process(WithTimestamp())
        .execute_and_collect())
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for key, ts, value in EVENTS:
        sums[key, tumbling_start(ts, 100)] += value
    # Each result carries its window's max_timestamp() = end - 1.
    assert sorted(got) == sorted(((k, s, v), s + 99) for (k, s), v in sums.items())


class CountAndSum(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: Event, accumulator: tuple[int, int]) -> tuple[int, int]:
        return (accumulator[0] + 1, accumulator[1] + value[2])

    def get_result(self, accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator

    def merge(self, acc_a: tuple[int, int], acc_b: tuple[int, int]) -> tuple[int, int]:
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


class LabelWithWindow(ProcessWindowFunction):
    """Emits (key, window start, window end, *each aggregate result)."""

    def process(self, key: str, context: ProcessWindowFunction.Context,
                elements: Iterable[tuple[int, int]]) -> Iterator[Any]:
        window = context.window()
        for count, total in elements:
            yield key, window.start, window.end, count, total


@pytest.mark.workers(1, 2)
def test_sliding_event_time_aggregate_with_process_window_function(env: StreamExecutionEnvironment) -> None:
    got = list(
        event_source(env, EVENTS, 60)
        .key_by(lambda e: e[0])
        .window(SlidingEventTimeWindows.of(Time.milliseconds(200), Time.milliseconds(50)))
        .aggregate(CountAndSum(), LabelWithWindow())
        .execute_and_collect())
    acc: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for key, ts, value in EVENTS:
        for start in sliding_starts(ts, 200, 50):
            acc[key, start][0] += 1
            acc[key, start][1] += value
    assert sorted(got) == sorted((k, s, s + 200, c, t) for (k, s), (c, t) in acc.items())


class Contents(ProcessWindowFunction):
    def process(self, key: str, context: ProcessWindowFunction.Context,
                elements: Iterable[Event]) -> Iterator[Any]:
        window = context.window()
        yield key, window.start, window.end, sorted(e[2] for e in elements)


def sessions_oracle(events: list[Event], gap: int) -> list[tuple[str, int, int, list[int]]]:
    """Per key, sort by timestamp and cut where the next event starts after the session's end.

    Windows that touch merge (as in Flink), so a session ``[s, e)`` takes an event at ``e``.
    """
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for key, ts, value in events:
        by_key[key].append((ts, value))
    result = []
    for key, items in by_key.items():
        items.sort()
        start, end, values = items[0][0], items[0][0] + gap, [items[0][1]]
        for ts, value in items[1:]:
            if ts <= end:
                end, values = max(end, ts + gap), values + [value]
            else:
                result.append((key, start, end, sorted(values)))
                start, end, values = ts, ts + gap, [value]
        result.append((key, start, end, sorted(values)))
    return result


# Timestamps are multiples of 10 and the gap is not: no on-time event can land exactly on the end
# of a session that already fired (a touching event that would merge with it in the oracle).
SESSION_GAP = 45


def test_session_windows_process(env: StreamExecutionEnvironment) -> None:
    got = list(
        event_source(env, EVENTS, 60)
        .key_by(lambda e: e[0])
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(SESSION_GAP)))
        .process(Contents())
        .execute_and_collect())
    expected = sessions_oracle(EVENTS, SESSION_GAP)
    assert len(expected) > 12  # the data has real session boundaries, not one session per key
    assert sorted(got) == sorted(expected)


@pytest.mark.workers(1, 2)
def test_session_windows_aggregate_merges_accumulators(env: StreamExecutionEnvironment) -> None:
    got = list(
        event_source(env, EVENTS, 60)
        .key_by(lambda e: e[0])
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(SESSION_GAP)))
        .aggregate(CountAndSum(), LabelWithWindow())
        .execute_and_collect())
    expected = [(k, s, e, len(vs), sum(vs)) for k, s, e, vs in sessions_oracle(EVENTS, SESSION_GAP)]
    assert sorted(got) == sorted(expected)


class CountPerWindow(WindowFunction):
    def apply(self, key: str, window: TimeWindow, inputs: Iterable[Event]) -> Iterator[Any]:
        values = [e[2] for e in inputs]
        yield key, window.start, len(values), sorted(values)


def test_tumbling_event_time_apply_with_offset(env: StreamExecutionEnvironment) -> None:
    got = list(
        event_source(env, EVENTS, 60)
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(100), Time.milliseconds(30)))
        .apply(CountPerWindow())
        .execute_and_collect())
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for key, ts, value in EVENTS:
        groups[key, tumbling_start(ts, 100, 30)].append(value)
    assert sorted(got) == sorted((k, s, len(vs), sorted(vs)) for (k, s), vs in groups.items())


# -- allowed lateness and late data ----------------------------------------------------------------
# Lateness depends on exactly which watermark a window operator has seen when a record arrives.
# To make that the same for every parallelism and seed:
#  * the source runs at parallelism 1 (an IteratorSource always does), so every window subtask
#    sees one upstream channel carrying records and watermarks in source order;
#  * the timestamps operator emits its periodic watermark after each *batch* it receives, so with
#    a larger batch_size the watermark a record sees depends on batch boundaries. With
#    batch_size=1 the watermark after record i is exactly max(ts[0..i]) - bound - 1, and record i
#    is judged against the watermark after record i - 1, which the oracle models. (With
#    batch_size=3, LATE_EVENTS already gives other firings and other late records.)
LATE_BOUND = 20
WINDOW = 100


def late_events(n: int, seed: int) -> list[Event]:
    """Rising timestamps, with every ~6th event pushed 0-400 ms into the past.

    Timestamps end in 0 or 9, so watermarks (``max - 21``) often sit exactly on a window's
    ``end - 1`` or on ``end - 1 + lateness``, or one below: that exercises the ``<=`` in
    firing, cleanup and lateness, and the ``- 1`` of the bounded-out-of-orderness watermark.
    """
    rng = random.Random(seed)
    events = []
    for i in range(n):
        ts = 10 * i + rng.choice((0, 9))
        if rng.random() < 0.17:
            ts = max(0, 10 * (i - rng.randint(0, 40)) + rng.choice((0, 9)))
        events.append((rng.choice("xyz"), ts, rng.randint(1, 9)))
    return events


LATE_EVENTS = late_events(120, seed=0)


def late_oracle(events: list[Event], bound: int, lateness: int, size: int = WINDOW,
                slide: int | None = None) -> tuple[dict[str, list[tuple[int, int]]], list[Event]]:
    """Simulate tumbling (or sliding) event-time windows with ``allowed_lateness``, fed one record
    per watermark.

    Returns each key's firings in order as (window start, running sum), and the late records.
    Record i meets the watermark ``max(ts[0..i-1]) - bound - 1``. A window fires when the
    watermark reaches its max timestamp (``end - 1``), again at once for every element that
    arrives before the watermark reaches ``end - 1 + lateness`` (when its state is dropped);
    a record is late when all its windows were dropped (Flink: skipped by every window, and its
    timestamp plus the lateness is at or below the watermark).
    """
    firings: dict[str, list[tuple[int, int]]] = defaultdict(list)
    late: list[Event] = []
    contents: dict[tuple[str, int], int] = {}  # live windows (key, start) -> sum
    fired: set[tuple[str, int]] = set()
    watermark: float = float("-inf")
    max_ts: float = float("-inf")

    def advance(wm: float) -> None:
        # Timers fire in time order; at equal times a window's firing precedes its cleanup.
        timers = sorted([(start + size - 1, 0, key, start) for key, start in contents
                         if (key, start) not in fired and start + size - 1 <= wm]
                        + [(start + size - 1 + lateness, 1, key, start) for key, start in contents
                           if start + size - 1 + lateness <= wm])
        for _, kind, key, start in timers:
            if kind == 0:
                firings[key].append((start, contents[key, start]))
                fired.add((key, start))
            else:
                del contents[key, start]
                fired.discard((key, start))

    for event in events:
        key, ts, value = event
        starts = sliding_starts(ts, size, slide) if slide else [tumbling_start(ts, size)]
        live = [start for start in starts if start + size - 1 + lateness > watermark]
        if not live and ts + lateness <= watermark:  # (with slide > size, a gap holds no window)
            late.append(event)
        for start in live:  # in the assigner's order: latest window first
            contents[key, start] = contents.get((key, start), 0) + value
            if start + size - 1 <= watermark:
                firings[key].append((start, contents[key, start]))  # a late firing
                fired.add((key, start))
        max_ts = max(max_ts, ts)
        if max_ts - bound - 1 > watermark:
            watermark = max_ts - bound - 1
            advance(watermark)
    advance(float("inf"))
    return dict(firings), late


class SumValues(AggregateFunction):
    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Event, accumulator: int) -> int:
        return accumulator + value[2]

    def get_result(self, accumulator: int) -> tuple[str, int]:
        return ("", accumulator)


class RunningSum(ProcessWindowFunction):
    def process(self, key: str, context: ProcessWindowFunction.Context,
                elements: Iterable[tuple[str, int]]) -> Iterator[Any]:
        for _key, total in elements:
            yield key, context.window().start, total


def run_late_job(events: list[Event], bound: int, lateness: int, size: int, parallelism: int,
                 seed: int, slide: int | None = None
                 ) -> tuple[dict[str, list[tuple[int, int]]], list[Event]]:
    """Tumbling (or sliding) running sums with allowed lateness and a late-data side output,
    one record per batch.

    Returns each key's firings in order as (window start, sum), and the late records.
    """
    env = make_env(parallelism, seed, batch_size=1)
    late_tag = OutputTag("late")
    source = env.from_source(IteratorSource(events), strategy(bound), "events")
    assert source.get_parallelism() == 1
    main = (source
            .key_by(lambda e: e[0])
            .window(SlidingEventTimeWindows.of(size, slide) if slide else TumblingEventTimeWindows.of(size))
            .allowed_lateness(lateness)
            .side_output_late_data(late_tag)
            .aggregate(SumValues(), RunningSum()))
    late: list = []
    main.get_side_output(late_tag).add_sink(late.append)
    firings: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for key, start, total in main.execute_and_collect():
        firings[key].append((start, total))  # one key lives in one subtask: its firings stay in order
    return dict(firings), late


@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("lateness", [0, 150])
def test_allowed_lateness_refires_and_late_data_goes_to_side_output(
        parallelism: int, seed: int, lateness: int) -> None:
    firings, late = run_late_job(LATE_EVENTS, LATE_BOUND, lateness, WINDOW, parallelism, seed)
    expected_firings, expected_late = late_oracle(LATE_EVENTS, LATE_BOUND, lateness)
    assert firings == expected_firings
    assert sorted(late) == sorted(expected_late)
    assert expected_late  # the data really has late records ...
    if lateness:  # ... and, with allowed lateness, windows that fire more than once
        assert any(len({s for s, _ in f}) < len(f) for f in expected_firings.values())


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("xy"), st.integers(0, 300), st.integers(1, 9)),
                       max_size=30),
       bound=st.integers(0, 50),
       lateness=st.sampled_from([0, 1, 10, 60]),
       size_and_slide=st.sampled_from([(1, None), (10, None), (37, None), (30, 10), (25, 7), (5, 8)]),
       parallelism=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_lateness_matches_oracle_for_any_input(events: list[Event], bound: int, lateness: int,
                                                size_and_slide: tuple[int, int | None],
                                                parallelism: int, seed: int) -> None:
    size, slide = size_and_slide
    firings, late = run_late_job(events, bound, lateness, size, parallelism, seed, slide)
    expected_firings, expected_late = late_oracle(events, bound, lateness, size, slide)
    assert firings == expected_firings
    assert sorted(late) == sorted(expected_late)


# -- count windows ---------------------------------------------------------------------------------
class CountWindowContents(WindowFunction):
    def apply(self, key: str, window: CountWindow, inputs: Iterable[tuple[str, int]]) -> Iterator[Any]:
        yield key, window.id, [v for _, v in inputs]


def count_oracle(data: list[tuple[str, int]], size: int, slide: int | None
                 ) -> list[tuple[str, int, list[int]]]:
    """PyFlink: window i of a key holds its elements i*slide .. i*slide+size-1; fires when full."""
    step = slide or size
    per_key: dict[str, list[int]] = defaultdict(list)
    for key, value in data:
        per_key[key].append(value)
    return [(key, i, values[i * step:i * step + size])
            for key, values in per_key.items()
            for i in range(len(values)) if i * step + size <= len(values)]


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.parametrize("size, slide", [(3, None), (4, 2), (3, 1), (2, 5)])
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_count_windows(env: StreamExecutionEnvironment, size: int, slide: int | None) -> None:
    rng = random.Random(11)
    data = [(rng.choice("pqrs"), i) for i in range(70)]
    # Count windows depend on each key's arrival order: one source subtask keeps it.
    got = list(
        env.from_collection(data).set_parallelism(1)
        .key_by(lambda e: e[0])
        .count_window(size, slide)
        .apply(CountWindowContents())
        .execute_and_collect())
    assert sorted(got) == sorted(count_oracle(data, size, slide))


# -- window_all ------------------------------------------------------------------------------------
class TotalPerWindow(AllWindowFunction):
    def apply(self, window: TimeWindow, inputs: Iterable[Event]) -> Iterator[Any]:
        for total in inputs:
            yield window.start, total[2]


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_window_all_reduce_runs_at_parallelism_one(env: StreamExecutionEnvironment) -> None:
    result = (event_source(env, EVENTS, 60)
              .window_all(TumblingEventTimeWindows.of(Time.milliseconds(250)))
              .reduce(lambda a, b: ("", 0, a[2] + b[2]), TotalPerWindow()))
    assert result.get_parallelism() == 1
    got = list(result.execute_and_collect())
    totals: dict[int, int] = defaultdict(int)
    for _, ts, value in EVENTS:
        totals[tumbling_start(ts, 250)] += value
    assert sorted(got) == sorted(totals.items())


class ProcessAllContents(ProcessAllWindowFunction):
    def process(self, context: ProcessAllWindowFunction.Context, elements: Iterable[Event]) -> Iterator[Any]:
        yield context.window().start, sorted(e[2] for e in elements)


@pytest.mark.parallelisms(4)
@pytest.mark.seeds(1)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_window_all_process_sees_every_subtasks_records(env: StreamExecutionEnvironment) -> None:
    got = list(event_source(env, EVENTS, 60)
               .window_all(TumblingEventTimeWindows.of(Time.milliseconds(400)))
               .process(ProcessAllContents())
               .execute_and_collect())
    groups: dict[int, list[int]] = defaultdict(list)
    for _, ts, value in EVENTS:
        groups[tumbling_start(ts, 400)].append(value)
    assert sorted(got) == sorted((s, sorted(vs)) for s, vs in groups.items())


@pytest.mark.parallelisms(4)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_window_all_refuses_parallelism_above_one(env: StreamExecutionEnvironment) -> None:
    result = (event_source(env, EVENTS, 60)
              .window_all(TumblingEventTimeWindows.of(Time.milliseconds(100)))
              .reduce(lambda a, b: a))
    with pytest.raises(InvalidProgramError, match="at most at parallelism 1"):
        result.set_parallelism(2)
    result.set_parallelism(1)  # asking for what it already has is fine


# -- processing time -------------------------------------------------------------------------------
class SumWithWindow(ProcessWindowFunction):
    def process(self, key: str, context: ProcessWindowFunction.Context,
                elements: Iterable[tuple[str, int]]) -> Iterator[Any]:
        for _key, total in elements:
            yield key, context.window().start, context.window().end, total


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_processing_time_tumbling_with_a_clock_that_never_moves(env: StreamExecutionEnvironment) -> None:
    # The clock stays at 12_345 ms, so every record lands in [12_000, 13_000) and no timer is
    # ever due; at end of input the operator fires every open processing-time window once
    # (slipstream's documented choice; Flink in STREAMING mode would drop them).
    rng = random.Random(8)
    data = [(rng.choice("uvw"), rng.randint(1, 20)) for _ in range(60)]
    env.configure(clock=ManualClock(start_ms=12_345))
    got = list(
        env.from_collection(data)
        .key_by(lambda e: e[0])
        .window(TumblingProcessingTimeWindows.of(Time.seconds(1)))
        .reduce(lambda a, b: (a[0], a[1] + b[1]), SumWithWindow())
        .process(WithTimestamp())
        .execute_and_collect())
    sums: dict[str, int] = defaultdict(int)
    for key, value in data:
        sums[key] += value
    assert sorted(got) == sorted(((k, 12_000, 13_000, v), 12_999) for k, v in sums.items())


# -- properties over random inputs ---------------------------------------------------------------
class KeyedWindowSum(WindowFunction):
    def apply(self, key: str, window: TimeWindow, inputs: Iterable[tuple[str, int, int]]) -> Iterator[Any]:
        for _key, _ts, total in inputs:
            yield key, window.start, total


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 1_000), st.integers(-50, 50)),
                       max_size=40),
       size=st.sampled_from([1, 7, 100, 2_000]),
       monotonous=st.booleans(),
       parallelism=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_tumbling_sum_matches_oracle_for_any_input(events: list[Event], size: int, monotonous: bool,
                                                   parallelism: int, seed: int) -> None:
    # Either timestamps never decrease (each source subtask reads a contiguous, hence sorted, slice)
    # or the bound exceeds every possible disorder: either way no record is late.
    if monotonous:
        events = sorted(events, key=lambda e: e[1])
        watermarks = (WatermarkStrategy.for_monotonous_timestamps()
                      .with_timestamp_assigner(lambda e, _ts: e[1]))
    else:
        watermarks = strategy(1_000)
    env = make_env(parallelism, seed)
    got = list(
        env.from_source(CollectionSource(events), watermarks, "events")
        .key_by(lambda e: e[0])
        .window(TumblingEventTimeWindows.of(size))
        .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]), KeyedWindowSum())
        .execute_and_collect())
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for key, ts, value in events:
        sums[key, tumbling_start(ts, size)] += value
    assert sorted(got) == sorted((k, s, v) for (k, s), v in sums.items())


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 200), st.integers(1, 9)),
                       max_size=30),
       gap=st.integers(1, 30),
       parallelism=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_sessions_match_oracle_for_any_input(events: list[Event], gap: int, parallelism: int,
                                             seed: int) -> None:
    # The bound exceeds the whole time span, so no session fires before the input ends: the
    # sessions are those of the sorted timestamps, whatever order the windows merged in
    # (including events that exactly touch a session's end).
    env = make_env(parallelism, seed)
    got = list(
        event_source(env, events, 1_000)
        .key_by(lambda e: e[0])
        .window(EventTimeSessionWindows.with_gap(gap))
        .process(Contents())
        .execute_and_collect())
    assert sorted(got) == sorted(sessions_oracle(events, gap))

"""Process functions end to end: side outputs, keyed state of every kind, event- and
processing-time timers, checked against plain-Python oracles across parallelisms and seeds."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream import (
    AggregateFunction,
    AggregatingStateDescriptor,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    ReducingStateDescriptor,
    RuntimeContext,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    TimeDomain,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.iterator import CollectionSource
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.testing import CollectingSink, ManualClock, TestStream

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 4, 9]


pytestmark = pytest.mark.configure(batch_size=3, channel_capacity=2, backlog_sorting=False)


def small_batches(env: StreamExecutionEnvironment) -> StreamExecutionEnvironment:
    """Small batches through short channels, record by record (backlog sorting: test_backlog_modes.py)."""
    return env.configure(batch_size=3, channel_capacity=2, backlog_sorting=False)


# -- side outputs ---------------------------------------------------------------------------------
ODD = OutputTag("odd")
NEGATIVE = OutputTag("negative")


class Splitter(ProcessFunction):
    """Evens (>= 0) to the main output; odds via ``yield tag, value``; negatives via ``ctx.output``."""

    def process_element(self, value: int, ctx: ProcessFunction.Context) -> Iterator[Any]:
        if value < 0:
            ctx.output(NEGATIVE, -value)
        elif value % 2:
            yield ODD, value * 10
        else:
            yield value
            yield ("pair", value)  # a plain 2-tuple is a main output, not a side output


@pytest.mark.seeds(*SEEDS)
def test_side_outputs_by_yield_and_by_ctx_output(env: StreamExecutionEnvironment) -> None:
    data = [3, -4, 8, 0, 7, -1, 12, 5, 6, -9, 2, 11] * 4
    main = small_batches(env).from_collection(data).process(Splitter())
    odd, negative = CollectingSink(), CollectingSink()
    main.get_side_output(ODD).map(lambda v: v + 1).add_sink(odd)
    main.get_side_output(NEGATIVE).add_sink(negative)
    got_main = list(main.execute_and_collect())
    evens = [v for v in data if v >= 0 and v % 2 == 0]
    assert sorted(got_main, key=repr) == sorted(evens + [("pair", v) for v in evens], key=repr)
    assert sorted(odd.values) == sorted(v * 10 + 1 for v in data if v >= 0 and v % 2)
    assert sorted(negative.values) == sorted(-v for v in data if v < 0)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(1)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_side_output_that_nobody_reads_is_dropped_and_main_output_unaffected(env: StreamExecutionEnvironment) -> None:
    got = list(env.from_collection(list(range(-5, 6))).process(Splitter()).execute_and_collect())
    assert sorted(got, key=repr) == sorted([0, 2, 4] + [("pair", v) for v in (0, 2, 4)], key=repr)


# -- keyed state of every kind ---------------------------------------------------------------------
class Average(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, accumulator: tuple[int, int]) -> tuple[int, int]:
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]


class AllStates(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.history = runtime_context.get_list_state(ListStateDescriptor("history"))
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen"))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b))
        self.average = runtime_context.get_aggregating_state(AggregatingStateDescriptor("avg", Average()))

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        key, amount = value
        assert ctx.get_current_key() == key
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        self.history.add(amount)
        self.seen.put(amount, (self.seen.get(amount) or 0) + 1)
        self.total.add(amount)
        self.average.add(amount)
        if amount == 0:  # a reset: clear the list and map state of this key only
            self.history.clear()
            self.seen.clear()
        yield (key, count, list(self.history.get()), dict(self.seen.items()), self.total.get(),
               self.average.get(), amount in self.seen)


def all_states_oracle(data: list[tuple[str, int]]) -> dict[str, list]:
    count: dict[str, int] = defaultdict(int)
    history: dict[str, list] = defaultdict(list)
    seen: dict[str, dict] = defaultdict(dict)
    total: dict[str, int] = defaultdict(int)
    out: dict[str, list] = defaultdict(list)
    for key, amount in data:
        count[key] += 1
        history[key].append(amount)
        seen[key][amount] = seen[key].get(amount, 0) + 1
        total[key] += amount
        average = total[key] / count[key]
        if amount == 0:
            history[key] = []
            seen[key] = {}
        out[key].append((key, count[key], list(history[key]), dict(seen[key]), total[key], average,
                         amount in seen[key]))
    return dict(out)


@pytest.mark.seeds(*SEEDS)
def test_keyed_state_of_every_kind(env: StreamExecutionEnvironment) -> None:
    keys = "pqrstu"
    data = [(keys[(i * 7) % 6], (i * 5) % 4) for i in range(80)]
    updates = list(small_batches(env).from_collection(data).set_parallelism(1).key_by(lambda r: r[0])
                   .process(AllStates()).execute_and_collect())
    grouped: dict[str, list] = defaultdict(list)
    for update in updates:
        grouped[update[0]].append(update)
    assert dict(grouped) == all_states_oracle(data)


# -- event time: timers and timestamps ----------------------------------------------------------------
EVENTS = [(k, t) for t in range(0, 400, 7) for k in ("a", "b", "c") if (t + ord(k)) % 3]
DELAY = 25


def event_time(event: tuple[str, int], record_timestamp: int) -> int:
    return event[1]


STRATEGY = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(event_time)


class DelayedEcho(KeyedProcessFunction):
    """Per record, a timer DELAY ms later (deduplicated per key and time); a far timer for the end."""

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        assert ctx.timestamp() == value[1]
        assert ctx.get_current_key() == value[0]
        ctx.timer_service().register_event_time_timer(value[1] + DELAY)
        ctx.timer_service().register_event_time_timer(value[1] + DELAY)  # a duplicate: fires once
        ctx.timer_service().register_event_time_timer(10**12)
        yield ("element", value[0], value[1], ctx.timer_service().current_watermark())

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        assert ctx.time_domain() is TimeDomain.EVENT_TIME
        yield ("timer", ctx.get_current_key(), timestamp, ctx.timestamp(),
               ctx.timer_service().current_watermark())


class WithTimestamp(ProcessFunction):
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value, ctx.timestamp()


def event_time_stream(env: StreamExecutionEnvironment, via_from_source: bool) -> Any:
    if via_from_source:
        return env.from_source(CollectionSource(EVENTS), STRATEGY, "events")
    return env.from_collection(EVENTS).assign_timestamps_and_watermarks(STRATEGY)


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.parametrize("via_from_source", [False, True])
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.workers(1, 2)
def test_event_time_timers_fire_as_the_watermark_passes(env: StreamExecutionEnvironment, via_from_source: bool) -> None:
    out = list(event_time_stream(env, via_from_source).key_by(lambda e: e[0]).process(DelayedEcho())
               .process(WithTimestamp()).execute_and_collect())
    elements = [(v, ts) for v, ts in out if v[0] == "element"]
    timers = [(v, ts) for v, ts in out if v[0] == "timer"]
    # every element came out with its own timestamp
    assert sorted((v[1], v[2]) for v, _ in elements) == sorted(EVENTS)
    assert all(ts == v[2] for v, ts in elements)
    # monotonous timestamps in every source subtask: no record is ever behind the watermark
    assert all(v[3] < v[2] for v, _ in elements)
    # one timer per distinct (key, time + DELAY), plus one far timer per key
    expected = {(k, t + DELAY) for k, t in EVENTS} | {(k, 10**12) for k in {k for k, _ in EVENTS}}
    fired = [(v[1], v[2]) for v, _ in timers]
    assert sorted(fired) == sorted(expected)
    for v, ts in timers:
        _, key, timestamp, ctx_timestamp, watermark = v
        assert ctx_timestamp == timestamp  # ctx.timestamp() in on_timer is the timer's time
        assert ts == timestamp  # and the output record carries it
        assert watermark >= timestamp  # fired only once the watermark passed it
    # timers within the input's time range fire before the end of input, the far one only at it
    for v, _ in timers:
        if v[2] == 10**12:
            assert v[4] == MAX_TIMESTAMP
    last_event_time = max(t for _, t in EVENTS)
    assert any(v[4] < last_event_time for v, _ in timers)
    # per key, timers fire in time order
    per_key: dict[str, list[int]] = defaultdict(list)
    for v, _ in timers:
        per_key[v[1]].append(v[2])
    assert all(times == sorted(times) for times in per_key.values())


class CountUntilTimer(KeyedProcessFunction):
    """Counts a key's records per window of event time [n*10, n*10+10), emitting each count
    from the timer at the window's end (a tumbling count built from state and timers)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.counts = runtime_context.get_map_state(MapStateDescriptor("counts"))

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        end = value[1] // 10 * 10 + 10
        self.counts.put(end, (self.counts.get(end) or 0) + 1)
        ctx.timer_service().register_event_time_timer(end - 1)
        return ()

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        end = timestamp + 1
        yield ctx.get_current_key(), end, self.counts.get(end)
        self.counts.remove(end)


@settings(max_examples=30, deadline=None)
@given(gaps=st.lists(st.tuples(st.sampled_from("xyz"), st.integers(0, 7)), max_size=60),
       parallelism=st.sampled_from(PARALLELISMS), seed=st.integers(0, 2**16),
       batch_size=st.integers(1, 4), capacity=st.integers(1, 3))
def test_property_event_time_counts_match_oracle(gaps: list, parallelism: int, seed: int,
                                                 batch_size: int, capacity: int) -> None:
    events, now = [], 0
    for key, gap in gaps:
        now += gap
        events.append((key, now))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(scheduler_seed=seed, batch_size=batch_size,
                                               channel_capacity=capacity, backlog_sorting=False)
    got = list(env.from_collection(events).assign_timestamps_and_watermarks(STRATEGY)
               .key_by(lambda e: e[0]).process(CountUntilTimer()).execute_and_collect())
    oracle: dict[tuple[str, int], int] = defaultdict(int)
    for key, t in events:
        oracle[(key, t // 10 * 10 + 10)] += 1
    assert sorted(got) == sorted((k, end, n) for (k, end), n in oracle.items())


class LastActivity(KeyedProcessFunction):
    """Keeps one pending timer per key: a later record deletes the previous timer and sets a new one."""

    TIMEOUT = 10**9

    def open(self, runtime_context: RuntimeContext) -> None:
        self.pending = runtime_context.get_state(ValueStateDescriptor("pending"))

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        previous = self.pending.value()
        due = ctx.timestamp() + self.TIMEOUT
        if previous is not None:
            if previous >= due:  # records of a key may arrive out of order from a parallel source
                return ()
            ctx.timer_service().delete_event_time_timer(previous)
        ctx.timer_service().register_event_time_timer(due)
        self.pending.update(due)
        return ()

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        yield ctx.get_current_key(), timestamp - self.TIMEOUT
        self.pending.clear()


@pytest.mark.seeds(*SEEDS)
def test_deleted_timers_do_not_fire(env: StreamExecutionEnvironment) -> None:
    out = list(small_batches(env).from_collection(EVENTS).assign_timestamps_and_watermarks(STRATEGY)
               .key_by(lambda e: e[0]).process(LastActivity()).execute_and_collect())
    last: dict[str, int] = {}
    for key, t in EVENTS:
        last[key] = max(t, last.get(key, t))
    assert sorted(out) == sorted(last.items())


# -- processing time on a manual clock ---------------------------------------------------------------
class ProcessingTimeEcho(KeyedProcessFunction):
    def process_element(self, value: str, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        now = ctx.timer_service().current_processing_time()
        if value != "marker":
            ctx.timer_service().register_processing_time_timer(now + 50)
        if value == "late":
            ctx.timer_service().register_processing_time_timer(now + 10**6)
        yield ("seen", value, now)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        yield ("timer", ctx.get_current_key(), timestamp, ctx.time_domain(),
               ctx.timer_service().current_processing_time())


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.parallelisms(1, 2)
@pytest.mark.seeds(0, 3)
def test_processing_time_timers_on_a_manual_clock(env: StreamExecutionEnvironment) -> None:
    clock = ManualClock(1_000)
    small_batches(env).configure(clock=clock)
    stream = (TestStream(["a", "b"], clock=clock)
              .advance_processing_time(49).add_elements("marker")  # nothing is due at 1049
              .advance_processing_time(1)                          # a's and b's timers fire at 1050
              .advance_processing_time(100).add_elements("late")
              .advance_processing_time(50))
    sink = CollectingSink()
    env.from_source(stream, None, "inbox").key_by(lambda v: v).process(ProcessingTimeEcho()).sink_to(sink)
    env.execute()
    pt = TimeDomain.PROCESSING_TIME
    # every record and timer at the processing time the stream had reached when it came; at end of
    # input a processing-time timer not yet due (late's second) does not fire, as in Flink
    assert sorted(sink.values, key=repr) == sorted([
        ("seen", "a", 1_000), ("seen", "b", 1_000), ("seen", "marker", 1_049),
        ("timer", "a", 1_050, pt, 1_050), ("timer", "b", 1_050, pt, 1_050),
        ("seen", "late", 1_150), ("timer", "late", 1_200, pt, 1_200)], key=repr)

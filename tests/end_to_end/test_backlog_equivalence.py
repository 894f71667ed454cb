"""Sorted backlog and streamed backlog give the same event-time output in STREAMING mode.

Every job runs twice over the same bounded, out-of-order history: with the backlog sorted
(FLIP-327's batch work at the switch) and with ``configure(backlog_sorting=False)``. Main
outputs, side outputs and late-drop counts are compared as multisets of (value, timestamp),
across parallelisms and scheduler seeds. The history has records far behind the watermark,
so windows drop or side-output late records and timers fire between a key's records.

Each keyed operator reads one source subtask (an ``IteratorSource``), so which records are
late is fixed by the input, not by how the scheduler interleaves input channels: with several
channels into one subtask even two streaming runs disagree on that. For the same reason the
two-input (co_group, join) and parallel chain jobs use histories in which no record is late
where more than one channel meets; the operator-level tests drive late records through them
with a fixed interleaving (``tests/operators``).
"""

from __future__ import annotations

import logging
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 7]
BOUND = 40
GAP = 60

Event = tuple[str, int, int]
"""(key, event timestamp in ms, value)."""


def history(n: int, seed: int, late_share: float = 0.1, bound: int = BOUND, keys: str = "abcdef") -> list[Event]:
    """Events with rising time, most at most ``bound`` behind the newest one (on time for a
    ``bound`` watermark); a ``late_share`` of them far behind it (late), some with gaps between."""
    rng = random.Random(seed)
    events, base = [], 0
    for _ in range(n):
        base += rng.choice([3, 7, 10, 10, 15, 150])
        behind = rng.randint(bound + 1, 6 * bound) if rng.random() < late_share else rng.randint(0, bound)
        events.append((rng.choice(keys), max(0, base - behind), rng.randint(1, 99)))
    return events


def make_env(parallelism: int, seed: int, sorting: bool | str, batch_size: int = 7) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    return env.configure(scheduler_seed=seed, batch_size=batch_size, channel_capacity=2, backlog_sorting=sorting,
                         sort_memory_budget=50)  # a small budget: the sorted backlog spills too


def events_of(env: StreamExecutionEnvironment, events: list[Event], bound: int = BOUND) -> Any:
    """The history with timestamps and bounded-out-of-orderness watermarks, from one source subtask."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(bound).with_timestamp_assigner(lambda e, _: e[1])
    stream = env.from_source(IteratorSource(events), strategy, "history")
    assert stream.get_parallelism() == 1
    return stream


class Stamped(ProcessFunction):
    """Pairs each record with its timestamp, so outputs compare as (value, timestamp)."""

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value, ctx.timestamp()


Outputs = dict[str, Counter]


def run(build: Callable[[StreamExecutionEnvironment], dict[str, Any]], parallelism: int, seed: int,
        sorting: bool | str, batch_size: int = 7) -> tuple[Outputs, dict[str, dict[str, Any]]]:
    """Run the job ``build`` makes; its named streams' outputs as multisets, and its metrics."""
    env = make_env(parallelism, seed, sorting, batch_size)
    collected: dict[str, list] = {}
    for name, stream in build(env).items():
        sink = collected.setdefault(name, [])
        stream.process(Stamped()).add_sink(sink.append)
    metrics = env.execute().get_all_accumulator_results()
    return {name: Counter(map(repr, values)) for name, values in collected.items()}, metrics


def late_drops(metrics: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: values["num_late_records_dropped"] for name, values in metrics.items()
            if "num_late_records_dropped" in values}


def assert_same_both_ways(build: Callable[[StreamExecutionEnvironment], dict[str, Any]], parallelism: int,
                          seed: int, batch_size: int = 7) -> tuple[Outputs, dict[str, int]]:
    sorted_out, sorted_metrics = run(build, parallelism, seed, "always", batch_size)  # every kind sorts
    streamed_out, streamed_metrics = run(build, parallelism, seed, False, batch_size)
    assert sorted_out == streamed_out
    assert late_drops(sorted_metrics) == late_drops(streamed_metrics)
    assert any(metrics.get("backlog_records") for metrics in sorted_metrics.values())  # it did sort
    return sorted_out, late_drops(sorted_metrics)


# -- keyed process functions with event-time timers ------------------------------------------------
class SessionTimeout(KeyedProcessFunction):
    """Per key: each record moves the session's timeout timer (deleting the old one) to GAP ms after
    the newest timestamp seen; the timer emits the session's count and sum. Each record is echoed
    with the watermark it met, so the test sees that too."""

    def open(self, runtime_context: Any) -> None:
        self.session = runtime_context.get_state(ValueStateDescriptor("session"))  # (timer, count, total)

    def process_element(self, value: Event, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        timer, count, total = self.session.value() or (None, 0, 0)
        deadline = ctx.timestamp() + GAP
        if timer is None or deadline > timer:
            if timer is not None:
                ctx.timer_service().delete_event_time_timer(timer)
            ctx.timer_service().register_event_time_timer(deadline)
            timer = deadline
        self.session.update((timer, count + 1, total + value[2]))
        yield "seen", value, ctx.timer_service().current_watermark()

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        _, count, total = self.session.value()
        self.session.clear()
        yield "session", ctx.get_current_key(), count, total


def sessions(env: StreamExecutionEnvironment, events: list[Event]) -> dict[str, Any]:
    return {"out": events_of(env, events).key_by(lambda e: e[0]).process(SessionTimeout()).name("sessions")}


def session_oracle(events: list[Event], batch_size: int) -> Counter:
    """Plain Python: the source emits ``batch_size`` events, then the watermark (the newest
    timestamp minus BOUND minus 1) when it rose; each key's due timers fire in time order."""
    out: list[tuple[Any, int]] = []
    state: dict[str, tuple[int, int, int]] = {}
    watermark, newest = -(2 ** 63), -(2 ** 63) + BOUND + 1
    for start in range(0, len(events), batch_size):
        for event in events[start:start + batch_size]:
            key, ts, value = event
            timer, count, total = state.get(key, (None, 0, 0))
            timer = ts + GAP if timer is None or ts + GAP > timer else timer
            state[key] = (timer, count + 1, total + value)
            out.append((("seen", event, watermark), ts))
            newest = max(newest, ts)
        if newest - BOUND - 1 > watermark:
            watermark = newest - BOUND - 1
            for key, (timer, count, total) in sorted(state.items(), key=lambda item: item[1][0]):
                if timer <= watermark:
                    out.append((("session", key, count, total), timer))
                    del state[key]
    out.extend((("session", key, count, total), timer) for key, (timer, count, total) in state.items())
    return Counter(map(repr, out))


@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("batch_size", [1, 7])
def test_session_timeout_timers_fire_between_records_as_when_streamed(parallelism: int, seed: int,
                                                                      batch_size: int) -> None:
    events = history(240, seed=3)
    outputs, _ = assert_same_both_ways(lambda env: sessions(env, events), parallelism, seed, batch_size)
    assert outputs["out"] == session_oracle(events, batch_size)
    keys = {key for key, _, _ in events}
    assert sum(n for text, n in outputs["out"].items() if "'session'" in text) > 3 * len(keys)  # many per key


# -- windows -----------------------------------------------------------------------------------------
WINDOWS = {
    "tumbling": lambda: TumblingEventTimeWindows.of(50),
    "sliding": lambda: SlidingEventTimeWindows.of(60, 20),
    "session": lambda: EventTimeSessionWindows.with_gap(40),
}


def windowed(env: StreamExecutionEnvironment, events: list[Event], kind: str, lateness: int,
             side_output: bool) -> dict[str, Any]:
    late = OutputTag("late")
    window = events_of(env, events).key_by(lambda e: e[0]).window(WINDOWS[kind]()).allowed_lateness(lateness)
    if side_output:
        window = window.side_output_late_data(late)
    result = window.process(lambda key, ctx, elements: [(key, ctx.window().start, ctx.window().end,
                                                          sorted(e[2] for e in elements))]).name("windows")
    streams = {"out": result}
    if side_output:
        streams["late"] = result.get_side_output(late)
    return streams


@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", list(WINDOWS))
@pytest.mark.parametrize("lateness, side_output", [(0, False), (0, True), (30, True)])
def test_event_time_windows_drop_and_refire_as_when_streamed(parallelism: int, seed: int, kind: str,
                                                              lateness: int, side_output: bool) -> None:
    events = history(200, seed=5)
    outputs, drops = assert_same_both_ways(lambda env: windowed(env, events, kind, lateness, side_output),
                                           parallelism, seed)
    if side_output:
        assert outputs["late"] and drops == {"windows": 0}
    else:
        assert drops["windows"] > 0
    if lateness and kind != "session":  # allowed lateness: some window fires more than once
        assert len({text.split(", [")[0] for text in outputs["out"]}) < sum(outputs["out"].values())


# -- keyed reduce ---------------------------------------------------------------------------------------
def running_sums(env: StreamExecutionEnvironment, events: list[Event]) -> dict[str, Any]:
    return {"out": events_of(env, events).key_by(lambda e: e[0]).reduce(lambda a, b: (a[0], b[1], a[2] + b[2]))}


@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_rolling_reduce_emits_the_updates_streaming_emits(parallelism: int, seed: int) -> None:
    events = history(150, seed=8)
    outputs, _ = assert_same_both_ways(lambda env: running_sums(env, events), parallelism, seed)
    oracle: list[tuple[Any, int]] = []
    totals: dict[str, int] = defaultdict(int)
    for key, ts, value in events:  # each key's records in arrival order, whatever their timestamps
        totals[key] += value
        oracle.append(((key, ts, totals[key]), ts))
    assert outputs["out"] == Counter(map(repr, oracle))


# -- two inputs: co_group and join over event-time windows --------------------------------------------
def co_grouped(env: StreamExecutionEnvironment, events: list[Event], join: bool) -> dict[str, Any]:
    left = events_of(env, [e for e in events if e[2] % 2])
    right = events_of(env, [e for e in events if not e[2] % 2])
    if join:
        joined = (left.join(right).where(lambda e: e[0]).equal_to(lambda e: e[0])
                  .window(TumblingEventTimeWindows.of(50)).apply(lambda a, b: (a[0], a[2], b[2])))
    else:
        joined = (left.co_group(right).where(lambda e: e[0]).equal_to(lambda e: e[0])
                  .window(SlidingEventTimeWindows.of(60, 30))
                  .apply(lambda a, b: [(len(a), sum(e[2] for e in a), len(b), sum(e[2] for e in b))]))
    return {"out": joined}


@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("join", [False, True], ids=["co_group", "join"])
def test_co_group_and_join_over_event_time_windows_give_what_streaming_gives(parallelism: int, seed: int,
                                                                             join: bool) -> None:
    events = history(160, seed=9, late_share=0.0)
    outputs, _ = assert_same_both_ways(lambda env: co_grouped(env, events, join), parallelism, seed)
    assert sum(outputs["out"].values()) > 10


# -- a chain: process function -> window ---------------------------------------------------------------
class LateAware(KeyedProcessFunction):
    """Passes each record on re-keyed (``drop_late``: only those behind no watermark yet), and emits a
    marker GAP ms after a key's first record (an event-time timer)."""

    def __init__(self, drop_late: bool) -> None:
        self.drop_late = drop_late

    def open(self, runtime_context: Any) -> None:
        self.started = runtime_context.get_state(ValueStateDescriptor("started"))

    def process_element(self, value: Event, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if self.drop_late and ctx.timestamp() <= ctx.timer_service().current_watermark():
            return
        if not self.started.value():
            self.started.update(True)
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + GAP)
        yield "xy"[value[2] % 2], value[2]

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        yield "marker", 1000


def chained(env: StreamExecutionEnvironment, events: list[Event], drop_late: bool) -> dict[str, Any]:
    late = OutputTag("late")
    result = (events_of(env, events).key_by(lambda e: e[0]).process(LateAware(drop_late))
              .key_by(lambda pair: pair[0]).window(TumblingEventTimeWindows.of(40)).side_output_late_data(late)
              .reduce(lambda a, b: (a[0], a[1] + b[1])))
    return {"out": result, "late": result.get_side_output(late)}


@pytest.mark.parametrize("seed", SEEDS + [3, 11])
def test_a_chain_sees_the_watermarks_between_the_records_it_saw_streaming(seed: int) -> None:
    """One subtask per operator: the window after the process function drops what it dropped when
    the backlog streamed, so the process function's output met the same watermarks."""
    events = history(220, seed=seed)
    outputs, _ = assert_same_both_ways(lambda env: chained(env, events, drop_late=False), 1, seed)
    assert outputs["late"]  # records late at the window, not only at the source


@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_parallel_chain_gives_what_streaming_gives(parallelism: int, seed: int) -> None:
    events = history(220, seed=seed)
    outputs, _ = assert_same_both_ways(lambda env: chained(env, events, drop_late=True), parallelism, seed)
    assert sum(outputs["out"].values()) > 10


@settings(max_examples=15, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("pqr"), st.integers(0, 400), st.integers(1, 9)), min_size=1,
                       max_size=40),
       bound=st.integers(0, 60), size=st.sampled_from([1, 20, 45]), lateness=st.sampled_from([0, 30]),
       batch_size=st.integers(1, 5), parallelism=st.integers(1, 4), seed=st.integers(0, 2 ** 16))
def test_any_out_of_order_history_gives_the_same_timers_and_windows(events: list[Event], bound: int, size: int,
                                                                    lateness: int, batch_size: int,
                                                                    parallelism: int, seed: int) -> None:
    def build(env: StreamExecutionEnvironment) -> dict[str, Any]:
        late = OutputTag("late")
        source = events_of(env, events, bound)
        result = (source.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(size)).allowed_lateness(lateness)
                  .side_output_late_data(late).process(lambda key, ctx, elements: [(key, sorted(elements))]))
        timers = source.key_by(lambda e: e[0]).process(SessionTimeout())
        return {"windows": result, "late": result.get_side_output(late), "timers": timers}

    assert_same_both_ways(build, parallelism, seed, batch_size)


# -- what is counted, logged and explained --------------------------------------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_late_drop_is_counted_warned_once_and_reported_per_operator(caplog: pytest.LogCaptureFixture,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      workers: str) -> None:
    """Once per operator in one process, and on two workers (each warned, the driver passed one on)."""
    monkeypatch.setenv("SLIPSTREAM_WORKERS", workers)
    events = history(200, seed=5)
    with caplog.at_level(logging.WARNING, logger="slipstream.operators"):
        _, metrics = run(lambda env: windowed(env, events, "tumbling", 0, False), 2, 0, True)
    warnings = [r.getMessage() for r in caplog.records if "num_late_records_dropped" in r.getMessage()]
    assert len(warnings) == 1 and "'windows'" in warnings[0] and "late record" in warnings[0]
    assert metrics["windows"]["num_late_records_dropped"] > 1  # summed over subtasks, warned once


class RemindByClock(KeyedProcessFunction):
    def process_element(self, value: Event, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 10)
        yield value

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        yield "reminder"


def test_explain_names_the_operators_whose_backlog_results_depend_on_processing_time() -> None:
    env = make_env(1, 0, "always")
    source = events_of(env, history(10, seed=1))
    source.key_by(lambda e: e[0]).process(RemindByClock()).name("by clock").print()
    source.key_by(lambda e: e[0]).process(SessionTimeout()).name("by event time").print()
    source.key_by(lambda e: e[0]).window(TumblingProcessingTimeWindows.of(100)).reduce(lambda a, b: a) \
        .name("clock windows").print()
    source.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(100)).reduce(lambda a, b: a) \
        .name("event windows").print()
    notes: dict[str, list[str]] = defaultdict(list)
    for line in env.explain().splitlines():
        name, _, note = line.strip().partition(": ")
        notes[name].append(note)
    assert any("differs from streaming its backlog" in note and "processing time" in note
               for note in notes["by clock"])
    assert any("differs from streaming its backlog" in note and "windows and trigger" in note
               for note in notes["clock windows"])
    for name in ("by event time", "event windows"):
        assert not any("differs" in note for note in notes[name]), notes[name]
    env.configure(backlog_sorting=False)
    assert "differs" not in env.explain() and "record by record (backlog_sorting=False)" in env.explain()


def test_processing_time_timers_registered_during_the_backlog_are_counted_and_warned(
        caplog: pytest.LogCaptureFixture) -> None:
    events = history(30, seed=2)
    with caplog.at_level(logging.WARNING, logger="slipstream.operators"):
        _, metrics = run(lambda env: {"out": events_of(env, events).key_by(lambda e: e[0])
                                      .process(RemindByClock()).name("by clock")}, 1, 0, "always")
    assert metrics["by clock"]["backlog_processing_time_timers"] > 0
    assert any("'by clock'" in r.getMessage() and "processing-time timer" in r.getMessage() for r in caplog.records)


def test_batch_mode_is_another_mode_where_no_record_is_late() -> None:
    """BATCH keeps Flink's BATCH semantics: sorted by key and time, only the final watermark."""
    events = history(200, seed=5)
    env = make_env(2, 0, True).set_runtime_mode(RuntimeExecutionMode.BATCH)
    got = list(events_of(env, events).key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(50))
               .reduce(lambda a, b: (a[0], a[1], a[2] + b[2])).execute_and_collect())
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for key, ts, value in events:
        sums[key, ts // 50] += value
    assert sorted((key, value) for key, _, value in got) == sorted((key, total) for (key, _), total in sums.items())

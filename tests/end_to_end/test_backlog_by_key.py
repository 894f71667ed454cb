"""A sorted backlog run key by key (``operators/key_replay.py``, ``operators/window_replay.py``)
gives what streaming gives, and the planner streams the kinds whose sorting does not pay.

Each kind with a Python function — a keyed reduce, a keyed process function with ValueState
and an event-time timer, tumbling and sliding windows with a process window function, window
aggregate and reduce functions — runs over a bounded history sorted (``backlog_sorting=
"always"``, held in memory or spilled) and streamed, at parallelisms 1, 2, 4 and two scheduler
seeds; both are compared with a plain-Python oracle. Histories with late records compare sorted
with streamed (which records are late depends on the watermarks, which the oracle would have to
replay). The keyed operator reads one source subtask, so lateness is fixed by the input.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream import (
    KeyedProcessFunction,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.functions import AggregateFunction
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import (
    EventTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from slipstream.errors import InvalidProgramError, UserFunctionError

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 7]
IN_MEMORY, SPILLED = 1_000_000, 50
PERIOD = 100
SLIDE = 40
SESSION_GAP = 17
"""No sum of the histories' steps (0, 3, 10, 40, 130) is 17: no record touches a session exactly at its end."""

Event = tuple[str, int, int]
"""(key, event time in ms, value)."""


def on_time_history(n: int, seed: int) -> list[Event]:
    """Events in rising time (some equal), keys interleaved: no record is ever late."""
    rng = random.Random(seed)
    events, ts = [], 0
    for _ in range(n):
        ts += rng.choice([0, 3, 10, 40, 130])
        events.append((rng.choice("abcdefg"), ts, rng.randint(1, 99)))
    return events


def late_history(n: int, seed: int) -> list[Event]:
    """Events mostly in time, a tenth far behind the newest (late for a 20 ms bound)."""
    rng = random.Random(seed)
    events, newest = [], 0
    for _ in range(n):
        newest += rng.choice([3, 10, 10, 60])
        behind = rng.randint(80, 300) if rng.random() < 0.1 else rng.randint(0, 20)
        events.append((rng.choice("abcde"), max(0, newest - behind), rng.randint(1, 99)))
    return events


# -- the jobs ---------------------------------------------------------------------------------------
class PeriodCounts(KeyedProcessFunction):
    """ValueState holds the key's count per period; an event-time timer at each period's end
    emits and forgets that period's count and sum."""

    def open(self, runtime_context: Any) -> None:
        self.periods = runtime_context.get_state(ValueStateDescriptor("periods"))

    def process_element(self, value: Event, ctx: KeyedProcessFunction.Context) -> None:
        end = value[1] - value[1] % PERIOD + PERIOD - 1
        periods = dict(self.periods.value() or {})
        count, total = periods.get(end, (0, 0))
        periods[end] = (count + 1, total + value[2])
        self.periods.update(periods)
        ctx.timer_service().register_event_time_timer(end)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        periods = dict(self.periods.value())
        count, total = periods.pop(timestamp)
        self.periods.update(periods)
        yield ctx.get_current_key(), timestamp, count, total


class WindowRows(ProcessWindowFunction):
    calls = 0

    def process(self, key: str, context: ProcessWindowFunction.Context, elements: list[Event]) -> Iterator[Any]:
        WindowRows.calls += 1
        window = context.window()
        yield key, window.start, window.end, sorted(element[2] for element in elements)


class KeyedMean(AggregateFunction):
    def create_accumulator(self) -> list:
        return [None, 0, 0]

    def add(self, value: Event, accumulator: list) -> list:
        return [value[0], accumulator[1] + 1, accumulator[2] + value[2]]

    def get_result(self, accumulator: list) -> tuple[str, float]:
        return accumulator[0], accumulator[2] / accumulator[1]

    def merge(self, a: list, b: list) -> list:
        return [a[0] or b[0], a[1] + b[1], a[2] + b[2]]


def source(env: StreamExecutionEnvironment, events: list[Event], bound: int) -> Any:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(bound).with_timestamp_assigner(lambda e, _: e[1])
    return env.from_source(IteratorSource(events), strategy, "history").key_by(lambda e: e[0])


KINDS: dict[str, Callable[[Any], Any]] = {
    "reduce": lambda keyed: keyed.reduce(lambda a, b: (a[0], b[1], a[2] + b[2])),
    "process + timer": lambda keyed: keyed.process(PeriodCounts()),
    "tumbling window": lambda keyed: keyed.window(TumblingEventTimeWindows.of(PERIOD)).process(WindowRows()),
    "sliding window": lambda keyed: keyed.window(SlidingEventTimeWindows.of(PERIOD, SLIDE)).process(WindowRows()),
    "window aggregate": lambda keyed: keyed.window(TumblingEventTimeWindows.of(PERIOD)).aggregate(KeyedMean()),
    "window reduce": lambda keyed: keyed.window(SlidingEventTimeWindows.of(PERIOD, SLIDE))
    .reduce(lambda a, b: (a[0], max(a[1], b[1]), a[2] + b[2])),
    "session sum": lambda keyed: keyed.window(EventTimeSessionWindows.with_gap(SESSION_GAP)).sum(2),
}


class Stamped(ProcessFunction):
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value, ctx.timestamp()


def run(kind: str, events: list[Event], parallelism: int, seed: int, sorting: bool | str,
        budget: int = IN_MEMORY, bound: int = 0) -> tuple[Counter, dict[str, dict[str, Any]]]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    env.configure(scheduler_seed=seed, batch_size=7, channel_capacity=2, backlog_sorting=sorting,
                  sort_memory_budget=budget)
    out: list[Any] = []
    KINDS[kind](source(env, events, bound)).name("the operator").process(Stamped()).add_sink(out.append)
    metrics = env.execute().get_all_accumulator_results()
    return Counter(map(repr, out)), metrics


# -- oracles: plain Python over the same events ------------------------------------------------------
def _windows(ts: int, size: int, slide: int) -> list[tuple[int, int]]:
    last = ts - ts % slide
    return [(start, start + size) for start in range(last, ts - size, -slide)]


def oracle(kind: str, events: list[Event]) -> Counter:
    """What each kind emits for an on-time history, as (value, timestamp) pairs."""
    out: list[tuple[Any, int]] = []
    if kind == "reduce":
        latest: dict[str, Event] = {}
        for key, ts, value in events:
            current = latest.get(key)
            latest[key] = (key, ts, value) if current is None else (key, ts, current[2] + value)
            out.append((latest[key], ts))
        return Counter(map(repr, out))
    if kind == "session sum":
        return session_oracle(events)
    size, slide = (PERIOD, SLIDE) if kind in ("sliding window", "window reduce") else (PERIOD, PERIOD)
    groups: dict[tuple[str, int, int], list[Event]] = defaultdict(list)
    for event in events:
        for start, end in _windows(event[1], size, slide):
            groups[(event[0], start, end)].append(event)
    for (key, start, end), rows in groups.items():
        values = [row[2] for row in rows]
        if kind == "process + timer":
            result: Any = (key, end - 1, len(values), sum(values))
        elif kind == "window aggregate":
            result = (key, sum(values) / len(values))
        elif kind == "window reduce":
            result = (key, max(row[1] for row in rows), sum(values))
        else:
            result = (key, start, end, sorted(values))
        out.append((result, end - 1))
    return Counter(map(repr, out))


def session_oracle(events: list[Event]) -> Counter:
    """Each key's sessions of an on-time history: a record more than the gap after the key's last one
    starts a new session; a session emits its first record with the sum, at its last time + gap - 1."""
    sessions: dict[str, list[list[Any]]] = defaultdict(list)
    for key, ts, value in events:
        current = sessions[key][-1] if sessions[key] else None
        if current is None or ts > current[1] + SESSION_GAP:
            sessions[key].append([(key, ts, value), ts])
        else:
            current[0] = (key, current[0][1], current[0][2] + value)
            current[1] = ts
    return Counter(repr((first, last + SESSION_GAP - 1)) for per_key in sessions.values() for first, last in per_key)


# -- sorted == streamed == oracle ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("budget", [IN_MEMORY, SPILLED], ids=["in memory", "spilled"])
def test_sorted_and_streamed_backlog_give_the_oracle_s_results(kind: str, parallelism: int, seed: int,
                                                               budget: int) -> None:
    events = on_time_history(160, seed=parallelism + seed)
    expected = oracle(kind, events)
    sorted_out, metrics = run(kind, events, parallelism, seed, "always", budget)
    assert metrics["the operator"]["backlog_records"] == len(events)  # it did sort
    if kind == "session sum":  # each key's records in time order: one polars query
        assert metrics["the operator"]["backlog_records_vectorised"] == len(events)
    assert sorted_out == expected
    assert run(kind, events, parallelism, seed, False)[0] == expected


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("parallelism", PARALLELISMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_late_records_are_dropped_as_when_streamed(kind: str, parallelism: int, seed: int) -> None:
    events = late_history(200, seed=seed + 3)
    sorted_out, sorted_metrics = run(kind, events, parallelism, seed, "always", bound=20)
    streamed_out, streamed_metrics = run(kind, events, parallelism, seed, False, bound=20)
    assert sorted_out == streamed_out
    drops = [metrics["the operator"].get("num_late_records_dropped") for metrics in (sorted_metrics,
                                                                                      streamed_metrics)]
    assert drops[0] == drops[1]


@settings(max_examples=20, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("pq"), st.integers(0, 500), st.integers(1, 9)), min_size=1,
                       max_size=60),
       bound=st.integers(0, 120), kind=st.sampled_from(sorted(KINDS)))
def test_any_history_gives_the_same_results_sorted_key_by_key(events: list[Event], bound: int, kind: str) -> None:
    assert run(kind, events, 1, 0, "always", bound=bound)[0] == run(kind, events, 1, 0, False, bound=bound)[0]


def test_a_window_function_is_called_once_per_window_with_the_window_s_rows() -> None:
    events = on_time_history(300, seed=5)
    WindowRows.calls = 0
    outputs, _ = run("sliding window", events, 1, 0, "always")
    assert WindowRows.calls == sum(outputs.values()) == sum(oracle("sliding window", events).values())



class Arrived(ProcessFunction):
    """Each record with its timestamp and the watermark it arrived after."""

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


class WindowsSoFar(ProcessWindowFunction):
    """Reads what a window function can see besides its rows: the watermark that fired it, the key's
    global state (windows fired so far) and its per-window state; emits a side output too."""

    tag = OutputTag("odd sums")

    def open(self, runtime_context: Any) -> None:
        self.fired = ValueStateDescriptor("fired")

    def process(self, key: str, context: ProcessWindowFunction.Context, elements: list[Event]) -> Iterator[Any]:
        fired = context.global_state().get_state(self.fired)
        count = (fired.value() or 0) + 1
        fired.update(count)
        window = context.window()
        total = sum(element[2] for element in elements)
        if total % 2:
            yield self.tag, (key, window.start, total)
        yield key, window.start, window.end, total, count, context.current_watermark()


@pytest.mark.parametrize("kind", ["tumbling", "sliding"])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_window_functions_see_the_watermark_state_and_side_outputs_of_streaming(kind: str, parallelism: int) -> None:
    """Key by key, a key's windows are evaluated after its last record: each still at the watermark
    that fires it when streaming, after the same windows of its key, its outputs (main and side) and
    the late records reaching downstream between the same watermarks as when streaming."""
    late = OutputTag("late")

    def outputs(sorting: bool | str) -> tuple[Counter, Counter, Counter]:
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        env.configure(batch_size=5, backlog_sorting=sorting)
        assigner = TumblingEventTimeWindows.of(PERIOD) if kind == "tumbling" else \
            SlidingEventTimeWindows.of(PERIOD, SLIDE)
        windowed = source(env, late_history(400, seed=11), 20).window(assigner).side_output_late_data(late) \
            .process(WindowsSoFar())
        main: list[Any] = []
        odd: list[Any] = []
        dropped: list[Any] = []
        windowed.process(Arrived()).add_sink(main.append)
        windowed.get_side_output(WindowsSoFar.tag).process(Arrived()).add_sink(odd.append)
        windowed.get_side_output(late).process(Arrived()).add_sink(dropped.append)
        env.execute()
        return Counter(map(repr, main)), Counter(map(repr, odd)), Counter(map(repr, dropped))

    sorted_outputs = outputs("always")
    assert all(sorted_outputs) and sorted_outputs == outputs(False)


# -- the planner's choice -------------------------------------------------------------------------------
def plan_notes(kind: str, sorting: bool | str = True, mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING,
               build: Callable[[Any], Any] | None = None) -> str:
    env = StreamExecutionEnvironment.get_execution_environment().set_runtime_mode(mode)
    env.configure(backlog_sorting=sorting)
    (build or KINDS[kind])(source(env, on_time_history(5, 0), 0)).name("the operator").print()
    return next(line for line in env.explain().splitlines() if line.strip().startswith("the operator:"))


@pytest.mark.parametrize("kind, reason", [("reduce", "a rolling reduce with a Python function"),
                                          ("process + timer", "a KeyedProcessFunction is called once per record")])
def test_the_planner_streams_the_backlog_of_kinds_that_sort_slower_and_explain_says_why(kind: str,
                                                                                        reason: str) -> None:
    assert f"streams its backlog record by record: {reason}" in plan_notes(kind)
    events = on_time_history(100, seed=1)
    outputs, metrics = run(kind, events, 2, 0, True)
    assert outputs == oracle(kind, events)
    assert not metrics["the operator"].get("backlog_records")  # nothing was buffered


@pytest.mark.parametrize("kind", ["tumbling window", "sliding window", "window aggregate", "window reduce"])
def test_the_planner_sorts_the_backlog_of_windows(kind: str) -> None:
    assert "sorts its backlog" in plan_notes(kind)
    events = on_time_history(100, seed=2)
    outputs, metrics = run(kind, events, 2, 0, True)
    assert outputs == oracle(kind, events)
    assert metrics["the operator"]["backlog_records"] == len(events)


def test_built_in_aggregations_always_sort_their_backlog() -> None:
    assert "sorts its backlog" in plan_notes("", build=lambda keyed: keyed.sum(2))


@pytest.mark.parametrize("kind", ["reduce", "process + timer"])
def test_always_and_batch_mode_sort_every_kind(kind: str) -> None:
    assert "sorts its backlog" in plan_notes(kind, sorting="always")
    assert "sorts its backlog" in plan_notes(kind, mode=RuntimeExecutionMode.BATCH)
    assert "record by record (backlog_sorting=False)" in plan_notes(kind, sorting=False)


def test_backlog_sorting_refuses_other_values() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidProgramError, match="backlog_sorting must be True, False or 'always', got 'sometimes'"):
        env.configure(backlog_sorting="sometimes")


# -- errors while a key's backlog runs -------------------------------------------------------------------
class FailsOnNinetyNine(KeyedProcessFunction):
    def process_element(self, value: Event, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if value[2] == 99:
            raise ValueError("no 99s")
        yield value


@pytest.mark.parametrize("build, message", [
    (lambda keyed: keyed.reduce(lambda a, b: None), "returned None"),
    (lambda keyed: keyed.process(FailsOnNinetyNine()), "no 99s"),
    (lambda keyed: keyed.window(TumblingEventTimeWindows.of(PERIOD)).reduce(lambda a, b: 1 / 0), "division"),
], ids=["reduce", "process", "window"])
def test_a_failing_function_names_the_operator_and_the_record(build: Callable[[Any], Any], message: str) -> None:
    events = [("a", 1, 5), ("a", 2, 99), ("b", 3, 7)]
    env = StreamExecutionEnvironment.get_execution_environment().configure(backlog_sorting="always")
    build(source(env, events, 0)).name("the operator").print()
    with pytest.raises(UserFunctionError, match=message) as caught:
        env.execute()
    assert "the operator" in str(caught.value) and "('a', 2, 99)" in str(caught.value)


def test_a_failing_window_function_names_the_key_and_the_window() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().configure(backlog_sorting="always")
    source(env, [("a", 1, 5), ("a", 2, 6)], 0).window(TumblingEventTimeWindows.of(PERIOD)) \
        .apply(lambda key, window, rows: [1 / 0]).name("the operator").print()
    with pytest.raises(UserFunctionError, match="division") as caught:
        env.execute()
    assert "the operator" in str(caught.value) and "key 'a', window" in str(caught.value)
    assert "TimeWindow(start=0, end=100)" in str(caught.value)

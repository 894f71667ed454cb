"""Keyed state reached from any user function is the state of the record's key.

Flink's ``test_reduce_with_state``: a ``ReduceFunction`` that opens a ``ValueState`` in
``open()`` and counts its calls must count per key. The same holds for every operator
that calls a user function with keyed state in reach — keyed reduce, window reduce /
aggregate / process, co_group, keyed process and keyed co-process functions — in
STREAMING and BATCH mode, with the backlog sorted or streamed, at every parallelism.
Each test's oracle is the per-key count computed in plain Python from the input.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from slipstream.common import Duration, WatermarkStrategy
from slipstream.datastream import (
    AggregateFunction,
    CoGroupFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessWindowFunction,
    ReduceFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
)
from slipstream.datastream.window import EndOfStreamWindows

MODES = [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH]
PARALLELISMS = [1, 2, 4]
SORTING = ["polars", "record-by-record"]  # the backlog sorted as batch work, or record by record

LETTERS = [("a", 0), ("c", 1), ("d", 1), ("b", 0), ("e", 1)]
"""Flink's test_reduce_with_state input, keyed by field 1."""

MANY = [(f"v{i}", i % 5, i) for i in range(60)]
"""``(name, key, timestamp)``: 12 records for each of 5 keys."""


# each job runs with its parallelism as its scheduler seed, in small batches
pytestmark = [pytest.mark.zipped(parallelisms=PARALLELISMS, seeds=PARALLELISMS), pytest.mark.configure(batch_size=3)]


def timestamped(env: StreamExecutionEnvironment, records: list) -> Any:
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
                .with_timestamp_assigner(lambda record, _: record[2]))
    return env.from_collection(records).assign_timestamps_and_watermarks(strategy)


class CountingReduce(ReduceFunction):
    """Flink's MyReduceFunction: concatenates names and counts its calls in keyed state."""

    def open(self, runtime_context: Any) -> None:
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls"))

    def reduce(self, value1: tuple, value2: tuple) -> tuple:
        calls = (self.calls.value() or 0) + 1
        self.calls.update(calls)
        return value1[0] + value2[0], value1[1], calls


@pytest.mark.modes(*MODES)
@pytest.mark.parametrize("sorting", [True, False])  # in STREAMING a user reduce streams its backlog either way
def test_a_reduce_function_counts_its_calls_per_key(env: StreamExecutionEnvironment, sorting: bool) -> None:
    env.configure(backlog_sorting=sorting)
    mode = env.get_runtime_mode()
    out = env.from_collection(LETTERS).set_parallelism(1).key_by(lambda r: r[1]) \
        .reduce(CountingReduce()).execute_and_collect()
    out = list(out)
    finals = {record[1]: record for record in out}
    # each key's calls count only its own reductions: 'ab' once, 'cde' twice
    assert finals == {0: ("ab", 0, 1), 1: ("cde", 1, 2)}
    if mode is RuntimeExecutionMode.STREAMING:
        assert sorted(out, key=str) == sorted([("a", 0), ("ab", 0, 1), ("c", 1), ("cd", 1, 1),
                                               ("cde", 1, 2)], key=str)


class CountingWindowReduce(ReduceFunction):
    def open(self, runtime_context: Any) -> None:
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls"))

    def reduce(self, value1: tuple, value2: tuple) -> tuple:
        self.calls.update((self.calls.value() or 0) + 1)
        return value1[0], value1[1], max(value1[2], value2[2]), self.calls.value()


class CountingAggregate(AggregateFunction):
    def open(self, runtime_context: Any) -> None:
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls"))

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: tuple, accumulator: int) -> int:
        self.calls.update((self.calls.value() or 0) + 1)
        return self.calls.value()

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, acc_a: int, acc_b: int) -> int:
        return acc_a + acc_b


class CountingWindowProcess(ProcessWindowFunction):
    def open(self, runtime_context: Any) -> None:
        self.windows = runtime_context.get_state(ValueStateDescriptor("windows"))

    def process(self, key: Any, context: Any, elements: Any) -> list:
        self.windows.update((self.windows.value() or 0) + 1)
        return [(key, self.windows.value(), len(list(elements)))]


def window_oracle() -> tuple[dict, Counter]:
    """Per key: the number of records (the calls) and of 10 ms windows (one record per 5 ms)."""
    records = Counter(key for _, key, _ in MANY)
    windows = Counter(key for key, _ in {(key, ts // 10) for _, key, ts in MANY})
    return dict(records), windows


@pytest.mark.modes(*MODES)
@pytest.mark.engines(*SORTING)
def test_window_functions_see_the_state_of_the_windows_key(env: StreamExecutionEnvironment) -> None:
    records, windows = window_oracle()
    keyed = timestamped(env, MANY).key_by(lambda r: r[1])
    whole = EndOfStreamWindows.get()
    reduced = keyed.window(whole).reduce(CountingWindowReduce()).execute_and_collect()
    # a window of n records calls reduce n - 1 times, all on the key's own count
    assert {r[1]: r[3] for r in reduced} == {key: n - 1 for key, n in records.items()}

    added = timestamped(env, MANY).key_by(lambda r: r[1]).window(whole) \
        .aggregate(CountingAggregate(), lambda key, window, results: [(key, r) for r in results]) \
        .execute_and_collect()
    assert dict(added) == records

    processed = timestamped(env, MANY).key_by(lambda r: r[1]) \
        .window(TumblingEventTimeWindows.of(Duration.of_millis(10))) \
        .process(CountingWindowProcess()).execute_and_collect()
    last = {key: count for key, count, _ in sorted(processed, key=lambda r: r[1])}
    assert last == dict(windows)


class CountingCoGroup(CoGroupFunction):
    def open(self, runtime_context: Any) -> None:
        self.calls = runtime_context.get_state(ValueStateDescriptor("calls"))

    def co_group(self, first: Any, second: Any) -> list:
        self.calls.update((self.calls.value() or 0) + 1)
        left = list(first)
        return [(left[0][1] if left else list(second)[0][1], self.calls.value())]


@pytest.mark.modes(*MODES)
@pytest.mark.engines(*SORTING)
def test_a_co_group_function_sees_the_state_of_its_key(env: StreamExecutionEnvironment) -> None:
    left = timestamped(env, MANY)
    right = timestamped(env, [(name, key + 3, ts) for name, key, ts in MANY])
    out = left.co_group(right).where(lambda r: r[1]).equal_to(lambda r: r[1]) \
        .window(TumblingEventTimeWindows.of(Duration.of_millis(20))).apply(CountingCoGroup()) \
        .execute_and_collect()
    # keys 0..7 meet in windows of 20 ms; each key's count reaches its number of windows
    expected = Counter(key for key, _ in {(key, ts // 20) for _, key, ts in MANY}
                       | {(key + 3, ts // 20) for _, key, ts in MANY})
    assert {key: count for key, count in sorted(out, key=lambda r: r[1])} == dict(expected)


class CountingProcess(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def process_element(self, value: tuple, ctx: Any) -> Any:
        self.seen.update((self.seen.value() or 0) + 1)
        yield ctx.get_current_key(), self.seen.value()


class CountingCoProcess(KeyedCoProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def _count(self, ctx: Any) -> Any:
        self.seen.update((self.seen.value() or 0) + 1)
        yield ctx.get_current_key(), self.seen.value()

    def process_element1(self, value: tuple, ctx: Any) -> Any:
        return self._count(ctx)

    def process_element2(self, value: tuple, ctx: Any) -> Any:
        return self._count(ctx)


@pytest.mark.modes(*MODES)
@pytest.mark.parametrize("sorting", [True, False])  # in STREAMING a process function streams its backlog either way
def test_process_functions_count_per_key(env: StreamExecutionEnvironment, sorting: bool) -> None:
    env.configure(backlog_sorting=sorting)
    records, _ = window_oracle()
    out = timestamped(env, MANY).key_by(lambda r: r[1]).process(CountingProcess()).execute_and_collect()
    out = list(out)
    assert {key: max(c for k, c in out if k == key) for key, _ in out} == records

    both = timestamped(env, MANY).connect(timestamped(env, MANY)) \
        .key_by(lambda r: r[1], lambda r: r[1]).process(CountingCoProcess()).execute_and_collect()
    both = list(both)
    assert {key: max(c for k, c in both if k == key) for key, _ in both} == \
        {key: 2 * n for key, n in records.items()}


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_a_reduce_inside_an_iteration_body_counts_per_key(env: StreamExecutionEnvironment) -> None:
    """Records ``(name, key, rounds_left)`` go round until their rounds are used up; a keyed
    reduce in the body sees every pass, and its calls are counted per key."""
    from slipstream.datastream.iteration import IterationBodyResult, iterate_bounded_streams_until_termination

    initial = [(f"n{i}", i % 3, i % 4) for i in range(12)]

    def body(variables: Any, data: Any) -> IterationBodyResult:
        passes = variables.get(0)
        counts = passes.key_by(lambda r: r[1]).reduce(CountingReduce())
        again = passes.filter(lambda r: r[2] > 0).map(lambda r: (r[0], r[1], r[2] - 1))
        return IterationBodyResult([again], [counts])

    variables = env.from_collection(initial).set_parallelism(env.get_parallelism())  # goes round at its parallelism
    outputs = iterate_bounded_streams_until_termination([variables], [], body)
    out = list(outputs.get(0).execute_and_collect())
    passes = Counter()
    for _, key, rounds in initial:
        passes[key] += rounds + 1
    # a key seen n times is reduced n - 1 times: its last count says so
    assert {key: max(r[2] for r in out if len(r) == 3 and r[1] == key) for key in passes} == \
        {key: n - 1 for key, n in passes.items()}

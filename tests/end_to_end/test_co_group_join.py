"""co_group and join end to end, against plain-Python oracles: EndOfStreamWindows and tumbling
event-time windows, per-key and vectorised functions, across parallelisms, scheduler seeds and
both ways of processing bounded (backlog) input — sorted batch work (``backlog_sorting=True``,
the default) and record by record (``backlog_sorting=False``)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from slipstream.datastream import (
    CoGroupFunction,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    VectorizedCoGroupFunction,
)
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.typeinfo import Types
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import (
    EndOfStreamWindows,
    GlobalWindows,
    TumblingEventTimeWindows,
)
from slipstream.errors import UserFunctionError

SEEDS = [0, 7]
SORTING = ["polars", "record-by-record"]  # the backlog sorted as batch work, or record by record

pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING),
              pytest.mark.configure(batch_size=3, channel_capacity=2)]


def flip327_records(n: int) -> list[tuple[int, int, float]]:
    """FLIP-327's CoGroup benchmark input: ``(2i, 2i+1, 1.0)`` for i = 1..n, every key once per side."""
    return [(2 * i, 2 * i + 1, 1.0) for i in range(1, n + 1)]


def many_per_key(n: int, keys: int, seed: int) -> list[tuple[int, int, float]]:
    rng = random.Random(seed)
    return [(rng.randrange(keys), i, float(rng.randrange(10))) for i in range(n)]


def groups_of(first: list, second: list) -> dict[Any, tuple[list, list]]:
    groups: dict[Any, tuple[list, list]] = defaultdict(lambda: ([], []))
    for record in first:
        groups[record[0]][0].append(record)
    for record in second:
        groups[record[0]][1].append(record)
    return groups


class Summary(CoGroupFunction):
    """One record per key: how many records each side had and the sum of their third fields."""

    def co_group(self, first: Any, second: Any) -> Iterator[Any]:
        first, second = list(first), list(second)
        key = (first or second)[0][0]
        yield key, len(first), len(second), sum(r[2] for r in first) + sum(r[2] for r in second)


def summary_oracle(first: list, second: list) -> list:
    return sorted((key, len(a), len(b), sum(r[2] for r in a) + sum(r[2] for r in b))
                  for key, (a, b) in groups_of(first, second).items())


class FrameSummary(VectorizedCoGroupFunction):
    """``Summary`` over DataFrames of all keys at once."""

    def co_group(self, first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
        def per_key(frame: pl.DataFrame, count: str, total: str) -> pl.DataFrame:
            return frame.group_by("f0").agg(pl.len().cast(pl.Int64).alias(count), pl.col("f2").sum().alias(total))

        both = per_key(first, "n1", "t1").join(per_key(second, "n2", "t2"), on="f0", how="full", coalesce=True)
        return both.select("f0", pl.col("n1").fill_null(0), pl.col("n2").fill_null(0),
                           (pl.col("t1").fill_null(0.0) + pl.col("t2").fill_null(0.0)).alias("total"))


RECORD_TYPE = Types.TUPLE([Types.LONG(), Types.LONG(), Types.DOUBLE()])


class WithTimestamp(ProcessFunction):
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        yield value, ctx.timestamp()


# -- EndOfStreamWindows -----------------------------------------------------------------------------
@pytest.mark.seeds(*SEEDS)
@pytest.mark.engines(*SORTING)
@pytest.mark.parametrize("distribution", ["each key once", "many per key", "one-sided keys"])
def test_co_group_with_end_of_stream_windows(env: StreamExecutionEnvironment, distribution: str) -> None:
    seed = env.runtime_options.scheduler_seed
    if distribution == "each key once":
        first = second = flip327_records(60)
    elif distribution == "many per key":
        first, second = many_per_key(120, 9, seed), many_per_key(90, 9, seed + 1)
    else:  # keys 0..7 on the first side, 4..11 on the second: co_group sees empty sides
        first = [(k, i, 1.0) for i, k in enumerate(list(range(8)) * 3)]
        second = [(k, i, 2.0) for i, k in enumerate(range(4, 12))]
    got = list(env.from_collection(first).co_group(env.from_collection(second))
               .where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(Summary())
               .process(WithTimestamp()).execute_and_collect())
    assert sorted(value for value, _ in got) == summary_oracle(first, second)
    assert {ts for _, ts in got} == {MAX_TIMESTAMP}


@pytest.mark.seeds(*SEEDS)
@pytest.mark.engines(*SORTING)
@pytest.mark.workers(1, 2)
def test_join_with_end_of_stream_windows_is_the_inner_join(env: StreamExecutionEnvironment) -> None:
    first = many_per_key(80, 12, env.runtime_options.scheduler_seed)
    second = [(k, -i, 0.5) for i, k in enumerate(list(range(6, 16)) * 2)]  # keys 12..15 never match
    got = (env.from_collection(first).join(env.from_collection(second))
           .where(lambda r: r[0]).equal_to(lambda r: r[0]).window(EndOfStreamWindows.get())
           .apply(lambda a, b: (a[0], a[1], b[1]))
           .execute_and_collect())
    expected = sorted((a[0], a[1], b[1]) for a in first for b in second if a[0] == b[0])
    assert sorted(got) == expected and expected


@pytest.mark.seeds(3)
@pytest.mark.engines(*SORTING)
def test_flat_join_and_field_name_keys_on_dicts(env: StreamExecutionEnvironment) -> None:
    users = [{"id": i, "name": f"user{i}"} for i in range(10)]
    orders = [{"user": i % 13, "amount": i} for i in range(40)]

    def each_unit(user: dict, order: dict) -> Iterator[Any]:
        for _ in range(order["amount"] % 3):
            yield user["name"], order["amount"]

    got = (env.from_collection(users).join(env.from_collection(orders))
           .where("id").equal_to("user").window(GlobalWindows.create_with_end_of_stream_trigger())
           .apply(each_unit).execute_and_collect())
    expected = [(u["name"], o["amount"]) for u in users for o in orders if u["id"] == o["user"]
                for _ in range(o["amount"] % 3)]
    assert sorted(got) == sorted(expected)


@pytest.mark.seeds(*SEEDS)
@pytest.mark.engines(*SORTING)
def test_vectorised_co_group_equals_the_per_key_form(env: StreamExecutionEnvironment) -> None:
    seed = env.runtime_options.scheduler_seed
    first, second = many_per_key(150, 20, seed), many_per_key(100, 25, seed + 9)
    results = []
    for function in (Summary(), FrameSummary()):
        a = env.from_collection(first, type_info=RECORD_TYPE)
        b = env.from_collection(second, type_info=RECORD_TYPE)
        results.append(sorted(a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get())
                              .apply(function).execute_and_collect()))
    assert results[0] == results[1] == summary_oracle(first, second)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(7)
@pytest.mark.engines("spark")
def test_vectorised_co_group_equals_the_per_key_form_on_spark(env: StreamExecutionEnvironment) -> None:
    """Both forms as Spark jobs (grouped co-group in Spark's Python workers): once, a Spark run costs seconds."""
    test_vectorised_co_group_equals_the_per_key_form(env)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_vectorised_callable_sees_all_keys_of_its_subtask_in_one_call(env: StreamExecutionEnvironment) -> None:
    calls: list[int] = []

    def count_rows(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
        calls.append(first.height + second.height)
        return pl.DataFrame({"rows": [first.height + second.height]})

    got = list(env.from_collection(many_per_key(50, 10, 1)).co_group(env.from_collection(many_per_key(30, 10, 2)))
               .where(0).equal_to(0).window(EndOfStreamWindows.get())
               .apply(count_rows, vectorized=True).execute_and_collect())
    assert got == [(80,)] and calls == [80]


# -- nothing before the end -------------------------------------------------------------------------
@pytest.mark.engines(*SORTING)
@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(1)
@pytest.mark.configure(batch_size=2)
def test_downstream_of_end_of_stream_windows_receives_nothing_before_end_of_input(
        env: StreamExecutionEnvironment) -> None:
    log: list[str] = []

    def produce(side: str, n: int) -> Any:
        def records() -> Iterator[Any]:
            for i in range(n):
                log.append(f"produced {side}")
                yield i % 5, i, 1.0
        return records

    a = env.from_source(IteratorSource(produce("a", 40)), None, "a").set_parallelism(1)
    b = env.from_source(IteratorSource(produce("b", 25)), None, "b").set_parallelism(1)
    result = (a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(Summary())
              .map(lambda r: log.append("received") or r))
    got = list(result.execute_and_collect())
    assert len(got) == 5
    first_received = log.index("received")
    assert log[:first_received].count("produced a") == 40 and log[:first_received].count("produced b") == 25


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_the_co_group_chains_its_forward_successor_and_a_consumer_behind_its_blocking_edge_starts_after_it(
        env: StreamExecutionEnvironment) -> None:
    """FLIP-331 as Flink plans it: the map after the co-group runs in its task (it emits only at end of
    input too), and the edge leaving that chain blocks."""
    after = (env.from_collection(flip327_records(30)).co_group(env.from_collection(flip327_records(30)))
             .where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(Summary()).name("eos co-group")
             .map(lambda r: r).name("after"))
    collected: list[Any] = []
    after.rebalance().map(lambda r: r).name("behind").add_sink(collected.append)
    plan = env.explain()
    assert "emits only at end of input" in plan and "BLOCKING" in plan and "eos co-group -> after" in plan
    metrics = env.execute().get_all_accumulator_results()
    assert metrics["behind"]["deployed_ms"] >= metrics["eos co-group"]["finished_ms"]
    assert metrics["eos co-group"]["backlog_records"] == 60
    assert len(collected) == 30


# -- tumbling event-time windows --------------------------------------------------------------------
def timed_events(n: int, keys: int, seed: int, bound: int = 40) -> list[tuple[int, int, float]]:
    """``(key, timestamp, value)`` with timestamps at most ``bound`` out of order, so nothing is late."""
    rng = random.Random(seed)
    events, base = [], 0
    for _ in range(n):
        base += rng.choice([0, 5, 10])
        events.append((rng.randrange(keys), base + rng.randrange(0, bound, 5), float(rng.randrange(5))))
    return events


def timed(env: StreamExecutionEnvironment, events: list, bound: int = 40) -> Any:
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(bound)
                .with_timestamp_assigner(lambda event, _ts: event[1]))
    return env.from_source(CollectionSource(events), strategy, "events")


@pytest.mark.seeds(*SEEDS)
@pytest.mark.engines(*SORTING)
@pytest.mark.workers(1, 2)
def test_co_group_and_join_in_tumbling_event_time_windows(env: StreamExecutionEnvironment) -> None:
    seed = env.runtime_options.scheduler_seed
    first, second = timed_events(120, 4, seed), timed_events(90, 4, seed + 100)
    size = 100

    def window_of(record: Any) -> int:
        return record[1] - record[1] % size

    co_grouped = list(timed(env, first).co_group(timed(env, second)).where(0).equal_to(0)
                      .window(TumblingEventTimeWindows.of(size)).apply(Summary())
                      .process(WithTimestamp()).execute_and_collect())
    expected: dict[tuple[Any, int], tuple[list, list]] = defaultdict(lambda: ([], []))
    for record in first:
        expected[record[0], window_of(record)][0].append(record)
    for record in second:
        expected[record[0], window_of(record)][1].append(record)
    oracle = sorted(((key, len(a), len(b), sum(r[2] for r in a) + sum(r[2] for r in b)), start + size - 1)
                    for (key, start), (a, b) in expected.items())
    assert sorted(co_grouped) == oracle

    joined = list(timed(env, first).join(timed(env, second)).where(0).equal_to(0)
                  .window(TumblingEventTimeWindows.of(size)).apply(lambda a, b: (a[1], b[1]))
                  .execute_and_collect())
    assert sorted(joined) == sorted((a[1], b[1]) for a in first for b in second
                                    if a[0] == b[0] and window_of(a) == window_of(b))


# -- keyed and all-window EndOfStreamWindows --------------------------------------------------------
@pytest.mark.seeds(2)
@pytest.mark.engines(*SORTING)
def test_keyed_window_and_window_all_with_end_of_stream_windows(env: StreamExecutionEnvironment) -> None:
    records = many_per_key(100, 7, 4)
    keyed = list(env.from_collection(records).key_by(0).window(EndOfStreamWindows.get())
                 .reduce(lambda a, b: (a[0], a[1] + b[1], a[2] + b[2])).process(WithTimestamp())
                 .execute_and_collect())
    sums: dict[Any, list] = defaultdict(lambda: [0, 0.0])
    for key, i, value in records:
        sums[key][0] += i
        sums[key][1] += value
    assert sorted(v for v, _ in keyed) == sorted((k, s[0], s[1]) for k, s in sums.items())
    assert {ts for _, ts in keyed} == {MAX_TIMESTAMP}
    total = list(env.from_collection(records).window_all(GlobalWindows.create_with_end_of_stream_trigger())
                 .apply(lambda window, xs: [sum(x[1] for x in xs)]).execute_and_collect())
    assert total == [sum(r[1] for r in records)]


# -- errors -----------------------------------------------------------------------------------------
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.engines(*SORTING)
def test_a_failing_co_group_function_names_the_operator_and_the_key(env: StreamExecutionEnvironment) -> None:
    def fragile(first: Any, second: Any) -> Iterator[Any]:
        first = list(first)
        if first and first[0][0] == 3:
            raise ValueError("cannot handle key 3")
        yield len(first)

    result = (env.from_collection(many_per_key(40, 5, 0)).co_group(env.from_collection(many_per_key(10, 5, 1)))
              .where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(fragile).name("fragile co-group"))
    with pytest.raises(UserFunctionError, match=r"operator 'fragile co-group'.*key 3.*ValueError: cannot handle key 3"):
        list(result.execute_and_collect())

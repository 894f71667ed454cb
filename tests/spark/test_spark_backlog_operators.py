"""Every backlog operator gives the same result on the Spark engine (local[2]), on the polars
engine, and record by record (``backlog_sorting=False``): keyed aggregates (STREAMING and
BATCH), a user reduce, sorted per-key replay through a KeyedProcessFunction, keyed event-time
windows, built-in window aggregations, co_group (per-key and vectorised) with EndOfStreamWindows, and join."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import EndOfStreamWindows, SlidingEventTimeWindows, TumblingEventTimeWindows

RNG = random.Random(4)
RECORDS = [(RNG.choice("abcdefg"), RNG.randint(-10, 30), i) for i in range(240)]  # (key, value, time)
OTHERS = [(RNG.choice("defghij"), RNG.randint(0, 5)) for _ in range(60)]
ENGINES = {"spark": {"engine": "spark"}, "polars": {"engine": "polars"}, "record-by-record": {"sorting": False}}


def make_env(spark: Any, engine: str = "polars", sorting: bool = True, parallelism: int = 1,
             mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(mode).configure(backlog_sorting=sorting, show_progress=False, batch_size=16)
    if engine == "spark":
        env.set_batch_engine("spark", session=spark)
    return env


def on_every_engine(spark: Any, job: Callable[[StreamExecutionEnvironment], Any], **options: Any) -> dict[str, Any]:
    return {name: job(make_env(spark, **{**choice, **options})) for name, choice in ENGINES.items()}


def timed(env: StreamExecutionEnvironment) -> Any:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r[2])
    return env.from_collection(RECORDS).assign_timestamps_and_watermarks(strategy)


def final_per_key(updates: list) -> dict:
    return {update[0]: update for update in updates}


@pytest.mark.parametrize("mode", [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH])
def test_keyed_sum_min_max_by(spark: Any, mode: RuntimeExecutionMode) -> None:
    results = {}
    for name, choice in ENGINES.items():
        outputs = []
        for aggregate in (lambda k: k.sum(1), lambda k: k.min(1), lambda k: k.max_by(1)):
            env = make_env(spark, mode=mode, **choice)
            outputs.append(list(aggregate(env.from_collection(RECORDS).key_by(lambda r: r[0])).execute_and_collect()))
        results[name] = outputs
    assert results["spark"] == results["polars"]
    # record by record emits every rolling update; BATCH emits the final ones: compare finals
    for sorted_run, plain in zip(results["spark"], results["record-by-record"]):
        assert final_per_key(sorted_run) == final_per_key(plain)
    oracle = {k: sum(r[1] for r in RECORDS if r[0] == k) for k in "abcdefg"}
    assert {k: v[1] for k, v in final_per_key(results["spark"][0]).items()} == oracle


def test_user_reduce(spark: Any) -> None:
    def job(env: StreamExecutionEnvironment) -> Any:
        return list(env.from_collection(RECORDS).key_by(lambda r: r[0])
                    .reduce(lambda a, b: (a[0], a[1] * 2 + b[1], max(a[2], b[2]))).execute_and_collect())

    results = on_every_engine(spark, job)
    assert results["spark"] == results["polars"]
    assert final_per_key(results["spark"]) == final_per_key(results["record-by-record"])


class RunningTotals(KeyedProcessFunction):
    """Emits (key, running count, running total, values in order seen): order-sensitive."""

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("totals"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count, total, seen = self.state.value() or (0, 0, ())
        seen = seen + (value[1],)
        self.state.update((count + 1, total + value[1], seen))
        yield (ctx.get_current_key(), count + 1, total + value[1], seen)


def test_sorted_per_key_replay(spark: Any) -> None:
    results = on_every_engine(spark, lambda env: list(
        timed(env).key_by(lambda r: r[0]).process(RunningTotals()).execute_and_collect()))
    assert results["spark"] == results["polars"]
    # input timestamps ascend, so timestamp order is arrival order: record by record agrees per key
    assert final_per_key(results["spark"]) == final_per_key(results["record-by-record"])


@pytest.mark.parametrize("parallelism", [1, 2])
def test_keyed_event_time_window(spark: Any, parallelism: int) -> None:
    results = on_every_engine(spark, lambda env: sorted(
        timed(env).key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(50))
        .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).execute_and_collect()), parallelism=parallelism)
    assert results["spark"] == results["polars"] == results["record-by-record"]
    assert len(results["spark"]) >= 7 * 4


BUILT_IN_WINDOWS: dict[str, Callable[[Any], Any]] = {
    "tumbling sum": lambda keyed: keyed.window(TumblingEventTimeWindows.of(50)).sum(1),
    "sliding min_by": lambda keyed: keyed.window(SlidingEventTimeWindows.of(50, 20)).min_by(1),
    "count max": lambda keyed: keyed.count_window(4, 3).max(1),
}


@pytest.mark.parametrize("mode", [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH])
@pytest.mark.parametrize("window", list(BUILT_IN_WINDOWS))
def test_built_in_window_aggregations(spark: Any, mode: RuntimeExecutionMode, window: str) -> None:
    results = on_every_engine(spark, lambda env: sorted(
        BUILT_IN_WINDOWS[window](timed(env).key_by(lambda r: r[0])).execute_and_collect()), mode=mode)
    assert results["spark"] == results["polars"] == results["record-by-record"]
    assert len(results["spark"]) >= 7 * 4


def co_group_job(env: StreamExecutionEnvironment, apply: Callable[[Any], Any], kind: str = "co_group") -> Any:
    first, second = env.from_collection(RECORDS), env.from_collection(OTHERS)
    both = first.join(second) if kind == "join" else first.co_group(second)
    return list(apply(both.where(0).equal_to(0).window(EndOfStreamWindows.get())).execute_and_collect())


def per_key_summary(first: list, second: list) -> Any:
    key = (first or second)[0][0]
    yield (key, len(first), sum(r[1] for r in first), tuple(r[1] for r in second))


def test_co_group_per_key(spark: Any) -> None:
    results = on_every_engine(spark, lambda env: co_group_job(env, lambda w: w.apply(per_key_summary)))
    assert results["spark"] == results["polars"]
    assert sorted(results["spark"]) == sorted(results["record-by-record"])
    assert len(results["spark"]) == 10


def vectorised_totals(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
    return first.group_by("f0").agg(pl.col("f1").sum().alias("total")).join(
        second.group_by("f0").agg(pl.len().alias("others")), on="f0", how="full", coalesce=True)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_co_group_vectorised(spark: Any, parallelism: int) -> None:
    results = on_every_engine(spark, lambda env: sorted(
        co_group_job(env, lambda w: w.apply(vectorised_totals, vectorized=True)),
        key=lambda row: row[0]), parallelism=parallelism)
    assert results["spark"] == results["polars"] == results["record-by-record"]
    assert len(results["spark"]) == 10


def test_join(spark: Any) -> None:
    results = on_every_engine(spark, lambda env: co_group_job(
        env, lambda w: w.apply(lambda a, b: (a[0], a[1], b[1])), kind="join"))
    assert results["spark"] == results["polars"]
    assert sorted(results["spark"]) == sorted(results["record-by-record"])
    oracle = sorted((a[0], a[1], b[1]) for a in RECORDS for b in OTHERS if a[0] == b[0])
    assert sorted(results["spark"]) == oracle


def test_a_failing_function_on_spark_names_operator_and_key(spark: Any) -> None:
    def fails(first: list, second: list) -> Any:
        if second and second[0][0] == "h":
            raise ZeroDivisionError("bad key h")
        return []

    env = make_env(spark, engine="spark")
    with pytest.raises(Exception) as caught:
        co_group_job(env, lambda w: w.apply(fails).name("scoring"))
    message = str(caught.value)
    assert "scoring" in message and "'h'" in message and "ZeroDivisionError" in message


def test_explain_names_the_engine(spark: Any) -> None:
    env = make_env(spark, engine="spark")
    env.from_collection(RECORDS).key_by(lambda r: r[0]).sum(1).print()
    plan = env.explain()
    assert "runs it as batch work on spark" in plan
    assert "on polars" in make_env(spark).from_collection(RECORDS).key_by(lambda r: r[0]).sum(1) \
        .get_execution_environment().explain()

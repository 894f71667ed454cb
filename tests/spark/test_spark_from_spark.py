"""from_spark beyond the co-group: a built-in keyed aggregation after it folded into one Spark
query in BATCH mode on either batch engine (differential against the operator unfolded, sorted
on polars and record by record, on the same DataFrame), not folded in STREAMING mode."""

from __future__ import annotations

import random
from typing import Any

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.errors import JobExecutionError, UserFunctionError

RNG = random.Random(27)
ROWS = [(RNG.choice("abcdefghij"), RNG.randint(-20, 20), i, f"r{i}", RNG.random() < 0.5) for i in range(400)]
SCHEMA = "k string, v int, i long, name string, flag boolean"
KINDS = ["sum", "min", "max", "min_by", "max_by"]
ENGINES = {"spark": ("spark", True), "polars": ("polars", True), "record-by-record": ("polars", False)}


def make_env(spark: Any, engine: str = "spark", sorting: bool = True, parallelism: int = 1,
             mode: RuntimeExecutionMode = RuntimeExecutionMode.BATCH) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(mode).configure(backlog_sorting=sorting, show_progress=False)
    if engine == "spark":
        env.set_batch_engine("spark", session=spark)
    return env


def frame(spark: Any, rows: list = ROWS, schema: str = SCHEMA, partitions: int = 3) -> Any:
    return spark.createDataFrame(rows, schema).coalesce(partitions)


def keep_all(row: Any) -> bool:
    return True


def aggregate(env: StreamExecutionEnvironment, dataframe: Any, kind: str, key: Any = "k", field: Any = "v",
              unfolded: bool = False) -> Any:
    """``from_spark(dataframe).key_by(key).<kind>(field)``; ``unfolded``: with a filter keeping every
    row between the two, so the operator runs in slipstream, not folded into Spark."""
    stream = env.from_spark(dataframe)
    if unfolded:
        stream = stream.filter(keep_all)
    return getattr(stream.key_by(key), kind)(field)


def unfolded(spark: Any, dataframe: Any, kind: str, key: Any = "k", field: Any = "v", parallelism: int = 1) -> list:
    """The aggregation's records on the polars engine, the operator sorting its backlog itself."""
    env = make_env(spark, "polars", parallelism=parallelism)
    return [tuple(row) for row in aggregate(env, dataframe, kind, key, field, unfolded=True).execute_and_collect()]


def finals(updates: list) -> list:
    """The last update per key, in the order of the keys' first updates."""
    last: dict = {}
    for update in updates:
        last[update[0]] = update
    return list(last.values())


@pytest.mark.parametrize("kind", KINDS)
def test_keyed_aggregation_after_from_spark_is_one_spark_query(spark: Any, kind: str) -> None:
    dataframe = frame(spark)
    env = make_env(spark)
    aggregate(env, dataframe, kind).print()
    plan = env.explain()
    assert "Spark Source" not in plan
    assert f"runs on spark as one query: from_spark -> key_by('k').{kind}('v') (BATCH" in plan
    results = {}
    for name, (engine, sorting) in ENGINES.items():
        results[name] = [tuple(row) for row in aggregate(make_env(spark, engine, sorting), dataframe,
                                                         kind).execute_and_collect()]
    # same records in the same order: the key's first record is the DataFrame's first row of it
    assert results["spark"] == results["polars"] == unfolded(spark, dataframe, kind)
    assert results["spark"] == finals(results["record-by-record"])
    assert len(results["spark"]) == len({row[0] for row in ROWS})
    # an oracle for the aggregated field
    for row in results["spark"]:
        values = [r[1] for r in ROWS if r[0] == row[0]]
        expected = {"sum": sum(values), "min": min(values), "max": max(values), "min_by": min(values),
                    "max_by": max(values)}[kind]
        assert row[1] == expected


@pytest.mark.parametrize("kind", ["sum", "min_by"])
def test_fold_by_position_and_at_parallelism_two(spark: Any, kind: str) -> None:
    dataframe = frame(spark, partitions=4)
    env = make_env(spark, parallelism=2)
    folded = sorted(tuple(row) for row in aggregate(env, dataframe, kind, key=0, field=1).execute_and_collect())
    assert folded == sorted(unfolded(spark, dataframe, kind, key=0, field=1, parallelism=2))


def test_other_types_fold_exactly(spark: Any) -> None:
    rows = [(RNG.randint(0, 5), f"s{RNG.randint(0, 50):02d}", RNG.randint(-3, 3) * 10**12, i) for i in range(200)]
    dataframe = frame(spark, rows, "k int, s string, big long, i long", 2)
    for kind, field in (("max", "s"), ("min_by", "s"), ("sum", "big"), ("max_by", "big")):
        env = make_env(spark)
        aggregate(env, dataframe, kind, field=field).print()
        assert "runs on spark as one query" in env.explain()
        folded = [tuple(row) for row in aggregate(make_env(spark), dataframe, kind, field=field).execute_and_collect()]
        assert folded == unfolded(spark, dataframe, kind, field=field)


def test_sum_beyond_the_fields_type_becomes_int64(spark: Any) -> None:
    rows = [("a", 2_000_000_000, 0), ("a", 2_000_000_000, 1), ("b", 5, 2)]
    dataframe = frame(spark, rows, "k string, v int, i long", 1)
    folded = [tuple(row) for row in aggregate(make_env(spark), dataframe, "sum").execute_and_collect()]
    assert folded == unfolded(spark, dataframe, "sum") == [("a", 4_000_000_000, 0), ("b", 5, 2)]


def test_null_fields_as_the_operator_treats_them(spark: Any) -> None:
    # a key of one record keeps its null; a key of several with a null fails, as the operator does
    alone = frame(spark, [("a", None, 0), ("b", 3, 1), ("b", 4, 2)], "k string, v int, i long", 1)
    for kind in KINDS:
        folded = [tuple(row) for row in aggregate(make_env(spark), alone, kind).execute_and_collect()]
        assert folded == unfolded(spark, alone, kind)
    mixed = frame(spark, [("a", 1, 0), ("a", None, 1)], "k string, v int, i long", 1)
    for (engine, sorting), filtered in [*((paths, False) for paths in ENGINES.values()), (("polars", True), True)]:
        with pytest.raises(JobExecutionError) as failure:
            list(aggregate(make_env(spark, engine, sorting), mixed, "max", unfolded=filtered).execute_and_collect())
        error = failure.value
        while not isinstance(error, UserFunctionError) and error.__cause__ is not None:
            error = error.__cause__
        assert isinstance(error, UserFunctionError)


def test_not_folded_in_streaming_or_for_inexact_types(spark: Any) -> None:
    dataframe = frame(spark)
    env = make_env(spark, mode=RuntimeExecutionMode.STREAMING)
    aggregate(env, dataframe, "sum").print()
    plan = env.explain()
    assert "Spark Source" in plan and "in STREAMING mode the rolling sum emits an update per record" in plan
    # STREAMING: every rolling update, the same on every path
    results = {name: [tuple(row) for row in aggregate(make_env(spark, engine, sorting, mode=RuntimeExecutionMode.STREAMING),
                                                      dataframe, "sum").execute_and_collect()]
               for name, (engine, sorting) in ENGINES.items()}
    assert results["spark"] == results["polars"] and len(results["spark"]) == len(ROWS)
    assert sorted(results["spark"]) == sorted(results["record-by-record"])
    # a double field is not folded (Spark's float sum and min/max differ from Python's fold)
    doubles = spark.createDataFrame([("a", 0.1), ("a", 0.2)], "k string, x double")
    env = make_env(spark)
    aggregate(env, doubles, "sum", field="x").print()
    plan = env.explain()
    assert "Spark Source" in plan and "not folded into a Spark query: the key must be" in plan
    # a key given as a function is not folded either (Spark cannot run it)
    env = make_env(spark)
    env.from_spark(dataframe).key_by(lambda row: row.k).sum("v").print()
    assert "runs on spark as one query" not in env.explain()

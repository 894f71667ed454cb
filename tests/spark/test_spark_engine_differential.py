"""The Spark batch engine against the polars engine, call by call: the BatchEngine protocol
demands the same table (rows, order, values, types) from both."""

from __future__ import annotations

import pickle
import random
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from slipstream.operators.batch_engine import KEY_COLUMN, Aggregation, BatchEngine, CoGroupFunctionError
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.runtime.batch.spark_engine import SparkBatchEngine

RNG = random.Random(327)
N = 300
TABLE = pa.table({
    "key": pa.array([RNG.choice([None, 1, 2, 3, 4, 5]) for _ in range(N)], pa.int64()),
    "ts": pa.array([RNG.choice([None] + list(range(20))) for _ in range(N)], pa.int64()),
    "seq": pa.array(range(N), pa.int64()),
    "x": pa.array([RNG.choice([None, -3, 0, 7, 11, 2 ** 40]) for _ in range(N)], pa.int64()),
    "f": pa.array([RNG.choice([None, 0.5, 1.25, -2.0]) for _ in range(N)], pa.float64()),
    "s": pa.array([RNG.choice(["a", "b", "zz", None]) for _ in range(N)], pa.large_string()),
})


@pytest.fixture(scope="module")
def engines(spark: Any) -> tuple[SparkBatchEngine, PolarsBatchEngine]:
    return SparkBatchEngine(session=spark), PolarsBatchEngine()


def test_both_engines_implement_the_protocol(engines: Any) -> None:
    for engine in engines:
        assert isinstance(engine, BatchEngine)
    assert [engine.name for engine in engines] == ["spark", "polars"]
    assert [engine.in_process for engine in engines] == [False, True]


@pytest.mark.parametrize("by, descending", [
    (["key", "ts", "seq"], None),
    (["ts", "seq"], [True, False]),
    (["s", "f", "seq"], [False, True, True]),
])
def test_sort_is_identical(engines: Any, by: list[str], descending: Any) -> None:
    spark, polars = engines
    assert spark.sort(TABLE, by, descending=descending).equals(polars.sort(TABLE, by, descending=descending))


AGGREGATIONS = [Aggregation("sum", "x", "sum_x"), Aggregation("min", "x", "min_x"), Aggregation("max", "f", "max_f"),
                Aggregation("count", "s", "count_s"), Aggregation("first", "x", "first_x"),
                Aggregation("last", "s", "last_s"), Aggregation("min", "s", "min_s"),
                Aggregation("sum", "f", "sum_f")]


@pytest.mark.parametrize("descending", [None, [True, False]])
def test_group_aggregate_is_identical(engines: Any, descending: Any) -> None:
    spark, polars = engines
    expected = polars.group_aggregate(TABLE, ["key"], AGGREGATIONS, order_by=["ts", "seq"], descending=descending)
    actual = spark.group_aggregate(TABLE, ["key"], AGGREGATIONS, order_by=["ts", "seq"], descending=descending)
    assert actual.schema == expected.schema
    assert actual.equals(expected), (actual.to_pylist(), expected.to_pylist())
    # a group of only nulls sums to null, as the protocol says, on both
    assert expected.to_pylist()[0]["key"] is None


def test_group_aggregate_of_no_rows(engines: Any) -> None:
    spark, polars = engines
    empty = TABLE.slice(0, 0)
    assert spark.group_aggregate(empty, ["key"], AGGREGATIONS, order_by=["seq"]).equals(
        polars.group_aggregate(empty, ["key"], AGGREGATIONS, order_by=["seq"]))


def side(rows: list[tuple[int, int | None, Any]]) -> pa.Table:
    return pa.table({"key": pa.array([r[0] for r in rows], pa.int64()),
                     "ts": pa.array([r[1] for r in rows], pa.int64()),
                     "seq": pa.array(range(len(rows)), pa.int64()),
                     "value": pa.array([pickle.dumps(r[2]) for r in rows], pa.large_binary())})


FIRST = side([(RNG.randrange(40), RNG.choice([None, 1, 2, 3]), ("a", i)) for i in range(200)])
SECOND = side([(RNG.randrange(50), RNG.choice([None, 5]), {"b": i}) for i in range(150)])


def summarise(first: list, second: list) -> Any:
    yield (len(first), len(second))
    yield from first[:2]
    if second:
        yield second[-1]


def test_co_group_is_identical(engines: Any) -> None:
    spark, polars = engines
    expected = polars.co_group(FIRST, SECOND, summarise)
    actual = spark.co_group(FIRST, SECOND, summarise)
    assert actual.equals(expected)
    decoded = [pickle.loads(blob) for blob in expected.column("value").to_pylist()]
    assert decoded[0][0] + decoded[0][1] > 0 and len(set(expected.column("key").to_pylist())) > 40


def test_co_group_of_one_empty_side(engines: Any) -> None:
    spark, polars = engines
    empty = FIRST.slice(0, 0)
    assert spark.co_group(empty, SECOND, summarise).equals(polars.co_group(empty, SECOND, summarise))


def fails_on_key_seven(first: list, second: list) -> Any:
    if any(value == ("a", 7) for value in first):
        raise ValueError("no sevens")
    return [len(first)]


@pytest.mark.parametrize("which", ["spark", "polars"])
def test_co_group_failure_names_the_key(engines: Any, which: str) -> None:
    engine = engines[0] if which == "spark" else engines[1]
    key_of_seven = FIRST.column("key")[7].as_py()
    with pytest.raises(CoGroupFunctionError) as caught:
        engine.co_group(FIRST, SECOND, fails_on_key_seven)
    assert caught.value.key_ids == [key_of_seven]
    assert isinstance(caught.value.cause, ValueError) and "no sevens" in str(caught.value.cause)


def test_co_group_vectorized_gives_the_same_rows(engines: Any) -> None:
    spark, polars = engines
    first = pa.table({KEY_COLUMN: [k % 9 for k in range(100)], "k": [k % 9 for k in range(100)], "v": list(range(100))})
    second = pa.table({KEY_COLUMN: [k % 11 for k in range(40)], "k": [k % 11 for k in range(40)], "w": [1.5] * 40})

    def per_key(left: pl.DataFrame, right: pl.DataFrame) -> pl.DataFrame:
        return left.group_by("k").agg(pl.col("v").sum()).join(
            right.group_by("k").agg(pl.col("w").sum()), on="k", how="full", coalesce=True)

    expected = pl.from_arrow(polars.co_group_vectorized(first, second, per_key)).sort("k")
    actual = pl.from_arrow(spark.co_group_vectorized(first, second, per_key)).sort("k")
    assert actual.equals(expected) and expected.height == 11


def test_co_group_vectorized_failure(engines: Any) -> None:
    first = pa.table({KEY_COLUMN: [1, 2], "v": [1, 2]})
    for engine in engines:
        with pytest.raises(CoGroupFunctionError) as caught:
            engine.co_group_vectorized(first, first, lambda left, right: "not a frame")
        assert "polars DataFrame" in str(caught.value.cause)

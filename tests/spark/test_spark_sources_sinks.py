"""Spark DataFrames in and out: from_spark (planned as one Spark query when the backlog
subgraph is vectorisable), to_spark, Parquet datasets Spark reads, and slipstream running
inside an existing PySpark job whose DataFrame feeds the backlog before the job streams."""

from __future__ import annotations

import os
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.spark import SparkSource
from slipstream.errors import UserFunctionError
from slipstream.datastream.formats.parquet import ParquetBulkWriters
from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.window import EndOfStreamWindows

ORDERS = [(f"u{i % 13}", i, float(i % 5)) for i in range(200)]
USERS = [(f"u{i}", f"name {i}") for i in range(0, 20, 2)]


def env_for(engine: str = "spark", sorting: bool = True, session: Any = None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(backlog_sorting=sorting, show_progress=False)
    if engine == "spark":
        env.set_batch_engine("spark", session=session)
    return env


def totals(orders: pl.DataFrame, users: pl.DataFrame) -> pl.DataFrame:
    spent = orders.group_by("user").agg(pl.col("amount").sum().alias("spent"), pl.len().alias("orders"))
    return spent.join(users, on="user", how="full", coalesce=True).select("user", "name", "spent", "orders")


def co_group_totals(env: StreamExecutionEnvironment, spark: Any) -> Any:
    orders = spark.createDataFrame(ORDERS, "user string, id long, amount double")
    users = spark.createDataFrame(USERS, "user string, name string")
    return env.from_spark(orders).co_group(env.from_spark(users)).where("user").equal_to("user") \
        .window(EndOfStreamWindows.get()).apply(totals, vectorized=True).name("totals")


def oracle() -> list[tuple]:
    keys = sorted({o[0] for o in ORDERS} | {u[0] for u in USERS})
    names = dict(USERS)
    rows = []
    for key in keys:
        mine = [o for o in ORDERS if o[0] == key]
        rows.append((key, names.get(key), sum(o[2] for o in mine) if mine else None, len(mine) if mine else None))
    return rows


def test_from_spark_co_group_is_one_spark_query(spark: Any) -> None:
    env = env_for()
    stream = co_group_totals(env, spark)
    plan = env.explain()
    assert "runs on spark as one query" in plan and "Spark Source" not in plan
    planned = sorted(tuple(row) for row in stream.execute_and_collect())
    assert planned == oracle()
    # the same job on polars, and record by record, goes through the operator: same rows
    for engine, sorting in (("polars", True), ("polars", False)):
        other_env = env_for(engine, sorting)
        assert sorted(tuple(row) for row in co_group_totals(other_env, spark).execute_and_collect()) == planned
    polars_env = env_for("polars")
    co_group_totals(polars_env, spark).print()
    assert "Spark Source" in polars_env.explain()


def test_from_spark_rows_into_python_functions(spark: Any) -> None:
    frame = spark.createDataFrame(ORDERS, "user string, id long, amount double")
    results = {}
    for engine in ("spark", "polars"):
        env = env_for(engine)
        results[engine] = list(env.from_spark(frame).map(lambda row: (row.user, row.amount))
                               .key_by(lambda r: r[0]).sum(1).execute_and_collect())
    assert results["spark"] == results["polars"] and len(results["spark"]) == len(ORDERS)


def test_to_spark_hands_back_a_dataframe(spark: Any) -> None:
    env = env_for()
    result = co_group_totals(env, spark).to_spark()
    assert result.sparkSession is spark
    assert sorted(tuple(row) for row in result.collect()) == oracle()
    assert result.columns == ["user", "name", "spent", "orders"]
    # Python records become columns f0, f1, … (tuples)
    env = env_for()
    tuples = env.from_collection([("a", 1), ("b", 2)]).to_spark(session=spark)
    assert tuples.columns == ["f0", "f1"] and sorted(map(tuple, tuples.collect())) == [("a", 1), ("b", 2)]


def test_parquet_dataset_written_by_a_sink_is_read_by_spark(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "totals")
    env = env_for().set_parallelism(2)
    schema = pa.schema([("user", pa.string()), ("name", pa.string()), ("spent", pa.float64()),
                        ("orders", pa.uint32())])
    co_group_totals(env, spark).sink_to(FileSink.for_bulk_format(path, ParquetBulkWriters.for_schema(schema)).build())
    env.execute("write totals")
    assert any(name.endswith(".parquet") or name.startswith("part") for name in os.listdir(path))
    read = spark.read.parquet(path)
    assert sorted(tuple(row) for row in read.collect()) == oracle()
    # and a Parquet dataset read by Spark feeds a job directly
    again = env_for().from_spark(spark.read.parquet(path)).map(lambda row: row.user)
    assert sorted(again.execute_and_collect()) == sorted(row[0] for row in oracle())


class RunningSpend(KeyedProcessFunction):
    """Per user, the running total: state built from the backlog, continued by live records."""

    def open(self, runtime_context: Any) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        total = (self.total.value() or 0.0) + value["amount"]
        self.total.update(total)
        yield (ctx.get_current_key(), total, ctx.is_backlog() if hasattr(ctx, "is_backlog") else None)


def test_inside_an_existing_pyspark_job(spark: Any) -> None:
    # the caller's Spark code: an ETL step producing the history
    raw = spark.createDataFrame(ORDERS, "user string, id long, amount double")
    history = raw.filter("id % 2 = 0").selectExpr("user", "id", "amount * 2 AS amount")
    live = [{"user": "u1", "id": 1000, "amount": 5.0}, {"user": "u99", "id": 1001, "amount": 1.0},
            {"user": "u1", "id": 1002, "amount": 0.5}]
    results = {}
    for engine, sorting in (("spark", True), ("polars", True), ("polars", False)):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.configure(backlog_sorting=sorting, show_progress=False)
        if engine == "spark":
            env.set_batch_engine("spark")  # no session given: the active one (the caller's) is used
        source = HybridSource.builder(SparkSource(history)).add_source(IteratorSource(live, bounded=False)).build()
        stream = env.from_source(source, None, "history then live").key_by(
            lambda r: r["user"]).process(RunningSpend())
        outputs = list(stream.execute_and_collect())
        results[(engine, sorting)] = [(key, total) for key, total, _ in outputs]
    spark_run = results[("spark", True)]
    assert spark_run == results[("polars", True)]
    # live records come after every backlog output, continuing from the state the backlog built
    assert spark_run[-3:] == [("u1", 2 * sum(o[2] for o in ORDERS if o[0] == "u1" and o[1] % 2 == 0) + 5.0),
                              ("u99", 1.0),
                              ("u1", 2 * sum(o[2] for o in ORDERS if o[0] == "u1" and o[1] % 2 == 0) + 5.5)]
    final = {key: total for key, total in spark_run}
    assert final == {key: total for key, total in results[("polars", False)]}


def test_the_active_session_is_reused(spark: Any) -> None:
    from slipstream.runtime.batch import make_batch_engine
    engine = make_batch_engine("spark")
    assert engine.session is spark and engine.startup_seconds == 0.0


def test_to_spark_names_the_record_and_the_field(spark: Any) -> None:
    env = env_for()
    stream = env.from_collection([("a", 1), ("b", 2), ("c", "three")])
    with pytest.raises(UserFunctionError, match=r"operator 'To Spark'.*\('c', 'three'\).*field 'f1'"):
        stream.to_spark(session=spark)

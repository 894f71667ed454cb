"""FLIP-327's CoGroup benchmark on the Spark batch engine, against raw Spark in the same run.

Two sources each hold N records ``(f0=2i, f1=2i+1, f2=1.0)`` for i = 1..N (every key once
on each side), as Spark DataFrames (``spark.range``, cached and counted before any timing,
so generating them is not timed). Then, each on the same cached DataFrames:

* ``slipstream vectorised`` — ``env.from_spark(a).co_group(env.from_spark(b)).where("f0")
  .equal_to("f0").window(EndOfStreamWindows.get()).apply(fn, vectorized=True)`` into a sink
  that counts, with ``env.set_batch_engine("spark")``: planned as one Spark query (the
  grouped co-group over key buckets, the polars function in Spark's Python workers), only
  the result (one row per key) comes back, as Arrow;
* ``raw Spark, same function`` — the same computation written by hand in PySpark: the same
  polars function through ``groupBy(bucket).cogroup(...).applyInArrow``, result collected
  with ``toArrow()`` — the like-for-like baseline (aim: slipstream within 1.3x);
* ``raw Spark SQL`` — what Spark does best: per-key counts of each side joined (full
  outer), collected with ``toArrow()``; no Python function at all;
* ``slipstream per-key`` — a Python ``CoGroupFunction`` per key on Spark, on a smaller
  N (``--per-key-n``): the records pass through the driver's sort buffer, are pickled to
  Spark's workers and the function runs there key by key.

JVM start-up (starting the local SparkSession) is reported apart from compute. Each timed
step runs ``--repeat`` times after one warm-up run; the best time is reported.

Run: ``python benchmarks/cogroup_spark.py [--n N] [--master local[*]]``; default
N = 2·10^6 per source (a couple of minutes on two cores).
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Any

import polars as pl
import pyarrow as pa

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.co_group import CoGroupFunction
from slipstream.datastream.connectors.base import Sink, SinkWriter
from slipstream.datastream.window import EndOfStreamWindows


def per_key_counts(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
    """One row per key: (key, records of a, records of b)."""
    left = first.group_by("f0").agg(pl.len().alias("a"))
    right = second.group_by("f0").agg(pl.len().alias("b"))
    return left.join(right, on="f0", how="full", coalesce=True).fill_null(0)


class PerKeyCounts(CoGroupFunction):
    def co_group(self, first: Any, second: Any) -> Any:
        first, second = list(first), list(second)
        key = (first or second)[0]["f0"]
        yield (key, len(first), len(second))


class CountingSink(Sink):
    """Counts records; columnar batches are counted without building rows."""

    def __init__(self) -> None:
        self.count = [0]

    def default_name(self) -> str:
        return "Count"

    def create_writer(self) -> SinkWriter:
        return _CountingWriter(self.count)


class _CountingWriter(SinkWriter):
    def __init__(self, count: list[int]) -> None:
        self._count = count

    def write(self, values: list, timestamps: list | None) -> None:
        self._count[0] += len(values)

    def write_arrow(self, batch: Any, timestamps: list | None) -> None:
        self._count[0] += batch.num_rows


def sources(spark: Any, n: int) -> tuple[Any, Any]:
    frame = spark.range(1, n + 1).selectExpr("2 * id AS f0", "2 * id + 1 AS f1", "CAST(1.0 AS DOUBLE) AS f2")
    first, second = frame.cache(), frame.alias("b").cache()
    first.count()
    second.count()
    return first, second


def slipstream_vectorised(spark: Any, first: Any, second: Any) -> int:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False).set_batch_engine("spark", session=spark)
    sink = CountingSink()
    env.from_spark(first).co_group(env.from_spark(second)).where("f0").equal_to("f0") \
        .window(EndOfStreamWindows.get()).apply(per_key_counts, vectorized=True).sink_to(sink)
    assert "runs on spark as one query" in env.explain()
    env.execute("cogroup on spark")
    return sink.count[0]


def slipstream_per_key(spark: Any, first: Any, second: Any) -> int:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False).set_batch_engine("spark", session=spark)
    sink = CountingSink()
    env.from_spark(first).co_group(env.from_spark(second)).where("f0").equal_to("f0") \
        .window(EndOfStreamWindows.get()).apply(PerKeyCounts()).sink_to(sink)
    env.execute("per-key cogroup on spark")
    return sink.count[0]


def raw_spark_same_function(spark: Any, first: Any, second: Any) -> int:
    from pyspark.sql import functions as F
    buckets = int(spark.conf.get("spark.sql.shuffle.partitions"))

    def run(left: pa.Table, right: pa.Table) -> pa.Table:
        result = per_key_counts(pl.from_arrow(left.drop_columns(["bucket"])),
                                pl.from_arrow(right.drop_columns(["bucket"])))
        return result.to_arrow().cast(pa.schema([("f0", pa.int64()), ("a", pa.int64()), ("b", pa.int64())]))

    left = first.withColumn("bucket", F.pmod(F.hash("f0"), F.lit(buckets)))
    right = second.withColumn("bucket", F.pmod(F.hash("f0"), F.lit(buckets)))
    result = left.groupBy("bucket").cogroup(right.groupBy("bucket")).applyInArrow(run, "f0 long, a long, b long")
    return result.toArrow().num_rows


def raw_spark_sql(spark: Any, first: Any, second: Any) -> int:
    from pyspark.sql import functions as F
    left = first.groupBy("f0").agg(F.count("*").alias("a"))
    right = second.groupBy("f0").agg(F.count("*").alias("b"))
    return left.join(right, "f0", "full_outer").na.fill(0).toArrow().num_rows


def best_of(repeat: int, fn: Any, *args: Any) -> tuple[float, int]:
    fn(*args)  # warm-up: Python workers started, code paths compiled
    best, count = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        count = fn(*args)
        best = min(best, time.perf_counter() - started)
    return best, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2_000_000, help="records per source")
    parser.add_argument("--per-key-n", type=int, default=100_000, help="records per source, per-key path")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    started = time.perf_counter()
    from slipstream.runtime.batch.spark_engine import start_session
    spark = start_session(args.master, app_name="cogroup-benchmark",
                          **{"spark.sql.shuffle.partitions": str(args.partitions), "spark.driver.memory": "4g"})
    spark.sparkContext.setLogLevel("ERROR")
    jvm = time.perf_counter() - started
    print(f"# FLIP-327 CoGroup on Spark {spark.version} ({args.master}, {spark.sparkContext.defaultParallelism} "
          f"cores, shuffle partitions {args.partitions}), Python {platform.python_version()}")
    print(f"JVM + SparkSession start-up: {jvm:.1f} s (not in any figure below)")

    started = time.perf_counter()
    first, second = sources(spark, args.n)
    print(f"generating and caching 2 x {args.n:,} records: {time.perf_counter() - started:.1f} s (not timed below)")
    rows = []
    for label, fn in (("slipstream vectorised (one Spark query)", slipstream_vectorised),
                      ("raw Spark, same polars function", raw_spark_same_function),
                      ("raw Spark SQL (no Python function)", raw_spark_sql)):
        seconds, count = best_of(args.repeat, fn, spark, first, second)
        assert count == args.n, (label, count)
        rows.append((label, args.n, seconds))
    first.unpersist()
    second.unpersist()
    small_first, small_second = sources(spark, args.per_key_n)
    seconds, count = best_of(1, slipstream_per_key, spark, small_first, small_second)
    assert count == args.per_key_n, count
    rows.append(("slipstream per-key CoGroupFunction", args.per_key_n, seconds))

    print(f"{'path':42} {'N/source':>12} {'seconds':>9} {'records/s/source':>17}")
    for label, n, seconds in rows:
        print(f"{label:42} {n:>12,} {seconds:>9.2f} {n / seconds:>17,.0f}")
    ratio = rows[0][2] / rows[1][2]
    print(f"slipstream vectorised / raw Spark with the same function: {ratio:.2f}x (aim: <= 1.3x)")
    print(f"slipstream vectorised / raw Spark SQL: {rows[0][2] / rows[2][2]:.2f}x")


if __name__ == "__main__":
    main()

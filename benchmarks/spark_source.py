"""``from_spark`` with the polars batch engine against raw PySpark, keyed sum, in the same run.

The DataFrame holds N rows ``(k, v)`` with 10^5 keys (``spark.range``, cached and counted
before any timing, so generating it is not timed). Then, each on the same cached DataFrame:

* ``slipstream BATCH keyed sum`` — ``env.from_spark(df).key_by("k").sum("v")`` in BATCH mode on
  the polars engine: the planner runs it on Spark (``explain()`` says so) and one row per key
  comes back, read in pieces;
* ``raw PySpark`` — ``df.groupBy("k").agg(F.sum("v")).toArrow()``, what the user would write;
* ``slipstream, every row read`` — the same sum with a filter keeping every row between source
  and sum, so it is not folded: every row comes through the driver in pieces of at most half a
  reader's buffer and the polars engine sums them (what the BATCH sum cost before it was folded:
  229 s at 10^7 rows, and a driver out of memory on the first attempt).

Times are wall seconds, best of ``--repeat`` after one warm-up, with the driver's CPU seconds
(``time.process_time``: this Python process only, not Spark's JVM) beside them, since the
machine may be loaded. JVM start-up is reported apart.

Run: ``python benchmarks/spark_source.py [--n N] [--master local[*]]`` (default N = 10^6).
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Any

from cogroup_spark import CountingSink

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

KEYS = 100_000


def keep_all(row: Any) -> bool:
    return True


def slipstream_sum(spark: Any, frame: Any, every_row: bool = False) -> int:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH).configure(show_progress=False)
    stream = env.from_spark(frame)
    if every_row:
        stream = stream.filter(keep_all)
    sink = CountingSink()
    stream.key_by("k").sum("v").sink_to(sink)
    assert ("runs on spark as one query" in env.explain()) != every_row
    env.execute("keyed sum of a Spark DataFrame")
    return sink.count[0]


def raw_pyspark(spark: Any, frame: Any) -> int:
    from pyspark.sql import functions as F
    return frame.groupBy("k").agg(F.sum("v").alias("v")).toArrow().num_rows


def best_of(repeat: int, fn: Any, *args: Any) -> tuple[float, float, int]:
    """Best wall seconds, the driver's CPU seconds of that run, and what ``fn`` returned."""
    fn(*args)
    best, cpu, count = float("inf"), 0.0, 0
    for _ in range(repeat):
        wall, used = time.perf_counter(), time.process_time()
        count = fn(*args)
        wall, used = time.perf_counter() - wall, time.process_time() - used
        if wall < best:
            best, cpu = wall, used
    return best, cpu, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="rows of the DataFrame")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partitions", type=int, default=8, help="spark.sql.shuffle.partitions")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    started = time.perf_counter()
    from slipstream.runtime.batch.spark_engine import start_session
    spark = start_session(args.master, app_name="spark-source-benchmark",
                          **{"spark.sql.shuffle.partitions": str(args.partitions), "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    print(f"# from_spark keyed sum on Spark {spark.version} ({args.master}, {spark.sparkContext.defaultParallelism} "
          f"cores, shuffle partitions {args.partitions}), Python {platform.python_version()}")
    print(f"JVM + SparkSession start-up: {time.perf_counter() - started:.1f} s (not in any figure below)")
    frame = spark.range(0, args.n).selectExpr(f"id % {KEYS} AS k", "id % 7 AS v").cache()
    frame.count()
    keys = min(args.n, KEYS)
    rows = []
    for label, fn, extra in (("slipstream BATCH keyed sum (planned on Spark)", slipstream_sum, ()),
                             ("raw PySpark groupBy().sum().toArrow()", raw_pyspark, ()),
                             ("slipstream, every row read in pieces", slipstream_sum, (True,))):
        seconds, cpu, count = best_of(args.repeat, fn, spark, frame, *extra)
        assert count == keys, (label, count)
        rows.append((label, seconds, cpu))
    print(f"{'path (N = ' + format(args.n, ',') + ' rows)':48} {'seconds':>9} {'driver CPU s':>13} {'rows/s':>12}")
    for label, seconds, cpu in rows:
        print(f"{label:48} {seconds:>9.2f} {cpu:>13.2f} {args.n / seconds:>12,.0f}")
    print(f"slipstream BATCH keyed sum / raw PySpark: {rows[0][1] / rows[1][1]:.2f}x")
    print(f"every row through the driver / raw PySpark: {rows[2][1] / rows[1][1]:.2f}x")
    frame.unpersist()


if __name__ == "__main__":
    main()

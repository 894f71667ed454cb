"""The Spark runner against the embedded runtime and a hand-written PySpark query, in the same run.

**Keyed-state streaming job.** ``--files`` text files of ``--per-file`` lines ``key,ts,amount``
(``--keys`` keys) lie in a directory (both Spark queries run once over input of the same shape
first, untimed, so neither pays the cold start for the other, then ``--repeat`` times each,
alternately); the job parses each line, keys it, and a
``KeyedProcessFunction`` keeps per key a count and a sum in value state and emits
``key,count,average`` per record into a text file sink. Three ways, on the same files:

* ``spark runner`` — the slipstream job with ``SparkRunner(max_files_per_trigger=...)``: one
  Structured Streaming query (file stream source, the chain in ``mapInArrow``,
  ``groupBy(key).transformWithState`` with pickled state, Spark's file sink), ``availableNow``;
* ``hand-written`` — the same work written directly in PySpark: ``readStream.text``, columns
  split in SQL, ``groupBy(key).transformWithState`` with typed state, ``writeStream.text``;
* ``embedded`` — the slipstream job on the embedded runtime (one process).

Each prints its throughput (records per second of wall time), the micro-batch durations'
percentiles (the end-to-end latency of a micro-batch engine is one batch plus the trigger),
the time until the first micro-batch ended (the time to reach streaming) and the driver's CPU
time (``time.process_time``; Spark's work runs in the JVM and in Python workers, so for the
Spark rows it is the driver's share only). Outputs are compared: all three write the same lines.

**Flagship.** ``examples/bootstrap_then_stream.py`` with ``--runner embedded`` and
``--runner spark`` at ``--history``/``--live`` sizes (its own figures: backlog, time to reach
streaming, per-record latency percentiles, alerts).

Run: ``python benchmarks/spark_runner.py [--files 40 --per-file 5000] [--repeat 3] [--skip-flagship]``; the
defaults are small. The flagship on Spark runs its history as a Spark batch query through
``process_backlog`` and installs a profile per user of the history as initial state (one
state call per key through Spark's Python state server).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slipstream.datastream import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.formats.base import Encoder, StreamFormat
from slipstream.runtime.batch.spark_engine import start_session
from slipstream.spark_runner import SparkRunner

REPO = Path(__file__).resolve().parents[1]


def write_input(directory: Path, files: int, per_file: int, keys: int) -> int:
    directory.mkdir(parents=True)
    for index in range(files):
        lines = [f"k{(n * 7919) % keys},{n},{n % 97}" for n in range(index * per_file, (index + 1) * per_file)]
        path = directory / f"part-{index:05d}.txt"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))  # Spark takes files by age: path order
    return files * per_file


def parse(line: str) -> tuple[str, int, int]:
    key, ts, amount = line.split(",")
    return key, int(ts), int(amount)


def key_of(event: tuple[str, int, int]) -> str:
    return event[0]


class RunningAverage(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, event: tuple[str, int, int], ctx: Any) -> Iterator[str]:
        count = (self.count.value() or 0) + 1
        total = (self.total.value() or 0) + event[2]
        self.count.update(count)
        self.total.update(total)
        yield f"{event[0]},{count},{total / count:.4f}"


def slipstream_job(env: StreamExecutionEnvironment, input_dir: Path, output: Path) -> None:
    lines = env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(),
                                                                str(input_dir)).build(), None, "lines")
    lines.map(parse).key_by(key_of).process(RunningAverage()).name("average").uid("average") \
        .sink_to(FileSink.for_row_format(str(output), Encoder.simple_string_encoder()).build())


def hand_written(spark: Any, input_dir: Path, output: Path, checkpoint: Path, per_trigger: int) -> Any:
    """The same job written directly in PySpark, typed state, no slipstream."""
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor

    class Average(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.state = handle.getValueState("average", "count long, total long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            count, total = self.state.get() if self.state.exists() else (0, 0)
            for row in sorted(rows, key=lambda r: r.ts):
                count, total = count + 1, total + row.amount
                yield Row(value=f"{key[0]},{count},{total / count:.4f}")
            self.state.update((count, total))

        def close(self) -> None:
            pass

    parts = F.split(F.col("value"), ",")
    frame = spark.readStream.option("maxFilesPerTrigger", per_trigger).text(str(input_dir)).select(
        parts[0].alias("key"), parts[1].cast("long").alias("ts"), parts[2].cast("long").alias("amount"))
    query = frame.groupBy("key").transformWithState(Average(), "value string", "Append", "None") \
        .writeStream.format("text").option("path", str(output)).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    return query


def percentile(ordered: list[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))] if ordered else 0.0


def output_lines(directory: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not any(p.startswith((".", "_")) for p in path.relative_to(directory).parts):
            lines.extend(line for line in path.read_text().splitlines() if line)
    return sorted(lines)


@dataclass
class Measured:
    """One timed run: wall and driver CPU seconds, micro-batch durations (ms), first batch done (s)."""

    wall: float
    cpu: float
    batch_ms: list[float]
    first_batch_s: float

    def report(self, name: str, records: int) -> None:
        ordered = sorted(self.batch_ms)
        print(f"{name:<14} {records / self.wall:>12,.0f} rec/s  wall {self.wall:6.2f} s  driver cpu {self.cpu:6.2f} s"
              f"  batches {len(ordered):3d}  batch p50 {percentile(ordered, 50):7.0f} ms  "
              f"p99 {percentile(ordered, 99):7.0f} ms  first batch done {self.first_batch_s:6.2f} s")


def warm_up(spark: Any, work: Path, args: argparse.Namespace) -> None:
    """Both Spark queries once over input of the timed run's shape, untimed: the JVM's code,
    Spark's Python workers (as many as the timed run uses, each with its imports done) and its
    state store are warm for whichever runs first when timed. A long-running query pays these
    once; the time to reach streaming of a cold query is the flagship's figure below."""
    per_trigger = args.per_trigger
    write_input(work / "in", args.files, args.per_file, args.keys)
    env = StreamExecutionEnvironment.get_execution_environment()
    slipstream_job(env, work / "in", work / "spark")
    env.execute("warm-up", runner=SparkRunner(spark, checkpoint_location=str(work / "spark-checkpoint"),
                                              available_now=True, max_files_per_trigger=per_trigger))
    hand_written(spark, work / "in", work / "hand", work / "hand-checkpoint", per_trigger).awaitTermination()


def run_spark_runner(spark: Any, args: argparse.Namespace, work: Path, output: Path) -> Measured:
    env = StreamExecutionEnvironment.get_execution_environment()
    slipstream_job(env, work / "in", output)
    runner = SparkRunner(spark, checkpoint_location=str(output) + "-checkpoint", available_now=True,
                         max_files_per_trigger=args.per_trigger)
    wall, cpu = time.perf_counter(), time.process_time()
    job = env.execute("spark runner", runner=runner).metrics["job"]
    return Measured(time.perf_counter() - wall, time.process_time() - cpu, job["batch_ms"],
                    (job["switched_ms"] or 0) / 1000)


def run_hand_written(spark: Any, args: argparse.Namespace, work: Path, output: Path) -> Measured:
    wall, cpu = time.perf_counter(), time.process_time()
    query = hand_written(spark, work / "in", output, Path(str(output) + "-checkpoint"), args.per_trigger)
    first = None
    while not query.awaitTermination(0.05):
        if first is None and query.lastProgress is not None:
            first = time.perf_counter() - wall
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    batch_ms = [p.durationMs.get("triggerExecution", 0) for p in query.recentProgress]
    return Measured(wall, cpu, batch_ms, first or wall)


def keyed_state(args: argparse.Namespace, spark: Any, work: Path) -> None:
    records = write_input(work / "in", args.files, args.per_file, args.keys)
    print(f"\nkeyed-state streaming job: {records:,} records in {args.files} files, {args.keys} keys, "
          f"{args.per_trigger} files per micro-batch, {args.repeat} run(s) each, alternately")

    warm_up(spark, work / "warm-up", args)
    ratios = []
    for run in range(args.repeat):
        ways = [("spark runner", run_spark_runner), ("hand-written", run_hand_written)]
        measured = {name: way(spark, args, work, work / f"{name.split()[0]}-{run}")
                    for name, way in (ways if run % 2 == 0 else ways[::-1])}
        for name, figures in sorted(measured.items(), reverse=True):
            figures.report(name, records)
        ratios.append(measured["spark runner"].wall / measured["hand-written"].wall)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    slipstream_job(env, work / "in", work / "embedded")
    wall, cpu = time.perf_counter(), time.process_time()
    env.execute("embedded")
    Measured(time.perf_counter() - wall, time.process_time() - cpu, [], 0.0).report("embedded", records)

    print(f"spark runner / hand-written wall time: {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.2f}× (aim: within 1.2×)")
    same = output_lines(work / "spark-0") == output_lines(work / "hand-written-0") == output_lines(work / "embedded")
    print(f"same output from all three: {same}")


def flagship(args: argparse.Namespace) -> None:
    print(f"\nflagship (examples/bootstrap_then_stream.py, --history {args.history} --live {args.live}):")
    for runner in ("embedded", "spark"):
        command = [sys.executable, str(REPO / "examples" / "bootstrap_then_stream.py"), "--history",
                   str(args.history), "--live", str(args.live), "--rate", str(args.rate), "--runner", runner]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=dict(os.environ))
        lines = [line for line in done.stdout.splitlines()
                 if line.startswith(("backlog", "switch", "alerts", "live", "stream"))]
        print(f"  --runner {runner} ({time.perf_counter() - started:.1f} s wall, exit {done.returncode}):")
        for line in lines or done.stderr.splitlines()[-5:]:
            print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--per-file", type=int, default=2_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--per-trigger", type=int, default=2, help="files per micro-batch")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each Spark query, alternately")
    parser.add_argument("--history", type=int, default=50_000)
    parser.add_argument("--live", type=int, default=2_000)
    parser.add_argument("--rate", type=float, default=1_000.0)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-flagship", action="store_true", help="only the keyed-state job")
    args = parser.parse_args()
    started = time.perf_counter()
    spark = start_session(args.master, app_name="slipstream-bench", **{"spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    print(f"SparkSession on {args.master} started in {time.perf_counter() - started:.1f} s")
    with tempfile.TemporaryDirectory(prefix="slipstream-spark-runner-") as directory:
        keyed_state(args, spark, Path(directory))
    if not args.skip_flagship:
        flagship(args)


if __name__ == "__main__":
    main()

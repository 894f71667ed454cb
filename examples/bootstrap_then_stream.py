"""Bootstrap state from history, then enrich a live stream: the flagship job of `make run`.

One stream of card transactions — about two million historical ones (Parquet files this
script generates), then live ones (a thread produces them at a steady rate) — is keyed by
user into one ``KeyedProcessFunction`` that is also a ``KeyedStateBootstrapFunction``:

1. **Backlog.** The history is backlog (FLIP-327): instead of a call per historical record,
   the function's ``process_backlog`` gets all of it as one polars DataFrame and returns
   every user's profile (transaction count and average amount) in one query.
2. **The switch.** The profiles are installed as the users' keyed state.
3. **Streaming.** Each live transaction is enriched record by record with its user's profile
   and the user's segment and credit limit (reference data the function loads when it
   opens) and scored; the script measures each record's latency from creation to the sink.

It prints the plan, how long the backlog took and on which engine, when the switch
happened, and the latency percentiles (p50, p99, p99.9, max) of the records created
after it.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from slipstream.datastream import (
    KeyedProcessFunction,
    KeyedStateBootstrapFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.file_system import FileSource
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat

USERS = 100_000
SEGMENTS = ["student", "retail", "business", "premium"]


def uniform(rows: int, seed: int) -> pl.Expr:
    """Deterministic pseudo-random numbers in [0, 1), one per row, computed by polars."""
    return pl.int_range(rows, dtype=pl.UInt64).hash(seed) / float(2 ** 64)


def write_history(directory: Path, rows: int) -> Path:
    """Historical transactions as a directory of Parquet files: user, merchant, amount, event
    time. They are the same for the same ``rows``, so they are written once and kept: a run
    resumed from a savepoint (``slipstream run ... --restore latest``) finds the very files its
    source had read."""
    path = directory / f"history-{rows}"
    if path.exists():
        return path
    frame = pl.select(
        user_id=(uniform(rows, 1) * USERS).cast(pl.Int64),
        merchant_id=(uniform(rows, 2) * 5_000).cast(pl.Int64),
        amount=(-(1 - uniform(rows, 3)).log() * 60.0).round(2),
        ts=1_600_000_000_000 + pl.int_range(rows, dtype=pl.Int64) * 50,
    )
    partial = directory / f".history-{rows}.{os.getpid()}"
    partial.mkdir(parents=True)
    for part, start in enumerate(range(0, rows, 1_048_576)):
        frame.slice(start, 1_048_576).write_parquet(partial / f"part-{part:03d}.parquet", row_group_size=262_144)
    try:
        os.rename(partial, path)  # whole or absent, should another run look meanwhile
    except OSError:  # another run wrote it first
        shutil.rmtree(partial)
    return path


def users_table() -> pl.DataFrame:
    return pl.select(
        user_id=pl.int_range(USERS, dtype=pl.Int64),
        segment=pl.lit(pl.Series(SEGMENTS)).gather((uniform(USERS, 4) * len(SEGMENTS)).cast(pl.Int64)),
        credit_limit=((5 + uniform(USERS, 5) * 195).round(0) * 100),
    )


def live_transactions(count: int | None, rate: float, seed: int = 11) -> Iterator[dict[str, Any]]:
    """``count`` live transactions (None: until the job is stopped) at ``rate`` per second, each
    stamped with its creation time.

    While the job is still busy with the backlog, backpressure holds this producer back;
    it then resumes at the same steady rate rather than bursting to catch up.
    """
    rng = random.Random(seed)
    start = time.perf_counter()
    for i in range(count) if count is not None else itertools.count():
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        elif delay < -0.05:
            start -= delay
        yield {"txn_id": i, "user_id": rng.randrange(USERS), "amount": round(rng.expovariate(1 / 60), 2),
               "created": time.perf_counter()}


class Enrich(KeyedProcessFunction, KeyedStateBootstrapFunction):
    """Each user's profile from the history in one polars query, then each live transaction
    enriched with it and scored."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.txns = runtime_context.get_state(ValueStateDescriptor("txns"))
        self.avg_amount = runtime_context.get_state(ValueStateDescriptor("avg_amount"))
        users = users_table()  # reference data, the same for every key
        self.segment = dict(zip(users["user_id"].to_list(), users["segment"].to_list()))
        self.credit_limit = dict(zip(users["user_id"].to_list(), users["credit_limit"].to_list()))

    def process_backlog(self, frame: pl.DataFrame) -> pl.DataFrame:
        """The history of many users at once: one row per user, a column per ValueState."""
        return frame.group_by("user_id").agg(pl.len().alias("txns"), pl.col("amount").mean().alias("avg_amount"))

    def process_element(self, txn: dict[str, Any], ctx: KeyedProcessFunction.Context):
        user = txn["user_id"]
        average = self.avg_amount.value() or 0.0
        unusual = txn["amount"] / max(average, 1.0)
        over_limit = txn["amount"] > self.credit_limit[user] / 10
        yield {**txn, "segment": self.segment[user], "history_txns": self.txns.value() or 0,
               "unusual": round(unusual, 2), "alert": unusual > 8 or over_limit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=int, default=2_000_000, help="historical transactions")
    parser.add_argument("--live", type=int, default=None,
                        help="live transactions (default: until the job is stopped; `make run` streams 20,000)")
    parser.add_argument("--rate", type=float, default=4_000.0, help="live transactions per second")
    parser.add_argument("--runner", choices=["embedded", "spark"], default="embedded",
                        help="run on the embedded runtime, or as one Spark Structured Streaming query (local[2])")
    args = parser.parse_args()

    started = time.perf_counter()
    history_path = write_history(Path(tempfile.gettempdir()) / "slipstream-flagship", args.history)
    print(f"{args.history:,} historical transactions ready in {time.perf_counter() - started:.1f} s")

    env = StreamExecutionEnvironment.get_execution_environment()
    if args.runner == "spark":
        from slipstream.spark_runner import SparkRunner
        env.set_runner(SparkRunner(master="local[2]"))
    else:
        # Under `slipstream run`, Ctrl-C takes a savepoint that `--restore latest` resumes from (at
        # once: the interval is long so that a short run's latency figures include no checkpoint).
        # No checkpoint while the history is read and sorted: it would write the whole buffer.
        env.enable_checkpointing(30_000)
        env.get_checkpoint_config().set_checkpoint_interval_during_backlog(0)
    history = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(batch_size=65_536),
                                              str(history_path)).build()
    live = IteratorSource(lambda: live_transactions(args.live, args.rate), bounded=False)
    transactions = env.from_source(HybridSource.builder(history).add_source(live).build(), None, "transactions")
    latencies: list[tuple[float, float]] = []
    alerts = []

    def sink(record: dict[str, Any]) -> None:
        now = time.perf_counter()
        latencies.append((record["created"], now - record["created"]))
        if record["alert"]:
            alerts.append(record)

    transactions.key_by("user_id").process(Enrich()).name("enrich").uid("enrich").add_sink(sink).name("scored")

    print(env.explain())
    job_start = time.perf_counter()
    result = env.execute("bootstrap then stream")
    metrics = result.get_all_accumulator_results()

    if args.runner == "spark":
        # On Spark the profiles are the first micro-batch's initial state: streaming starts after it.
        switched_ms = metrics["job"]["switched_ms"] or 0
        print(f"\nbacklog: the history ran as a Spark batch query through process_backlog, its profiles "
              f"Spark's initial state; {metrics['job']['batches']} micro-batches")
    else:
        backlog = metrics["enrich"]
        # The job switched once the last profile was in keyed state (the runtime says when).
        switched_ms = metrics.get("job", {}).get("switched_ms", backlog["finished_ms"])
        print(f"\nbacklog: {backlog['backlog_records']:,} historical records into process_backlog as polars "
              f"frames in {backlog['backlog_seconds']:.2f} s (its query and the profiles into keyed state "
              f"{backlog['switch_time']:.2f} s)")
    switch = job_start + switched_ms / 1000
    streaming = sorted(latency for created, latency in latencies if created >= switch)
    print(f"switch to streaming at {switched_ms / 1000:.2f} s into the job (profiles in keyed state); "
          f"job ran {result.get_net_runtime() / 1000:.2f} s")
    alerted = sorted(record["txn_id"] for record in alerts)  # the same on either runner
    print(f"alerts: the first of them {alerted[:8]}, sum of their ids {sum(alerted)}")
    print(f"live: {len(latencies):,} transactions scored, {len(alerts):,} alerts; "
          f"{len(streaming):,} created after the switch")
    if streaming:
        print("streaming latency: " + ", ".join(
            f"p{p}={percentile(streaming, p) * 1000:.2f} ms" for p in (50, 99, 99.9)) +
            f", max={streaming[-1] * 1000:.2f} ms")


def percentile(ordered: list[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of an ascending list."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


if __name__ == "__main__":
    main()

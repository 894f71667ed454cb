"""Bootstrap state from history, then enrich a live stream: the flagship job of `make run`.

1. **Backlog.** About two million historical card transactions (a Parquet file this
   script generates) are co-grouped with a reference table of users. The co_group runs
   at end of input over ``EndOfStreamWindows`` with a vectorised function, so the whole
   backlog is sorted batch work on polars (FLIP-327): one query builds every user's
   profile (transaction count, average and largest amount, segment, credit limit).
2. **The switch.** When the history is consumed, the profiles flow into keyed state.
3. **Streaming.** Live transactions (a thread produces them at a steady rate) are
   enriched record by record with their user's profile and scored; the script measures
   each record's latency from creation to the sink.

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
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from slipstream.datastream import (
    KeyedCoProcessFunction,
    ListStateDescriptor,
    RuntimeContext,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.co_group import VectorizedCoGroupFunction
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.file_system import FileSource
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
from slipstream.datastream.window import EndOfStreamWindows

USERS = 100_000
SEGMENTS = ["student", "retail", "business", "premium"]


def uniform(rows: int, seed: int) -> pl.Expr:
    """Deterministic pseudo-random numbers in [0, 1), one per row, computed by polars."""
    return pl.int_range(rows, dtype=pl.UInt64).hash(seed) / float(2 ** 64)


def write_history(directory: Path, rows: int) -> Path:
    """Historical transactions as a Parquet file: user, merchant, amount, event time. The file is
    the same for the same ``rows``, so it is written once and kept: a run resumed from a savepoint
    (``slipstream run ... --restore latest``) finds the very file its source had read."""
    path = directory / f"history-{rows}.parquet"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    frame = pl.select(
        user_id=(uniform(rows, 1) * USERS).cast(pl.Int64),
        merchant_id=(uniform(rows, 2) * 5_000).cast(pl.Int64),
        amount=(-(1 - uniform(rows, 3)).log() * 60.0).round(2),
        ts=1_600_000_000_000 + pl.int_range(rows, dtype=pl.Int64) * 50,
    )
    partial = directory / f".history-{rows}.{os.getpid()}.parquet"
    frame.write_parquet(partial, row_group_size=262_144)
    os.replace(partial, path)  # whole or absent, should another run look meanwhile
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


class UserProfiles(VectorizedCoGroupFunction):
    """One polars query over the whole history: per-user statistics joined with the user table."""

    def co_group(self, first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
        stats = first.group_by("user_id").agg(
            pl.len().alias("txns"), pl.col("amount").mean().alias("avg_amount"),
            pl.col("amount").max().alias("max_amount"))
        return second.join(stats, on="user_id", how="left").with_columns(
            pl.col("txns").fill_null(0), pl.col("avg_amount").fill_null(0.0), pl.col("max_amount").fill_null(0.0))


class Enrich(KeyedCoProcessFunction):
    """Live transactions (input 1) meet their user's profile (input 2) in keyed state."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting"))

    def process_element1(self, txn: dict[str, Any], ctx: KeyedCoProcessFunction.Context):
        profile = self.profile.value()
        if profile is None:
            self.waiting.add(txn)
        else:
            yield self.score(txn, profile)

    def process_element2(self, profile: Any, ctx: KeyedCoProcessFunction.Context):
        self.profile.update(profile)
        for txn in self.waiting.get():
            yield self.score(txn, profile)
        self.waiting.clear()

    @staticmethod
    def score(txn: dict[str, Any], profile: Any) -> dict[str, Any]:
        unusual = txn["amount"] / max(profile.avg_amount, 1.0)
        over_limit = txn["amount"] > profile.credit_limit / 10
        return {**txn, "segment": profile.segment, "history_txns": profile.txns,
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
    history = env.from_source(
        FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(batch_size=65_536),
                                        str(history_path)).build(), None, "history")
    users = env.from_source(ArrowSource(users_table()), None, "users")
    profiles = history.co_group(users).where("user_id").equal_to("user_id") \
        .window(EndOfStreamWindows.get()).apply(UserProfiles()).name("user profiles")
    live = env.from_source(IteratorSource(lambda: live_transactions(args.live, args.rate), bounded=False),
                           None, "live transactions")
    latencies: list[tuple[float, float]] = []
    alerts = []

    def sink(record: dict[str, Any]) -> None:
        now = time.perf_counter()
        latencies.append((record["created"], now - record["created"]))
        if record["alert"]:
            alerts.append(record)

    live.connect(profiles).key_by(lambda txn: txn["user_id"], lambda profile: profile.user_id) \
        .process(Enrich()).name("enrich").uid("enrich").add_sink(sink).name("scored")

    print(env.explain())
    job_start = time.perf_counter()
    result = env.execute("bootstrap then stream")
    metrics = result.get_all_accumulator_results()

    if args.runner == "spark":
        # On Spark the profiles are the first micro-batch's initial state: streaming starts after it.
        switched_ms = metrics["job"]["switched_ms"] or 0
        print(f"\nbacklog: the co-group ran as a Spark batch query, its profiles Spark's initial state; "
              f"{metrics['job']['batches']} micro-batches")
    else:
        backlog = metrics["user profiles"]
        # The job switched once the last profile was in keyed state (the runtime says when).
        switched_ms = metrics.get("job", {}).get("switched_ms", backlog["finished_ms"])
        print(f"\nbacklog: {backlog['backlog_records']:,} records sorted and co-grouped on "
              f"{backlog.get('batch_engine', 'no engine')} in {backlog['backlog_seconds']:.2f} s "
              f"(batch work {backlog['switch_time']:.2f} s), {backlog['records_out']:,} user profiles")
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

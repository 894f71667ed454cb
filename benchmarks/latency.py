"""Tail latency after the switch: a keyed enrichment job against a hand-written loop, in one run.

The job bootstraps a profile for each of ``--keys`` users (10^6 by default) from a
columnar backlog into keyed state (FLIP-327: sorted batch work, then the switch), then
enriches live transactions record by record: each one reads its user's profile, updates
the user's running count and goes to a sink. Live transactions come from an unbounded
source reading a queue that a producer thread fills at a fixed rate (10^3, 10^4 and 10^5
records/s); each record's latency runs from its creation to the sink. A record's creation
time is the instant it was due, so a producer held up (by the GIL, say) does not hide a
delay. The hand-written loop reads the same kind of queue, fed the same way, and updates
dicts holding the same profile rows. Per rate it prints p50, p99, p99.9 and max for the
loop, for slipstream, and for slipstream with a checkpoint every second; and the pauses of
Python's full (generation 2) garbage collections in the measured window, a cause of tails.

Run: ``python benchmarks/latency.py [--keys N] [--seconds S] [--rates 1000,10000,100000]
[--runs loop,slipstream,checkpoints] [--repeat R]`` (``--keys 100000 --seconds 3`` for a
quick run; ``--repeat 3`` shows the median of three runs, as a shared machine's noise asks).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import queue
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import polars as pl

from slipstream.datastream import KeyedCoProcessFunction, RuntimeContext, StreamExecutionEnvironment
from slipstream.datastream import ValueStateDescriptor
from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.iterator import IteratorSource

SEGMENTS = ["student", "retail", "business", "premium"]


def profiles_table(keys: int) -> pl.DataFrame:
    """One profile per user: segment, average amount, credit limit (the backlog)."""
    return pl.select(
        user_id=pl.int_range(keys, dtype=pl.Int64),
        segment=pl.lit(pl.Series(SEGMENTS)).gather(pl.int_range(keys) % len(SEGMENTS)),
        avg_amount=(pl.int_range(keys) % 997).cast(pl.Float64) / 10 + 1.0,
        credit_limit=(pl.int_range(keys) % 50 + 5).cast(pl.Float64) * 100,
    )


def enrich(txn: dict[str, Any], profile: Any, seen: int) -> dict[str, Any]:
    """The enrichment both the job and the loop apply: the record with its user's profile."""
    return {**txn, "segment": profile.segment, "seen": seen,
            "unusual": txn["amount"] / profile.avg_amount > 8 or txn["amount"] > profile.credit_limit / 10}


class Feed:
    """A producer thread putting transactions into a queue at ``rate`` per second once started.

    It runs for ``warmup + seconds`` and then puts None (the end). Each record carries the
    instant it was due as ``created``.
    """

    def __init__(self, rate: float, seconds: float, warmup: float, keys: int, seed: int = 7) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.rate, self.count, self.keys, self.seed = rate, int(rate * (warmup + seconds)), keys, seed
        self.go = threading.Event()
        self.started = 0.0
        self.measure_from = 0.0
        self.warmup = warmup
        self._thread = threading.Thread(target=self._produce, name="feed", daemon=True)
        self._thread.start()

    def records(self) -> Iterator[dict[str, Any]]:
        """The queue's records until the end."""
        return iter(self.queue.get, None)

    def _produce(self) -> None:
        self.go.wait()
        rng, put, rate, keys = random.Random(self.seed), self.queue.put, self.rate, self.keys
        self.started = start = time.perf_counter()
        self.measure_from = start + self.warmup
        sent = 0
        while sent < self.count:
            due = min(self.count, int((time.perf_counter() - start) * rate) + 1)
            for i in range(sent, due):
                put({"txn_id": i, "user_id": rng.randrange(keys), "amount": round(rng.expovariate(1 / 60), 2),
                     "created": start + i / rate})
            sent = due
            delay = start + sent / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        put(None)


@dataclass
class Measurement:
    """Latencies (seconds) of the records created in the measured window, and the GC pauses in it."""

    latencies: list[float] = field(default_factory=list)
    gc_pauses: list[float] = field(default_factory=list)
    note: str = ""

    def quantile(self, q: float) -> float:
        """The nearest-rank ``q`` quantile (1.0: the maximum)."""
        ordered = sorted(self.latencies)
        return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


class GcPauses:
    """Records how long each full (generation 2) collection took, while installed."""

    def __init__(self, into: list[float], window_start: Callable[[], float]) -> None:
        self._into, self._window_start, self._began = into, window_start, 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        now = time.perf_counter()
        if phase == "start":
            self._began = now
        elif self._window_start() and now >= self._window_start():
            self._into.append(now - self._began)

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self)


def latency_sink(feed: Feed, measurement: Measurement) -> Callable[[dict[str, Any]], None]:
    append = measurement.latencies.append
    clock = time.perf_counter

    def sink(record: dict[str, Any]) -> None:
        created = record["created"]
        if created >= feed.measure_from:
            append(clock() - created)
    return sink


class Enrich(KeyedCoProcessFunction):
    """Live transactions (input 1) read their user's profile (input 2, the backlog) from keyed
    state and update the user's running count; ``loaded`` is called once every profile is in."""

    def __init__(self, keys: int, loaded: Callable[[], None]) -> None:
        self.keys, self.loaded, self.profiles_in = keys, loaded, 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

    def process_element1(self, txn: dict[str, Any], ctx: KeyedCoProcessFunction.Context):
        seen = (self.seen.value() or 0) + 1
        self.seen.update(seen)
        yield enrich(txn, self.profile.value(), seen)

    def process_element2(self, profile: Any, ctx: KeyedCoProcessFunction.Context):
        self.profile.update(profile)
        self.profiles_in += 1
        if self.profiles_in == self.keys:
            self.loaded()
        return ()


def run_slipstream(profiles: pl.DataFrame, feed: Feed, checkpoint_dir: str | None) -> Measurement:
    measurement = Measurement()
    env = StreamExecutionEnvironment.get_execution_environment()
    if checkpoint_dir is not None:
        env.enable_checkpointing(1000)
        env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    backlog = env.from_source(ArrowSource(profiles), None, "profiles")
    live = env.from_source(IteratorSource(feed.records, bounded=False), None, "transactions")
    live.connect(backlog).key_by(lambda txn: txn["user_id"], lambda profile: profile.user_id) \
        .process(Enrich(profiles.height, feed.go.set)).name("enrich").uid("enrich") \
        .add_sink(latency_sink(feed, measurement)).name("latency")
    with GcPauses(measurement.gc_pauses, lambda: feed.measure_from):
        result = env.execute("latency")
    if checkpoint_dir is not None:
        stats = result.get_accumulator_result("checkpoints")
        pauses = stats.get("pauses_ms")  # how long each stopped the tasks, the last one after the stream ended
        measurement.note = (f"{stats['completed']} checkpoints, longest {max(stats['durations_ms'], default=0):,.0f} ms"
                            + ("" if pauses is None else f", tasks stopped up to {max(pauses[:-1], default=0):.2f} ms"))
    return measurement


def run_loop(profiles: pl.DataFrame, feed: Feed) -> Measurement:
    """The hand-written loop: the same profile rows in a dict, the same queue, the same enrichment."""
    measurement = Measurement()
    sink = latency_sink(feed, measurement)
    with GcPauses(measurement.gc_pauses, lambda: feed.measure_from):
        state = {row.user_id: row for row in rows_from_arrow(profiles.to_arrow())}
        seen: dict[int, int] = {}
        feed.go.set()
        for txn in feed.records():
            key = txn["user_id"]
            count = seen.get(key, 0) + 1
            seen[key] = count
            sink(enrich(txn, state[key], count))
    return measurement


def measure(kind: str, profiles: pl.DataFrame, rate: float, args: argparse.Namespace) -> Measurement:
    feed = Feed(rate, args.seconds, args.warmup, profiles.height)
    gc.collect()
    if kind == "loop":
        return run_loop(profiles, feed)
    directory = tempfile.mkdtemp(prefix="slipstream-latency-") if kind == "checkpoints" else None
    try:
        return run_slipstream(profiles, feed, directory)
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


LABELS = {"loop": "hand-written loop", "slipstream": "slipstream", "checkpoints": "slipstream, checkpoint 1 s"}


QUANTILES = (0.5, 0.99, 0.999, 1.0)


def row(rate: float, kind: str, runs: list[Measurement]) -> str:
    """One line of the table: each percentile the median over the runs (a run disturbed by the rest of
    the machine moves it less than it moves a mean), with the GC pauses and checkpoints of the last."""
    figures = [statistics.median(m.quantile(q) for m in runs) * 1000 for q in QUANTILES]
    last = runs[-1]
    gcs = f"{len(last.gc_pauses)} ({max(last.gc_pauses, default=0) * 1000:.0f})"
    return (f"{rate:>8,.0f}  {LABELS[kind]:<28}{len(last.latencies):>10,}"
            + "".join(f"{figure:>11,.2f}" for figure in figures) + f"  {gcs}{'; ' + last.note if last.note else ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="users with a profile in state")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds after the switch left out")
    parser.add_argument("--rates", default="1000,10000,100000", help="live records per second, comma-separated")
    parser.add_argument("--runs", default="loop,slipstream,checkpoints", help="which of: " + ", ".join(LABELS))
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, their percentiles' medians shown")
    args = parser.parse_args()
    profiles = profiles_table(args.keys)
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}; {args.keys:,} keys, {args.seconds:g} s per run after "
          f"{args.warmup:g} s of warm-up, median of {args.repeat} run(s)")
    print(f"{'rate/s':>8}  {'job':<28}{'records':>10}" + "".join(f"{name:>11}" for name in
          ("p50 ms", "p99 ms", "p99.9 ms", "max ms")) + "  full GCs (longest ms); checkpoints")
    for rate in (float(r) for r in args.rates.split(",")):
        for kind in args.runs.split(","):
            runs = [measure(kind, profiles, rate, args) for _ in range(args.repeat)]
            print(row(rate, kind, runs), flush=True)


if __name__ == "__main__":
    main()

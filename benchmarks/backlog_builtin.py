"""Backlog of the built-in keyed aggregations: sorted (one polars query) vs streamed vs raw polars.

A bounded Arrow table of N records ``(k, v, i)`` — 10^5 keys, ``v`` an int64, ``i`` the
arrival number — feeds ``key_by("k").<kind>("v")`` at parallelism 1 into a sink that counts
rows (without building them), for kind in ``sum``, ``min``, ``max``, ``min_by``, ``max_by``:

* ``sorted``   — STREAMING mode, the bounded input is backlog: buffered as Arrow and run at the
  switch as one polars query that emits every rolling update (``backlog_records_vectorised``);
* ``streamed`` — the same job with ``env.configure(backlog_sorting=False)``: record by record;
* ``raw polars`` — the baseline: the same rolling updates computed by polars over the same
  DataFrame (``cum_sum``/``cum_min``/``cum_max`` over the key, the other columns from the key's
  first record; for ``*_by`` the record holding the running extreme) in the replay's order.

A row runs ``sum`` in BATCH mode (one final value per key) against polars' ``group_by``. Then
window aggregations, ``window(...).sum("v")``, over event time ``i`` ms (taken from the column
by a ``FieldTimestampAssigner``, so the records stay Arrow): tumbling windows of 10 s, sliding
windows of 10 s every 5 s, tumbling count windows of 5 records per key, and session windows with a
gap of 100 s — sorted (one polars query at the switch) vs streamed vs raw polars (``group_by`` on
the window start, number or session). The ratio printed is slipstream's time over raw
polars' (aim: at most 2). Each figure is the best of ``--repeat`` runs (default 3) after one
untimed run of the same job, so imports and polars' thread pool are not charged to the first one;
``--skip-streamed`` leaves out the record-by-record runs (minutes at 10^6, timed once).

Run: ``python benchmarks/backlog_builtin.py [--n N] [--full] [--repeat R] [--skip-streamed]``
(default N = 10^6; ``--full``: 10^7). ``count`` per key has no built-in here (Flink's DataStream
has none either).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import polars as pl

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.base import Sink, SinkWriter
from slipstream.datastream.execution_mode import RuntimeExecutionMode
from slipstream.datastream.watermark_strategy import FieldTimestampAssigner, WatermarkStrategy
from slipstream.datastream.window import EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows

KEYS = 100_000
BATCH_SIZE = 65_536
KINDS = ("sum", "min", "max", "min_by", "max_by")
WINDOW_MS = 10_000
SLIDE_MS = 5_000
COUNT = 5
GAP_MS = 100_000
"""Session gap: a key's records are about ``KEYS`` ms apart, so its sessions hold a few."""
WINDOWS = {
    "tumbling 10 s": lambda keyed: keyed.window(TumblingEventTimeWindows.of(WINDOW_MS)),
    "sliding 10 s / 5 s": lambda keyed: keyed.window(SlidingEventTimeWindows.of(WINDOW_MS, SLIDE_MS)),
    "count 5": lambda keyed: keyed.count_window(COUNT),
    "session 100 s": lambda keyed: keyed.window(EventTimeSessionWindows.with_gap(GAP_MS)),
}


class CountingSink(Sink):
    """Counts what reaches it; Arrow batches are counted without building rows."""

    def __init__(self) -> None:
        self.rows = 0

    def create_writer(self) -> SinkWriter:
        sink = self

        class Writer(SinkWriter):
            def write(self, values: list, timestamps: list | None) -> None:
                sink.rows += len(values)

            def write_arrow(self, batch: object, timestamps: list | None) -> None:
                sink.rows += batch.num_rows  # type: ignore[attr-defined]

        return Writer()


def history(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(7)
    return pl.DataFrame({"k": rng.integers(0, KEYS, n), "v": rng.integers(-1_000, 1_000, n),
                         "i": np.arange(n, dtype=np.int64)})


def slipstream_run(frame: pl.DataFrame, kind: str, *, sorting: bool, batch: bool = False) -> tuple[float, int]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.configure(backlog_sorting=sorting)
    if batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    sink = CountingSink()
    source = env.from_source(ArrowSource(frame, batch_size=BATCH_SIZE), None, "history")
    getattr(source.key_by("k"), kind)("v").sink_to(sink)
    started = time.perf_counter()
    env.execute(f"backlog {kind}")
    return time.perf_counter() - started, sink.rows


def slipstream_window_run(frame: pl.DataFrame, window: str, *, sorting: bool) -> tuple[float, int]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.configure(backlog_sorting=sorting)
    sink = CountingSink()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(FieldTimestampAssigner("i"))
    source = env.from_source(ArrowSource(frame, batch_size=BATCH_SIZE), strategy, "history")
    WINDOWS[window](source.key_by("k")).sum("v").sink_to(sink)
    started = time.perf_counter()
    env.execute(f"backlog window {window}")
    return time.perf_counter() - started, sink.rows


def raw_window(frame: pl.DataFrame, window: str) -> pl.DataFrame:
    """Each window's sum of ``v`` with the other fields of its first record, in raw polars."""
    fold = [pl.col("v").sum(), pl.col("i").first()]
    if window == "count 5":
        numbered = frame.with_columns((pl.int_range(pl.len()).over("k") // COUNT).alias("w"))
        windows = numbered.group_by("k", "w", maintain_order=True).agg(*fold, pl.len().alias("n"))
        return windows.filter(pl.col("n") == COUNT)
    if window.startswith("session"):
        opens = (pl.col("i").diff().fill_null(GAP_MS + 1) > GAP_MS).over("k")
        sessions = frame.with_columns(opens.cast(pl.Int64).cum_sum().over("k").alias("session"))
        return sessions.group_by("k", "session", maintain_order=True).agg(*fold)
    if window.startswith("tumbling"):
        starts = frame.with_columns((pl.col("i") - pl.col("i") % WINDOW_MS).alias("start"))
    else:
        last = pl.col("i") - pl.col("i") % SLIDE_MS
        starts = frame.with_columns(pl.concat_list(last, last - SLIDE_MS).alias("start")).explode("start") \
            .filter(pl.col("start") > pl.col("i") - WINDOW_MS)
    return starts.group_by("k", "start", maintain_order=True).agg(*fold)


def raw_rolling(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    """The rolling updates in raw polars, ordered key by key (first seen), then arrival."""
    scan = {"sum": "cum_sum", "min": "cum_min", "max": "cum_max", "min_by": "cum_min", "max_by": "cum_max"}[kind]
    running = getattr(pl.col("v"), scan)().over("k")
    rank = pl.col("i").min().over("k").alias("rank")
    if kind in ("sum", "min", "max"):
        result = frame.with_columns(running, pl.col("i").first().over("k"), rank)
    else:
        changed = (running != getattr(pl.col("v"), scan)().shift(1).over("k")).fill_null(True)
        pick = pl.when(changed).then(pl.col("i")).otherwise(None).forward_fill().over("k")
        picks = frame.select(pick).to_series()
        result = frame[picks].with_columns(frame.select(rank))
    return result.sort("rank", "i", maintain_order=False).drop("rank")


def raw_final_sum(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by("k", maintain_order=True).agg(pl.col("v").sum(), pl.col("i").first())


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def best(repeat: int, work: Callable[[], tuple[float, int]]) -> tuple[float, int]:
    """The shortest of ``repeat`` timed runs of ``work`` (which returns its seconds and rows), after
    one untimed run."""
    rows = work()[1]
    return min(work()[0] for _ in range(repeat)), rows


def best_raw(repeat: int, work: Callable[[], object]) -> float:
    """The shortest of ``repeat`` timed runs of a raw polars ``work``, after one untimed run."""
    return best(repeat, lambda: (timed(work), 0))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000, help="records")
    parser.add_argument("--full", action="store_true", help="N = 10^7")
    parser.add_argument("--skip-streamed", action="store_true", help="leave out the record-by-record runs")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each job (the best is printed)")
    args = parser.parse_args()
    n = 10_000_000 if args.full else args.n
    repeat = max(1, args.repeat)
    frame = history(n)
    print(f"N = {n:,} records, {KEYS:,} keys, parallelism 1; {platform.python_version()}, polars {pl.__version__}; "
          f"best of {repeat}; load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"{'job':<22} {'sorted s':>9} {'streamed s':>11} {'raw polars s':>13} {'sorted/raw':>11} "
          f"{'streamed/sorted':>16}")
    for kind in KINDS:
        sorted_s, rows = best(repeat, partial(slipstream_run, frame, kind, sorting=True))
        assert rows == n, (kind, rows)
        streamed_s = float("nan") if args.skip_streamed else slipstream_run(frame, kind, sorting=False)[0]
        raw_s = best_raw(repeat, partial(raw_rolling, frame, kind))
        print(f"{kind + ' (rolling)':<22} {sorted_s:>9.2f} {streamed_s:>11.2f} {raw_s:>13.2f} "
              f"{sorted_s / raw_s:>11.2f} {streamed_s / sorted_s:>16.2f}")
    sorted_s, rows = best(repeat, partial(slipstream_run, frame, "sum", sorting=True, batch=True))
    assert rows == frame["k"].n_unique(), rows
    raw_s = best_raw(repeat, partial(raw_final_sum, frame))
    print(f"{'sum (BATCH, final)':<22} {sorted_s:>9.2f} {'':>11} {raw_s:>13.2f} {sorted_s / raw_s:>11.2f}")
    for window in WINDOWS:
        sorted_s, rows = best(repeat, partial(slipstream_window_run, frame, window, sorting=True))
        expected = raw_window(frame, window).height
        assert rows == expected, (window, rows, expected)
        streamed_s = float("nan") if args.skip_streamed else slipstream_window_run(frame, window, sorting=False)[0]
        raw_s = best_raw(repeat, partial(raw_window, frame, window))
        print(f"{window:<22} {sorted_s:>9.2f} {streamed_s:>11.2f} {raw_s:>13.2f} "
              f"{sorted_s / raw_s:>11.2f} {streamed_s / sorted_s:>16.2f}")


if __name__ == "__main__":
    main()

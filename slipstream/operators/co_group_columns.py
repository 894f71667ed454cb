"""The co-group's batch work on a backlog buffered as Arrow: partition by partition, on the columns.

Every input was keyed by a field and arrived as Arrow, so the backlog sits in
:class:`~slipstream.operators.columnar_buffer.ColumnarBuffer`\\ s (one partition when nothing
spilled). Each partition's keys come in ascending order (partitions in hash order), not in the
first-seen order of the row paths; the batch path promises no key order. Each key's records keep
their arrival order (in BATCH mode sorted by timestamp, stably, so arrival order next).

:class:`ColumnsVectorised` hands the vectorised function each partition's columns as DataFrames
and emits its result as Arrow; :class:`ColumnsPerKey` gives a per-key function each key's rows,
built a chunk at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from itertools import repeat
from typing import Any

from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.window import Window
from slipstream.errors import user_code
from slipstream.operators.base import split_outputs
from slipstream.operators.co_group_batch import CoGroupHost, key_guard
from slipstream.operators.columnar_buffer import (
    SPILL_PARTITIONS,
    TS_COLUMN,
    ColumnarBuffer,
    canonical_keys,
    without_stamps,
)

COLUMNAR_CHUNK = 65_536
"""Records of a columnar backlog turned into rows at a time by the per-key path."""
ARROW_OUTPUT_ROWS = 65_536
"""Rows per Arrow batch a vectorised function's result is emitted in."""


class _Partitions(ABC):
    """The columnar buffers read partition by partition (at the switch, so with the garbage collector
    paused: :func:`~slipstream.operators.backlog.gc_paused`)."""

    counts_keys = True
    """Whether :meth:`run` reports the keys it evaluated (a vectorised function's are not counted)."""

    def __init__(self, columnar: list[ColumnarBuffer | None]) -> None:
        self.columnar: list[ColumnarBuffer] = [buffer for buffer in columnar if buffer is not None]
        self.count = SPILL_PARTITIONS if any(buffer.spilled for buffer in self.columnar) else 1

    def run(self, host: CoGroupHost, window: Window) -> int | None:
        """Evaluate every partition; the number of keys evaluated."""
        readers = [buffer.partition_tables(self.count) if buffer.schema is not None else None
                   for buffer in self.columnar]
        keys = 0
        for number in range(self.count):
            tables = [None if reader is None else next(reader) for reader in readers]
            keys += self.partition(host, window, tables, number)
        return keys if self.counts_keys else None

    @abstractmethod
    def partition(self, host: CoGroupHost, window: Window, tables: list[Any], number: int) -> int:
        """Evaluate partition ``number`` (its table per input, None for an input without columns);
        the number of keys evaluated."""


class ColumnsVectorised(_Partitions):
    """The vectorised function once per partition, over DataFrames straight from the columns."""

    counts_keys = False

    def partition(self, host: CoGroupHost, window: Window, tables: list[Any], number: int) -> int:
        import polars as pl
        count = self.count
        what = "the keys of the backlog, window" if count == 1 else \
            f"the keys of backlog partition {number + 1} of {count}, window"
        with user_code(host, lambda: window, what=what):
            # one chunk per column: the buffered batches' chunks would slow the function's polars work
            frames = [host.frame([], index) if table is None else
                      pl.from_arrow(without_stamps(table), rechunk=False).rechunk()
                      for index, table in enumerate(tables)]
            tables[:] = [None] * len(tables)  # the frames are copies: let the buffered batches go
            result = host.function.co_group(*frames)
            if result is not None and not isinstance(result, pl.DataFrame):
                raise TypeError(f"a vectorised co-group function must return a polars DataFrame (or None), "
                                f"got {type(result).__name__}: {result!r}"[:300])
        if result is None or not result.height:
            return 0
        timestamp = window.max_timestamp()
        # Unsigned counts (polars' len() is UInt32) become Int64, the type the same values get as
        # Python ints on the row path: sinks that have no unsigned types (Spark) see what they would.
        unsigned = [pl.col(name).cast(pl.Int64) for name, dtype in result.schema.items()
                    if dtype in (pl.UInt8, pl.UInt16, pl.UInt32)]
        if unsigned:
            result = result.with_columns(unsigned)
        for batch in result.to_arrow().to_batches(max_chunksize=ARROW_OUTPUT_ROWS):
            host.emit_arrow(batch, timestamp)
        return 0


class ColumnsPerKey(_Partitions):
    """The per-key function over every key of each partition, its rows built a chunk at a time."""

    def partition(self, host: CoGroupHost, window: Window, tables: list[Any], number: int) -> int:
        keys = self._per_key_partition(host, window, tables)
        host.flush()
        return keys

    def _per_key_partition(self, host: CoGroupHost, window: Window, tables: list[Any]) -> int:
        """Run the per-key function over every key of one partition; returns the number of keys."""
        import numpy as np
        sides, runs = self._sorted_sides(host, tables)
        present = [run for run in runs if run is not None]
        if not present:
            return 0
        if len(present) == 2:
            joined = runs[0].join(runs[1], on="value", how="full", coalesce=True, suffix="_2") \
                .sort("value").fill_null(0)
            counts = [joined.get_column("len").to_numpy(), joined.get_column("len_2").to_numpy()]
        else:
            joined = present[0]
            zeros = np.zeros(joined.height, dtype=np.int64)
            counts = [joined.get_column("len").to_numpy() if run is not None else zeros for run in runs]
        key_series = joined.get_column("value")
        key_count = key_series.len()
        ends = [np.cumsum(c) for c in counts]
        total = ends[0] + ends[1]
        start = 0
        while start < key_count:
            base = int(total[start - 1]) if start else 0
            stop = min(key_count, max(start + 1, int(np.searchsorted(total, base + COLUMNAR_CHUNK, "right"))))
            rows = []
            for side, end in zip(sides, ends):
                low = int(end[start - 1]) if start else 0
                high = int(end[stop - 1])
                rows.append(rows_from_arrow(side.slice(low, high - low)) if side is not None and high > low else [])
            self._call_chunk(host, window, key_series.slice(start, stop - start).to_list(), rows,
                             counts[0][start:stop].tolist(), counts[1][start:stop].tolist())
            host.flush()
            start = stop
        return int(key_count)

    def _sorted_sides(self, host: CoGroupHost, tables: list[Any]) -> tuple[list[Any], list[Any]]:
        """Each input's table in key order (then timestamp order in BATCH mode) and its run of keys."""
        import polars as pl
        sides: list[Any] = []
        runs: list[Any] = []
        for table, buffer in zip(tables, self.columnar):
            if table is None or not table.num_rows:
                sides.append(None)
                runs.append(None)
                continue
            key_name, kind = buffer.partitioning()
            keys = canonical_keys(table.column(key_name), kind)
            by_time = buffer.has_timestamps and host.ctx.batch_mode
            if not by_time and keys.is_sorted():
                ordered = without_stamps(table)  # arrived in key order (as backlogs often do)
            else:
                frame = pl.DataFrame({"k": keys, "t": pl.Series(table.column(TS_COLUMN))}) \
                    if by_time else pl.DataFrame({"k": keys})
                order = frame.select(pl.arg_sort_by(frame.columns, nulls_last=False, maintain_order=True)) \
                    .to_series()
                ordered = without_stamps(table.take(order.to_arrow()))
                keys = keys.gather(order)
            sides.append(ordered)
            runs.append(keys.rle().struct.unnest())  # value, len: the keys in order
        return sides, runs

    @staticmethod
    def _call_chunk(host: CoGroupHost, window: Window, keys: list[Any], rows: list[list[Any]],
                    first_counts: list[int], second_counts: list[int]) -> None:
        """Call the function for each key of a chunk, its outputs collected at the window's timestamp."""
        co_group = host.function.co_group
        set_key = host.set_current_key
        timestamp = window.max_timestamp()
        values, timestamps, side_outputs = host.outputs()
        append = values.append
        first_rows, second_rows = rows
        a = b = 0
        key = None
        with key_guard(host, lambda: window, lambda: key):
            for key, na, nb in zip(keys, first_counts, second_counts):
                first = first_rows[a:a + na]
                second = second_rows[b:b + nb]
                a += na
                b += nb
                set_key(key)
                results = co_group(first, second)
                if results is not None:
                    for out in results:
                        if type(out) is tuple and len(out) == 2 and isinstance(out[0], OutputTag):
                            split_outputs((out,), timestamp, values, timestamps, side_outputs)
                        else:
                            append(out)
        timestamps.extend(repeat(timestamp, len(values) - len(timestamps)))  # every main output's


__all__ = ["ColumnsPerKey", "ColumnsVectorised"]

"""``ColumnarBacklog``: a one-input sorting operator's backlog kept as Arrow columns, for built-in aggregations.

A keyed built-in aggregation (rolling ``sum``/``min``/``max``/``min_by``/``max_by``, or a window's)
whose backlog arrives as Arrow batches keyed by a field keeps it as columns
(:class:`IntervalColumns`: a :class:`~slipstream.operators.columnar_buffer.ColumnarBuffer` plus
each record's watermark interval and arrival number) and runs it at the switch as one polars
query (:mod:`slipstream.operators.vectorised_reduce`, :mod:`slipstream.operators.vectorised_windows`).

This module does not import polars when it is imported (only when a backlog is read back):
polars installs a SIGINT handler on import that keeps a blocked main thread from seeing Ctrl-C
(pola-rs/polars#21739), so jobs that never read a columnar backlog must not import it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.fields import FieldKey
from slipstream.operators.backlog import BacklogSortingOperator
from slipstream.operators.columnar_buffer import (
    TS_COLUMN,
    ColumnarBuffer,
    restore_columnar_buffers,
)
from slipstream.operators.elements import RecordBatch
from slipstream.operators.memory import columnar_buffer_bytes
from slipstream.operators.sort_buffer import SortBuffer

if TYPE_CHECKING:
    import polars as pl

INTERVAL_COLUMN = "__slipstream_interval"
"""The watermark interval a buffered record arrived in (see :mod:`slipstream.operators.backlog`)."""
SEQ_COLUMN = "__slipstream_seq"
"""A buffered record's arrival number (unique, increasing)."""
RANK_COLUMN = "__slipstream_rank"
"""The arrival number of the key's first record: keys come out in first-seen order."""
EXTRA_COLUMNS = (INTERVAL_COLUMN, SEQ_COLUMN)
OUTPUT_ROWS = 65_536
"""Rows per Arrow batch emitted at the switch."""


def field_name(schema: pa.Schema, field: int | str) -> str | None:
    """The column ``field`` names in ``schema`` (a position or a name), None when there is none."""
    if isinstance(field, int):
        return schema.names[field] if 0 <= field < len(schema.names) else None
    return field if schema.get_field_index(field) >= 0 else None


class ColumnarBacklog(BacklogSortingOperator):
    """A one-input sorting operator whose built-in aggregation can run an Arrow backlog as columns.

    While the backlog arrives as Arrow batches and the key is a field, it is kept in
    :class:`IntervalColumns`; the first batch that cannot be (rows, another schema) moves it to the
    row buffer. At the switch :meth:`run_columns` gets the columns; when it declines, they go to
    the row buffer and the operator's row path runs.
    """

    _columns: IntervalColumns | None = None

    def columnar_aggregation(self) -> tuple[str, int | str] | None:
        """The built-in ``(kind, field)`` to keep the backlog as columns for; None: keep rows."""
        return None

    def combines_backlog(self) -> bool:
        """Whether only each key's final value counts, so the columns may be combined past their budget."""
        return False

    def run_columns(self, columns: IntervalColumns, frames: list[pl.DataFrame]) -> bool:
        """Run the columnar backlog; False (nothing done) to have it run as rows."""
        return False

    def begin_backlog(self) -> None:
        aggregation = self.columnar_aggregation()
        selector = self.transformation.key_selectors[0]
        ctx = self.ctx
        if aggregation is not None and isinstance(selector, FieldKey) and getattr(ctx.batch_engine, "in_process", True):
            self._columns = IntervalColumns(selector.field, aggregation[1], aggregation[0],
                                            memory_budget=columnar_buffer_bytes(ctx),
                                            spill_dir=ctx.spill_dir, metrics=ctx.metrics, name=ctx.name,
                                            combine=self.combines_backlog())

    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        columns = self._columns
        if columns is not None:
            if batch.arrow is not None and columns.add(batch.arrow, batch.timestamp_column(), self.backlog_interval()):
                return
            self._columns = None  # rows (or Arrow it cannot hold) from now on
            columns.move_to_rows(self._backlog_buffers[0], self.backlog_key_selector(0), self.next_arrival)
        super().buffer_backlog(batch, input_index)

    def holds_backlog(self) -> bool:
        return super().holds_backlog() or (self._columns is not None and len(self._columns) > 0)

    def stream_the_rest_of_backlog(self) -> None:
        self._close_columns()
        super().stream_the_rest_of_backlog()

    def snapshot_own_buffers(self) -> Any:
        return None if self._columns is None else self._columns.snapshot()

    def restore_own_buffers(self, state: Any) -> None:
        self._columns = restore_interval_columns(self._columns, state)

    def run_backlog(self, buffers: list[SortBuffer]) -> None:
        columns, self._columns = self._columns, None
        if columns is not None:
            try:
                frames = list(columns.frames())
                if frames and not self.run_columns(columns, frames):
                    columns.move_to_rows(buffers[0], self.backlog_key_selector(0), self.next_arrival, frames)
            finally:
                columns.close()
        super().run_backlog(buffers)

    def close(self) -> None:
        self._close_columns()
        super().close()

    def _close_columns(self) -> None:
        if self._columns is not None:
            self._columns.close()
            self._columns = None


class IntervalColumns:
    """A one-input backlog held as Arrow columns, each record tagged with its watermark interval
    and arrival number (so the switch can replay interval by interval on columns)."""

    def __init__(self, key_field: int | str, value_field: int | str, kind: str, *, memory_budget: int,
                 spill_dir: str | None, metrics: dict[str, Any], name: str, combine: bool = False) -> None:
        """``combine``: only each key's final value counts (a BATCH reduce), so past the budget the
        records are combined rather than spilled where that is exact (:meth:`_combined`)."""
        self.buffer = ColumnarBuffer(key_field, memory_budget=memory_budget, spill_dir=spill_dir,
                                     metrics=metrics, name=name, partitioned=False)  # one query over all of it
        if combine:
            self.buffer.compact = self._combined
        self.value_field = value_field
        self.kind = kind
        self.field: str | None = None
        self._seq = 0

    def _combined(self, table: pa.Table) -> pa.Table | None:
        from slipstream.operators.vectorised_reduce import combined_records
        return combined_records(table, self.key_name(), self.field, self.kind)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.buffer)

    def add(self, batch: pa.RecordBatch | pa.Table, timestamps: list[Any] | pa.Array | None, interval: int) -> bool:
        """Buffer an Arrow batch; False when it cannot be held so (the rows take it from here)."""
        if any(name in batch.schema.names for name in EXTRA_COLUMNS):
            return False
        if self.field is None:
            self.field = field_name(batch.schema, self.value_field)
            if self.field is None:
                return False
        count = batch.num_rows
        tagged = batch.append_column(INTERVAL_COLUMN, pa.array(np.full(count, interval, np.int64))) \
            .append_column(SEQ_COLUMN, pa.array(np.arange(self._seq, self._seq + count, dtype=np.int64)))
        if not self.buffer.add(tagged, timestamps):
            return False
        self._seq += count
        return True

    def frames(self) -> Iterator[pl.DataFrame]:
        """The buffered records as polars frames, one per key partition, arrival order in each."""
        import polars as pl
        for table in self.buffer.partition_tables(self.buffer.partition_count):
            if table.num_rows:
                yield pl.from_arrow(table, rechunk=False)  # type: ignore[misc]

    def key_name(self) -> str:
        return self.buffer.key_name  # type: ignore[return-value]

    def move_to_rows(self, rows: SortBuffer, key_selector: Callable[[Any], Any], next_arrival: Callable[[], int],
                     frames: list[pl.DataFrame] | None = None) -> None:
        """Hand the records (or ``frames``, already read from :meth:`frames`) to the row buffer in
        arrival order, each in its interval, and close."""
        import polars as pl
        try:
            frames = list(self.frames()) if frames is None else frames
            if not frames:
                return
            frame = pl.concat(frames).sort(SEQ_COLUMN)
            for (interval,), part in frame.group_by(INTERVAL_COLUMN, maintain_order=True):
                for start in range(0, part.height, OUTPUT_ROWS):
                    chunk = part.slice(start, OUTPUT_ROWS)
                    stamps = chunk[TS_COLUMN].to_list() if TS_COLUMN in chunk.columns else None
                    values = rows_from_arrow(records_of(chunk))
                    rows.add([key_selector(value) for value in values], values, stamps,
                             interval=int(interval), arrival=next_arrival())
        finally:
            self.close()

    def snapshot(self) -> dict[str, Any]:
        """For a checkpoint taken while buffering (see :meth:`ColumnarBuffer.snapshot`)."""
        return {"buffer": self.buffer.snapshot(), "field": self.field, "seq": self._seq}

    def close(self) -> None:
        self.buffer.close()


def restore_interval_columns(columns: IntervalColumns | None, state: Any) -> IntervalColumns | None:
    """The columns made anew for a restored backlog, filled with a checkpoint's snapshot of them
    (None: the backlog had moved on to rows when it was taken)."""
    (restored,) = restore_columnar_buffers([None if columns is None else columns.buffer],
                                           [None if state is None else state["buffer"]])
    if restored is None or columns is None or state is None:
        return None
    columns.field, columns._seq = state["field"], state["seq"]
    return columns


def records_of_names(columns: list[str]) -> list[str]:
    """The record columns among a buffered or computed frame's ``columns``."""
    return [name for name in columns if name not in (TS_COLUMN, RANK_COLUMN, *EXTRA_COLUMNS)]


def records_of(frame: pl.DataFrame) -> pa.Table:
    """The record columns of a buffered or computed frame, as Arrow."""
    return frame.select(records_of_names(frame.columns)).to_arrow()


def interval_parts(frame: pl.DataFrame, column: str = INTERVAL_COLUMN) -> Iterator[tuple[int, pl.DataFrame]]:
    """The runs of equal ``column`` values of ``frame`` (sorted by it), each with its value: slices,
    not copies."""
    values = frame[column].to_numpy()
    starts = np.flatnonzero(np.diff(values)) + 1
    bounds = [0, *starts.tolist(), frame.height]
    for start, stop in itertools.pairwise(bounds):
        if stop > start:
            yield int(values[start]), frame.slice(start, stop - start)


def arrow_batches(frame: pl.DataFrame) -> Iterator[tuple[pa.RecordBatch, list[Any] | None]]:
    """``frame``'s records as Arrow batches of up to :data:`OUTPUT_ROWS`, with their timestamps."""
    for start in range(0, frame.height, OUTPUT_ROWS):
        chunk = frame.slice(start, OUTPUT_ROWS).rechunk()
        stamps = chunk[TS_COLUMN].to_list() if TS_COLUMN in chunk.columns else None
        offset = 0
        for batch in records_of(chunk).to_batches():
            yield batch, None if stamps is None else stamps[offset:offset + batch.num_rows]
            offset += batch.num_rows

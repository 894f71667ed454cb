"""``ArrowSource``: a bounded source over an Arrow table or a polars DataFrame, kept columnar.

Records travel as Arrow record batches, so vectorised operators (a vectorised
co_group, a Parquet sink) never build Python rows; an operator running a Python
function per record gets named ``Row`` objects.

Examples:
    >>> import pyarrow as pa
    >>> source = ArrowSource(pa.table({"f0": [1, 2, 3]}), batch_size=2)
    >>> source.num_rows
    3
"""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import END_OF_INPUT, Source, SourceReader, SourceReaderContext, _Signal
from slipstream.datastream.connectors.columnar import ArrowSourceBatch
from slipstream.datastream.connectors.number_seq import RangeCursor, redistribute_slices, slice_bounds
from slipstream.errors import InvalidProgramError


def as_arrow_table(data: Any) -> pa.Table:
    """Accept an Arrow table or record batch, or anything with ``to_arrow()`` (a polars DataFrame)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    to_arrow = getattr(data, "to_arrow", None)
    if callable(to_arrow):
        return as_arrow_table(to_arrow())
    raise InvalidProgramError(f"ArrowSource needs an Arrow table or a polars DataFrame, got {type(data).__name__}")


class ArrowSource(Source):
    """The rows of a table, split into contiguous slices across subtasks, in batches of ``batch_size``."""

    def __init__(self, data: Any, batch_size: int = 65_536) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidProgramError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.table = as_arrow_table(data)
        self.batch_size = batch_size

    @property
    def num_rows(self) -> int:
        return cast("int", self.table.num_rows)

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def default_name(self) -> str:
        return "ArrowSource"

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        start, end = slice_bounds(self.table.num_rows, subtask_index, parallelism)
        return _ArrowReader(self.table, start, end, self.batch_size)

    def redistribute_positions(self, positions: list[Any], parallelism: int) -> list[Any]:
        """The rows the old subtasks had left, cut into ``parallelism`` contiguous shares."""
        return redistribute_slices(positions, self.table.num_rows, parallelism)


class _ArrowReader(SourceReader):
    """Reads its row ranges of the table in slices; its position is the row ranges left."""

    def __init__(self, table: pa.Table, start: int, end: int, batch_size: int) -> None:
        self._table = table
        self._start = start
        self._end = end
        self._batch_size = batch_size
        self._cursor = RangeCursor(start, end)

    def open(self, context: SourceReaderContext) -> None:
        """Nothing to open: the table is in memory."""

    def poll(self, max_records: int) -> ArrowSourceBatch | _Signal:
        """The next slice of up to the source's ``batch_size`` rows: columnar batches are sized by
        the source, not by the runtime's row-batch size, since no Python loop runs over them here."""
        piece = self._cursor.take(self._batch_size)
        if piece is None:
            return END_OF_INPUT
        chunk = self._table.slice(piece[0], piece[1] - piece[0]).combine_chunks()
        batches = chunk.to_batches()
        return ArrowSourceBatch(batches[0] if len(batches) == 1 else pa.Table.from_batches(batches))

    def snapshot_position(self) -> list[list[int]]:
        return self._cursor.snapshot()

    def records_remaining(self) -> int:
        return self._cursor.remaining()

    def restore_position(self, position: Any) -> None:
        self._cursor.restore(position, self._start, self._end, 0, self._table.num_rows, "ArrowSource")

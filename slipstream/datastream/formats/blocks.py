"""Bulk reading of line formats: a block of whole records is parsed at once (by pyarrow), and
only a block the bulk parser refuses is read again line by line, which names the exact bad line.

A :class:`BlockLineReader` reads about :data:`BLOCK_BYTES` of a file, cuts it after the last
line that ends a record, and hands the block to :meth:`BlockLineReader.parse_block` together
with where each record ends. When that returns None (Arrow refused the block, or the block
holds something whose bulk value could differ from today's), the block goes through the
format's own line-by-line :meth:`~LineRecordReader.parse`, so errors, bad records and values
are exactly those of the line reader. The position is the line reader's (byte offset and
line count after the last record returned), so checkpoints resume mid-file as before.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from slipstream.datastream.connectors.base import SourceBatch
from slipstream.datastream.connectors.errors import BadRecord, SourceFormatError
from slipstream.datastream.formats.base import SKIP, LineRecordReader

BLOCK_BYTES = 1 << 20
"""How many bytes a block holds at least (more when one record is longer)."""

_NEWLINE, _CR = 10, 13


class _Failed:
    """A record the line-by-line reading of a block refused: raised, or routed as a bad record, when reached."""

    __slots__ = ("error", "raw")

    def __init__(self, error: SourceFormatError, raw: str | None) -> None:
        self.error = error
        self.raw = raw


class Segments:
    """The records of a block: where each starts and ends (the byte after its newline) in the block."""

    __slots__ = ("ends", "lines", "starts")

    def __init__(self, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray) -> None:
        self.starts = starts
        self.ends = ends
        self.lines = lines  # how many lines of the block precede each record's end

    def __len__(self) -> int:
        return len(self.starts)


def lone_carriage_returns(data: np.ndarray, at_record_end: np.ndarray) -> bool:
    """Whether some ``\\r`` of ``data`` is not the first half of a record-ending ``\\r\\n``: the
    line reader keeps such a ``\\r`` in the text, Arrow takes it for a line end."""
    returns = np.flatnonzero(data == _CR)
    if not len(returns):
        return False
    followed = returns + 1 < len(data)
    ok = np.zeros(len(returns), dtype=bool)
    ok[followed] = at_record_end[returns[followed] + 1]
    return not bool(ok.all())


class BlockLineReader(LineRecordReader):
    """A line reader whose records are parsed a block at a time; see the module docstring.

    Subclasses give :meth:`record_ends` (which newlines end a record) and :meth:`parse_block`
    (the bulk values of a block's records, or None to read the block line by line). Mix it in
    before the format's line reader, whose ``read_record`` and ``parse`` serve the fallback.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._items: list[Any] = []
        self._item_ends: list[int] | np.ndarray = []
        self._item_lines: list[int] | np.ndarray = []
        self._has_failures = False
        self._cursor = 0
        self._at: dict[str, int] | None = None
        super().__init__(*args, **kwargs)

    def seek(self, position: Any) -> None:
        super().seek(position)
        self._items, self._item_ends, self._item_lines, self._cursor, self._at = [], [], [], 0, None

    def record_ends(self, data: np.ndarray) -> np.ndarray:
        """A mask of the bytes of ``data`` that are newlines ending a record (every newline, by default)."""
        return cast("np.ndarray[Any, Any]", data == _NEWLINE)

    def is_blank(self, data: np.ndarray, segments: Segments) -> np.ndarray:
        """Which segments hold no record (the bulk parser skips them): those of only ``\\r`` (empty lines)."""
        lengths = segments.ends - segments.starts
        blank = (lengths == 1) | ((lengths == 2) & (data[np.minimum(segments.starts, len(data) - 1)] == _CR))
        return cast("np.ndarray[Any, Any]", blank)

    def parse_block(self, block: bytes, data: np.ndarray, at_record_end: np.ndarray,
                    records: Segments) -> list[Any] | None:
        """The values of ``records`` (the block's non-blank records), or None to read the block line by line."""
        return None

    # -- reading ------------------------------------------------------------------------------------
    def _next_block(self) -> bool:
        """Parse the next block into the buffer; False at the end of the file."""
        start, first_line = self._offset, self._line
        data = b""
        while True:
            more = self._file.read(max(BLOCK_BYTES, len(data)))
            data += more
            array = np.frombuffer(data, dtype=np.uint8)
            at_end = self.record_ends(array)
            ends = np.flatnonzero(at_end)
            if len(ends) or not more:
                break
        if not data:
            return False
        if not len(ends):  # the end of the file, without a newline ending a record
            self._file.seek(start)
            self._read_line_by_line(start, first_line, None)
            return True
        cut = int(ends[-1]) + 1
        block, array, at_end = data[:cut], array[:cut], at_end[:cut]
        self._file.seek(start + cut)
        newlines = np.flatnonzero(array == _NEWLINE)
        self._offset = start + cut
        self._line = first_line + len(newlines)
        starts = np.concatenate(([0], ends[:-1] + 1))
        segments = Segments(starts, ends + 1, np.searchsorted(newlines, ends) + 1)
        keep = ~self.is_blank(array, segments)
        records = Segments(starts[keep], segments.ends[keep], segments.lines[keep])
        values = self.parse_block(block, array, at_end, records) if len(records) else []
        if values is None:
            self._file.seek(start)
            self._offset, self._line = start, first_line
            self._read_line_by_line(start, first_line, start + cut)
            return True
        self._items, self._cursor, self._has_failures = values, 0, False
        self._item_ends, self._item_lines = records.ends + start, records.lines + first_line
        return True

    def _read_line_by_line(self, start: int, first_line: int, end: int | None) -> None:
        """Fill the buffer from the block ``[start, end)`` (to the end of the file if None) with the
        line reader's records; the refused ones are kept to be raised or routed when reached."""
        items, ends, lines = [], [], []
        while end is None or self._offset < end:
            try:
                record = self.read_record()
            except SourceFormatError as error:  # undecodable bytes, an unclosed quote at the end
                items.append(_Failed(error, None))
            else:
                if record is None:
                    break
                try:
                    value = self.parse(*record)
                except SourceFormatError as error:
                    value = _Failed(error, record[0])
                if value is SKIP:
                    continue
                items.append(value)
            ends.append(self._offset)
            lines.append(self._line)
        self._items, self._item_ends, self._item_lines = items, ends, lines
        self._cursor, self._has_failures = 0, any(isinstance(item, _Failed) for item in items)

    def read_batch(self, max_records: int) -> SourceBatch | None:
        values: list[Any] = []
        found_bad = 0
        while len(values) + found_bad < max_records:
            if self._cursor == len(self._items):
                if not self._next_block():
                    break
                continue
            take = min(len(self._items) - self._cursor, max_records - len(values) - found_bad)
            taken = self._items[self._cursor:self._cursor + take]
            if self._has_failures:
                found_bad += self._route_failures(taken, values)
            else:
                values.extend(taken)
            self._cursor += take
            last = self._cursor - 1
            self._at = {"offset": int(self._item_ends[last]), "line": int(self._item_lines[last])}
        return SourceBatch(values) if values or found_bad else None

    def _route_failures(self, taken: list[Any], values: list[Any]) -> int:
        """Add the good records of ``taken`` to ``values`` and route the failed ones (or raise the
        first, without a bad-record output); the number routed."""
        routed = 0
        for item in taken:
            if not isinstance(item, _Failed):
                values.append(item)
            elif self.bad_records is None:
                raise item.error
            else:
                self.bad_records.append(BadRecord.from_error(item.error, item.raw))
                routed += 1
        return routed

    def position(self) -> dict[str, int]:
        return dict(self._at) if self._at is not None else super().position()

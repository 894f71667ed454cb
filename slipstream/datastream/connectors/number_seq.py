"""``NumberSequenceSource``: the integers from ``start`` to ``end``, both inclusive, as in PyFlink.

Each subtask reads one contiguous slice of the range, so the split depends only
on the parallelism and every number is read exactly once.
"""

from __future__ import annotations

from typing import Any

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    SHARE_FINISHED,
    PollResult,
    Source,
    SourceBatch,
    SourceReader,
)
from slipstream.datastream.connectors.errors import SourceRestoreError
from slipstream.errors import InvalidProgramError


def slice_bounds(count: int, subtask_index: int, parallelism: int) -> tuple[int, int]:
    """The half-open index range ``[begin, end)`` of ``count`` items that subtask ``subtask_index`` reads.

    Slices are contiguous, in subtask order, and differ in length by at most one,
    so subtasks share the work evenly and each keeps the input order.
    """
    return count * subtask_index // parallelism, count * (subtask_index + 1) // parallelism


class RangeCursor:
    """What a reader of index slices has left: half-open ranges ``[a, b)``, read front to back.

    A reader starts with its own slice; after a restore at another parallelism it may
    own pieces of several old slices. Its position is the list of ranges left, so a
    position can be split again at the next change of parallelism.
    """

    def __init__(self, begin: int, end: int) -> None:
        self.ranges: list[list[int]] = [[begin, end]] if begin < end else []

    def take(self, limit: int) -> tuple[int, int] | None:
        """The next contiguous piece of at most ``limit`` indices, or None when nothing is left."""
        while self.ranges:
            head = self.ranges[0]
            if head[0] < head[1]:
                upto = min(head[1], head[0] + limit)
                piece = (head[0], upto)
                head[0] = upto
                return piece
            self.ranges.pop(0)
        return None

    def snapshot(self) -> list[list[int]]:
        return [list(r) for r in self.ranges if r[0] < r[1]]

    def remaining(self) -> int:
        """How many indices are left."""
        return sum(max(0, r[1] - r[0]) for r in list(self.ranges))

    def restore(self, position: Any, begin: int, end: int, low: int, high: int, what: str) -> None:
        """Resume at ``position``: the ranges left (a list of ``[a, b]``), or the next index of
        the own slice ``[begin, end)`` (the form older checkpoints hold); every range must lie
        inside the source's ``[low, high)``."""
        if isinstance(position, int) and not isinstance(position, bool) and begin <= position <= end:
            self.ranges = [[position, end]] if position < end else []
            return
        if isinstance(position, list) and all(
                isinstance(r, (list, tuple)) and len(r) == 2 and all(type(x) is int for x in r)
                and low <= r[0] <= r[1] <= high for r in position):
            self.ranges = [list(r) for r in position if r[0] < r[1]]
            return
        raise SourceRestoreError(
            f"{what} reader of [{begin}, {end}) cannot resume at position {position!r}: expected the next "
            f"index in [{begin}, {end}] or a list of [a, b) ranges inside [{low}, {high})")


def redistribute_slices(positions: list[Any], count: int, parallelism: int, offset: int = 0) -> list[Any]:
    """New reader positions for ``parallelism`` subtasks from those of every old subtask.

    Old subtask ``i`` of ``len(positions)`` read the slice :func:`slice_bounds` gives it
    (shifted by ``offset``); its position is what :meth:`RangeCursor.snapshot` returned,
    None (it never started: its whole slice is left) or ``SHARE_FINISHED`` (nothing is
    left). What is left, in old subtask order, is cut into ``parallelism`` contiguous
    shares of nearly equal size, so no index is lost or read twice.
    """
    old_parallelism = len(positions)
    left: list[tuple[int, int]] = []
    for index, position in enumerate(positions):
        begin, end = slice_bounds(count, index, old_parallelism)
        begin, end = begin + offset, end + offset
        if position is SHARE_FINISHED:
            continue
        cursor = RangeCursor(begin, end)
        if position is not None:
            cursor.restore(position, begin, end, offset, offset + count, "a rescaled")
        left.extend((a, b) for a, b in cursor.snapshot())
    total = sum(b - a for a, b in left)
    shares: list[Any] = []
    for subtask in range(parallelism):
        first, last = slice_bounds(total, subtask, parallelism)
        share: list[list[int]] = []
        seen = 0
        for a, b in left:
            lo, hi = max(a, a + first - seen), min(b, a + last - seen)
            if lo < hi:
                share.append([lo, hi])
            seen += b - a
        shares.append(share)
    return shares


class NumberSequenceSource(Source):
    """A bounded source of the integers ``start, start + 1, ..., end`` (``end`` included).

    Examples:
        >>> source = NumberSequenceSource(1, 10)
        >>> (source.get_from(), source.get_to())
        (1, 10)
    """

    def __init__(self, start: int, end: int) -> None:
        """Describe the range; fails at once when ``end < start``, as Flink does."""
        if not isinstance(start, int) or not isinstance(end, int):
            raise InvalidProgramError(
                f"NumberSequenceSource needs integer bounds, got start={start!r}, end={end!r}")
        if end < start:
            raise InvalidProgramError(
                f"NumberSequenceSource needs start <= end, got start={start}, end={end}")
        self._start = start
        self._end = end

    def get_from(self) -> int:
        """The first number of the sequence."""
        return self._start

    def get_to(self) -> int:
        """The last number of the sequence (included)."""
        return self._end

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        begin, end = slice_bounds(self._end - self._start + 1, subtask_index, parallelism)
        return _NumberSequenceReader(self._start + begin, self._start + end, self._start, self._end + 1)

    def redistribute_positions(self, positions: list[Any], parallelism: int) -> list[Any]:
        """The numbers the old subtasks had left, cut into ``parallelism`` contiguous shares."""
        return redistribute_slices(positions, self._end - self._start + 1, parallelism, self._start)

    def default_name(self) -> str:
        return f"NumberSequenceSource({self._start}, {self._end})"


class _NumberSequenceReader(SourceReader):
    """Reads its ranges of numbers in order; its position is the ranges left."""

    def __init__(self, first: int, stop: int, low: int, high: int) -> None:
        self._first = first
        self._stop = stop
        self._low = low
        self._high = high
        self._cursor = RangeCursor(first, stop)

    def poll(self, max_records: int) -> PollResult:
        piece = self._cursor.take(max_records)
        if piece is None:
            return END_OF_INPUT
        return SourceBatch(list(range(*piece)))

    def snapshot_position(self) -> list[list[int]]:
        return self._cursor.snapshot()

    def records_remaining(self) -> int:
        return self._cursor.remaining()

    def restore_position(self, position: Any) -> None:
        self._cursor.restore(position, self._first, self._stop, self._low, self._high, "NumberSequenceSource")


__all__ = ["NumberSequenceSource", "RangeCursor", "redistribute_slices", "slice_bounds"]

"""``NumberSequenceSource``: the integers from ``start`` to ``end``, both inclusive, as in PyFlink.

Each subtask reads one contiguous slice of the range, so the split depends only
on the parallelism and every number is read exactly once.
"""

from __future__ import annotations

from typing import Any

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
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


class NumberSequenceSource(Source):
    """A bounded source of the integers ``start, start + 1, ..., end`` (``end`` included).

    Example:
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
        return _NumberSequenceReader(self._start + begin, self._start + end)

    def default_name(self) -> str:
        return f"NumberSequenceSource({self._start}, {self._end})"


class _NumberSequenceReader(SourceReader):
    """Reads ``[next, stop)``; its position is the next number it would emit."""

    def __init__(self, first: int, stop: int) -> None:
        self._first = first
        self._next = first
        self._stop = stop

    def poll(self, max_records: int) -> SourceBatch | object:
        if self._next >= self._stop:
            return END_OF_INPUT
        upto = min(self._stop, self._next + max_records)
        batch = SourceBatch(list(range(self._next, upto)))
        self._next = upto
        return batch

    def snapshot_position(self) -> int:
        return self._next

    def restore_position(self, position: Any) -> None:
        if not isinstance(position, int) or not self._first <= position <= self._stop:
            raise SourceRestoreError(
                f"NumberSequenceSource reader for [{self._first}, {self._stop - 1}] cannot resume "
                f"at position {position!r}: expected an integer in [{self._first}, {self._stop}]")
        self._next = position


__all__ = ["NumberSequenceSource", "slice_bounds"]

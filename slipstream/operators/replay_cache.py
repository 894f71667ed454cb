"""What an iteration head keeps to send later: a replayed data stream (sent again every
round) or the feedback that waits for its round to start (sent once).

Like Flink ML's data cache: the batches stay in memory up to a budget of records, and
the rest goes to a spill file (:class:`slipstream.operators.spill_file.SpillFile`) that
each round reads again from the start (or, for held feedback, takes once), so keeping
more than memory holds takes disk, not RAM.
"""

from __future__ import annotations

from collections.abc import Iterator

from slipstream.operators.elements import RecordBatch
from slipstream.operators.spill_file import SpillFile


class ReplayCache:
    """Batches in arrival order, read again as often as needed (or taken out once: :meth:`drain`)."""

    def __init__(self, memory_budget: int, owner: str, spill_dir: str | None = None) -> None:
        self.memory_budget = memory_budget
        self._in_memory: list[RecordBatch] = []
        self._in_memory_records = 0
        self._file = SpillFile(owner, spill_dir)

    @property
    def spilled_bytes(self) -> int:
        return self._file.size_bytes

    def append(self, batch: RecordBatch) -> None:
        if self._file.count or self._in_memory_records + len(batch) > self.memory_budget:
            self._file.append(batch)  # once one batch spilled, the rest follows it: order is kept
        else:
            self._in_memory.append(batch)
            self._in_memory_records += len(batch)

    def __iter__(self) -> Iterator[RecordBatch]:
        yield from list(self._in_memory)
        yield from self._file.remaining()

    def drain(self) -> Iterator[RecordBatch]:
        """Every batch kept so far, oldest first, taken out: what is appended meanwhile stays."""
        in_memory, spilled = self._in_memory, self._file.count
        self._in_memory, self._in_memory_records = [], 0
        yield from in_memory
        for _ in range(spilled):
            yield self._file.take()

    def __bool__(self) -> bool:
        return bool(self._in_memory) or bool(self._file.count)

    def close(self) -> None:
        """Delete the spill file."""
        self._file.close()

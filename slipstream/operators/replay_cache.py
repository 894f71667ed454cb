"""What an iteration head keeps to send later: a replayed data stream (sent again every
round) or the feedback that waits for its round to start (sent once).

Like Flink ML's data cache: the batches stay in memory up to a budget — of records, and
of bytes when the job sets one (:mod:`slipstream.operators.memory`) — and the rest goes
to a spill file (:class:`slipstream.operators.spill_file.SpillFile`) that each round
reads again from the start (or, for held feedback, takes once), so keeping more than
memory holds takes disk, not RAM.

The cache only grows (until it is drained), so it is kept as immutable segments
(:class:`slipstream.operators.segments.Segment`): batches go into an open
segment, sealed when it holds ``SEGMENT_BYTES`` or when a checkpoint takes the cache. A
checkpoint writes each segment once, as a content-addressed shared file, and later
checkpoints refer to it: the cost of checkpointing a cache is what was appended since
the last checkpoint. A spilled segment goes to the spill file as its encoded bytes, one
element per segment.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from itertools import islice
from typing import TYPE_CHECKING

from slipstream.operators.elements import RecordBatch
from slipstream.operators.segments import Segment
from slipstream.operators.spill_file import SpillFile

if TYPE_CHECKING:
    from slipstream.operators.memory import MemoryBudget

SEGMENT_BYTES = 4 * 1024 * 1024
"""The estimated size at which the open segment is sealed."""


class ReplayCache:
    """Batches in arrival order, read again as often as needed (or taken out once: :meth:`drain`)."""

    def __init__(self, memory_budget: int, owner: str, spill_dir: str | None = None,
                 budget: MemoryBudget | None = None) -> None:
        self.memory_budget = memory_budget  # records
        self.budget = budget  # bytes, when the job sets one
        self._sealed: list[Segment] = []  # in memory, then spilled ones (once one spilled, the rest follows)
        self._open: list[RecordBatch] = []
        self._open_bytes = 0
        self._in_memory_records = 0
        self._in_memory_bytes = 0
        self._spilled = 0  # segments in the spill file
        self._file = SpillFile(owner, spill_dir)

    @property
    def spilled_bytes(self) -> int:
        return self._file.size_bytes

    @property
    def memory_bytes(self) -> int:
        """The estimated bytes of the batches held in memory."""
        return self._in_memory_bytes

    def append(self, batch: RecordBatch) -> None:
        size = batch.estimated_bytes()
        self._open.append(batch)
        self._open_bytes += size
        self._in_memory_records += len(batch)
        self._in_memory_bytes += size
        if self._over_budget() or (self._spilled and self._open_is_full()):
            self._spill(self._seal())  # once one segment spilled, the rest follows it: order is kept
        elif self._open_bytes >= SEGMENT_BYTES:
            self._seal()
        if self.budget is not None:
            self.budget.set_usage(self._in_memory_bytes)

    def _over_budget(self) -> bool:
        if self._in_memory_records > self.memory_budget:
            return True
        return self.budget is not None and not self.budget.fits(self._in_memory_bytes)

    def _open_is_full(self) -> bool:
        """Once spilling, the open segment gathers batches up to a quarter of the budget (or
        ``SEGMENT_BYTES``) before it goes to disk, so segments are not one batch each."""
        limit = SEGMENT_BYTES if self.budget is None else min(SEGMENT_BYTES, self.budget.limit // 4)
        return self._open_bytes >= limit or 4 * self._in_memory_records >= self.memory_budget

    def _seal(self) -> Segment | None:
        """Close the open segment (None when it is empty)."""
        if not self._open:
            return None
        segment = Segment(self._open, sum(len(batch) for batch in self._open))
        self._sealed.append(segment)
        self._open, self._open_bytes = [], 0
        return segment

    def _spill(self, segment: Segment | None) -> None:
        """Move ``segment`` (the newest) and every other segment still in memory to the spill file,
        in their order (the file is read in the order of the spilled segments)."""
        if segment is None:
            return
        for position, kept in enumerate(self._sealed):
            if kept.batches is None:
                continue
            data = Segment.encode_batches(kept.batches)
            self._file.append(data)
            self._sealed[position] = Segment.spilled(data, kept.records, partial(self._read, self._spilled))
            self._spilled += 1
        self._in_memory_records = self._in_memory_bytes = 0

    def _read(self, ordinal: int) -> bytes:
        """The encoded bytes of spilled segment number ``ordinal`` (counting those not taken)."""
        data: bytes = next(islice(self._file.remaining(), ordinal, None))
        return data

    def __iter__(self) -> Iterator[RecordBatch]:
        sealed, open_batches = list(self._sealed), list(self._open)
        spilled = self._file.remaining()
        for segment in sealed:
            yield from segment.batches if segment.batches is not None else Segment.decode_batches(next(spilled))
        yield from open_batches

    def drain(self) -> Iterator[RecordBatch]:
        """Every batch kept so far, oldest first, taken out: what is appended meanwhile stays."""
        sealed, open_batches = self._sealed, self._open
        self._sealed, self._open, self._open_bytes, self._spilled = [], [], 0, 0
        self._in_memory_records = self._in_memory_bytes = 0
        if self.budget is not None:
            self.budget.set_usage(0)
        for segment in sealed:
            yield from segment.batches if segment.batches is not None else Segment.decode_batches(self._file.take())
        yield from open_batches

    def snapshot(self) -> list[Segment]:
        """The cache as sealed segments (the open one is sealed now), for a checkpoint: one that
        refers to segments an earlier checkpoint wrote writes only the new ones."""
        self._seal()
        return list(self._sealed)

    def restore(self, segments: list[Segment]) -> None:
        """Take back the segments of a checkpoint (before anything is appended) as they are, so the
        next checkpoint refers to the same files; past the budget they spill."""
        for segment in segments:
            self._sealed.append(segment)
            self._in_memory_records += segment.records
            self._in_memory_bytes += sum(batch.estimated_bytes() for batch in segment.batches or ())
            if self._over_budget() or self._spilled:
                self._spill(segment)
        if self.budget is not None:
            self.budget.set_usage(self._in_memory_bytes)

    def __bool__(self) -> bool:
        return bool(self._sealed) or bool(self._open)

    def close(self) -> None:
        """Delete the spill file."""
        self._file.close()

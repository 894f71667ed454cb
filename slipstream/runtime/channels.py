"""Channels between tasks: FIFO queues of stream elements with a capacity in batches.

A producer whose channel is full is not scheduled until the consumer took some:
that is backpressure. The capacity is soft: one turn of a producer may overshoot it
by what a single input batch produced.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from typing import Any

from slipstream.operators.columnar_buffer import BYTES_PER_RECORD
from slipstream.operators.elements import RecordBatch
from slipstream.operators.spill_file import SpillFile


class Channel:
    __slots__ = ("capacity", "consumer_finished", "name", "producer_finished", "queue")

    def __init__(self, capacity: int, name: str = "") -> None:
        self.queue: deque[Any] = deque()
        self.capacity = capacity
        self.name = name
        self.producer_finished = False  # the producer sent its end of input: nothing more will come
        self.consumer_finished = False  # the consumer will never read again: what comes is dropped

    def is_full(self) -> bool:
        return len(self.queue) >= self.capacity

    def is_at_budget(self) -> bool:
        """Whether its in-memory buffer is at its budget: never, for a channel that does not spill."""
        return False

    def push(self, element: Any) -> None:
        if self.consumer_finished:
            return
        self.queue.append(element)

    def finish_consumer(self) -> None:
        """Its consumer was restored as finished and never reads again (an iteration that had
        ended): drop what waits and what comes, so a producer restored before it (a source
        re-sending its end of input, barriers) is never held back by a channel nobody empties."""
        self.consumer_finished = True
        while self.queue:
            self.pop()

    def pop(self) -> Any:
        return self.queue.popleft()

    def snapshot_elements(self) -> list[Any]:
        """Everything waiting in the channel, oldest first, without taking it out."""
        return list(self.queue)

    def __len__(self) -> int:
        return len(self.queue)

    def __repr__(self) -> str:
        return f"Channel({self.name}, {len(self.queue)}/{self.capacity})"


def _per_record(batch: RecordBatch) -> tuple[float, float]:
    """A batch's estimated bytes per record, and the share of a record budget one of its records
    takes: 1 for a Python row, its bytes over :data:`BYTES_PER_RECORD` for a record held in Arrow."""
    size = len(batch)  # len: no rows built for Arrow
    per_record = batch.estimated_bytes() / size if size else 0.0
    return per_record, (per_record / BYTES_PER_RECORD if batch.arrow is not None and per_record else 1.0)


class SpillingChannel(Channel):
    """A channel that never refuses its producer: unbounded in records, bounded in memory.

    At most ``memory_budget`` records, and about ``memory_budget_bytes`` bytes (estimated:
    :meth:`RecordBatch.estimated_bytes`), stay in memory — more only when a single record is
    larger than the byte budget. Records held as Arrow columns count as the Python rows their bytes
    would make (:data:`BYTES_PER_RECORD` each), as the sort buffers count them: a budget of records
    is the same memory whichever form they take (10^6 rows of three int64 columns are 24 MB, the
    memory of 94,000 Python rows). Past that, elements go to a private spill file
    (:class:`SpillFile`) and are read back in order, one at a time. A batch is split into
    pieces that fit the budget, so a batch far larger than it (a multiplying ``flat_map``, a
    listener's whole output) never holds more than the budget in memory, whether pushed or
    read back. (An Arrow piece kept in memory is a slice: it shares its batch's buffers.)
    Feedback edges of loops and iterations, and BLOCKING edges, use it, so a cycle can
    never deadlock on a full channel.
    """

    __slots__ = (
        "_file",
        "_in_memory_bytes",
        "_in_memory_records",
        "_sizes",
        "memory_budget",
        "memory_budget_bytes",
        "peak_in_memory_records",
    )

    def __init__(self, memory_budget: int, name: str = "", spill_dir: str | None = None,
                 memory_budget_bytes: int = sys.maxsize) -> None:
        super().__init__(capacity=0, name=name)
        self.memory_budget = memory_budget
        self.memory_budget_bytes = memory_budget_bytes
        self.peak_in_memory_records = 0  # the most records it held in memory at once
        self._in_memory_records = 0
        self._in_memory_bytes = 0
        self._sizes: deque[tuple[int, int]] = deque()  # each queued element's records (as counted) and bytes
        self._file = SpillFile(f"channel {name}", spill_dir)

    @property
    def spilled_bytes(self) -> int:
        return self._file.size_bytes

    def is_full(self) -> bool:
        return False

    def is_at_budget(self) -> bool:
        """Whether its in-memory buffer is at its budget (what comes next is spilled)."""
        return bool(self._file.count) or self._in_memory_records >= self.memory_budget or \
            self._in_memory_bytes >= self.memory_budget_bytes

    def push(self, element: Any) -> None:
        if self.consumer_finished:
            return
        if type(element) is not RecordBatch:
            self._admit(element, 0, 0)
            return
        per_record, weight = _per_record(element)
        piece = min(int(self.memory_budget / weight),
                    int(self.memory_budget_bytes // per_record) if per_record else len(element))
        for part in element.split(max(1, piece)):
            self._admit(part, math.ceil(weight * len(part)), int(per_record * len(part)))

    def _admit(self, element: Any, records: int, estimated: int) -> None:
        """Keep ``element`` in memory if nothing waits on disk and it fits the budget, else spill it."""
        if self._file.count or (records and (self._in_memory_records + records > self.memory_budget or
                                             self._in_memory_bytes + estimated > self.memory_budget_bytes)):
            self._file.append(element)
            if not self.queue:
                self._load_one()
        else:
            self._keep(element, records, estimated)

    def _keep(self, element: Any, records: int, estimated: int) -> None:
        self.queue.append(element)
        self._sizes.append((records, estimated))
        self._in_memory_records += records
        self._in_memory_bytes += estimated
        self.peak_in_memory_records = max(self.peak_in_memory_records, self._in_memory_records)

    def _load_one(self) -> None:
        """Move the oldest spilled element into memory, so the queue shows there is data."""
        element = self._file.take()
        if type(element) is RecordBatch:
            per_record, weight = _per_record(element)
            self._keep(element, math.ceil(weight * len(element)), int(per_record * len(element)))
        else:
            self._keep(element, 0, 0)

    def pop(self) -> Any:
        element = self.queue.popleft()
        records, estimated = self._sizes.popleft()
        self._in_memory_records -= records
        self._in_memory_bytes -= estimated
        if not self.queue and self._file.count:
            self._load_one()
        return element

    def snapshot_elements(self) -> list[Any]:
        """What is in memory, then what is spilled."""
        return list(self.queue) + list(self._file.remaining())

    def __len__(self) -> int:
        return len(self.queue) + self._file.count

    def close(self) -> None:
        """Delete the spill file."""
        self._file.close()

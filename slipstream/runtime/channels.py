"""Channels between tasks: FIFO queues of stream elements with a capacity in batches.

A producer whose channel is full is not scheduled until the consumer took some:
that is backpressure. The capacity is soft: one turn of a producer may overshoot it
by what a single input batch produced.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from slipstream.operators.elements import RecordBatch
from slipstream.operators.spill_file import SpillFile


class Channel:
    __slots__ = ("queue", "capacity", "name", "producer_finished")

    def __init__(self, capacity: int, name: str = "") -> None:
        self.queue: deque[Any] = deque()
        self.capacity = capacity
        self.name = name
        self.producer_finished = False  # the producer sent its end of input: nothing more will come

    def is_full(self) -> bool:
        return len(self.queue) >= self.capacity

    def push(self, element: Any) -> None:
        self.queue.append(element)

    def pop(self) -> Any:
        return self.queue.popleft()

    def snapshot_elements(self) -> list[Any]:
        """Everything waiting in the channel, oldest first, without taking it out."""
        return list(self.queue)

    def __len__(self) -> int:
        return len(self.queue)

    def __repr__(self) -> str:
        return f"Channel({self.name}, {len(self.queue)}/{self.capacity})"


class SpillingChannel(Channel):
    """A channel that never refuses its producer: unbounded in records, bounded in memory.

    Up to ``memory_budget`` records stay in memory; beyond that, whole batches go to a
    private spill file (:class:`SpillFile`) and are read back in order. Feedback edges of
    loops use it, so a cycle can never deadlock on a full channel.
    """

    __slots__ = ("memory_budget", "_in_memory_records", "_file")

    def __init__(self, memory_budget: int, name: str = "", spill_dir: str | None = None) -> None:
        super().__init__(capacity=0, name=name)
        self.memory_budget = memory_budget
        self._in_memory_records = 0
        self._file = SpillFile(f"channel {name}", spill_dir)

    @property
    def spilled_bytes(self) -> int:
        return self._file.size_bytes

    def is_full(self) -> bool:
        return False

    def is_at_budget(self) -> bool:
        """Whether its in-memory buffer is at its budget (what comes next is spilled)."""
        return bool(self._file.count) or self._in_memory_records >= self.memory_budget

    def push(self, element: Any) -> None:
        size = len(element) if isinstance(element, RecordBatch) else 0  # len: no rows built for Arrow
        if self._file.count or (size and self._in_memory_records + size > self.memory_budget):
            self._file.append(element)
            if not self.queue:
                self._load_one()
        else:
            self._in_memory_records += size
            self.queue.append(element)

    def _load_one(self) -> None:
        """Move the oldest spilled element into memory, so the queue shows there is data."""
        element = self._file.take()
        if isinstance(element, RecordBatch):
            self._in_memory_records += len(element)
        self.queue.append(element)

    def pop(self) -> Any:
        element = self.queue.popleft()
        if isinstance(element, RecordBatch):
            self._in_memory_records -= len(element)
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

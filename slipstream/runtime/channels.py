"""Channels between tasks: FIFO queues of stream elements with a capacity in batches.

A producer whose channel is full is not scheduled until the consumer took some:
that is backpressure. The capacity is soft: one turn of a producer may overshoot it
by what a single input batch produced.
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import tempfile
from collections import deque
from typing import Any

from slipstream.errors import DiskFullError
from slipstream.operators.elements import RecordBatch


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

    Up to ``memory_budget`` records stay in memory; beyond that, whole batches are
    pickled to a private spill file and read back in order. Feedback edges of loops use
    it, so a cycle can never deadlock on a full channel.
    """

    __slots__ = ("memory_budget", "_in_memory_records", "_spill_dir", "_writer", "_reader",
                 "_spilled", "spilled_bytes")

    def __init__(self, memory_budget: int, name: str = "", spill_dir: str | None = None) -> None:
        super().__init__(capacity=0, name=name)
        self.memory_budget = memory_budget
        self._in_memory_records = 0
        self._spill_dir = spill_dir
        self._writer: Any = None
        self._reader: Any = None
        self._spilled = 0
        self.spilled_bytes = 0

    def is_full(self) -> bool:
        return False

    def is_at_budget(self) -> bool:
        """Whether its in-memory buffer is at its budget (what comes next is spilled)."""
        return bool(self._spilled) or self._in_memory_records >= self.memory_budget

    def push(self, element: Any) -> None:
        size = len(element) if isinstance(element, RecordBatch) else 0  # len: no rows built for Arrow
        if self._spilled or (size and self._in_memory_records + size > self.memory_budget):
            self._spill(element)
            if not self.queue:
                self._load_one()
        else:
            self._in_memory_records += size
            self.queue.append(element)

    def _spill(self, element: Any) -> None:
        if self._writer is None:
            directory = tempfile.mkdtemp(prefix="slipstream-spill-", dir=self._spill_dir)
            os.chmod(directory, 0o700)
            path = os.path.join(directory, "channel.bin")
            self._writer = open(path, "wb")
            self._reader = open(path, "rb")
        try:
            pickle.dump(element, self._writer, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(self._writer.name, f"spill file of channel {self.name}", exc) from exc
            raise
        self.spilled_bytes = max(self.spilled_bytes, self._writer.tell())
        self._spilled += 1

    def _load_one(self) -> None:
        """Move the oldest spilled element into memory, so the queue shows there is data."""
        self._writer.flush()
        element = pickle.load(self._reader)
        self._spilled -= 1
        if not self._spilled:
            self._writer.seek(0)
            self._writer.truncate()
            self._reader.seek(0)
        if isinstance(element, RecordBatch):
            self._in_memory_records += len(element)
        self.queue.append(element)

    def pop(self) -> Any:
        element = self.queue.popleft()
        if isinstance(element, RecordBatch):
            self._in_memory_records -= len(element)
        if not self.queue and self._spilled:
            self._load_one()
        return element

    def snapshot_elements(self) -> list[Any]:
        """What is in memory, then what is spilled, read through a handle of its own."""
        elements = list(self.queue)
        if self._spilled:
            self._writer.flush()
            with open(self._writer.name, "rb") as spilled:
                spilled.seek(self._reader.tell())
                elements.extend(pickle.load(spilled) for _ in range(self._spilled))
        return elements

    def __len__(self) -> int:
        return len(self.queue) + self._spilled

    def close(self) -> None:
        """Delete the spill file."""
        if self._writer is not None:
            path = self._writer.name
            self._writer.close()
            self._reader.close()
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            self._writer = self._reader = None

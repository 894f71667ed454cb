"""Channels between tasks: FIFO queues of stream elements with a capacity in batches.

A producer whose channel is full is not scheduled until the consumer took some:
that is backpressure. The capacity is soft: one turn of a producer may overshoot it
by what a single input batch produced.
"""

from __future__ import annotations

from collections import deque
from typing import Any


class Channel:
    __slots__ = ("queue", "capacity", "name")

    def __init__(self, capacity: int, name: str = "") -> None:
        self.queue: deque[Any] = deque()
        self.capacity = capacity
        self.name = name

    def is_full(self) -> bool:
        return len(self.queue) >= self.capacity

    def push(self, element: Any) -> None:
        self.queue.append(element)

    def pop(self) -> Any:
        return self.queue.popleft()

    def __len__(self) -> int:
        return len(self.queue)

    def __repr__(self) -> str:
        return f"Channel({self.name}, {len(self.queue)}/{self.capacity})"

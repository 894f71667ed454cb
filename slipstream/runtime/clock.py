"""Clocks for processing time: the wall clock, and a manual one tests move by hand."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Current processing time in epoch milliseconds."""

    def is_manual(self) -> bool:
        """A manual clock never moves by itself, so the scheduler must not wait for it."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def is_manual(self) -> bool:
        return False


class ManualClock:
    """Processing time that moves only when told (``advance``/``set``): deterministic tests."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, millis: int) -> None:
        self._now += int(millis)

    def set(self, now_ms: int) -> None:
        self._now = int(now_ms)

    def is_manual(self) -> bool:
        return True

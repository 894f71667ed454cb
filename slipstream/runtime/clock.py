"""Clocks for processing time: the wall clock here; the manual one tests move by hand is
``slipstream.testing.ManualClock``."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Current processing time in epoch milliseconds."""

    def is_manual(self) -> bool:
        """A manual clock never moves by itself, so the scheduler must not wait for it."""

    def on_idle(self) -> bool:
        """Called by the scheduler when no task can run at the current time: a manual clock may
        move now (a test source's advance of processing time); whether it did."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def is_manual(self) -> bool:
        return False

    def on_idle(self) -> bool:
        return False

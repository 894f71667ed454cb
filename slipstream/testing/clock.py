"""A processing-time clock that moves only when told: deterministic processing-time tests.

>>> from slipstream.testing import ManualClock
>>> clock = ManualClock(start_ms=1_000)
>>> clock.advance(500)
>>> clock.now_ms()
1500

Give it to a job with ``env.configure(clock=clock)`` (processing-time timers then fire exactly
when the test moves it), or let an :class:`~slipstream.testing.OperatorHarness` own one.
``tick_ms`` makes every read move it a little, so intervals measured in processing time
(checkpoint intervals, periodic watermarks) pass in a repeatable number of scheduler turns:

>>> ticking = ManualClock(tick_ms=1)
>>> ticking.now_ms(), ticking.now_ms()
(1, 2)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

_PROBE_MS = 1 << 40


class ManualClock:
    """Processing time that moves only when told (``advance``/``set``, or ``tick_ms`` per read).

    A test source advances it in band with :meth:`advance_when_idle`: the scheduler applies
    such an advance only when no task can run at the current time, so every record read before
    the advance is processed before the timers it makes due fire (Beam's ``TestStream``).
    """

    def __init__(self, start_ms: int = 0, *, tick_ms: int = 0) -> None:
        self._now = int(start_ms)
        self._tick = int(tick_ms)
        self._when_idle: deque[tuple[int, Callable[[], None]]] = deque()

    def now_ms(self) -> int:
        self._now += self._tick
        return self._now

    def advance(self, millis: int) -> None:
        self._now += int(millis)

    def set(self, now_ms: int) -> None:
        self._now = int(now_ms)

    def is_manual(self) -> bool:
        return True

    def drives(self, read: Callable[[], int]) -> bool:
        """Whether ``read`` (a job's processing time) reads this clock: it is moved far and back,
        and ``read`` must have seen the move."""
        before = read()
        self._now += _PROBE_MS
        try:
            return read() - before >= _PROBE_MS
        finally:
            self._now -= _PROBE_MS

    def advance_when_idle(self, millis: int, then: Callable[[], None]) -> None:
        """Move by ``millis`` when the job next has nothing to do at the current time, then call
        ``then`` (a source's ``notify_available``, so it reads on)."""
        self._when_idle.append((int(millis), then))

    def on_idle(self) -> bool:
        """The scheduler found no task to run: apply the oldest pending advance; whether there was one."""
        if not self._when_idle:
            return False
        millis, then = self._when_idle.popleft()
        self._now += millis
        then()
        return True

"""Helpers for testing jobs: a processing-time clock that moves only when told.

>>> from slipstream.testing import ManualClock
>>> clock = ManualClock(start_ms=1_000)
>>> clock.advance(500)
>>> clock.now_ms()
1500

Give it to a job with ``env.configure(clock=clock)``; processing-time timers then
fire exactly when the test advances the clock.
"""

from slipstream.runtime.clock import ManualClock

__all__ = ["ManualClock"]

"""The test kit's manual clock: moved by hand, by ticks, or by a test source when the job is idle."""

from __future__ import annotations

from slipstream.runtime.clock import SystemClock
from slipstream.testing import ManualClock


def test_a_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(start_ms=10)
    assert [clock.now_ms(), clock.now_ms()] == [10, 10]
    clock.advance(5)
    clock.set(100)
    assert clock.now_ms() == 100 and clock.is_manual()


def test_a_ticking_clock_moves_by_its_tick_at_every_read() -> None:
    clock = ManualClock(tick_ms=3)
    assert [clock.now_ms() for _ in range(3)] == [3, 6, 9]


def test_advances_asked_for_while_busy_apply_one_per_idle_moment_in_order() -> None:
    clock = ManualClock()
    woken: list[int] = []
    clock.advance_when_idle(10, lambda: woken.append(clock.now_ms()))
    clock.advance_when_idle(5, lambda: woken.append(clock.now_ms()))
    assert clock.now_ms() == 0
    assert clock.on_idle() and woken == [10]
    assert clock.on_idle() and woken == [10, 15]
    assert not clock.on_idle()
    assert not SystemClock().on_idle()


def test_a_clock_knows_whether_a_reading_is_its_own() -> None:
    clock, other = ManualClock(start_ms=5, tick_ms=1), ManualClock(start_ms=5)
    assert clock.drives(clock.now_ms) and not clock.drives(other.now_ms)
    assert not clock.drives(SystemClock().now_ms)
    assert other.now_ms() == 5 and clock.now_ms() < 20  # the probe leaves no trace

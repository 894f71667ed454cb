"""Sizes of time: ``Duration`` (as ``pyflink.common.Duration``) and the older ``Time``.

Timestamps throughout slipstream are integer milliseconds since the epoch, as in Flink.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_TIMESTAMP = -(2 ** 63)
MAX_TIMESTAMP = 2 ** 63 - 1


@dataclass(frozen=True, slots=True, order=True)
class Duration:
    """A length of time, kept in milliseconds."""

    millis: int

    @staticmethod
    def of_millis(millis: int) -> Duration:
        return Duration(int(millis))

    @staticmethod
    def of_seconds(seconds: int | float) -> Duration:
        return Duration(int(seconds * 1000))

    @staticmethod
    def of_minutes(minutes: int | float) -> Duration:
        return Duration(int(minutes * 60_000))

    @staticmethod
    def of_hours(hours: int | float) -> Duration:
        return Duration(int(hours * 3_600_000))

    @staticmethod
    def of_days(days: int | float) -> Duration:
        return Duration(int(days * 86_400_000))

    @staticmethod
    def of_nanos(nanos: int) -> Duration:
        return Duration(int(nanos) // 1_000_000)

    @staticmethod
    def zero() -> Duration:
        return Duration(0)

    def to_milliseconds(self) -> int:
        return self.millis

    def get_seconds(self) -> int:
        return self.millis // 1000

    def __repr__(self) -> str:
        return f"Duration.of_millis({self.millis})"


@dataclass(frozen=True, slots=True, order=True, init=False)
class Time:
    """Flink's older ``Time`` for window sizes; converts to and from :class:`Duration`."""

    millis: int

    def __init__(self, milliseconds: int) -> None:
        """``Time(milliseconds)``, as PyFlink's (the value is kept as ``millis``)."""
        object.__setattr__(self, "millis", milliseconds)

    @staticmethod
    def milliseconds(milliseconds: int) -> Time:
        return Time(int(milliseconds))

    @staticmethod
    def seconds(seconds: int | float) -> Time:
        return Time(int(seconds * 1000))

    @staticmethod
    def minutes(minutes: int | float) -> Time:
        return Time(int(minutes * 60_000))

    @staticmethod
    def hours(hours: int | float) -> Time:
        return Time(int(hours * 3_600_000))

    @staticmethod
    def days(days: int | float) -> Time:
        return Time(int(days * 86_400_000))

    def to_milliseconds(self) -> int:
        return self.millis


def to_millis(size: Duration | Time | int, what: str = "size") -> int:
    """Accept a ``Duration``, a ``Time`` or plain milliseconds; refuse anything else by name."""
    if isinstance(size, (Duration, Time)):
        return size.millis
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    raise TypeError(f"{what} must be a Duration, a Time or integer milliseconds, got {size!r}")


@dataclass(frozen=True, slots=True, order=True)
class Watermark:
    """Event time has reached ``timestamp``: no record with a smaller or equal timestamp should follow."""

    timestamp: int

    def get_timestamp(self) -> int:
        return self.timestamp


MAX_WATERMARK = Watermark(MAX_TIMESTAMP)

"""Restart strategies, as ``pyflink.common.RestartStrategies``.

When a task fails, a job with a restart strategy and checkpointing restarts in
the same process from its latest completed checkpoint; without checkpoints it
restarts from the beginning. After the configured attempts the job fails with
the last error (so a record that keeps failing ends the job rather than looping).

Strategies are equal by value, as PyFlink's (``RestartStrategies.no_restart() ==
RestartStrategies.no_restart()``); the delay reads back as a ``timedelta``, as in PyFlink.

Examples:
    >>> strategy = RestartStrategies.fixed_delay_restart(3, 100)
    >>> strategy.get_restart_attempts(), strategy.get_delay_between_attempts_interval()
    (3, datetime.timedelta(microseconds=100000))
    >>> strategy == RestartStrategies.fixed_delay_restart(3, timedelta(milliseconds=100))
    True
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeAlias

from slipstream.errors import InvalidProgramError


class RestartStrategyConfiguration:
    """Base of the restart strategy descriptions; equal when of the same kind with the same values."""

    def max_restarts(self) -> int:
        """How many times a failed job is restarted."""
        return 0

    def allows_restart(self, failures: list[float]) -> bool:
        """Whether the job restarts after failing at these instants (monotonic seconds, oldest first;
        the last is the failure now): at most :meth:`max_restarts` failures in all."""
        return len(failures) <= self.max_restarts()

    def delay_ms(self) -> int:
        return 0

    def get_description(self) -> str:
        return "Restart deactivated."

    def _key(self) -> tuple[Any, ...]:
        return (self.max_restarts(), self.delay_ms())

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))


class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
    """A failure fails the job."""

    def __repr__(self) -> str:
        return "NoRestartStrategy"


class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Use the cluster's restart strategy. slipstream has no cluster configuration beyond the
    environment's, so this falls back to not restarting (said by its description)."""

    def get_description(self) -> str:
        return "Cluster level default restart strategy: no restart (slipstream has no cluster configuration)."

    def __repr__(self) -> str:
        return "FallbackRestartStrategy"


class _DelayedRestart(RestartStrategyConfiguration):
    """A strategy that waits ``delay_between_attempts_interval`` (ms or a ``timedelta``) before each restart."""

    def __init__(self, delay_between_attempts_interval: int | timedelta) -> None:
        self._delay_ms = _delay_millis(delay_between_attempts_interval)

    def get_delay_between_attempts_interval(self) -> timedelta:
        return timedelta(milliseconds=self._delay_ms)

    def delay_ms(self) -> int:
        return self._delay_ms


class FixedDelayRestartStrategyConfiguration(_DelayedRestart):
    """Restart up to ``restart_attempts`` times, waiting ``delay_between_attempts_interval`` (ms or a
    ``timedelta``) each time."""

    def __init__(self, restart_attempts: int, delay_between_attempts_interval: int | timedelta) -> None:
        if not isinstance(restart_attempts, int) or isinstance(restart_attempts, bool) or restart_attempts < 0:
            raise InvalidProgramError(f"restart attempts must be an integer >= 0, got {restart_attempts!r}")
        super().__init__(delay_between_attempts_interval)
        self._attempts = restart_attempts

    def get_restart_attempts(self) -> int:
        return self._attempts

    def get_description(self) -> str:
        return f"Restart with fixed delay ({self._delay_ms} ms). #{self._attempts} restart attempts."

    def max_restarts(self) -> int:
        return self._attempts

    def __repr__(self) -> str:
        return f"FixedDelayRestartStrategy(attempts={self._attempts}, delay={self._delay_ms} ms)"


class FailureRateRestartStrategyConfiguration(_DelayedRestart):
    """Restart after each failure, waiting ``delay_between_attempts_interval``, unless more than
    ``max_failure_rate`` failures came within the last ``failure_interval`` (Flink's failure rate)."""

    def __init__(self, max_failure_rate: int, failure_interval: int | timedelta,
                 delay_between_attempts_interval: int | timedelta) -> None:
        if not isinstance(max_failure_rate, int) or isinstance(max_failure_rate, bool) or max_failure_rate < 1:
            raise InvalidProgramError(f"the failure rate must be an integer >= 1, got {max_failure_rate!r}")
        super().__init__(delay_between_attempts_interval)
        self._rate = max_failure_rate
        self._interval_ms = _delay_millis(failure_interval)

    def get_max_failure_rate(self) -> int:
        return self._rate

    def get_failure_interval(self) -> timedelta:
        return timedelta(milliseconds=self._interval_ms)

    def get_description(self) -> str:
        return (f"Failure rate restart with maximum of {self._rate} failures within interval "
                f"{self._interval_ms} ms and fixed delay {self._delay_ms} ms.")

    def allows_restart(self, failures: list[float]) -> bool:
        now = failures[-1]
        return sum(1 for failed in failures if now - failed < self._interval_ms / 1000) <= self._rate

    def _key(self) -> tuple[Any, ...]:
        return (self._rate, self._interval_ms, self._delay_ms)

    def __repr__(self) -> str:
        return (f"FailureRateRestartStrategy(rate={self._rate}, interval={self._interval_ms} ms, "
                f"delay={self._delay_ms} ms)")


def _delay_millis(delay: Any) -> int:
    """A delay given as integer milliseconds, a ``timedelta``, or a ``Duration``/``Time``."""
    if isinstance(delay, timedelta):
        delay = round(delay.total_seconds() * 1000)
    elif hasattr(delay, "to_milliseconds"):
        delay = delay.to_milliseconds()
    if not isinstance(delay, int) or isinstance(delay, bool) or delay < 0:
        raise InvalidProgramError(f"the restart delay must be milliseconds >= 0 or a timedelta, got {delay!r}")
    return delay


class RestartStrategies:
    """Factory of restart strategy configurations."""

    RestartStrategyConfiguration: TypeAlias = RestartStrategyConfiguration
    NoRestartStrategyConfiguration: TypeAlias = NoRestartStrategyConfiguration
    FixedDelayRestartStrategyConfiguration: TypeAlias = FixedDelayRestartStrategyConfiguration
    FallbackRestartStrategyConfiguration: TypeAlias = FallbackRestartStrategyConfiguration
    FailureRateRestartStrategyConfiguration: TypeAlias = FailureRateRestartStrategyConfiguration

    @staticmethod
    def no_restart() -> NoRestartStrategyConfiguration:
        return NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> FallbackRestartStrategyConfiguration:
        return FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int,
                            delay_between_attempts: int | timedelta) -> FixedDelayRestartStrategyConfiguration:
        return FixedDelayRestartStrategyConfiguration(restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval: int | timedelta,
                             delay_interval: int | timedelta) -> FailureRateRestartStrategyConfiguration:
        """Restart unless more than ``failure_rate`` failures came within ``failure_interval``."""
        return FailureRateRestartStrategyConfiguration(failure_rate, failure_interval, delay_interval)


__all__ = ["FailureRateRestartStrategyConfiguration", "FallbackRestartStrategyConfiguration",
           "FixedDelayRestartStrategyConfiguration",
           "NoRestartStrategyConfiguration", "RestartStrategies", "RestartStrategyConfiguration"]

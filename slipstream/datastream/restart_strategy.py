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


class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Restart up to ``restart_attempts`` times, waiting ``delay_between_attempts_interval`` (ms or a
    ``timedelta``) each time."""

    def __init__(self, restart_attempts: int, delay_between_attempts_interval: int | timedelta) -> None:
        if not isinstance(restart_attempts, int) or isinstance(restart_attempts, bool) or restart_attempts < 0:
            raise InvalidProgramError(f"restart attempts must be an integer >= 0, got {restart_attempts!r}")
        self._attempts = restart_attempts
        self._delay_ms = _delay_millis(delay_between_attempts_interval)

    def get_restart_attempts(self) -> int:
        return self._attempts

    def get_delay_between_attempts_interval(self) -> timedelta:
        return timedelta(milliseconds=self._delay_ms)

    def get_description(self) -> str:
        return f"Restart with fixed delay ({self._delay_ms} ms). #{self._attempts} restart attempts."

    def max_restarts(self) -> int:
        return self._attempts

    def delay_ms(self) -> int:
        return self._delay_ms

    def __repr__(self) -> str:
        return f"FixedDelayRestartStrategy(attempts={self._attempts}, delay={self._delay_ms} ms)"


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


__all__ = ["FallbackRestartStrategyConfiguration", "FixedDelayRestartStrategyConfiguration",
           "NoRestartStrategyConfiguration", "RestartStrategies", "RestartStrategyConfiguration"]

"""Restart strategies, as ``pyflink.common.RestartStrategies``.

When a task fails, a job with a restart strategy and checkpointing restarts in
the same process from its latest completed checkpoint; without checkpoints it
restarts from the beginning. After the configured attempts the job fails with
the last error (so a record that keeps failing ends the job rather than looping).

Example:
    >>> strategy = RestartStrategies.fixed_delay_restart(3, 100)
    >>> strategy.get_restart_attempts(), strategy.get_delay_between_attempts_interval()
    (3, 100)
"""

from __future__ import annotations

from slipstream.errors import InvalidProgramError


class RestartStrategyConfiguration:
    """Base of the restart strategy descriptions."""

    def max_restarts(self) -> int:
        """How many times a failed job is restarted."""
        return 0

    def delay_ms(self) -> int:
        return 0


class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
    """A failure fails the job."""

    def __repr__(self) -> str:
        return "NoRestartStrategy"


class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Restart up to ``restart_attempts`` times, waiting ``delay_between_attempts_interval`` ms each time."""

    def __init__(self, restart_attempts: int, delay_between_attempts_interval: int) -> None:
        if not isinstance(restart_attempts, int) or isinstance(restart_attempts, bool) or restart_attempts < 0:
            raise InvalidProgramError(f"restart attempts must be an integer >= 0, got {restart_attempts!r}")
        delay = getattr(delay_between_attempts_interval, "to_milliseconds", None)
        delay_ms = delay() if delay is not None else delay_between_attempts_interval
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise InvalidProgramError(f"the restart delay must be milliseconds >= 0, got {delay_ms!r}")
        self._attempts = restart_attempts
        self._delay_ms = delay_ms

    def get_restart_attempts(self) -> int:
        return self._attempts

    def get_delay_between_attempts_interval(self) -> int:
        return self._delay_ms

    def max_restarts(self) -> int:
        return self._attempts

    def delay_ms(self) -> int:
        return self._delay_ms

    def __repr__(self) -> str:
        return f"FixedDelayRestartStrategy(attempts={self._attempts}, delay={self._delay_ms} ms)"


class RestartStrategies:
    """Factory of restart strategy configurations."""

    RestartStrategyConfiguration = RestartStrategyConfiguration
    NoRestartStrategyConfiguration = NoRestartStrategyConfiguration
    FixedDelayRestartStrategyConfiguration = FixedDelayRestartStrategyConfiguration

    @staticmethod
    def no_restart() -> NoRestartStrategyConfiguration:
        return NoRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: int) -> FixedDelayRestartStrategyConfiguration:
        return FixedDelayRestartStrategyConfiguration(restart_attempts, delay_between_attempts)


__all__ = ["FixedDelayRestartStrategyConfiguration", "NoRestartStrategyConfiguration", "RestartStrategies",
           "RestartStrategyConfiguration"]

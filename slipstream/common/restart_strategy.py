"""``pyflink.common.restart_strategy`` (see :mod:`slipstream.datastream.restart_strategy`)."""

from slipstream.datastream.restart_strategy import RestartStrategies, RestartStrategyConfiguration

__all__ = ["RestartStrategies", "RestartStrategyConfiguration"]

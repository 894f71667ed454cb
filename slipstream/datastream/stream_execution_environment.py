"""``pyflink.datastream.stream_execution_environment`` (see :mod:`slipstream.datastream.environment`)."""

from slipstream.datastream.environment import StreamExecutionEnvironment

__all__ = ["StreamExecutionEnvironment"]

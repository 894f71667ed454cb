"""``pyflink.common.execution_config``: ``ExecutionConfig`` (see :mod:`slipstream.datastream.execution_config`)."""

from slipstream.datastream.execution_config import ExecutionConfig

__all__ = ["ExecutionConfig"]

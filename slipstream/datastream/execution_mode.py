"""``pyflink.datastream.execution_mode``: ``RuntimeExecutionMode`` (STREAMING, BATCH, AUTOMATIC).

The enum lives in :mod:`slipstream.datastream.environment`; this module gives it PyFlink's import path.
"""

from slipstream.datastream.environment import RuntimeExecutionMode

__all__ = ["RuntimeExecutionMode"]

"""``pyflink.datastream.execution_mode``: ``RuntimeExecutionMode`` (STREAMING, BATCH, AUTOMATIC).

The enum lives in :mod:`slipstream.datastream.job_spec`; this module gives it PyFlink's import path.
"""

from slipstream.datastream.job_spec import RuntimeExecutionMode

__all__ = ["RuntimeExecutionMode"]

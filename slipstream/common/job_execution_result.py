"""``pyflink.common.job_execution_result``: ``JobExecutionResult`` (see :mod:`slipstream.datastream.environment`)."""

from slipstream.datastream.job_spec import JobExecutionResult

__all__ = ["JobExecutionResult"]

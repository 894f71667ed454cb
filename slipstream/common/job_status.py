"""``pyflink.common.job_status``: ``JobStatus`` (see :mod:`slipstream.runtime.driver`)."""

from slipstream.runtime.driver import JobStatus

__all__ = ["JobStatus"]

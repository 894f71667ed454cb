"""``pyflink.common.job_client``: ``JobClient`` (see :mod:`slipstream.runtime.job_client`)."""

from slipstream.runtime.job_client import JobClient

__all__ = ["JobClient"]

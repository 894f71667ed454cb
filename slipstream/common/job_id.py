"""``pyflink.common.job_id``: ``JobID`` (see :mod:`slipstream.datastream.job_id`)."""

from slipstream.datastream.job_id import JobID

__all__ = ["JobID"]

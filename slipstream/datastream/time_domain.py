"""``pyflink.datastream.time_domain``: ``TimeDomain`` (see :mod:`slipstream.datastream.functions`)."""

from slipstream.datastream.functions import TimeDomain

__all__ = ["TimeDomain"]

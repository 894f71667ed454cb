"""``pyflink.common.time``: ``Duration`` and ``Time`` (see :mod:`slipstream.datastream.time`)."""

from slipstream.datastream.time import Duration, Time

__all__ = ["Duration", "Time"]

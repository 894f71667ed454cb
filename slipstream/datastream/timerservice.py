"""``pyflink.datastream.timerservice``: ``TimerService`` (see :mod:`slipstream.datastream.functions`)."""

from slipstream.datastream.functions import TimerService

__all__ = ["TimerService"]

"""``TimeCharacteristic``, as ``pyflink.datastream.TimeCharacteristic`` (deprecated in Flink 1.12).

Since Flink 1.12 every window names its own clock (``TumblingEventTimeWindows``
or ``TumblingProcessingTimeWindows``) and event time is the default; slipstream
has only that model. ``env.set_stream_time_characteristic`` keeps the value for
``get_stream_time_characteristic`` and warns when it asks for anything else,
since it changes no window.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TimeCharacteristic"]


class TimeCharacteristic(Enum):
    """Which clock time-dependent operations follow: PyFlink's three values, EventTime the default."""

    ProcessingTime = 0
    IngestionTime = 1
    EventTime = 2

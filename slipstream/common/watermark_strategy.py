"""``pyflink.common.watermark_strategy`` (see :mod:`slipstream.datastream.watermark_strategy`)."""

from slipstream.datastream.watermark_strategy import *  # noqa: F403
from slipstream.datastream.watermark_strategy import TimestampAssigner, WatermarkStrategy  # noqa: F401

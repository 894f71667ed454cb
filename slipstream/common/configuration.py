"""``pyflink.common.configuration``: ``Configuration`` (see :mod:`slipstream.datastream.configuration`)."""

from slipstream.datastream.configuration import Configuration

__all__ = ["Configuration"]

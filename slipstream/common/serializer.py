"""``pyflink.common.serializer``: ``TypeSerializer`` (see :mod:`slipstream.datastream.serialization`)."""

from slipstream.datastream.serialization import TypeSerializer

__all__ = ["TypeSerializer"]

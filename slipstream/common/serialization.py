"""``pyflink.common.serialization``: the serialization schemas, ``Encoder`` and ``BulkWriterFactory``
(see :mod:`slipstream.datastream.serialization` and :mod:`slipstream.datastream.formats.base`)."""

from slipstream.datastream.formats.base import BulkWriterFactory, Encoder
from slipstream.datastream.serialization import (
    ByteArraySchema,
    DeserializationSchema,
    SerializationSchema,
    SimpleStringSchema,
)

__all__ = ["BulkWriterFactory", "ByteArraySchema", "DeserializationSchema", "Encoder", "SerializationSchema",
           "SimpleStringSchema"]

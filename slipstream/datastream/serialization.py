"""Serialization schemas, as PyFlink's ``pyflink.common.serialization`` names them.

A :class:`SerializationSchema` turns a record into the bytes of one message and a
:class:`DeserializationSchema` turns one message back into a record. PyFlink's are
wrappers of Java objects that only its connectors call; here they are Python objects
with ``serialize``/``deserialize``, so a user's own schema (a subclass overriding
them, the way PyFlink users write one) and the built-in ones can be called and
tested directly.

Examples:
    >>> SimpleStringSchema().serialize("héllo")
    b'h\\xc3\\xa9llo'
    >>> SimpleStringSchema().deserialize(b"h\\xc3\\xa9llo")
    'héllo'
"""

from __future__ import annotations

import codecs
from abc import ABC, abstractmethod
from typing import IO, Any, Generic, TypeVar

from slipstream.datastream.typeinfo import TypeInformation, Types
from slipstream.errors import InvalidProgramError

T = TypeVar("T")


class TypeSerializer(ABC, Generic[T]):
    """Writes values of one type to a binary stream and reads them back (PyFlink's
    ``pyflink.common.serializer.TypeSerializer``: what a custom window assigner's
    ``get_window_serializer`` returns). Records inside slipstream stay Python objects; this is
    for code of one's own that stores values as Flink would."""

    @abstractmethod
    def serialize(self, element: T, stream: IO[bytes]) -> None:
        """Write ``element`` to ``stream``."""

    @abstractmethod
    def deserialize(self, stream: IO[bytes]) -> T:
        """Read one value from ``stream``."""


class SerializationSchema(ABC):
    """Turns a record into the bytes of one message; subclasses define :meth:`serialize`."""

    @abstractmethod
    def serialize(self, element: Any) -> bytes:
        """The message for ``element``."""


class DeserializationSchema(ABC):
    """Turns one message into a record; subclasses define :meth:`deserialize` and, when the
    records have a declared type, :meth:`get_produced_type`."""

    @abstractmethod
    def deserialize(self, message: bytes) -> Any:
        """The record of ``message`` (None: the message is skipped, as Flink's contract has it)."""

    def is_end_of_stream(self, next_element: Any) -> bool:
        """Whether ``next_element`` ends the stream; never, unless a subclass says so."""
        return False

    def get_produced_type(self) -> TypeInformation:
        """The type of the records (Python objects unless a subclass declares one)."""
        return Types.PICKLED_BYTE_ARRAY()


def _charset(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise InvalidProgramError(f"unknown charset {name!r}") from None


class SimpleStringSchema(SerializationSchema, DeserializationSchema):
    """Strings as the bytes of ``charset`` (UTF-8 unless told), both ways."""

    def __init__(self, charset: str = "UTF-8") -> None:
        self.charset = _charset(charset)

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, str):
            raise TypeError(f"SimpleStringSchema serializes str records, got {type(element).__name__}: {element!r}")
        return element.encode(self.charset)

    def deserialize(self, message: bytes) -> str:
        return bytes(message).decode(self.charset)

    def get_produced_type(self) -> TypeInformation:
        return Types.STRING()


class ByteArraySchema(SerializationSchema, DeserializationSchema):
    """Messages as they are: bytes in, bytes out."""

    def serialize(self, element: Any) -> bytes:
        if not isinstance(element, (bytes, bytearray, memoryview)):
            raise TypeError(f"ByteArraySchema serializes bytes records, got {type(element).__name__}: {element!r}")
        return bytes(element)

    def deserialize(self, message: bytes) -> bytes:
        return bytes(message)

    def get_produced_type(self) -> TypeInformation:
        return Types.PRIMITIVE_ARRAY(Types.BYTE())


__all__ = ["ByteArraySchema", "DeserializationSchema", "SerializationSchema", "SimpleStringSchema", "TypeSerializer"]

"""JSON: ``JsonRowDeserializationSchema``/``JsonRowSerializationSchema`` (as PyFlink) and JSON lines files.

``JsonLinesReaderFormat`` reads one JSON document per line: as plain Python
values (dicts for objects), or as ``Row`` records through a
``JsonRowDeserializationSchema``. ``JsonLinesEncoder`` writes one document per
line. Field values are checked against the schema's ``Types``; dates and times
are not parsed from strings here.

Example:
    >>> from slipstream.datastream.typeinfo import Types
    >>> schema = (JsonRowDeserializationSchema.builder()
    ...           .type_info(Types.ROW_NAMED(['id', 'name'], [Types.INT(), Types.STRING()]))
    ...           .build())
    >>> schema.deserialize(b'{"id": 1, "name": "a"}')
    Row(id=1, name='a')
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Mapping
from typing import Any

from slipstream.datastream.connectors.errors import SinkFormatError, SourceFormatError
from slipstream.datastream.formats.base import (
    SKIP,
    Encoder,
    FileRecordReader,
    LineRecordReader,
    StreamFormat,
    named_row,
)
from slipstream.datastream.typeinfo import Row, RowTypeInfo
from slipstream.errors import InvalidProgramError


class JsonRowDeserializationSchema:
    """Turns a JSON object into a named ``Row`` of the given ``RowTypeInfo``.

    A field absent from the object is None, or an error with
    ``fail_on_missing_field``; a message that does not parse or does not fit
    the type is an error, or dropped (``deserialize`` returns None) with
    ``ignore_parse_errors``, as the user asked.
    """

    def __init__(self, type_info: RowTypeInfo, fail_on_missing_field: bool = False,
                 ignore_parse_errors: bool = False) -> None:
        if not isinstance(type_info, RowTypeInfo):
            raise InvalidProgramError(
                f"JsonRowDeserializationSchema needs a row type (Types.ROW_NAMED(...)), got {type_info!r}")
        if fail_on_missing_field and ignore_parse_errors:
            raise InvalidProgramError(
                "JsonRowDeserializationSchema: fail_on_missing_field and ignore_parse_errors exclude each other")
        self._type_info = type_info
        self._names = type_info.get_field_names()
        self._types = type_info.get_field_types()
        self._fail_on_missing_field = fail_on_missing_field
        self.ignore_parse_errors = ignore_parse_errors

    @staticmethod
    def builder() -> JsonRowDeserializationSchemaBuilder:
        return JsonRowDeserializationSchemaBuilder()

    def get_type_info(self) -> RowTypeInfo:
        return self._type_info

    def deserialize(self, message: bytes | str) -> Row | None:
        """The row in ``message``; raises :class:`SourceFormatError` (path None) if it does not fit."""
        try:
            return self.to_row(message, None, None, None)
        except SourceFormatError:
            if self.ignore_parse_errors:
                return None
            raise

    def to_row(self, text: bytes | str, path: str | None, line_number: int | None, offset: int | None) -> Row:
        """The row in ``text``, with errors naming ``path``, ``line_number`` and ``offset``."""
        try:
            document = json.loads(text)
        except ValueError as error:
            raise SourceFormatError(path, line_number, offset, f"a JSON document ({error})", text) from None
        if not isinstance(document, Mapping):
            raise SourceFormatError(path, line_number, offset, "a JSON object", document)
        values = []
        for name, type_info in zip(self._names, self._types):
            if name not in document and self._fail_on_missing_field:
                raise SourceFormatError(path, line_number, offset, "a field that is present", document,
                                        field=f"'{name}'")
            value = document.get(name)
            try:
                values.append(type_info.from_python(value))
            except TypeError:
                raise SourceFormatError(path, line_number, offset, f"a value of type {type_info!r}", value,
                                        field=f"'{name}'") from None
        return named_row(self._names, values)


class JsonRowDeserializationSchemaBuilder:
    """Builds a :class:`JsonRowDeserializationSchema`; ``type_info`` is required."""

    def __init__(self) -> None:
        self._type_info: RowTypeInfo | None = None
        self._fail_on_missing_field = False
        self._ignore_parse_errors = False

    def type_info(self, type_info: RowTypeInfo) -> JsonRowDeserializationSchemaBuilder:
        self._type_info = type_info
        return self

    def fail_on_missing_field(self) -> JsonRowDeserializationSchemaBuilder:
        self._fail_on_missing_field = True
        return self

    def ignore_parse_errors(self) -> JsonRowDeserializationSchemaBuilder:
        self._ignore_parse_errors = True
        return self

    def build(self) -> JsonRowDeserializationSchema:
        if self._type_info is None:
            raise InvalidProgramError("JsonRowDeserializationSchema.builder(): call type_info(...) before build()")
        return JsonRowDeserializationSchema(self._type_info, self._fail_on_missing_field, self._ignore_parse_errors)


def _json_default(value: Any) -> Any:
    """JSON for what ``json`` does not know: rows as objects (or arrays), decimals as numbers, times as ISO text."""
    if isinstance(value, Row):
        return value.as_dict() if value._fields is not None else list(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} {value!r} has no JSON form")


def to_json(value: Any) -> str:
    """One line of compact JSON for ``value``; :class:`SinkFormatError` if it has no JSON form."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    except (TypeError, ValueError) as error:
        raise SinkFormatError(f"JSON: cannot write record {value!r}: {error}") from None


class JsonRowSerializationSchema:
    """Turns a row of the given ``RowTypeInfo`` into a JSON object (bytes), fields named by the type."""

    def __init__(self, type_info: RowTypeInfo) -> None:
        if not isinstance(type_info, RowTypeInfo):
            raise InvalidProgramError(
                f"JsonRowSerializationSchema needs a row type (Types.ROW_NAMED(...)), got {type_info!r}")
        self._type_info = type_info
        self._names = type_info.get_field_names()

    @staticmethod
    def builder() -> JsonRowSerializationSchemaBuilder:
        return JsonRowSerializationSchemaBuilder()

    def to_json(self, row: Any) -> str:
        """The JSON object for ``row`` (a row, tuple or dict of this type) as text."""
        try:
            checked = self._type_info.from_python(row)
        except TypeError as error:
            raise SinkFormatError(f"JSON: record {row!r} does not fit {self._type_info!r}: {error}") from None
        return to_json(dict(zip(self._names, checked)))

    def serialize(self, row: Any) -> bytes:
        return self.to_json(row).encode("utf-8")


class JsonRowSerializationSchemaBuilder:
    """Builds a :class:`JsonRowSerializationSchema`; ``with_type_info`` is required."""

    def __init__(self) -> None:
        self._type_info: RowTypeInfo | None = None

    def with_type_info(self, type_info: RowTypeInfo) -> JsonRowSerializationSchemaBuilder:
        self._type_info = type_info
        return self

    def build(self) -> JsonRowSerializationSchema:
        if self._type_info is None:
            raise InvalidProgramError("JsonRowSerializationSchema.builder(): call with_type_info(...) before build()")
        return JsonRowSerializationSchema(self._type_info)


class JsonLinesReaderFormat(StreamFormat):
    """Reads files of one JSON document per line (JSON lines); empty lines are skipped.

    Without a schema each record is the parsed document (a dict for an
    object); with a :class:`JsonRowDeserializationSchema` each is a ``Row``.
    """

    def __init__(self, deserialization_schema: JsonRowDeserializationSchema | None = None) -> None:
        self._schema = deserialization_schema

    def create_reader(self, path: str, part: int | None, position: Any | None) -> FileRecordReader:
        return _JsonLinesReader(path, self._schema, position)


class _JsonLinesReader(LineRecordReader):
    def __init__(self, path: str, schema: JsonRowDeserializationSchema | None, position: Any | None) -> None:
        super().__init__(path, "UTF-8", position)
        self._schema = schema

    def parse(self, text: str, line_number: int, offset: int) -> Any:
        if not text.strip():
            return SKIP
        if self._schema is None:
            try:
                return json.loads(text)
            except ValueError as error:
                raise SourceFormatError(self.path, line_number, offset, f"a JSON document ({error})",
                                        text) from None
        try:
            return self._schema.to_row(text, self.path, line_number, offset)
        except SourceFormatError:
            if self._schema.ignore_parse_errors:
                return SKIP
            raise


class JsonLinesEncoder(Encoder):
    """Encodes each record as one line of compact JSON: dicts and named rows as objects, the rest as values.

    Example:
        >>> JsonLinesEncoder().encode({'id': 1, 'tags': ('a', 'b')})
        b'{"id":1,"tags":["a","b"]}\\n'
    """

    def __init__(self, serialization_schema: JsonRowSerializationSchema | None = None) -> None:
        self._schema = serialization_schema

    def encode(self, value: Any) -> bytes:
        text = to_json(value) if self._schema is None else self._schema.to_json(value)
        return (text + "\n").encode("utf-8")

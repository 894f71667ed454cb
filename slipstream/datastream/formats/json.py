"""JSON: ``JsonRowDeserializationSchema``/``JsonRowSerializationSchema`` (as PyFlink) and JSON lines files.

``JsonLinesReaderFormat`` reads one JSON document per line: as plain Python
values (dicts for objects), or as ``Row`` records through a
``JsonRowDeserializationSchema``. ``JsonLinesEncoder`` writes one document per
line. Field values are checked against the schema's ``Types``; dates and times
are not parsed from strings here.

Examples:
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
import re
from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from slipstream.datastream.columnar import column_values, named_row, rows_from_columns
from slipstream.datastream.connectors.errors import SinkFormatError, SourceFormatError
from slipstream.datastream.formats.base import (
    SKIP,
    Encoder,
    FileRecordReader,
    LineRecordReader,
    StreamFormat,
)
from slipstream.datastream.formats.blocks import BlockLineReader, Segments, lone_carriage_returns
from slipstream.datastream.serialization import DeserializationSchema, SerializationSchema
from slipstream.datastream.typeinfo import Row, RowTypeInfo, Types
from slipstream.errors import InvalidProgramError


class JsonRowDeserializationSchema(DeserializationSchema):
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

    def get_produced_type(self) -> RowTypeInfo:
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


class JsonRowSerializationSchema(SerializationSchema):
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
        if self._schema is None:
            return _JsonLinesBlockReader(path, None, position)
        if all(t in _ARROW_TYPES for t in self._schema.get_type_info().get_field_types()):
            return _JsonRowsBlockReader(path, self._schema, position)
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

    Examples:
        >>> JsonLinesEncoder().encode({'id': 1, 'tags': ('a', 'b')})
        b'{"id":1,"tags":["a","b"]}\\n'
    """

    def __init__(self, serialization_schema: JsonRowSerializationSchema | None = None) -> None:
        self._schema = serialization_schema

    def encode(self, value: Any) -> bytes:
        text = to_json(value) if self._schema is None else self._schema.to_json(value)
        return (text + "\n").encode("utf-8")


_ARROW_TYPES = {Types.BYTE(): pa.int8(), Types.SHORT(): pa.int16(), Types.INT(): pa.int32(), Types.LONG(): pa.int64(),
                Types.FLOAT(): pa.float64(), Types.DOUBLE(): pa.float64(), Types.STRING(): pa.string(),
                Types.BOOLEAN(): pa.bool_()}
"""The field types a schema's rows are read in bulk with, as Arrow types whose conversion refuses
what ``from_python`` refuses (a float for an integer, a number for a string, out of range).
FLOAT is read as double, as ``from_python`` keeps the parsed double."""

_JSON_BLANK = np.zeros(256, dtype=bool)
_JSON_BLANK[[ord(" "), ord("\t"), ord("\r"), ord("\n")]] = True
_TWO_DOCUMENTS = re.compile(rb"\}[ \t\r]*\{")


class _JsonLinesBlockMixin(BlockLineReader):
    """Blank lines are those of JSON white space only (the others go line by line when blank to ``str.strip``)."""

    def is_blank(self, data: np.ndarray, segments: Segments) -> np.ndarray:
        solid = np.concatenate(([0], np.cumsum(~_JSON_BLANK[data])))
        return cast("np.ndarray[Any, Any]", solid[segments.ends] == solid[segments.starts])


class _JsonLinesBlockReader(_JsonLinesBlockMixin, _JsonLinesReader):
    """Plain JSON lines: the block is decoded once and each line scanned by ``json``'s own C
    scanner, as ``json.loads`` does it (same values); a block with a line that does not scan
    goes line by line, for the error."""

    _scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner: in CPython, not typeshed
    _white = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]

    def parse_block(self, block: bytes, data: np.ndarray, at_record_end: np.ndarray,
                    records: Segments) -> list[Any] | None:
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            return None
        lines = text.split("\n")
        newline_counts = records.lines - 1  # each record is one line: its index in the block
        scan, white = self._scan, self._white
        values = []
        try:
            for index in newline_counts.tolist():
                line = lines[index]
                value, end = scan(line, white(line, 0).end())
                if white(line, end).end() != len(line):
                    return None
                values.append(value)
        except (StopIteration, ValueError):  # no document at all; a broken one
            return None
        return values


class _JsonRowsBlockReader(_JsonLinesBlockMixin, _JsonLinesReader):
    _schema: JsonRowDeserializationSchema  # made only with one (JsonLinesReaderFormat.create_reader)
    """JSON lines read into rows by pyarrow's JSON reader, for schemas of numbers, strings and
    booleans (see ``_ARROW_TYPES``; other schemas use the line reader). A block goes line by line
    when Arrow refuses it (a value that does not fit, a duplicate key, a lone surrogate), when a
    line may hold two documents (Arrow would read both), with ``fail_on_missing_field`` when a
    field is null or missing (Arrow cannot tell which), or when a ``\r`` does not end a line."""

    def parse_block(self, block: bytes, data: np.ndarray, at_record_end: np.ndarray,
                    records: Segments) -> list[Any] | None:
        if lone_carriage_returns(data, at_record_end) or _TWO_DOCUMENTS.search(block):
            return None
        row_type = self._schema.get_type_info()
        names = row_type.get_field_names()
        schema = pa.schema([(name, _ARROW_TYPES[t]) for name, t in zip(names, row_type.get_field_types())])
        try:
            table = pa_json.read_json(
                pa.py_buffer(block),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=min(len(block) + 1, 1 << 30)),
                parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, ValueError):
            return None
        if table.num_rows != len(records):
            return None
        if self._schema._fail_on_missing_field and any(column.null_count for column in table.columns):
            return None
        return rows_from_columns(names, [column_values(column) for column in table.columns])

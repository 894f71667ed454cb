"""CSV: ``CsvSchema`` and its builder, ``CsvReaderFormat`` (records in as ``Row``), ``CsvBulkWriters`` and
``CsvEncoder`` (out).

As in PyFlink, a schema lists typed columns; types are given as
``Types.STRING()``, ``Types.INT()``, ``Types.DOUBLE()`` … (PyFlink takes
``DataTypes``, which belong to its Table API). A schema with no columns and
``set_use_header()`` takes its column names from each file's header and reads
every field as a string. Quoted fields may span lines.

Examples:
    >>> schema = (CsvSchema.builder()
    ...           .add_number_column('id', number_type=Types.INT())
    ...           .add_string_column('name')
    ...           .set_use_header()
    ...           .build())
    >>> schema.get_type_info()
    RowTypeInfo(id: Integer, name: String)
"""

from __future__ import annotations

import csv
import decimal
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from slipstream.datastream.columnar import column_values, named_row, rows_from_columns
from slipstream.datastream.connectors.errors import SinkFormatError, SourceFormatError
from slipstream.datastream.formats.base import (
    SKIP,
    BulkWriter,
    BulkWriterFactory,
    Encoder,
    FileRecordReader,
    LineRecordReader,
    StreamFormat,
)
from slipstream.datastream.formats.blocks import BlockLineReader, Segments, lone_carriage_returns
from slipstream.datastream.typeinfo import Row, RowTypeInfo, TypeInformation, Types
from slipstream.errors import InvalidProgramError


def _parse_boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError(text)


_PARSERS: dict[TypeInformation, Callable[[str], Any]] = {
    Types.STRING(): str,
    Types.CHAR(): str,
    Types.BOOLEAN(): _parse_boolean,
    Types.BYTE(): int,
    Types.SHORT(): int,
    Types.INT(): int,
    Types.LONG(): int,
    Types.BIG_INT(): int,
    Types.FLOAT(): float,
    Types.DOUBLE(): float,
    Types.BIG_DEC(): decimal.Decimal,
}
"""How a field's text becomes a value of each column type CSV supports."""

_NUMBER_TYPES = [Types.BYTE(), Types.SHORT(), Types.INT(), Types.LONG(), Types.BIG_INT(),
                 Types.FLOAT(), Types.DOUBLE(), Types.BIG_DEC()]


@dataclass(frozen=True)
class CsvColumn:
    """One column: its name, its type and, for an array column, the separator of its elements."""

    name: str
    type_info: TypeInformation
    array_separator: str | None = None


@dataclass(frozen=True)
class CsvSchema:
    """The columns of a CSV file and how it is punctuated; build one with :meth:`builder`."""

    columns: tuple[CsvColumn, ...] = ()
    column_separator: str = ","
    quote_char: str | None = '"'
    escape_char: str | None = None
    line_separator: str = "\n"
    null_value: str | None = None
    use_header: bool = False
    strict_headers: bool = False
    skip_first_data_row: bool = False
    allow_comments: bool = False

    @staticmethod
    def builder() -> CsvSchemaBuilder:
        """A builder starting from no columns and the default punctuation (``,`` and ``"``)."""
        return CsvSchemaBuilder()

    def get_field_names(self) -> list[str]:
        return [column.name for column in self.columns]

    def get_type_info(self) -> RowTypeInfo:
        """The type of the rows read with this schema (arrays as ``Types.LIST`` of their element type)."""
        return Types.ROW_NAMED(
            self.get_field_names(),
            [Types.LIST(c.type_info) if c.array_separator is not None else c.type_info for c in self.columns])

    def size(self) -> int:
        return len(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def _single_char(char: str, what: str) -> str:
    if not isinstance(char, str) or len(char) != 1:
        raise InvalidProgramError(f"{what} must be a single character, got {char!r}")
    return char


class CsvSchemaBuilder:
    """Builds a :class:`CsvSchema` column by column, as PyFlink's ``CsvSchemaBuilder``."""

    def __init__(self) -> None:
        self._schema = CsvSchema()
        self._array_element_separator = ";"

    def build(self) -> CsvSchema:
        return self._schema

    def _set(self, **changes: Any) -> CsvSchemaBuilder:
        self._schema = replace(self._schema, **changes)
        return self

    def _add(self, column: CsvColumn) -> CsvSchemaBuilder:
        if column.name in self._schema.get_field_names():
            raise InvalidProgramError(f"CsvSchema already has a column {column.name!r}")
        return self._set(columns=(*self._schema.columns, column))

    def add_string_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(CsvColumn(name, Types.STRING()))

    def add_number_column(self, name: str, number_type: TypeInformation | None = None) -> CsvSchemaBuilder:
        """Add a number column of ``number_type`` (None: ``Types.LONG()``, PyFlink's BIGINT)."""
        number_type = Types.LONG() if number_type is None else number_type
        if number_type not in _NUMBER_TYPES:
            raise InvalidProgramError(
                f"CsvSchema number column {name!r}: number_type must be one of {_NUMBER_TYPES}, got {number_type!r}")
        return self._add(CsvColumn(name, number_type))

    def add_boolean_column(self, name: str) -> CsvSchemaBuilder:
        return self._add(CsvColumn(name, Types.BOOLEAN()))

    def add_array_column(self, name: str, separator: str | None = None,
                         element_type: TypeInformation | None = None) -> CsvSchemaBuilder:
        """Add a column holding a list of ``element_type`` (None: ``Types.STRING()``), its elements
        separated by ``separator`` (default ``;``)."""
        element_type = Types.STRING() if element_type is None else element_type
        if element_type not in _PARSERS:
            raise InvalidProgramError(
                f"CsvSchema array column {name!r}: element_type must be a basic type, got {element_type!r}")
        return self._add(CsvColumn(name, element_type, separator or self._array_element_separator))

    def add_columns_from(self, schema: CsvSchema) -> CsvSchemaBuilder:
        for column in schema.columns:
            self._add(column)
        return self

    def clear_columns(self) -> CsvSchemaBuilder:
        return self._set(columns=())

    def set_array_element_separator(self, separator: str) -> CsvSchemaBuilder:
        """The separator of array columns added from now on without one of their own."""
        self._array_element_separator = separator
        return self

    def set_column_separator(self, char: str) -> CsvSchemaBuilder:
        return self._set(column_separator=_single_char(char, "column separator"))

    def set_quote_char(self, char: str) -> CsvSchemaBuilder:
        return self._set(quote_char=_single_char(char, "quote char"))

    def disable_quote_char(self) -> CsvSchemaBuilder:
        return self._set(quote_char=None)

    def set_escape_char(self, char: str) -> CsvSchemaBuilder:
        return self._set(escape_char=_single_char(char, "escape char"))

    def disable_escape_char(self) -> CsvSchemaBuilder:
        return self._set(escape_char=None)

    def set_line_separator(self, separator: str) -> CsvSchemaBuilder:
        """The line separator written; reading accepts ``\\n`` and ``\\r\\n``."""
        return self._set(line_separator=separator)

    def set_null_value(self, null_value: str) -> CsvSchemaBuilder:
        """The text that stands for None (besides an empty field in a non-string column)."""
        return self._set(null_value=null_value)

    def set_use_header(self, use: bool = True) -> CsvSchemaBuilder:
        """Files start with a header line: read past it (or take column names from it), write one."""
        return self._set(use_header=use)

    def set_strict_headers(self, strict: bool = True) -> CsvSchemaBuilder:
        """Fail on a header whose names differ from the schema's columns."""
        return self._set(strict_headers=strict)

    def set_skip_first_data_row(self, skip: bool = True) -> CsvSchemaBuilder:
        """Skip each file's first line without reading it as a header."""
        return self._set(skip_first_data_row=skip)

    def set_allow_comments(self, allow: bool = True) -> CsvSchemaBuilder:
        """Skip lines starting with ``#``."""
        return self._set(allow_comments=allow)

    def size(self) -> int:
        return len(self._schema.columns)

    def __len__(self) -> int:
        return len(self._schema.columns)


class CsvReaderFormat(StreamFormat):
    """Reads CSV files into named ``Row`` records, one per CSV record; empty lines are skipped."""

    def __init__(self, schema: CsvSchema) -> None:
        if not schema.columns and not schema.use_header:
            raise InvalidProgramError(
                "CsvReaderFormat needs a CsvSchema with columns, or one with set_use_header() "
                "to take column names from each file's header")
        self._schema = schema

    @staticmethod
    def for_schema(schema: CsvSchema) -> CsvReaderFormat:
        return CsvReaderFormat(schema)

    def create_reader(self, path: str, part: int | None, position: Any | None) -> FileRecordReader:
        reader = _CsvBlockReader if _bulk_readable(self._schema) else _CsvRecordReader
        return reader(path, self._schema, position)


class _CsvRecordReader(LineRecordReader):
    def __init__(self, path: str, schema: CsvSchema, position: Any | None) -> None:
        super().__init__(path, "UTF-8", None)
        self._schema = schema
        self._columns = list(schema.columns)
        if schema.use_header or schema.skip_first_data_row:
            header = self.read_record()
            if header is not None and schema.use_header:
                self._read_header(*header)
        if position is not None:
            self.seek(position)

    def _read_header(self, text: str, line_number: int, offset: int) -> None:
        names = self._split(text, line_number, offset)
        if not self._columns:
            self._columns = [CsvColumn(name, Types.STRING()) for name in names]
        elif self._schema.strict_headers and names != [c.name for c in self._columns]:
            raise SourceFormatError(self.path, line_number, offset,
                                    f"a header naming the columns {[c.name for c in self._columns]}", names)

    def _quotes_balanced(self, text: str) -> bool:
        quote, escape = self._schema.quote_char, self._schema.escape_char
        if quote is None:
            return True
        inside = False
        escaped = False
        for char in text:
            if escaped:
                escaped = False
            elif char == escape:
                escaped = True
            elif char == quote:
                inside = not inside
        return not inside

    def read_record(self) -> tuple[str, int, int] | None:
        first = self.read_line()
        if first is None:
            return None
        text, line_number, offset = first
        while not self._quotes_balanced(text):
            more = self.read_line()
            if more is None:
                raise SourceFormatError(self.path, line_number, offset,
                                        f"a closing {self._schema.quote_char} before the end of the file", text)
            text += "\n" + more[0]
        return text, line_number, offset

    def _split(self, text: str, line_number: int, offset: int) -> list[str]:
        schema = self._schema
        options: dict[str, Any] = {"delimiter": schema.column_separator, "strict": True,
                                   "escapechar": schema.escape_char}
        if schema.quote_char is None:
            options["quoting"] = csv.QUOTE_NONE
        else:
            options["quotechar"] = schema.quote_char
        try:
            return next(csv.reader([text], **options))
        except csv.Error as error:
            raise SourceFormatError(self.path, line_number, offset, f"a CSV record ({error})", text) from None

    def parse(self, text: str, line_number: int, offset: int) -> Any:
        if not text or (self._schema.allow_comments and text.lstrip().startswith("#")):
            return SKIP
        fields = self._split(text, line_number, offset)
        if len(fields) != len(self._columns):
            raise SourceFormatError(
                self.path, line_number, offset,
                f"{len(self._columns)} fields {[c.name for c in self._columns]}, found {len(fields)}", text)
        values = [self._convert(column, index, field_text, line_number, offset)
                  for index, (column, field_text) in enumerate(zip(self._columns, fields))]
        return named_row([c.name for c in self._columns], values)

    def _convert(self, column: CsvColumn, index: int, text: str, line_number: int, offset: int) -> Any:
        if self._schema.null_value is not None and text == self._schema.null_value:
            return None
        if column.array_separator is not None:
            if not text:
                return []
            return [self._convert_one(column, index, element, line_number, offset)
                    for element in text.split(column.array_separator)]
        if not text and column.type_info != Types.STRING():
            return None
        return self._convert_one(column, index, text, line_number, offset)

    def _convert_one(self, column: CsvColumn, index: int, text: str, line_number: int, offset: int) -> Any:
        try:
            return column.type_info.from_python(_PARSERS[column.type_info](text))
        except (ValueError, TypeError, ArithmeticError):
            raise SourceFormatError(self.path, line_number, offset, f"a value of type {column.type_info!r}",
                                    text, field=f"'{column.name}' (column {index + 1})") from None


def _single_byte(char: str | None) -> bool:
    return char is None or (len(char.encode("utf-8")) == 1 and char not in "\r\n")


def _bulk_readable(schema: CsvSchema) -> bool:
    """Whether files of ``schema`` are parsed in bulk: not with an escape character (records would
    not end where quote parity says) or comments (Arrow has none), nor multi-byte punctuation."""
    return (schema.escape_char is None and not schema.allow_comments and _single_byte(schema.column_separator)
            and _single_byte(schema.quote_char) and schema.quote_char != schema.column_separator)


class _NotInBulk(Exception):
    """A column holds a value whose bulk conversion could differ from the line reader's."""


_INTEGER = r"^-?[0-9]+$"
_FLOATING = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?(?i:inf|infinity)$"
_ARROW_INTEGERS = {Types.BYTE(): pa.int8(), Types.SHORT(): pa.int16(), Types.INT(): pa.int32(),
                   Types.LONG(): pa.int64()}
"""Arrow's cast refuses what does not fit the width, as ``from_python`` does."""


class _CsvBlockReader(BlockLineReader, _CsvRecordReader):
    """Parses blocks of CSV records with pyarrow: every field as text, then each column converted
    at once (integers, floating point and booleans by Arrow compute, after checking that each
    text is one Python's ``int``/``float`` reads the same way; other types by the line reader's
    per-field conversion). Records end at newlines outside quotes, as the line reader finds them.

    A block goes line by line (same values and errors as :class:`_CsvRecordReader`) when Arrow
    refuses it or its values could differ: a quote that is not at a field's start or end (where
    Python's ``csv`` is strict and Arrow is not), a ``\r`` not ending a line, a NUL byte, a byte
    order mark, a field count or value that does not fit, ``nan`` in a number column (its sign).
    """

    def record_ends(self, data: np.ndarray) -> np.ndarray:
        newlines = data == 10
        quote = self._schema.quote_char
        if quote is None:
            return cast("np.ndarray[Any, Any]", newlines)
        inside = (np.cumsum(data == ord(quote)) & 1).astype(bool)
        return cast("np.ndarray[Any, Any]", newlines & ~inside)

    def parse_block(self, block: bytes, data: np.ndarray, at_record_end: np.ndarray,
                    records: Segments) -> list[Any] | None:
        if block.startswith(b"\xef\xbb\xbf") or (data == 0).any() or lone_carriage_returns(data, at_record_end):
            return None
        if not self._quotes_at_field_edges(data):
            return None
        names = [f"f{i}" for i in range(len(self._columns))]
        try:
            table = pa_csv.read_csv(
                pa.py_buffer(block),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=False,
                                                block_size=min(len(block) + 1, 1 << 30)),
                parse_options=pa_csv.ParseOptions(
                    delimiter=self._schema.column_separator, quote_char=self._schema.quote_char or False,
                    double_quote=True, escape_char=False, newlines_in_values=True, ignore_empty_lines=True),
                convert_options=pa_csv.ConvertOptions(
                    column_types={name: pa.string() for name in names}, null_values=[],
                    strings_can_be_null=False, quoted_strings_can_be_null=False))
        except (pa.ArrowInvalid, ValueError):
            return None
        if table.num_rows != len(records):
            return None
        try:
            columns = [self._column(column, table.column(i).combine_chunks())
                       for i, column in enumerate(self._columns)]
        except _NotInBulk:
            return None
        return rows_from_columns([c.name for c in self._columns], columns)

    def _quotes_at_field_edges(self, data: np.ndarray) -> bool:
        """Whether every quote opens a field (after a separator, a newline or a doubled quote) or
        closes one (before a separator, a line end or a doubled quote): there Python's strict
        ``csv`` and Arrow split fields alike."""
        quote = self._schema.quote_char
        if quote is None:
            return True
        q, separator = ord(quote), ord(self._schema.column_separator)
        quotes = np.flatnonzero(data == q)
        if not len(quotes):
            return True
        opening = (np.arange(len(quotes)) & 1) == 0
        before = np.where(quotes > 0, data[np.maximum(quotes - 1, 0)], 10)
        after = np.where(quotes + 1 < len(data), data[np.minimum(quotes + 1, len(data) - 1)], 10)
        opens_well = (before == separator) | (before == 10) | (before == q)
        closes_well = (after == separator) | (after == 10) | (after == 13) | (after == q)
        return bool(np.where(opening, opens_well, closes_well).all())

    def _column(self, column: CsvColumn, texts: pa.StringArray) -> list[Any]:
        """The values of one column's ``texts``, as :meth:`_convert` gives them."""
        null_value = self._schema.null_value
        nulls = pc.equal(texts, null_value) if null_value is not None else None
        kind = column.type_info
        if column.array_separator is None and kind == Types.STRING():
            return cast("list[Any]", (texts if nulls is None else pc.if_else(nulls, None, texts)).to_pylist())
        if column.array_separator is None and (kind in _ARROW_INTEGERS or kind in (Types.FLOAT(), Types.DOUBLE())):
            return self._numbers(texts, nulls, kind)
        if column.array_separator is None and kind == Types.BOOLEAN():
            return self._booleans(texts, nulls)
        try:
            return [self._convert(column, 0, text, 0, 0) for text in texts.to_pylist()]
        except SourceFormatError:
            raise _NotInBulk from None

    @staticmethod
    def _missing(texts: pa.StringArray, nulls: pa.BooleanArray | None) -> pa.BooleanArray:
        """Which texts stand for None in a column not of strings: empty ones and the null value."""
        empty = pc.equal(texts, "")
        return empty if nulls is None else pc.or_(empty, nulls)

    def _numbers(self, texts: pa.StringArray, nulls: pa.BooleanArray | None, kind: TypeInformation) -> list[Any]:
        missing = self._missing(texts, nulls)
        pattern = _FLOATING if kind in (Types.FLOAT(), Types.DOUBLE()) else _INTEGER
        if not pc.all(pc.or_(missing, pc.match_substring_regex(texts, pattern))).as_py():
            raise _NotInBulk
        try:
            return column_values(pc.cast(pc.if_else(missing, None, texts), _ARROW_INTEGERS.get(kind, pa.float64())))
        except pa.ArrowInvalid:  # out of the type's range
            raise _NotInBulk from None

    def _booleans(self, texts: pa.StringArray, nulls: pa.BooleanArray | None) -> list[Any]:
        missing = self._missing(texts, nulls)
        lowered = pc.utf8_lower(texts)
        true = pc.equal(lowered, "true")
        if not pc.all(pc.or_(pc.or_(missing, true), pc.equal(lowered, "false"))).as_py():
            raise _NotInBulk
        return cast("list[Any]", pc.if_else(missing, None, true).to_pylist())


class _CsvLineWriter:
    """Formats records as CSV lines by a schema: named records by column name, others by position."""

    def __init__(self, schema: CsvSchema | None) -> None:
        self._schema = schema or CsvSchema()
        self._names = self._schema.get_field_names()
        self._buffer = io.StringIO()
        options: dict[str, Any] = {"delimiter": self._schema.column_separator,
                                   "lineterminator": self._schema.line_separator,
                                   "escapechar": self._schema.escape_char}
        if self._schema.quote_char is None:
            options["quoting"] = csv.QUOTE_NONE
        else:
            options["quotechar"] = self._schema.quote_char
        self._writer = csv.writer(self._buffer, **options)

    def header(self) -> str:
        return self._line(self._names)

    def _line(self, fields: list[str]) -> str:
        self._buffer.seek(0)
        self._buffer.truncate()
        try:
            self._writer.writerow(fields)
        except csv.Error as error:
            raise SinkFormatError(f"CSV: cannot write fields {fields!r}: {error}") from None
        return self._buffer.getvalue()

    def _fields(self, value: Any) -> list[Any]:
        named = isinstance(value, Mapping) or (isinstance(value, Row) and value._fields is not None)
        if self._names and named:
            record = value if isinstance(value, Mapping) else value.as_dict()
            missing = [name for name in self._names if name not in record]
            if missing:
                raise SinkFormatError(f"CSV: record {value!r} lacks column(s) {missing} of the schema {self._names}")
            return [record[name] for name in self._names]
        if isinstance(value, Mapping):
            fields = list(value.values())
        elif isinstance(value, (Row, tuple, list)):
            fields = list(value)
        else:
            fields = [value]
        if self._names and len(fields) != len(self._names):
            raise SinkFormatError(
                f"CSV: record {value!r} has {len(fields)} field(s), the schema has {len(self._names)}: {self._names}")
        return fields

    def _text(self, value: Any, column: CsvColumn | None) -> str:
        if value is None:
            return self._schema.null_value or ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if column is not None and column.array_separator is not None and isinstance(value, (list, tuple)):
            return column.array_separator.join(self._text(element, None) for element in value)
        return str(value)

    def line(self, value: Any) -> str:
        fields = self._fields(value)
        columns: list[CsvColumn | None] = [*self._schema.columns] or [None] * len(fields)
        return self._line([self._text(v, c) for v, c in zip(fields, columns)])


class CsvEncoder(Encoder):
    """Encodes each record as one CSV line, for ``FileSink.for_row_format``; writes no header.

    With a schema, named records (dicts, named rows) are written in the schema's
    column order and positional ones (tuples, lists) are checked against its
    width; without one, fields are written in the record's own order.

    Examples:
        >>> CsvEncoder().encode(('a', 1, None, True))
        b'a,1,,true\\n'
    """

    def __init__(self, schema: CsvSchema | None = None, charset_name: str = "UTF-8") -> None:
        self._lines = _CsvLineWriter(schema)
        self._charset = charset_name

    def encode(self, value: Any) -> bytes:
        return self._lines.line(value).encode(self._charset)


class _CsvBulkWriter(BulkWriter):
    def __init__(self, stream: BinaryIO, schema: CsvSchema) -> None:
        self._stream = stream
        self._lines = _CsvLineWriter(schema)
        if schema.use_header:
            stream.write(self._lines.header().encode("utf-8"))

    def add_element(self, element: Any) -> None:
        self._stream.write(self._lines.line(element).encode("utf-8"))

    def flush(self) -> None:
        self._stream.flush()

    def finish(self) -> None:
        self._stream.flush()


@dataclass(frozen=True)
class _CsvBulkWriterFactory(BulkWriterFactory):
    schema: CsvSchema = field(default_factory=CsvSchema)

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _CsvBulkWriter(stream, self.schema)


class CsvBulkWriters:
    """Creates bulk writers of CSV part files for ``FileSink.for_bulk_format``; each part gets a header if the
    schema uses one.

    Examples:
        >>> schema = CsvSchema.builder().add_string_column('word').set_use_header().build()
        >>> factory = CsvBulkWriters.for_schema(schema)
    """

    @staticmethod
    def for_schema(schema: CsvSchema) -> BulkWriterFactory:
        if not schema.columns:
            raise InvalidProgramError("CsvBulkWriters.for_schema needs a CsvSchema with columns")
        return _CsvBulkWriterFactory(schema)


CsvBulkWriter = CsvBulkWriters
"""The name some PyFlink releases use for :class:`CsvBulkWriters`."""

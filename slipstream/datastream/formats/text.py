"""Plain text: lines in (``StreamFormat.text_line_format()``), a record's text per line out
(``Encoder.simple_string_encoder()``)."""

from __future__ import annotations

import codecs
import copy
from typing import Any

from slipstream.datastream.flink_strings import flink_formatter
from slipstream.datastream.formats.base import (
    Encoder,
    FileRecordReader,
    LineRecordReader,
    StreamFormat,
    check_charset,
)
from slipstream.datastream.typeinfo import TypeInformation
from slipstream.errors import InvalidProgramError


class TextLineInputFormat(StreamFormat):
    """Reads each line of a file as one ``str``, without its terminator; empty lines are kept.

    Examples:
        >>> fmt = StreamFormat.text_line_format()
        >>> type(fmt).__name__
        'TextLineInputFormat'
    """

    def __init__(self, charset_name: str = "UTF-8") -> None:
        self._charset = check_charset(charset_name)

    def create_reader(self, path: str, part: int | None, position: Any | None) -> FileRecordReader:
        return _TextLineReader(path, self._charset, position)


class _TextLineReader(LineRecordReader):
    def parse(self, text: str, line_number: int, offset: int) -> str:
        return text


class SimpleStringEncoder(Encoder):
    """Encodes a record as its text followed by ``\\n``: in a stream of a declared type the text Flink
    writes (the Java value's ``toString()``: a tuple ``(a,1)``, a row ``+I[1, a]``), otherwise ``str(record)``,
    as PyFlink's pickled records (:mod:`slipstream.datastream.flink_strings`).

    Examples:
        >>> Encoder.simple_string_encoder().encode(42)
        b'42\\n'
    """

    def __init__(self, charset_name: str = "UTF-8") -> None:
        try:
            codecs.lookup(charset_name)
        except LookupError:
            raise InvalidProgramError(f"unknown charset {charset_name!r}") from None
        self._charset = charset_name
        self._text = flink_formatter(None)

    def for_type(self, type_info: TypeInformation | None) -> SimpleStringEncoder:
        typed = copy.copy(self)
        typed._text = flink_formatter(type_info)
        return typed

    def encode(self, value: Any) -> bytes:
        return f"{self._text(value)}\n".encode(self._charset)

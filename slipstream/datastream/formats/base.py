"""What file formats implement, for ``FileSource`` (reading) and ``FileSink`` (writing).

Reading: a format splits a file into parts (one part, or a Parquet file's row
groups) and opens a :class:`FileRecordReader` on one part, optionally resuming
at a position that reader reported. Positions are JSON-serialisable so they can
go into checkpoints. :class:`StreamFormat` (record by record from a byte
stream, as text, CSV and JSON lines) and :class:`BulkFormat` (batches at a
time, as Parquet) are the two kinds PyFlink names; here they share one contract.

Writing: an :class:`Encoder` turns one record into bytes for a row-format
sink; a :class:`BulkWriterFactory` creates a :class:`BulkWriter` that writes a
whole part file (Parquet, or CSV with a header).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, BinaryIO

from slipstream.datastream.connectors.base import SourceBatch
from slipstream.datastream.connectors.errors import BadRecord, SourceFormatError
from slipstream.errors import InvalidProgramError
from slipstream.filesystem import filesystem_of

if TYPE_CHECKING:
    from slipstream.datastream.typeinfo import TypeInformation


class FileRecordReader(ABC):
    """Reads the records of one part of one file, in order.

    ``bad_records``: None (the default) makes a record that does not parse fail the read
    with a :class:`SourceFormatError`; a list makes readers that can skip a bad record
    (the line formats) append a :class:`BadRecord` to it instead and go on.
    """

    bad_records: list[BadRecord] | None = None

    @abstractmethod
    def read_batch(self, max_records: int) -> SourceBatch | None:
        """Up to ``max_records`` records, or None when the part has no more."""

    @abstractmethod
    def position(self) -> Any:
        """A JSON-serialisable position just after the last record returned; resumes there."""

    def close(self) -> None:
        """Release the file."""


class ReaderFormat(ABC):
    """How to read files of one format: how to split a file, and how to read one part."""

    def split_file(self, path: str) -> list[int | None]:
        """The parts of ``path`` that may be read by different subtasks; None for the whole file."""
        return [None]

    def split_file_counted(self, path: str) -> list[tuple[int | None, int | None]]:
        """The parts of ``path`` with how many records each holds, when the file says so without
        being read (Parquet's metadata); None when it does not (line formats)."""
        return [(part, None) for part in self.split_file(path)]

    @abstractmethod
    def create_reader(self, path: str, part: int | None, position: Any | None) -> FileRecordReader:
        """Open ``part`` of ``path``, at ``position`` (from :meth:`FileRecordReader.position`) or at the start."""


class StreamFormat(ReaderFormat):
    """A format read record by record from a file's bytes: text lines, CSV, JSON lines."""

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> StreamFormat:
        """Lines of text, without their line terminators (``\\n``, ``\\r\\n``), as ``str``."""
        # Imported here: the text format builds on this module.
        from slipstream.datastream.formats.text import TextLineInputFormat
        return TextLineInputFormat(charset_name)


class BulkFormat(ReaderFormat):
    """A format read a batch at a time from a whole file, such as Parquet."""


SKIP = object()
"""Returned by :meth:`LineRecordReader.parse` for a line that holds no record (a header, a comment)."""


def check_charset(charset_name: str) -> str:
    """Refuse charsets in which a newline is not the byte ``\\n``: lines are found by that byte."""
    try:
        newline = "\n".encode(charset_name)
    except LookupError:
        raise InvalidProgramError(f"unknown charset {charset_name!r}") from None
    if newline != b"\n":
        raise InvalidProgramError(
            f"charset {charset_name!r} is not ASCII-compatible; line formats need one (UTF-8, Latin-1, ...)")
    return charset_name


class LineRecordReader(FileRecordReader):
    """Reads a file line by line; subclasses turn a line into a record in :meth:`parse`.

    The position is the byte offset of the next unread line and the number of
    lines read before it, so a restored reader seeks straight there instead
    of re-reading the file.
    """

    def __init__(self, path: str, charset_name: str, position: Any | None) -> None:
        self.path = path
        self._charset = charset_name
        self._file: BinaryIO = filesystem_of(path).open_input(path)
        self._offset = 0
        self._line = 0
        if position is not None:
            self.seek(position)

    def seek(self, position: Any) -> None:
        """Continue at a position from :meth:`position` (a reader that read a header first seeks past it)."""
        self._offset, self._line = int(position["offset"]), int(position["line"])
        self._file.seek(self._offset)

    def read_line(self) -> tuple[str, int, int] | None:
        """The next line without its terminator, its 1-based number and byte offset; None at end of file."""
        raw = self._file.readline()
        if not raw:
            return None
        offset = self._offset
        self._offset += len(raw)
        self._line += 1
        try:
            text = raw.decode(self._charset)
        except UnicodeDecodeError as error:
            raise SourceFormatError(self.path, self._line, offset, f"text in {self._charset} ({error.reason})",
                                    raw) from None
        if text.endswith("\n"):
            text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
        return text, self._line, offset

    def read_record(self) -> tuple[str, int, int] | None:
        """The text of the next record, its first line's number and offset; one line unless overridden."""
        return self.read_line()

    @abstractmethod
    def parse(self, text: str, line_number: int, offset: int) -> Any:
        """The record in ``text``, or :data:`SKIP`; raises :class:`SourceFormatError` if it does not parse."""

    def read_batch(self, max_records: int) -> SourceBatch | None:
        bad = self.bad_records
        if bad is not None:
            return self._read_batch_routing_errors(max_records, bad)
        values: list[Any] = []
        while len(values) < max_records:
            record = self.read_record()
            if record is None:
                break
            value = self.parse(*record)
            if value is not SKIP:
                values.append(value)
        return SourceBatch(values) if values else None

    def _read_batch_routing_errors(self, max_records: int, bad: list[BadRecord]) -> SourceBatch | None:
        """As :meth:`read_batch`, but a record that does not parse goes to ``bad`` (with its whole
        text) and reading goes on; a batch of only bad records is an empty batch, not the end."""
        values: list[Any] = []
        found_bad = 0
        while len(values) + found_bad < max_records:
            try:
                record = self.read_record()
            except SourceFormatError as error:  # undecodable bytes, an unclosed quote at the end
                bad.append(BadRecord.from_error(error))
                found_bad += 1
                continue
            if record is None:
                break
            try:
                value = self.parse(*record)
            except SourceFormatError as error:
                bad.append(BadRecord.from_error(error, record[0]))
                found_bad += 1
                continue
            if value is not SKIP:
                values.append(value)
        return SourceBatch(values) if values or found_bad else None

    def position(self) -> dict[str, int]:
        return {"offset": self._offset, "line": self._line}

    def close(self) -> None:
        self._file.close()


class Encoder(ABC):
    """Turns one record into the bytes a row-format ``FileSink`` appends to a part file."""

    @abstractmethod
    def encode(self, value: Any) -> bytes:
        """The bytes for ``value``, including any record separator."""

    def for_type(self, type_info: TypeInformation | None) -> Encoder:
        """This encoder for records of ``type_info``: itself, unless what it writes depends on the type."""
        return self

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """Writes ``str(value)`` and a newline, as Flink's ``SimpleStringEncoder``."""
        # Imported here: the text format builds on this module.
        from slipstream.datastream.formats.text import SimpleStringEncoder
        return SimpleStringEncoder(charset_name)


class BulkWriter(ABC):
    """Writes one whole part file; the file is complete only after :meth:`finish`."""

    @abstractmethod
    def add_element(self, element: Any) -> None:
        """Add one record."""

    def add_elements(self, elements: list[Any]) -> None:
        """Add a batch of records (formats that write columns override this to stay columnar)."""
        for element in elements:
            self.add_element(element)

    def flush(self) -> None:
        """Push buffered records to the stream (they may still not form a readable file)."""

    @abstractmethod
    def finish(self) -> None:
        """Write what is buffered and any footer; the stream itself is closed by the sink."""


class BulkWriterFactory(ABC):
    """Creates the :class:`BulkWriter` for each new part file of a bulk-format ``FileSink``."""

    @abstractmethod
    def create(self, stream: BinaryIO) -> BulkWriter:
        """A writer writing to ``stream``."""


"""Errors connectors raise while reading or writing: bad input, missing paths, positions that cannot be resumed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slipstream.errors import CheckpointError, JobExecutionError


class SourceFormatError(JobExecutionError, ValueError):
    """A record in a source's input does not parse.

    The message says which file, which line (1-based) and byte offset, which field,
    what was expected there and what was found, so the user can fix the input.
    ``path`` is None for a record that did not come from a file (a message
    given to a deserialization schema).
    """

    def __init__(self, path: str | None, line_number: int | None, offset: int | None,
                 expected: str, got: object, field: str | None = None, source: str | None = None) -> None:
        self._arguments = (path, line_number, offset, expected, got, field, source)
        self.source = source
        """The source subtask that read it (``operator 'csv' (uid ...), subtask 1/2``), once it is known."""
        self.path = path
        self.line_number = line_number
        self.offset = offset
        self.field = field
        self.expected = expected
        self.got = got
        where = f"file '{path}'" if path is not None else "message"
        if line_number is not None:
            where += f", line {line_number}"
        if offset is not None:
            where += f" (byte offset {offset})"
        if field is not None:
            where += f", field {field}"
        shown = repr(got)
        if len(shown) > 200:
            shown = shown[:197] + "..."
        super().__init__(f"{source + ': ' if source else ''}{where}: expected {expected}, got {shown}")

    def in_source(self, source: str) -> SourceFormatError:
        """This error, naming the source subtask that read the record (the reader does not know it)."""
        path, line_number, offset, expected, got, field, _ = self._arguments
        return type(self)(path, line_number, offset, expected, got, field, source)

    def __reduce__(self) -> tuple[type[SourceFormatError], tuple[object, ...]]:
        """Pickled with its arguments, so a worker process's failure reaches the driver with its fields."""
        return type(self), self._arguments


class SourcePathNotFoundError(JobExecutionError, FileNotFoundError):
    """A path given to a file source does not exist when the source starts reading."""


class SourceRestoreError(CheckpointError):
    """A reader cannot resume from the position it was asked to restore (a checkpoint that cannot
    be used: a restart would not cure it)."""


class SinkFormatError(JobExecutionError, ValueError):
    """A record handed to a sink cannot be written in the sink's format; names the record and what was expected."""


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record of a source's input that did not parse, routed to a side output instead of failing.

    ``raw`` is the record's input as read (its text, or the undecodable bytes), ``error``
    the message the source would have failed with (what was expected, where, what was
    found), ``path``, ``line`` (1-based) and ``offset`` (bytes) where it starts, and
    ``field`` the field that did not fit, if one did.

    Examples:
        >>> BadRecord("x,1", "expected 2 fields", "/data/a.csv", 3, 17).as_dict()["line"]
        3
    """

    raw: str | bytes
    error: str
    path: str | None
    line: int | None
    offset: int | None
    field: str | None = None

    @staticmethod
    def from_error(error: SourceFormatError, raw: str | bytes | None = None) -> BadRecord:
        """The bad record for ``error``; ``raw`` is the whole record's text when the error
        names only part of it (a field)."""
        got = raw if raw is not None else error.got
        if not isinstance(got, (str, bytes)):
            got = repr(got)
        return BadRecord(got, str(error), error.path, error.line_number, error.offset, error.field)

    def as_dict(self) -> dict[Any, Any]:
        """The fields as a dict (for ``JsonLinesEncoder``; bytes are shown as text with escapes)."""
        raw = self.raw.decode("utf-8", "backslashreplace") if isinstance(self.raw, bytes) else self.raw
        return {"raw": raw, "error": self.error, "path": self.path, "line": self.line,
                "offset": self.offset, "field": self.field}

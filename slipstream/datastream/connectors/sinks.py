"""Sinks that live in memory or on the terminal: print, collect, and a per-record callable.

These are at-least-once: after a restore from a checkpoint they may show a record
again. Use ``FileSink`` for output that must be exactly-once.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Callable

from slipstream.datastream.connectors.base import RecordWriteError, Sink, SinkWriter


class PrintSink(Sink):
    """Prints each record on its own line, prefixed as Flink does: ``id:subtask> value``."""

    def __init__(self, sink_identifier: str | None = None, stderr: bool = False) -> None:
        self.sink_identifier = sink_identifier
        self.stderr = stderr

    def default_name(self) -> str:
        return "Print to Std. Err" if self.stderr else "Print to Std. Out"

    def create_writer(self) -> SinkWriter:
        return _PrintWriter(self.sink_identifier, self.stderr)


class _PrintWriter(SinkWriter):
    def __init__(self, identifier: str | None, stderr: bool) -> None:
        self._identifier = identifier
        self._stderr = stderr
        self._prefix = ""

    def open(self, subtask_index: int, parallelism: int) -> None:
        parts = []
        if self._identifier:
            parts.append(self._identifier)
        if parallelism > 1:
            parts.append(str(subtask_index + 1))
        self._prefix = (":".join(parts) + "> ") if parts else ""

    def write(self, values: list, timestamps: list | None) -> None:
        stream = sys.stderr if self._stderr else sys.stdout
        prefix = self._prefix
        stream.write("".join(f"{prefix}{value}\n" for value in values))

    def flush(self) -> None:
        (sys.stderr if self._stderr else sys.stdout).flush()


class CollectSink(Sink):
    """Hands records to the caller of ``execute_and_collect`` through an in-memory queue."""

    def __init__(self) -> None:
        self.buffer: deque[Any] = deque()

    def default_name(self) -> str:
        return "Collect"

    def create_writer(self) -> SinkWriter:
        return _CollectWriter(self.buffer)


class _CollectWriter(SinkWriter):
    def __init__(self, buffer: deque[Any]) -> None:
        self._buffer = buffer

    def write(self, values: list, timestamps: list | None) -> None:
        self._buffer.extend(values)


class FunctionSink(Sink):
    """Calls ``func(value)`` for every record (what ``add_sink`` does with a plain callable)."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        if not callable(func):
            raise TypeError(f"add_sink expects a Sink or a callable, got {func!r}")
        self.func = func

    def default_name(self) -> str:
        return getattr(self.func, "__name__", "Function Sink")

    def create_writer(self) -> SinkWriter:
        return _FunctionWriter(self.func)


class _FunctionWriter(SinkWriter):
    def __init__(self, func: Callable[[Any], Any]) -> None:
        self._func = func

    def write(self, values: list, timestamps: list | None) -> None:
        func = self._func
        for value in values:
            try:
                func(value)
            except Exception as exc:
                raise RecordWriteError(value, exc) from exc

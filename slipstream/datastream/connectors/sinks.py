"""Sinks that live in memory or on the terminal: print, collect, and a per-record callable.

All three act in the driver's process, also when a job runs on worker processes: a worker's
copy relays its records to the driver's (:class:`RelayedSink`, and :class:`CollectSink`'s commits).

Print and callables are at-least-once: after a restore from a checkpoint they may show a
record again. Collect commits at checkpoints, as ``FileSink`` does, and is exactly-once
with them (see :class:`CollectSink`).
"""

from __future__ import annotations

import copy
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

from slipstream.datastream.connectors.base import RecordWriteError, Sink, SinkWriter
from slipstream.datastream.flink_strings import flink_formatter
from slipstream.datastream.typeinfo import TypeInformation
from slipstream.errors import CheckpointError

Commit = tuple[int, int, list[Any]]
"""A sink writer's commit: its subtask, the checkpoint, the records that join the queue."""


class RelayedSink(Sink):
    """A sink whose effect belongs to the driver's process: the terminal it prints on, the callable
    it calls. On worker processes each copy relays what its writers were given to the driver's copy
    (:meth:`relay_to_driver`), which delivers it there, as in one process: ``print()`` shows in
    the driver's ``sys.stdout`` (a notebook's cell, a captured test), ``add_sink(results.append)``
    fills the driver's list."""

    _relayed: list[Any] | None = None  # a worker's copy: what its writers were given, not yet sent

    def relay_to_driver(self) -> None:
        """This copy runs in a worker process: its writers keep what they are given for the driver."""
        self._relayed = []

    def relay(self, entry: Any) -> bool:
        """Keep ``entry`` for the driver if this copy relays; whether it did."""
        if self._relayed is None:
            return False
        self._relayed.append(entry)
        return True

    def take_collected(self) -> tuple[list[Any], list[Commit]]:
        """What this worker's copy was given since it was last asked; nothing is committed (a relayed
        sink is at-least-once, as in one process)."""
        if self._relayed is None:
            return [], []
        relayed, self._relayed = self._relayed, []
        return relayed, []

    def add_collected(self, records: list[Any], commits: list[Commit]) -> None:
        """Deliver in the driver what a worker process's copy relayed (:meth:`take_collected`)."""
        for entry in records:
            self.deliver(entry)

    def deliver(self, entry: Any) -> None:
        """Do in the driver what a worker's writer relayed as ``entry``."""
        raise NotImplementedError


class PrintSink(RelayedSink):
    """Prints each record on its own line, prefixed as Flink does: ``id:subtask> value``; a record of a
    declared ``type_info`` as Flink writes its Java value (``+I[1, a]``), any other with ``str``
    (:mod:`slipstream.datastream.flink_strings`)."""

    def __init__(self, sink_identifier: str | None = None, stderr: bool = False) -> None:
        self.sink_identifier = sink_identifier
        self.stderr = stderr
        self.type_info: TypeInformation | None = None

    def for_input_type(self, type_info: TypeInformation | None) -> PrintSink:
        typed = copy.copy(self)
        typed.type_info = type_info
        return typed

    def default_name(self) -> str:
        return "Print to Std. Err" if self.stderr else "Print to Std. Out"

    def create_writer(self) -> SinkWriter:
        return _PrintWriter(self)

    def deliver(self, entry: str) -> None:
        self.write(entry)

    def write(self, text: str) -> None:
        (sys.stderr if self.stderr else sys.stdout).write(text)


class _PrintWriter(SinkWriter):
    def __init__(self, sink: PrintSink) -> None:
        self._sink = sink
        self._prefix = ""
        self._text = flink_formatter(sink.type_info)

    def open(self, subtask_index: int, parallelism: int) -> None:
        parts = []
        if self._sink.sink_identifier:
            parts.append(self._sink.sink_identifier)
        if parallelism > 1:
            parts.append(str(subtask_index + 1))
        self._prefix = (":".join(parts) + "> ") if parts else ""

    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        prefix, written = self._prefix, self._text
        text = "".join(f"{prefix}{written(value)}\n" for value in values)
        if not self._sink.relay(text):
            self._sink.write(text)

    def flush(self) -> None:
        (sys.stderr if self._sink.stderr else sys.stdout).flush()


class CollectSink(Sink):
    """Hands records to the caller of ``execute_and_collect`` through an in-memory queue.

    With checkpoints it commits like ``FileSink`` (two-phase commit): a record joins the
    queue when the checkpoint after it completes, and a restart from a checkpoint hands
    out only what that checkpoint had not committed, so every record is handed out
    exactly once. Without checkpoints a record joins the queue at once, and a restart runs
    the job from its start, so what was collected before the failure comes again.
    """

    _relayed_commits: list[Commit] | None = None  # a worker's copy: the commits its writers made, not yet sent

    def __init__(self) -> None:
        self.buffer: deque[Any] = deque()
        self._committed: dict[int, int] = {}  # subtask -> the last checkpoint whose records joined the queue

    def default_name(self) -> str:
        return "Collect"

    def is_transactional(self) -> bool:
        return True

    def create_writer(self) -> SinkWriter:
        return _CollectWriter(self)

    def entries(self, values: list[Any], timestamps: list[Any] | None, subtask: int) -> list[Any]:
        """What subtask ``subtask`` hands out for a written batch: the values themselves (a test
        kit's sink keeps their timestamps and subtasks too)."""
        return values

    def commit(self, subtask: int, checkpoint_id: int, records: list[Any]) -> None:
        """Checkpoint ``checkpoint_id`` completed: subtask ``subtask``'s records up to it join the queue.
        Called in the driver's process also when the job runs on workers (a subclass may watch it)."""
        self.buffer.extend(records)
        self._committed[subtask] = checkpoint_id

    def relay_to_driver(self) -> None:
        """This copy runs in a worker process: its writers' commits are kept for the driver's copy,
        which makes them (:meth:`commit`), as in one process."""
        self._relayed_commits = []

    def _commit_written(self, subtask: int, checkpoint_id: int, records: list[Any]) -> None:
        """A writer's commit: made here, or kept for the driver when this copy relays."""
        if self._relayed_commits is None:
            self.commit(subtask, checkpoint_id, records)
            return
        self._relayed_commits.append((subtask, checkpoint_id, records))
        self._committed[subtask] = checkpoint_id

    def take_collected(self) -> tuple[list[Any], list[Commit]]:
        """What this copy of the sink collected without checkpoints since it was last asked, and the
        commits its writers made (a worker process's copy, handing them to the driver's:
        :meth:`add_collected`)."""
        records = list(self.buffer)
        self.buffer.clear()
        commits: list[Commit] = []
        if self._relayed_commits is not None:
            commits, self._relayed_commits = self._relayed_commits, []
        return records, commits

    def add_collected(self, records: list[Any], commits: list[Commit]) -> None:
        """Take what a worker process's copy collected, and make its writers' commits
        (:meth:`take_collected`)."""
        self.buffer.extend(records)
        for subtask, checkpoint_id, committed in commits:
            if self._committed.get(subtask, 0) < checkpoint_id:
                self.commit(subtask, checkpoint_id, committed)

    def check_restore(self, subtask: int, checkpoint_id: int) -> None:
        """Refuse to restore checkpoint ``checkpoint_id`` if ``subtask`` already handed out records
        past it: they would be handed out twice."""
        committed = self._committed.get(subtask, 0)
        if committed > checkpoint_id:
            raise CheckpointError(
                f"execute_and_collect: subtask {subtask + 1} already handed out the records of checkpoint "
                f"{committed}; restoring the older checkpoint {checkpoint_id} would hand them out twice")

    def restore(self, subtask: int, checkpoint_id: int, pending: list[Any]) -> None:
        """A run restores checkpoint ``checkpoint_id`` (checked by :meth:`check_restore`): commit
        what it had pending for ``subtask`` unless an earlier run did already."""
        if self._committed.get(subtask, 0) < checkpoint_id:
            self._commit_written(subtask, checkpoint_id, pending)


class _CollectWriter(SinkWriter):
    def __init__(self, sink: CollectSink) -> None:
        self._sink = sink
        self._subtask = 0
        self._open: list[Any] | None = None  # under two-phase commit: written since the last checkpoint
        self._prepared: list[tuple[int, list[Any]]] = []  # (checkpoint id, its records), not yet committed

    def open(self, subtask_index: int, parallelism: int) -> None:
        self._subtask = subtask_index

    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        entries = self._sink.entries(values, timestamps, self._subtask)
        (self._sink.buffer if self._open is None else self._open).extend(entries)

    def supports_two_phase_commit(self) -> bool:
        return True

    def begin_two_phase_commit(self) -> None:
        self._open = []

    def prepare_commit(self, checkpoint_id: int) -> dict[str, Any]:
        """The records not yet committed, so a restore of this checkpoint can commit them."""
        self._prepared.append((checkpoint_id, self._open or []))
        self._open = []
        return {"subtask": self._subtask, "checkpoint": checkpoint_id,
                "pending": [record for _, records in self._prepared for record in records]}

    def commit(self, checkpoint_id: int) -> None:
        done = [records for prepared_id, records in self._prepared if prepared_id <= checkpoint_id]
        self._prepared = [entry for entry in self._prepared if entry[0] > checkpoint_id]
        self._sink._commit_written(self._subtask, checkpoint_id, [record for records in done for record in records])

    def check_commit_state(self, states: list[Any]) -> None:
        for state in states:
            self._sink.check_restore(int(state["subtask"]), int(state["checkpoint"]))

    def restore_commit_state(self, states: list[Any]) -> None:
        for state in states:
            self._sink.restore(int(state["subtask"]), int(state["checkpoint"]), state["pending"])


class FunctionSink(RelayedSink):
    """Calls ``func(value)`` for every record (what ``add_sink`` does with a plain callable), in
    the driver's process also when the job runs on worker processes (:class:`RelayedSink`)."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        if not callable(func):
            raise TypeError(f"add_sink expects a Sink or a callable, got {func!r}")
        self.func = func

    def default_name(self) -> str:
        return getattr(self.func, "__name__", "Function Sink")

    def create_writer(self) -> SinkWriter:
        return _FunctionWriter(self)

    def deliver(self, entry: tuple[int, int, list[Any]]) -> None:
        """Call ``func`` on the records a worker's subtask relayed (a failure names the subtask)."""
        subtask, parallelism, values = entry
        for value in values:
            try:
                self.func(value)
            except Exception as exc:
                raise RelayedWriteError(value, exc, subtask, parallelism) from exc


class RelayedWriteError(RecordWriteError):
    """A sink's callable failed in the driver on a record a worker process's subtask relayed."""

    def __init__(self, record: Any, cause: BaseException, subtask: int, parallelism: int) -> None:
        super().__init__(record, cause)
        self.subtask = subtask
        self.parallelism = parallelism


class _FunctionWriter(SinkWriter):
    def __init__(self, sink: FunctionSink) -> None:
        self._sink = sink
        self._subtask, self._parallelism = 0, 1

    def open(self, subtask_index: int, parallelism: int) -> None:
        self._subtask, self._parallelism = subtask_index, parallelism

    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        if self._sink.relay((self._subtask, self._parallelism, list(values))):
            return
        func = self._sink.func
        for value in values:
            try:
                func(value)
            except Exception as exc:
                raise RecordWriteError(value, exc) from exc

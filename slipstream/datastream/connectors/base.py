"""The source and sink interfaces every connector implements.

A source creates one reader per parallel subtask; the runtime's source task polls
its reader for batches. A reader that waits on the outside world (a socket, a
watched directory) reads in a thread of its own and calls ``notify_available``
so the cooperative scheduler wakes up; ``poll`` itself never blocks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from slipstream.attributes import Boundedness
from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.connectors.errors import SourceRestoreError

if TYPE_CHECKING:
    from slipstream.datastream.typeinfo import TypeInformation


@dataclass(slots=True)
class SourceBatch:
    """Records read by one poll, with their event timestamps if the source knows them.

    ``side_outputs`` carries records for side outputs of the source's stream (such as
    :class:`~slipstream.datastream.connectors.errors.BadRecord` s routed by
    ``with_bad_record_output``), by ``OutputTag``; they are emitted with the main records,
    before any checkpoint barrier that follows this poll, so they are part of the same
    exactly-once commit. ``watermark``, when set, is emitted after the records: a reader that
    knows its event time (a test stream) says so in band; give such a source no watermark
    strategy, as a strategy's generator replaces upstream watermarks.
    """

    values: list[Any]
    timestamps: list[Any] | None = None
    side_outputs: dict[Any, Any] | None = None
    watermark: int | None = None


class _Signal:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


END_OF_INPUT = _Signal("END_OF_INPUT")
"""Returned by :meth:`SourceReader.poll` once the reader has nothing more, ever."""

NOTHING_AVAILABLE = _Signal("NOTHING_AVAILABLE")
"""Returned by :meth:`SourceReader.poll` when nothing is ready now; the reader will notify."""

SHARE_FINISHED = _Signal("SHARE_FINISHED")
"""In :meth:`Source.redistribute_positions`: that old reader had read its whole share (a
``HybridSource`` passes it for the sources a reader had already moved past)."""

PollResult = SourceBatch | _Signal
"""What :meth:`SourceReader.poll` returns: records, ``NOTHING_AVAILABLE`` or ``END_OF_INPUT``."""


@dataclass(slots=True)
class SourceReaderContext:
    """What a reader learns about where it runs."""

    subtask_index: int
    parallelism: int
    notify_available: Callable[[], None] = field(default=lambda: None)
    current_processing_time: Callable[[], int] = field(default=lambda: 0)
    read_buffer_bytes: int | None = None
    """What a reader of a source that ``buffers_reads`` may hold of what it read and has not
    emitted yet: its share of the job's managed memory; None when the job sets none."""
    report_memory: Callable[[int], None] = field(default=lambda used: None)
    """Tells the job how many bytes the reader holds now (its ``memory_bytes.managed`` metric)."""


class SourceReader(ABC):
    """Reads one subtask's share of a source."""

    def open(self, context: SourceReaderContext) -> None:
        """Start reading (open files, start a reader thread)."""

    @abstractmethod
    def poll(self, max_records: int) -> PollResult:
        """Return up to ``max_records`` records, ``NOTHING_AVAILABLE`` or ``END_OF_INPUT``."""

    def is_backlog(self) -> bool | None:
        """Whether what this reader emits now is backlog; None lets the runtime decide by boundedness."""
        return None

    def records_remaining(self) -> int | None:
        """How many records this reader has still to read, when it knows (progress reports compute
        the backlog's ETA from it); None when it cannot tell. Called from another thread: it only
        reads."""
        return None

    def snapshot_position(self) -> Any:
        """A JSON-serialisable position from which :meth:`restore_position` resumes."""
        return None

    def restore_position(self, position: Any) -> None:
        """Resume from a position returned by :meth:`snapshot_position`."""

    def close(self) -> None:
        """Release what :meth:`open` acquired."""


class Source(ABC):
    """A description of where records come from; creates readers at run time."""

    buffers_reads = False
    """Whether its readers fetch ahead into a buffer of their own; such a reader gets a share
    of managed memory as its bound (:attr:`SourceReaderContext.read_buffer_bytes`)."""

    @abstractmethod
    def get_boundedness(self) -> Boundedness: ...

    @abstractmethod
    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader: ...

    def default_name(self) -> str:
        return type(self).__name__

    def max_parallelism(self) -> int | None:
        """The most subtasks this source can use, or None when unlimited."""
        return None

    def check_position(self, position: Any) -> None:
        """Raise if a reader cannot resume at ``position`` because what it names is gone (a file
        it read), reading only. A restored job calls it for every reader before any task opens,
        so a refused restore changes nothing. By default every position is accepted."""

    def redistribute_positions(self, positions: list[Any], parallelism: int) -> list[Any]:
        """Reader positions for ``parallelism`` subtasks, restoring a checkpoint taken at another one.

        ``positions[i]`` is what old reader ``i`` returned from ``snapshot_position``, None if
        it had not started (its whole share is left) or :data:`SHARE_FINISHED` (none is left).
        The result must hand every record not yet read to exactly one new reader. By default
        a source cannot be rescaled.
        """
        raise SourceRestoreError(
            f"{self.default_name()} cannot resume at another parallelism: the checkpoint has "
            f"{len(positions)} reader(s), the job now {parallelism}; give the source its old "
            "parallelism with set_parallelism()")


class RecordWriteError(Exception):
    """Raised by a writer that failed on one record, so the sink operator can name it."""

    def __init__(self, record: Any, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.record = record
        self.cause = cause


class SinkWriter(ABC):
    """Writes one subtask's share of a sink's input."""

    def open(self, subtask_index: int, parallelism: int) -> None:
        """Prepare to write."""

    @abstractmethod
    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        """Write a batch of records."""

    def write_arrow(self, batch: pa.RecordBatch | pa.Table, timestamps: list[Any] | None) -> None:
        """Write records that arrive as Arrow columns; by default as rows. Columnar writers
        (Parquet, counters) override this so the rows are never built."""
        self.write(rows_from_arrow(batch), timestamps)

    def flush(self) -> None:
        """Make everything written so far visible (end of input, or a checkpoint)."""

    def close(self) -> None:
        """Release resources; called after ``flush`` at end of input, or on failure."""

    # -- exactly-once output by two-phase commit (used when the job takes checkpoints) -----------
    def supports_two_phase_commit(self) -> bool:
        """Whether this writer can hold output back until a checkpoint completes.

        Writers that cannot (print, a callable) are at-least-once: after a restore from a
        checkpoint they may show records again.
        """
        return False

    def begin_two_phase_commit(self) -> None:
        """Called after ``open`` when the job takes checkpoints and this writer supports
        two-phase commit: what it writes from now on waits for :meth:`commit`. Writers whose
        output is never visible before a commit (files in progress) need not override it."""

    def prepare_commit(self, checkpoint_id: int) -> Any:
        """Phase one, at a checkpoint: make what was written so far durable but not yet visible,
        and return this writer's state for the checkpoint (what is pending, counters)."""
        raise NotImplementedError

    def commit(self, checkpoint_id: int) -> None:
        """Phase two: checkpoint ``checkpoint_id`` completed; make what it covers visible."""
        raise NotImplementedError

    def check_commit_state(self, states: list[Any]) -> None:
        """Step one of a restore, before ``open``: raise if restoring ``states`` would lose output
        or write it twice (output committed after the checkpoint), changing nothing. Every
        writer of the job checks before any of them applies :meth:`restore_commit_state`, so a
        refused restore leaves the newer checkpoints' pending output in place. By default every
        state is accepted (a writer that can refuse overrides this)."""

    def restore_commit_state(self, states: list[Any]) -> None:
        """Step two of a restore, after ``open`` (once every writer passed
        :meth:`check_commit_state`): commit what the checkpoint's ``states`` had pending and
        discard what was written after it."""
        raise NotImplementedError


class Sink(ABC):
    """A description of where records go; creates writers at run time."""

    def is_transactional(self) -> bool:
        """Whether its writers commit output only when a checkpoint completes (two-phase
        commit), so that what it writes becomes visible at checkpoints (FLIP-327's
        ``is_output_on_checkpoint``). False for print and callables."""
        return False

    @abstractmethod
    def create_writer(self) -> SinkWriter: ...

    def for_input_type(self, type_info: TypeInformation | None) -> Sink:
        """This sink as it writes a stream of ``type_info`` (``sink_to`` asks): itself, unless what it
        writes depends on the type, as Flink's text of a typed record does."""
        return self

    def default_name(self) -> str:
        return type(self).__name__

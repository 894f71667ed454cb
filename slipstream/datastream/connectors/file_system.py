"""Files: ``FileSource`` (text, CSV, JSON lines, Parquet; once or watching for new files) and ``FileSink``.

Reading. The paths (files or directories, read recursively; names starting
with ``.`` or ``_`` are hidden and skipped, as in Flink) are enumerated into
splits: a whole file, or a Parquet row group. A split belongs to the subtask
``crc32(split) % parallelism``, a rule every subtask applies on its own, so
each split is read exactly once however and whenever it is discovered. A
reader's position names the splits it finished and where it is in the current
one. With ``monitor_continuously`` the source is unbounded: the files present
at start are read first and reported as backlog (until they are read, without
waiting for a new file), and a thread lists the paths again at each interval and
wakes the reader for new files. Files must appear whole (written elsewhere, or
under a hidden name, then moved in); a file that changes after it was read is
not read again.

Positions and moved input. A split is named by the source path it was found
under (its index among the paths the source was built with) and its path
relative to that one, never by its absolute path; which subtask reads it is
decided by that name too. So a job whose input directory moved restores its
checkpoint when it is built with the new location, and resumes exactly where
it was. A restore fails, naming the file, when a file its position says was
read (wholly or in part) is not under the source's paths: reading the input
again, or skipping what is left of a file, would duplicate or lose records
without a word. Absolute paths could not tell a moved input from a new one,
and would silently re-read the whole input of a job pointed at the new place.
A file that was read must therefore stay (or be moved with its directory) for
as long as checkpoints that name it may be restored.

Writing. Each sink subtask writes part files named
``<prefix>-<subtask>-<counter><suffix>`` into the base path. A part is written
under a hidden in-progress name and renamed to its final name when the sink
flushes (end of input, later checkpoints) or closes, so readers never see a
half-written part. Part files roll (a new counter) by the rolling policy and at
every flush.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterator
from typing import Any, BinaryIO

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    NOTHING_AVAILABLE,
    SHARE_FINISHED,
    PollResult,
    RecordWriteError,
    Sink,
    SinkWriter,
    Source,
    SourceReader,
    SourceReaderContext,
)
from slipstream.datastream.connectors.buckets import BucketAssigner
from slipstream.datastream.connectors.errors import (
    SinkFormatError,
    SourcePathNotFoundError,
    SourceRestoreError,
)
from slipstream.datastream.formats.base import (
    BulkFormat,
    BulkWriter,
    BulkWriterFactory,
    Encoder,
    FileRecordReader,
    ReaderFormat,
    StreamFormat,
)
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.python_dependencies import warn_not_applied
from slipstream.datastream.time import Duration, to_millis
from slipstream.datastream.typeinfo import TypeInformation
from slipstream.errors import InvalidProgramError
from slipstream.filesystem import filesystem_of, normalize

__all__ = [
    "BucketAssigner",
    "BulkFormat",
    "BulkWriterFactory",
    "DefaultRollingPolicy",
    "Encoder",
    "FileCompactStrategy",
    "FileCompactor",
    "FileEnumeratorProvider",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "FileSplitAssignerProvider",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
    "StreamingFileSink",
]

Split = tuple[int, str, int | None]
"""A part of a file to read, as positions name it: the index of the source path the file lies
under, the file's path relative to that one (``.`` when the source path is the file), and the
part (a Parquet row group) or None for the whole file."""


def _is_hidden(name: str) -> bool:
    return name.startswith(".") or name.startswith("_")


def list_files(paths: list[str]) -> list[tuple[str, int, str]]:
    """The visible files under ``paths``, sorted by path: each as its normal path (absolute, or a
    full URL), the index of the source path it lies under and its path relative to that one.
    Directories are walked recursively."""
    found: list[tuple[str, int, str]] = []
    for index, root in enumerate(paths):
        fs = filesystem_of(root)
        if not fs.exists(root):
            raise SourcePathNotFoundError(f"FileSource: path '{root}' does not exist")
        found.extend((path, index, relative) for path, relative in fs.find_files(root, _is_hidden))
    return sorted(found)


def split_path(paths: list[str], split: Split) -> str:
    """Where the file of ``split`` is under the source paths ``paths``."""
    index, relative, _ = split
    return filesystem_of(paths[index]).join(paths[index], relative)


def split_owner(split: Split, parallelism: int) -> int:
    """The subtask that reads ``split``: the same answer in every subtask and every run, wherever
    the input lies (the split's name is relative to its source path)."""
    index, relative, part = split
    return zlib.crc32(f"{index}\0{relative}\0{part}".encode("utf-8", "surrogatepass")) % parallelism


def read_position(position: Any) -> tuple[set[Split], dict[Split, Any]]:
    """The splits a reader position says were read, and those begun with where each stopped."""
    try:
        finished = {(int(index), relative, part) for index, relative, part in position["finished"]}
        begun = list(position.get("partial", ()))
        if position["current"] is not None:
            begun.append(position["current"])
        partial = {(int(index), relative, part): at for (index, relative, part), at in begun}
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SourceRestoreError(f"FileSource cannot resume at position {position!r}: {error!r}") from None
    return finished, partial


def _position_entries(partial: dict[Split, Any]) -> list[list[Any]]:
    """``partial`` as JSON-friendly ``[[index, relative, part], at]`` entries, in a stable order."""
    return [[list(split), at] for split, at in sorted(partial.items(), key=repr)]


class FileSource(Source):
    """Reads files with a record format (text, CSV, JSON lines) or a bulk format (Parquet).

    Examples:
        >>> source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), "/tmp").build()
        >>> source.get_boundedness()
        <Boundedness.BOUNDED: 'BOUNDED'>
    """

    def __init__(self, reader_format: ReaderFormat, paths: list[str], discovery_interval_ms: int | None,
                 bad_record_output: OutputTag | None = None, splittable: bool = True) -> None:
        """Use :meth:`for_record_stream_format` or :meth:`for_bulk_file_format`, then ``build()``."""
        self._format = reader_format
        self._paths = [normalize(p, "FileSource") for p in paths]
        self._discovery_interval_ms = discovery_interval_ms
        self._bad_record_output = bad_record_output
        self._splittable = splittable

    @property
    def paths(self) -> list[str]:
        """The paths read (normalised): what another runner reads too."""
        return list(self._paths)

    @property
    def reader_format(self) -> ReaderFormat:
        return self._format

    def get_bad_record_output(self) -> OutputTag | None:
        """The side output that records which do not parse go to, or None when they fail the job."""
        return self._bad_record_output

    @staticmethod
    def for_record_stream_format(stream_format: StreamFormat, *paths: str) -> FileSourceBuilder:
        """Start building a source reading ``paths`` record by record with ``stream_format``."""
        if not isinstance(stream_format, StreamFormat):
            raise InvalidProgramError(
                f"FileSource.for_record_stream_format needs a StreamFormat, got {stream_format!r}")
        return FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: BulkFormat, *paths: str) -> FileSourceBuilder:
        """Start building a source reading ``paths`` in batches with ``bulk_format`` (such as Parquet)."""
        if not isinstance(bulk_format, BulkFormat):
            raise InvalidProgramError(f"FileSource.for_bulk_file_format needs a BulkFormat, got {bulk_format!r}")
        return FileSourceBuilder(bulk_format, paths)

    def get_boundedness(self) -> Boundedness:
        if self._discovery_interval_ms is None:
            return Boundedness.BOUNDED
        return Boundedness.CONTINUOUS_UNBOUNDED

    def redistribute_positions(self, positions: list[Any], parallelism: int) -> list[Any]:
        """Every new reader learns every split finished anywhere, and resumes the splits begun
        but not finished that it now owns (``crc32(split) % parallelism``) where they stopped;
        splits nobody began are found again by listing the paths."""
        old_parallelism = len(positions)
        finished: set[Split] = set()
        partial: dict[Split, Any] = {}
        for old, position in enumerate(positions):
            if position is None:
                continue
            if position is SHARE_FINISHED:  # that reader had read every split it owned
                for path, index, relative in list_files(self._paths):
                    splits = [(index, relative, part) for part, _ in file_parts(self._format, path, self._splittable)]
                    finished.update(split for split in splits if split_owner(split, old_parallelism) == old)
                continue
            read, begun = read_position(position)
            finished.update(read)
            partial.update(begun)
        finished_list = sorted([list(split) for split in finished], key=repr)
        return [{"finished": finished_list, "current": None,
                 "partial": _position_entries({split: at for split, at in partial.items()
                                               if split_owner(split, parallelism) == subtask})}
                for subtask in range(parallelism)]

    def check_position(self, position: Any) -> None:
        """Fail, naming the file, if a file ``position`` says was read wholly or in part is not
        under the source's paths (see the module docstring: positions are relative to them)."""
        finished, partial = read_position(position)
        for split in sorted(finished | set(partial), key=repr):
            index, relative, _ = split
            said = f"the checkpoint says file '{relative}' under the source's path number {index + 1}"
            how = "read" if split in finished else "partly read"
            if index >= len(self._paths):
                raise SourceRestoreError(f"{self.default_name()} cannot resume: {said} was {how}, but the "
                                         f"source has {len(self._paths)} path(s)")
            path = split_path(self._paths, split)
            if not filesystem_of(path).is_file(path):
                raise SourceRestoreError(
                    f"{self.default_name()} cannot resume: {said} ('{self._paths[index]}') was {how}, but "
                    f"'{path}' does not exist. If the input moved, build the source with the path that now "
                    "holds it (positions are relative to the source's paths); else put the file back, or "
                    "start without the checkpoint")

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        return _FileSourceReader(self._format, self._paths, subtask_index, parallelism,
                                 self._discovery_interval_ms, self._bad_record_output, self._splittable)

    def default_name(self) -> str:
        return f"FileSource({', '.join(self._paths)})"


class FileEnumeratorProvider:
    """Whether a ``FileSource`` splits its files (as Flink's enumerators): by default as the format
    splits them (Parquet by row group), or not at all, a file to a subtask."""

    def __init__(self, splittable: bool) -> None:
        self.splittable = splittable

    @staticmethod
    def default_splittable_file_enumerator() -> FileEnumeratorProvider:
        return FileEnumeratorProvider(True)

    @staticmethod
    def default_non_splittable_file_enumerator() -> FileEnumeratorProvider:
        return FileEnumeratorProvider(False)


class FileSplitAssignerProvider:
    """Which subtask reads a split (Flink's locality-aware assigner; kept: every subtask is local)."""

    @staticmethod
    def locality_aware_split_assigner() -> FileSplitAssignerProvider:
        return FileSplitAssignerProvider()


def file_parts(reader_format: ReaderFormat, path: str, splittable: bool) -> list[tuple[int | None, int | None]]:
    """The parts of ``path`` a source reads, each with its record count when known: the format's,
    or the whole file (``None``) when the source does not split files."""
    parts = reader_format.split_file_counted(path)
    if splittable or len(parts) <= 1:
        return parts
    counts = [records for _, records in parts]
    return [(None, None if None in counts else sum(c for c in counts if c is not None))]


class FileSourceBuilder:
    """Configures a :class:`FileSource`: bounded (the default) or monitoring its paths for new files."""

    def __init__(self, reader_format: ReaderFormat, paths: tuple[str, ...]) -> None:
        if not paths:
            raise InvalidProgramError("FileSource needs at least one path")
        self._format = reader_format
        self._paths = list(paths)
        self._discovery_interval_ms: int | None = None
        self._bad_record_output: OutputTag | None = None
        self._splittable = True

    def set_file_enumerator(self, file_enumerator: FileEnumeratorProvider) -> FileSourceBuilder:
        """Whether a file is read in parts by several subtasks (the default: as its format splits it,
        Parquet by row group) or whole by one (``default_non_splittable_file_enumerator()``)."""
        if not isinstance(file_enumerator, FileEnumeratorProvider):
            raise InvalidProgramError(f"set_file_enumerator needs a FileEnumeratorProvider, got {file_enumerator!r}")
        self._splittable = file_enumerator.splittable
        return self

    def set_split_assigner(self, split_assigner: FileSplitAssignerProvider) -> FileSourceBuilder:
        """Kept: splits go to subtasks by a hash of their name; every subtask runs on this machine, so
        there is no locality to prefer."""
        if not isinstance(split_assigner, FileSplitAssignerProvider):
            raise InvalidProgramError(f"set_split_assigner needs a FileSplitAssignerProvider, got {split_assigner!r}")
        return self

    def monitor_continuously(self, discovery_interval: Duration) -> FileSourceBuilder:
        """Make the source unbounded: keep listing the paths every ``discovery_interval`` and read new files."""
        millis = to_millis(discovery_interval, "discovery_interval")
        if millis <= 0:
            raise InvalidProgramError(f"monitor_continuously needs a positive interval, got {discovery_interval!r}")
        self._discovery_interval_ms = millis
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        """Make the source bounded again: read the files present at start, then end."""
        self._discovery_interval_ms = None
        return self

    def with_bad_record_output(self, output_tag: OutputTag) -> FileSourceBuilder:
        """Route records that do not parse to the side output ``output_tag`` instead of failing the job.

        Each such record becomes a :class:`~slipstream.datastream.connectors.errors.BadRecord`
        (its raw text, the error, the file, line and byte offset); read them with
        ``env.from_source(...).get_side_output(output_tag)``. They travel with the good
        records and before the same checkpoint barriers, so a ``FileSink`` on that side
        output is exactly-once too. Only for record formats (text, CSV, JSON lines).

        Examples:
            >>> from slipstream.datastream.output_tag import OutputTag
            >>> bad = OutputTag("bad-lines")
            >>> source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), "/tmp")
            ...           .with_bad_record_output(bad).build())
            >>> source.get_bad_record_output()
            OutputTag('bad-lines')
        """
        if not isinstance(output_tag, OutputTag):
            raise InvalidProgramError(f"with_bad_record_output needs an OutputTag, got {output_tag!r}")
        if not isinstance(self._format, StreamFormat):
            raise InvalidProgramError(
                f"with_bad_record_output applies to record formats (text, CSV, JSON lines); "
                f"{type(self._format).__name__} reads whole batches and has no bad records to route")
        self._bad_record_output = output_tag
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._discovery_interval_ms, self._bad_record_output,
                          self._splittable)


class _FileSourceReader(SourceReader):
    """Reads this subtask's splits one after another; discovers new ones in a thread when monitoring."""

    def __init__(self, reader_format: ReaderFormat, paths: list[str], subtask_index: int, parallelism: int,
                 discovery_interval_ms: int | None, bad_record_output: OutputTag | None = None,
                 splittable: bool = True) -> None:
        self._format = reader_format
        self._splittable = splittable
        self._bad_record_output = bad_record_output
        self._paths = paths
        self._subtask_index = subtask_index
        self._parallelism = parallelism
        self._interval_ms = discovery_interval_ms
        self._pending: deque[Split] = deque()
        self._lock = threading.Lock()
        self._seen_files: set[str] = set()
        self._finished: set[Split] = set()
        self._backlog: set[Split] = set()
        self._current: Split | None = None
        self._current_reader: FileRecordReader | None = None
        # Splits begun before a restore, with where to resume each: the reader's own current
        # split, or after a restore at another parallelism every such split it now owns.
        self._restored_partial: dict[Split, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._discovery_failure: BaseException | None = None
        self._split_records: dict[Split, int | None] = {}  # records in each split, when its file says

    def open(self, context: SourceReaderContext) -> None:
        initial = self._discover()
        self._backlog = set(initial)
        self._pending.extend(initial)
        for split in sorted(self._restored_partial, key=repr, reverse=True):
            if split in self._pending:
                self._pending.remove(split)
            self._pending.appendleft(split)
        if self._interval_ms is not None:
            self._thread = threading.Thread(target=self._monitor, args=(context.notify_available, self._interval_ms),
                                            name="FileSource discovery", daemon=True)
            self._thread.start()

    def _discover(self) -> list[Split]:
        """This subtask's unfinished splits of files not seen before, in file order."""
        splits = []
        for path, index, relative in list_files(self._paths):
            if path in self._seen_files:
                continue
            self._seen_files.add(path)
            for part, records in file_parts(self._format, path, self._splittable):
                split = (index, relative, part)
                if split_owner(split, self._parallelism) == self._subtask_index and split not in self._finished:
                    splits.append(split)
                    self._split_records[split] = records
        return splits

    def _monitor(self, notify_available: Any, interval_ms: int) -> None:
        while not self._stop.wait(interval_ms / 1000):
            try:
                found = self._discover()
            except FileNotFoundError:
                continue  # a path vanished between listing and reading; look again next time
            except Exception as error:  # a new file that cannot be split (a corrupt Parquet file)
                # Handed to poll, which raises it in the task's thread: the job fails instead of
                # silently reading no more files.
                self._discovery_failure = error
                notify_available()
                return
            if found:
                with self._lock:
                    self._pending.extend(found)
                notify_available()

    def poll(self, max_records: int) -> PollResult:
        if self._discovery_failure is not None:
            raise self._discovery_failure
        while True:
            reader = self._current_reader or self._open_next_split()
            if reader is None:
                return END_OF_INPUT if self._interval_ms is None else NOTHING_AVAILABLE
            batch = reader.read_batch(max_records)
            if batch is not None:
                if reader.bad_records:
                    batch.side_outputs = {self._bad_record_output: reader.bad_records}
                    reader.bad_records = []
                return batch
            self._finish_split(reader)

    def _open_next_split(self) -> FileRecordReader | None:
        """The reader of the next pending split, now current; None when none is pending."""
        with self._lock:
            if not self._pending:
                return None
            split = self._pending.popleft()
        position = self._restored_partial.pop(split, None)
        self._current = split
        reader = self._current_reader = self._format.create_reader(split_path(self._paths, split), split[2], position)
        if self._bad_record_output is not None:
            reader.bad_records = []
        return reader

    def _finish_split(self, reader: FileRecordReader) -> None:
        """Close the current split's ``reader``: the split is finished."""
        reader.close()
        split = self._current
        assert split is not None  # set with its reader
        self._finished.add(split)
        self._backlog.discard(split)
        self._current = None
        self._current_reader = None

    def records_remaining(self) -> int | None:
        """The records left in the splits not yet finished, when every one's file says how many it
        holds (Parquet); None otherwise. Read from the monitor's thread: copies, then sums."""
        with self._lock:
            pending = list(self._pending)
        current, reader = self._current, self._current_reader
        splits = pending if current is None else [*pending, current]
        counts = [self._split_records.get(split) for split in splits]
        known = [count for count in counts if count is not None]
        if len(known) < len(counts):
            return None
        done = reader.position() if reader is not None and current is not None else 0
        return sum(known) - (done if isinstance(done, int) else 0)

    def is_backlog(self) -> bool | None:
        """While monitoring: True until the files present at start are read. Bounded: left to the runtime."""
        if self._interval_ms is None:
            return None
        return bool(self._backlog)

    def snapshot_position(self) -> dict[str, Any]:
        current = None
        if self._current_reader is not None and self._current is not None:  # both set, or neither
            current = [list(self._current), self._current_reader.position()]
        position = {"finished": sorted([list(split) for split in self._finished], key=repr), "current": current}
        if self._restored_partial:
            position["partial"] = _position_entries(self._restored_partial)
        return position

    def restore_position(self, position: Any) -> None:
        if self._thread is not None or self._current_reader is not None:
            raise SourceRestoreError("FileSource: restore_position must come before open")
        self._finished, self._restored_partial = read_position(position)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._current_reader is not None:
            self._current_reader.close()
            self._current_reader = None


class OutputFileConfig:
    """The prefix and suffix of part file names: ``<prefix>-<subtask>-<counter><suffix>``."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = "") -> None:
        if not part_prefix or os.sep in part_prefix or os.sep in part_suffix:
            raise InvalidProgramError(
                f"OutputFileConfig: prefix must be non-empty and neither may contain '{os.sep}', "
                f"got {part_prefix!r}, {part_suffix!r}")
        self._part_prefix = part_prefix
        self._part_suffix = part_suffix

    @staticmethod
    def builder() -> OutputFileConfigBuilder:
        return OutputFileConfigBuilder()

    def get_part_prefix(self) -> str:
        return self._part_prefix

    def get_part_suffix(self) -> str:
        return self._part_suffix


class OutputFileConfigBuilder:
    """Builds an :class:`OutputFileConfig` (prefix ``part`` and no suffix unless set)."""

    def __init__(self) -> None:
        self._part_prefix = "part"
        self._part_suffix = ""

    def with_part_prefix(self, prefix: str) -> OutputFileConfigBuilder:
        self._part_prefix = prefix
        return self

    def with_part_suffix(self, suffix: str) -> OutputFileConfigBuilder:
        self._part_suffix = suffix
        return self

    def build(self) -> OutputFileConfig:
        return OutputFileConfig(self._part_prefix, self._part_suffix)


OutputFileConfig.OutputFileConfigBuilder = OutputFileConfigBuilder  # type: ignore[attr-defined]


class RollingPolicy:
    """When a sink closes its current part file and starts the next one (besides at every flush)."""

    def __init__(self, part_size: int | None, rollover_interval_ms: int | None,
                 inactivity_interval_ms: int | None) -> None:
        self.part_size = part_size
        self.rollover_interval_ms = rollover_interval_ms
        self.inactivity_interval_ms = inactivity_interval_ms

    @staticmethod
    def default_rolling_policy(part_size: int = 1024 * 1024 * 128, rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> DefaultRollingPolicy:
        """Roll at ``part_size`` bytes, or when the part is ``rollover_interval`` ms old, or was last
        written ``inactivity_interval`` ms ago (checked when records arrive)."""
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> OnCheckpointRollingPolicy:
        """Roll only at flushes (end of input, checkpoints); the default for bulk formats."""
        return OnCheckpointRollingPolicy(None, None, None)

    def should_roll(self, size: int, opened_at_ms: int, last_write_ms: int, now_ms: int) -> bool:
        """Whether the part described by these figures should be closed now."""
        return ((self.part_size is not None and size >= self.part_size)
                or (self.rollover_interval_ms is not None and now_ms - opened_at_ms >= self.rollover_interval_ms)
                or (self.inactivity_interval_ms is not None
                    and now_ms - last_write_ms >= self.inactivity_interval_ms))


class DefaultRollingPolicy(RollingPolicy):
    """Rolls by size, age and inactivity; the default for row formats."""


class OnCheckpointRollingPolicy(RollingPolicy):
    """Rolls only at flushes."""


class FileSink(Sink):
    """Writes records into part files under a base directory, by an encoder (rows) or a bulk writer.

    With checkpoints, part files are committed when a checkpoint completes (two-phase
    commit), so the output is exactly-once and becomes visible at checkpoints.

    Examples:
        >>> sink = FileSink.for_row_format("/tmp/out", Encoder.simple_string_encoder()).build()
    """

    def __init__(self, base_path: str, encoder: Encoder | None, writer_factory: BulkWriterFactory | None,
                 output_file_config: OutputFileConfig, rolling_policy: RollingPolicy,
                 bucket_assigner: BucketAssigner | None = None) -> None:
        """Use :meth:`for_row_format` or :meth:`for_bulk_format`, then ``build()``."""
        self._base_path = normalize(base_path, "FileSink")
        self._encoder = encoder
        self._writer_factory = writer_factory
        self._output_file_config = output_file_config
        self._rolling_policy = rolling_policy
        self._bucket_assigner = bucket_assigner or BucketAssigner.base_path_bucket_assigner()

    def is_transactional(self) -> bool:
        return True

    @property
    def base_path(self) -> str:
        return self._base_path

    @property
    def encoder(self) -> Encoder | None:
        """The row format's encoder, None with a bulk format."""
        return self._encoder

    @property
    def writer_factory(self) -> BulkWriterFactory | None:
        """The bulk format's writer factory, None with a row format."""
        return self._writer_factory

    @staticmethod
    def for_row_format(base_path: str, encoder: Encoder) -> RowFormatBuilder:
        """Start building a sink that appends ``encoder.encode(record)`` to part files in ``base_path``."""
        if not isinstance(encoder, Encoder):
            raise InvalidProgramError(f"FileSink.for_row_format needs an Encoder, got {encoder!r}")
        return RowFormatBuilder(base_path, encoder, None, RollingPolicy.default_rolling_policy())

    @staticmethod
    def for_bulk_format(base_path: str, writer_factory: BulkWriterFactory) -> BulkFormatBuilder:
        """Start building a sink whose part files are each written whole by one bulk writer (Parquet, CSV)."""
        if not isinstance(writer_factory, BulkWriterFactory):
            raise InvalidProgramError(f"FileSink.for_bulk_format needs a BulkWriterFactory, got {writer_factory!r}")
        return BulkFormatBuilder(base_path, None, writer_factory, RollingPolicy.on_checkpoint_rolling_policy())

    def for_input_type(self, type_info: TypeInformation | None) -> FileSink:
        """With a row format, the sink whose encoder writes records of ``type_info`` (the simple string
        encoder writes a typed record's Java text, as Flink's does)."""
        if self._encoder is None:
            return self
        typed = copy.copy(self)
        typed._encoder = self._encoder.for_type(type_info)
        return typed

    def create_writer(self) -> SinkWriter:
        return _PartFileWriter(self._base_path, self._encoder, self._writer_factory,
                               self._output_file_config, self._rolling_policy, self._bucket_assigner)

    def default_name(self) -> str:
        return f"FileSink({self._base_path})"


class RowFormatBuilder:
    """Configures a row-format :class:`FileSink`."""

    def __init__(self, base_path: str, encoder: Encoder | None, writer_factory: BulkWriterFactory | None,
                 rolling_policy: RollingPolicy) -> None:
        self._base_path = base_path
        self._encoder = encoder
        self._writer_factory = writer_factory
        self._rolling_policy = rolling_policy
        self._output_file_config = OutputFileConfig()
        self._bucket_assigner = BucketAssigner.base_path_bucket_assigner()
        self._bucket_check_interval_ms = 60_000
        self._compaction: tuple[FileCompactStrategy, FileCompactor] | None = None  # enable_compact: kept

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> RowFormatBuilder:
        self._output_file_config = output_file_config
        return self

    def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> RowFormatBuilder:
        """The directory under the base path each part file goes to (the base path by default)."""
        if not isinstance(bucket_assigner, BucketAssigner):
            raise InvalidProgramError(f"with_bucket_assigner needs a BucketAssigner, got {bucket_assigner!r}")
        self._bucket_assigner = bucket_assigner
        return self

    def enable_compact(self, strategy: FileCompactStrategy, compactor: FileCompactor) -> RowFormatBuilder:
        """Kept and warned about: part files are not merged after they are committed."""
        if not isinstance(strategy, FileCompactStrategy) or not isinstance(compactor, FileCompactor):
            raise InvalidProgramError("enable_compact needs a FileCompactStrategy and a FileCompactor, "
                                      f"got {strategy!r} and {compactor!r}")
        warn_not_applied("FileSink compaction", "committed part files are not merged")
        self._compaction = (strategy, compactor)
        return self

    def disable_compact(self) -> RowFormatBuilder:
        self._compaction = None
        return self

    def with_bucket_check_interval(self, interval: int) -> RowFormatBuilder:
        """Kept: Flink checks its rolling policy's time limits every ``interval`` ms; slipstream
        checks them as records arrive and at every flush."""
        if not isinstance(interval, int) or isinstance(interval, bool) or interval <= 0:
            raise InvalidProgramError(f"the bucket check interval must be positive milliseconds, got {interval!r}")
        self._bucket_check_interval_ms = interval
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> RowFormatBuilder:
        if not isinstance(rolling_policy, RollingPolicy):
            raise InvalidProgramError(f"with_rolling_policy needs a RollingPolicy, got {rolling_policy!r}")
        self._rolling_policy = rolling_policy
        return self

    def build(self) -> FileSink:
        return FileSink(self._base_path, self._encoder, self._writer_factory, self._output_file_config,
                        self._rolling_policy, self._bucket_assigner)


class BulkFormatBuilder(RowFormatBuilder):
    """Configures a bulk-format :class:`FileSink`; parts roll at flushes unless a policy says otherwise."""


class FileCompactStrategy:
    """When Flink's FileSink would merge small committed files (``enable_compact``; kept here)."""

    def __init__(self, size_threshold: int = -1, checkpoints_before_compaction: int = 1,
                 num_compact_threads: int = 1) -> None:
        self.size_threshold = size_threshold
        self.checkpoints_before_compaction = checkpoints_before_compaction
        self.num_compact_threads = num_compact_threads

    @staticmethod
    def builder() -> FileCompactStrategy.Builder:
        return FileCompactStrategy.Builder()

    class Builder:
        def __init__(self) -> None:
            self._settings: dict[str, int] = {}

        def set_size_threshold(self, size_threshold: int) -> FileCompactStrategy.Builder:
            self._settings["size_threshold"] = size_threshold
            return self

        def enable_compaction_on_checkpoint(self, num_checkpoints_before_compaction: int
                                            ) -> FileCompactStrategy.Builder:
            self._settings["checkpoints_before_compaction"] = num_checkpoints_before_compaction
            return self

        def set_num_compact_threads(self, num_compact_threads: int) -> FileCompactStrategy.Builder:
            self._settings["num_compact_threads"] = num_compact_threads
            return self

        def build(self) -> FileCompactStrategy:
            return FileCompactStrategy(**self._settings)


class FileCompactor:
    """How Flink's FileSink would merge files: concatenated (with a delimiter) or copied as they are."""

    def __init__(self, kind: str, file_delimiter: bytes | None = None) -> None:
        self.kind = kind
        self.file_delimiter = file_delimiter

    @staticmethod
    def concat_file_compactor(file_delimiter: bytes | None = None) -> FileCompactor:
        return FileCompactor("concat", file_delimiter)

    @staticmethod
    def identical_file_compactor() -> FileCompactor:
        return FileCompactor("identical")


class StreamingFileSink(FileSink):
    """Flink's older name for :class:`FileSink` (added with ``add_sink``): the same builders and files."""


FileSink.RowFormatBuilder = RowFormatBuilder  # type: ignore[attr-defined]
FileSink.BulkFormatBuilder = BulkFormatBuilder  # type: ignore[attr-defined]


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _raise_disk_full(error: OSError, path: str) -> None:
    """Turn ENOSPC into the typed error naming the part file; other errors pass."""
    if error.errno == errno.ENOSPC:
        from slipstream.errors import DiskFullError
        raise DiskFullError(path, "sink part file", error) from error


def _part_owner(name: str, prefix: str, suffix: str) -> tuple[int, int, bool] | None:
    """``(subtask, counter, in_progress)`` of a part file name of this sink, or None."""
    hidden = name.startswith(".") and ".inprogress." in name
    if hidden:
        name = name[1:name.rindex(".inprogress.")]
    if not name.startswith(prefix + "-") or not name.endswith(suffix):
        return None
    middle = name[len(prefix) + 1:len(name) - len(suffix)] if suffix else name[len(prefix) + 1:]
    subtask, _, counter = middle.partition("-")
    if not subtask.isdigit() or not counter.isdigit():
        return None
    return int(subtask), int(counter), hidden


class _PartFileWriter(SinkWriter):
    """Writes one subtask's part files: in progress under a hidden name, renamed to final on flush."""

    def __init__(self, base_path: str, encoder: Encoder | None, writer_factory: BulkWriterFactory | None,
                 output_file_config: OutputFileConfig, rolling_policy: RollingPolicy,
                 bucket_assigner: BucketAssigner) -> None:
        self._base_path = base_path
        self._buckets = bucket_assigner
        self._bucket = ""  # the bucket the open part is in: a directory under the base path ("": itself)
        self._fs = filesystem_of(base_path)
        self._encoder = encoder
        self._writer_factory = writer_factory
        self._config = output_file_config
        self._policy = rolling_policy
        self._subtask_index = 0
        self._counter = 0
        self._stream: BinaryIO | None = None
        self._bulk_writer: BulkWriter | None = None
        self._in_progress_path = ""
        self._final_path = ""
        self._pending: list[tuple[str, str]] = []
        self._opened_at_ms = 0
        self._last_write_ms = 0
        self._prepared: dict[int, list[tuple[str, str]]] = {}

    def _part_name(self, counter: int) -> str:
        return f"{self._config.get_part_prefix()}-{self._subtask_index}-{counter}{self._config.get_part_suffix()}"

    def open(self, subtask_index: int, parallelism: int) -> None:
        self._subtask_index = subtask_index
        self._fs.makedirs(self._base_path, private=False)
        # Start after this subtask's existing parts (in any bucket), so a second run adds files instead
        # of replacing them.
        prefix, suffix = self._config.get_part_prefix(), self._config.get_part_suffix()
        for path in self._files():
            owner = _part_owner(os.path.basename(path), prefix, suffix)
            if owner is not None and owner[0] == subtask_index and not owner[2]:
                self._counter = max(self._counter, owner[1] + 1)

    def _files(self, directory: str | None = None) -> Iterator[str]:
        """Every file under the base path, in its buckets' directories too (walked, as the buckets of
        a date-time assigner may nest: ``yyyy/MM/dd``)."""
        directory = directory or self._base_path
        if not self._fs.is_dir(directory):
            return
        for name in self._fs.listdir(directory):
            path = os.path.join(directory, name)
            if self._fs.is_dir(path):
                yield from self._files(path)
            else:
                yield path

    def _open_part(self) -> BinaryIO:
        """Open the next part file, in the current bucket; its stream."""
        name = self._part_name(self._counter)
        self._counter += 1
        directory = os.path.join(self._base_path, self._bucket) if self._bucket else self._base_path
        if self._bucket:
            self._fs.makedirs(directory, private=False)
        self._final_path = os.path.join(directory, name)
        self._in_progress_path = os.path.join(directory, f".{name}.inprogress.{uuid.uuid4().hex}")
        stream = self._stream = self._fs.open_output(self._in_progress_path)
        if self._writer_factory is not None:
            self._bulk_writer = self._writer_factory.create(stream)
        self._opened_at_ms = self._last_write_ms = _now_ms()
        return stream

    def _close_part(self) -> None:
        """Finish the current part; it becomes pending, to be renamed at the next flush."""
        if self._stream is None:
            return
        if self._bulk_writer is not None:
            with self._naming_the_part():
                self._bulk_writer.finish()
            self._bulk_writer = None
        self._fs.close_durably(self._stream)
        self._stream = None
        self._pending.append((self._in_progress_path, self._final_path))

    @contextlib.contextmanager
    def _naming_the_part(self) -> Iterator[None]:
        """Add the part file's name to a bulk writer's complaint about a record."""
        try:
            yield
        except RecordWriteError as exc:
            raise RecordWriteError(exc.record, SinkFormatError(
                f"{exc.cause} (writing part file '{self._final_path}')")) from exc.cause

    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        if not values:
            return
        try:
            self._write(values)
        except OSError as exc:
            _raise_disk_full(exc, self._in_progress_path)
            raise

    def _write(self, values: list[Any]) -> None:
        bucket = self._buckets.bucket_id(time.time() * 1000)
        if bucket != self._bucket:  # a new bucket (the next hour's, say): the open part is done
            self._close_part()
            self._bucket = bucket
        if self._stream is not None and self._policy.should_roll(
                self._stream.tell(), self._opened_at_ms, self._last_write_ms, _now_ms()):
            self._close_part()
        if self._writer_factory is not None:
            if self._stream is None:
                self._open_part()
            bulk_writer = self._bulk_writer
            assert bulk_writer is not None  # a bulk format's part has one
            with self._naming_the_part():
                bulk_writer.add_elements(values)
        else:
            assert self._encoder is not None  # a row format's sink has one (FileSink checks)
            encode = self._encoder.encode
            part_size = self._policy.part_size
            for value in values:
                stream = self._open_part() if self._stream is None else self._stream
                stream.write(encode(value))
                if part_size is not None and stream.tell() >= part_size:
                    self._close_part()
        self._last_write_ms = _now_ms()

    def flush(self) -> None:
        """Close the current part and give every finished part its final name."""
        self._close_part()
        for in_progress, final in self._pending:
            self._fs.rename(in_progress, final)
        self._pending = []

    def close(self) -> None:
        """Release the open part without committing it.

        After a normal end of input :meth:`flush` has already committed everything; after a
        failure, what was not flushed stays a hidden in-progress file that no reader sees.
        """
        if self._stream is not None:
            self._stream.close()
            self._stream = None
            self._bulk_writer = None

    # -- two-phase commit (exactly-once when the job checkpoints) ----------------------------------
    # At a checkpoint the open part is closed (fsynced) and, with every other closed part not yet
    # committed, listed in the checkpoint; when the checkpoint completes those parts are renamed
    # to their final names. A restore first checks, before any subtask of any sink touches a
    # file: every part the checkpoint lists still exists (in progress or final), and no final
    # part exists beyond the checkpoint's counter — that output was committed by a later
    # checkpoint, so falling back to this one would produce it twice. Only once every subtask
    # passed does each rename what the checkpoint lists (if not done already) and delete the
    # in-progress files it does not list, so a refused restore leaves a newer checkpoint's
    # pending parts in place and that checkpoint can still be restored.
    def supports_two_phase_commit(self) -> bool:
        return True

    def prepare_commit(self, checkpoint_id: int) -> dict[str, Any]:
        try:
            self._close_part()
        except OSError as exc:
            _raise_disk_full(exc, self._in_progress_path)
            raise
        self._prepared[checkpoint_id] = list(self._pending)
        base = self._base_path
        return {"subtask": self._subtask_index, "counter": self._counter,
                "pending": [[os.path.relpath(a, base), os.path.relpath(b, base)] for a, b in self._pending]}

    def commit(self, checkpoint_id: int) -> None:
        done = [cid for cid in self._prepared if cid <= checkpoint_id]
        committed = set()
        for cid in sorted(done):
            for in_progress, final in self._prepared.pop(cid):
                if (in_progress, final) not in committed:
                    self._commit_part(in_progress, final)
                    committed.add((in_progress, final))
        if committed:
            self._pending = [entry for entry in self._pending if entry not in committed]
            for directory in sorted({os.path.dirname(final) for _, final in committed}):
                self._fs.fsync_dir(directory)

    def _listed_parts(self, states: list[Any]) -> list[tuple[str, str]]:
        """The (in-progress, final) paths of the parts ``states`` had pending (relative to the base
        path: a bucket's directory, then the name)."""
        return [(os.path.join(self._base_path, in_progress), os.path.join(self._base_path, final))
                for state in states for in_progress, final in state["pending"]]

    def _parts_of(self, counters: dict[int, int]) -> list[tuple[str, int, int, bool]]:
        """``(path, subtask, counter, in_progress)`` of every part file written by the subtasks
        of ``counters`` (the subtasks whose state is being restored)."""
        prefix, suffix = self._config.get_part_prefix(), self._config.get_part_suffix()
        parts = []
        for path in self._files():
            owner = _part_owner(os.path.basename(path), prefix, suffix)
            if owner is not None and owner[0] in counters:
                parts.append((path, *owner))
        return parts

    def check_commit_state(self, states: list[Any]) -> None:
        from slipstream.errors import CheckpointError
        for in_progress, final in self._listed_parts(states):
            if not self._fs.exists(in_progress) and not self._fs.exists(final):
                raise CheckpointError(f"FileSink: the part file '{in_progress}' a checkpoint says is pending is "
                                      f"gone, and its final name '{final}' does not exist either: output is lost")
        counters = _restored_counters(states)
        for path, subtask, counter, part_in_progress in self._parts_of(counters):
            if not part_in_progress and counter >= counters[subtask]:
                raise CheckpointError(
                    f"FileSink: part file '{path}' was committed after the checkpoint being restored (which "
                    f"ends subtask {subtask}'s parts before number {counters[subtask]}): restoring it would "
                    "write that output twice. Restore the latest checkpoint, or remove the output directory "
                    "to start afresh")

    def restore_commit_state(self, states: list[Any]) -> None:
        for in_progress, final in self._listed_parts(states):
            self._commit_part(in_progress, final)
        counters = _restored_counters(states)
        directories = {self._base_path}
        for path, _, _, part_in_progress in self._parts_of(counters):
            if part_in_progress:
                self._fs.remove(path)  # written after the checkpoint
                directories.add(os.path.dirname(path))
        directories.update(os.path.dirname(final) for _, final in self._listed_parts(states))
        for directory in sorted(directories):
            self._fs.fsync_dir(directory)
        own = counters.get(self._subtask_index)
        if own is not None:
            self._counter = max(self._counter, own)

    def _commit_part(self, in_progress: str, final: str) -> None:
        """Give a pending part its final name, unless an earlier commit already did. On an object
        store the "rename" is a copy then a delete: a crash between them leaves the in-progress
        object, so the restore copies it again (the same bytes) and the part appears once, whole."""
        if self._fs.exists(in_progress):
            self._fs.rename(in_progress, final)


def _restored_counters(states: list[Any]) -> dict[int, int]:
    """The part counter each old subtask of ``states`` had reached at the checkpoint."""
    return {int(state["subtask"]): int(state["counter"]) for state in states}

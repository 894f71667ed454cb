"""Checkpointing settings, as ``pyflink.datastream.CheckpointConfig`` and ``CheckpointingMode``.

A job with checkpointing enabled takes a consistent snapshot of all its state at
regular intervals and writes it to a checkpoint directory; sinks that support it
(``FileSink``) commit their output only when a checkpoint completes, so a job that
is restarted from its latest checkpoint produces every record exactly once.

Examples:
    >>> from slipstream.datastream import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> _ = env.enable_checkpointing(1000, CheckpointingMode.EXACTLY_ONCE)
    >>> config = env.get_checkpoint_config()
    >>> config = config.set_checkpoint_storage_dir("/tmp/checkpoints").set_num_retained_checkpoints(2)
    >>> config.get_num_retained_checkpoints()
    2

Restoring: ``env.execute(name, restore_from="latest")`` resumes from the newest
complete checkpoint in the storage directory (or starts afresh when there is none);
``restore_from="/path/to/chk-000042"`` from that one. Without an argument, the
environment variable ``SLIPSTREAM_RESTORE_FROM`` (``latest`` or a path) is used, so
a job script can be restarted from the command line unchanged::

    SLIPSTREAM_RESTORE_FROM=latest python my_job.py
"""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Any

from slipstream.datastream.python_dependencies import warn_not_applied
from slipstream.datastream.time import Duration
from slipstream.errors import InvalidProgramError
from slipstream.filesystem import normalize

RESTORE_ENV_VAR = "SLIPSTREAM_RESTORE_FROM"
"""Environment variable read by ``execute`` when ``restore_from`` is not given."""


class CheckpointingMode(Enum):
    """EXACTLY_ONCE aligns barriers at tasks with several inputs; AT_LEAST_ONCE lets records pass
    a barrier that arrived on another input, which after a restore may replay them."""

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1


class ExternalizedCheckpointCleanup(Enum):
    """Whether completed checkpoints are kept when the job ends (as Flink's enum of that name)."""

    RETAIN_ON_CANCELLATION = 0
    DELETE_ON_CANCELLATION = 1
    NO_EXTERNALIZED_CHECKPOINTS = 2


class CheckpointStorage:
    """Where checkpoints go (a base class, as PyFlink's)."""


class FileSystemCheckpointStorage(CheckpointStorage):
    """Checkpoints in a directory (``chk-<id>`` subdirectories): a local path, a ``file://`` URI or
    a URL of another file system fsspec serves (``s3://bucket/checkpoints``)."""

    def __init__(self, checkpoint_path: str, file_state_size_threshold: int | None = None,
                 write_buffer_size: int = -1) -> None:
        """``file_state_size_threshold`` and ``write_buffer_size`` are kept (their getters) and warned
        about when given: every checkpoint here writes its state as files of its own."""
        self._path = normalize(checkpoint_path, "checkpoint storage")
        self._threshold = file_state_size_threshold
        self._write_buffer_size = write_buffer_size
        if file_state_size_threshold is not None or write_buffer_size != -1:
            warn_not_applied("FileSystemCheckpointStorage's file_state_size_threshold and write_buffer_size",
                             "every checkpoint writes its state as files of its own")

    def get_checkpoint_path(self) -> str:
        return self._path

    MAX_FILE_STATE_THRESHOLD = 1024 * 1024
    """Flink's largest ``file_state_size_threshold`` (state below it goes inline into the metadata)."""

    def get_min_file_size_threshold(self) -> int | None:
        return self._threshold

    def get_savepoint_path(self) -> str | None:
        """None: a savepoint goes where ``set_default_savepoint_directory`` says, else beside the checkpoints."""
        return None

    def get_write_buffer_size(self) -> int:
        return self._write_buffer_size

    def __repr__(self) -> str:
        return f"FileSystemCheckpointStorage({self._path!r})"


def _non_negative_int(value: Any, what: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidProgramError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return value


class CheckpointConfig:
    """How and how often a job checkpoints; obtained from ``env.get_checkpoint_config()``.

    Defaults follow Flink: no checkpoints until an interval is set, EXACTLY_ONCE,
    10 minute timeout, no minimum pause, one checkpoint at a time, no tolerated
    failures. ``num_retained`` (Flink's ``state.checkpoints.num-retained``) is 1.
    """

    DEFAULT_MODE = CheckpointingMode.EXACTLY_ONCE
    DEFAULT_TIMEOUT = 10 * 60 * 1000
    DEFAULT_MIN_PAUSE_BETWEEN_CHECKPOINTS = 0
    DEFAULT_MAX_CONCURRENT_CHECKPOINTS = 1

    def __init__(self) -> None:
        self._interval_ms = -1
        self._mode = CheckpointingMode.EXACTLY_ONCE
        self._timeout_ms = 10 * 60 * 1000
        self._min_pause_ms = 0
        self._max_concurrent = 1
        self._tolerable_failures = 0
        self._storage: FileSystemCheckpointStorage | None = None
        self._num_retained = 1
        self._cleanup = ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
        self._interval_during_backlog_ms: int | None = None
        self._interval_records: int | None = None
        self._unaligned = False
        self._force_unaligned = False
        self._aligned_timeout = Duration.of_millis(0)
        self._async_write_threshold = 1_000

    # -- interval and mode ------------------------------------------------------------------------
    def is_checkpointing_enabled(self) -> bool:
        return self._interval_ms > 0 or self._interval_records is not None

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._mode

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> CheckpointConfig:
        if not isinstance(checkpointing_mode, CheckpointingMode):
            raise InvalidProgramError(f"expected a CheckpointingMode, got {checkpointing_mode!r}")
        self._mode = checkpointing_mode
        return self

    def get_checkpoint_interval(self) -> int:
        """Milliseconds between checkpoints; -1 when checkpointing is off."""
        return self._interval_ms

    def set_checkpoint_interval(self, checkpoint_interval: int) -> CheckpointConfig:
        self._interval_ms = _non_negative_int(checkpoint_interval, "the checkpoint interval (ms)", 1)
        return self

    def get_checkpoint_interval_during_backlog(self) -> int | None:
        return self._interval_during_backlog_ms

    def set_checkpoint_interval_during_backlog(self, interval: int) -> CheckpointConfig:
        """A separate interval while any source reports backlog (Flink's
        ``execution.checkpointing.interval-during-backlog``); 0 disables checkpoints during backlog."""
        self._interval_during_backlog_ms = _non_negative_int(interval, "the backlog checkpoint interval (ms)")
        return self

    def get_checkpoint_interval_records(self) -> int | None:
        return self._interval_records

    def set_checkpoint_interval_records(self, records: int) -> CheckpointConfig:
        """Also trigger a checkpoint after every ``records`` records read by the sources (slipstream's
        own setting; with a processing-time interval too, whichever comes first). Deterministic for
        a given scheduler seed, which tests need, while checkpoints are written at once (see
        :meth:`set_async_write_threshold`)."""
        self._interval_records = _non_negative_int(records, "the checkpoint interval in records", 1)
        return self

    def get_async_write_threshold(self) -> int:
        return self._async_write_threshold

    def set_async_write_threshold(self, entries: int) -> CheckpointConfig:
        """Checkpoints whose keyed state holds at least ``entries`` entries (over all operators)
        are serialised and written by a background thread while the job goes on: the tasks stop
        only to freeze their state, copy-on-write. Smaller ones are written at once, in the job's
        thread, which costs about as little as handing them over (default 1,000; 0 writes every
        checkpoint in the background). Slipstream's own setting."""
        self._async_write_threshold = _non_negative_int(entries, "the asynchronous write threshold (entries)")
        return self

    # -- limits -----------------------------------------------------------------------------------
    def get_checkpoint_timeout(self) -> int:
        return self._timeout_ms

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> CheckpointConfig:
        """A checkpoint not complete after this many ms is aborted (and counts as a failure)."""
        self._timeout_ms = _non_negative_int(checkpoint_timeout, "the checkpoint timeout (ms)", 1)
        return self

    def get_min_pause_between_checkpoints(self) -> int:
        return self._min_pause_ms

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> CheckpointConfig:
        self._min_pause_ms = _non_negative_int(min_pause_between_checkpoints, "the minimum pause (ms)")
        return self

    def get_max_concurrent_checkpoints(self) -> int:
        return self._max_concurrent

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> CheckpointConfig:
        """Only 1 is supported: the embedded runtime writes one checkpoint at a time."""
        value = _non_negative_int(max_concurrent_checkpoints, "max concurrent checkpoints", 1)
        if value != 1:
            raise InvalidProgramError(f"only one concurrent checkpoint is supported, got {value}")
        self._max_concurrent = value
        return self

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._tolerable_failures

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> CheckpointConfig:
        """How many consecutive checkpoint failures (timeouts, write errors) the job survives."""
        self._tolerable_failures = _non_negative_int(tolerable_checkpoint_failure_number,
                                                     "the tolerable checkpoint failure number")
        return self

    def is_fail_on_checkpointing_errors(self) -> bool:
        """Flink's older form of :meth:`get_tolerable_checkpoint_failure_number`: True when none is tolerated."""
        return self._tolerable_failures == 0

    def set_fail_on_checkpointing_errors(self, fail_on_checkpointing_errors: bool) -> CheckpointConfig:
        """True tolerates no checkpoint failure; False tolerates any number (as Flink maps it)."""
        if not isinstance(fail_on_checkpointing_errors, bool):
            raise InvalidProgramError(f"expected True or False, got {fail_on_checkpointing_errors!r}")
        self._tolerable_failures = 0 if fail_on_checkpointing_errors else 2**31 - 1
        return self

    def is_prefer_checkpoint_for_recovery(self) -> bool:
        """Always True: a savepoint is a checkpoint here (``stop_with_savepoint``), and a restart
        restores the newest checkpoint, whichever kind it is."""
        return True

    def set_prefer_checkpoint_for_recovery(self, prefer_checkpoint_for_recovery: bool) -> CheckpointConfig:
        """Accepted; False cannot apply (a savepoint is a checkpoint here: a restart restores the newest
        of them), which is warned about."""
        if prefer_checkpoint_for_recovery is not True:
            warnings.warn("set_prefer_checkpoint_for_recovery(False) is not applied: a savepoint is a checkpoint "
                          "here, and restarts always restore from the latest one", stacklevel=2)
        return self

    # -- unaligned checkpoints (not implemented: barriers are always aligned) --------------------------
    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        """Kept for ``is_unaligned_checkpoints_enabled``; enabling warns, since slipstream always aligns
        barriers (EXACTLY_ONCE) and never stores in-flight records in a checkpoint."""
        if not isinstance(enabled, bool):
            raise InvalidProgramError(f"enable_unaligned_checkpoints expects True or False, got {enabled!r}")
        if enabled:
            _warn_unaligned("enable_unaligned_checkpoints()")
        self._unaligned = enabled
        return self

    def disable_unaligned_checkpoints(self) -> CheckpointConfig:
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._unaligned

    def set_force_unaligned_checkpoints(self, force_unaligned_checkpoints: bool = True) -> CheckpointConfig:
        if not isinstance(force_unaligned_checkpoints, bool):
            raise InvalidProgramError(f"expected True or False, got {force_unaligned_checkpoints!r}")
        if force_unaligned_checkpoints:
            _warn_unaligned("set_force_unaligned_checkpoints(True)")
        self._force_unaligned = force_unaligned_checkpoints
        return self

    def is_force_unaligned_checkpoints(self) -> bool:
        return self._force_unaligned

    def set_aligned_checkpoint_timeout(self, alignment_timeout: Duration) -> CheckpointConfig:
        """After how long an aligned checkpoint would turn unaligned; kept, and warned about when
        not zero (checkpoints stay aligned)."""
        if not isinstance(alignment_timeout, Duration):
            raise InvalidProgramError(f"expected a Duration, got {alignment_timeout!r}")
        if alignment_timeout.to_milliseconds():
            _warn_unaligned("an aligned checkpoint timeout")
        self._aligned_timeout = alignment_timeout
        return self

    def get_aligned_checkpoint_timeout(self) -> Duration:
        return self._aligned_timeout

    set_alignment_timeout = set_aligned_checkpoint_timeout
    get_alignment_timeout = get_aligned_checkpoint_timeout

    # -- storage and retention --------------------------------------------------------------------
    def set_checkpoint_storage(self, storage: CheckpointStorage) -> CheckpointConfig:
        if not isinstance(storage, FileSystemCheckpointStorage):
            raise InvalidProgramError(f"expected a FileSystemCheckpointStorage, got {storage!r}")
        self._storage = storage
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        return self.set_checkpoint_storage(FileSystemCheckpointStorage(checkpoint_path))

    def get_checkpoint_storage(self) -> FileSystemCheckpointStorage | None:
        return self._storage

    def get_checkpoint_storage_dir(self) -> str | None:
        return None if self._storage is None else self._storage.get_checkpoint_path()

    def get_num_retained_checkpoints(self) -> int:
        return self._num_retained

    def set_num_retained_checkpoints(self, num_retained: int) -> CheckpointConfig:
        """How many completed checkpoints are kept; older ones are deleted (at least 1)."""
        self._num_retained = _non_negative_int(num_retained, "the number of retained checkpoints", 1)
        return self

    def set_externalized_checkpoint_cleanup(self, cleanup_mode: ExternalizedCheckpointCleanup) -> CheckpointConfig:
        """Checkpoints are always written to the storage directory; DELETE_ON_CANCELLATION removes
        them when the job ends normally, the others keep them."""
        if not isinstance(cleanup_mode, ExternalizedCheckpointCleanup):
            raise InvalidProgramError(f"expected an ExternalizedCheckpointCleanup, got {cleanup_mode!r}")
        self._cleanup = cleanup_mode
        return self

    enable_externalized_checkpoints = set_externalized_checkpoint_cleanup

    def get_externalized_checkpoint_cleanup(self) -> ExternalizedCheckpointCleanup:
        return self._cleanup

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self._cleanup is not ExternalizedCheckpointCleanup.NO_EXTERNALIZED_CHECKPOINTS


def _warn_unaligned(what: str) -> None:
    warnings.warn(f"{what} is not applied: slipstream's checkpoints are always aligned (barriers wait "
                  "for each other at tasks with several inputs)", stacklevel=3)


__all__ = [
    "RESTORE_ENV_VAR",
    "CheckpointConfig",
    "CheckpointStorage",
    "CheckpointingMode",
    "ExternalizedCheckpointCleanup",
    "FileSystemCheckpointStorage",
]

"""State backends, as ``pyflink.datastream.state_backend``.

slipstream keeps keyed state in one of two places, both checkpointed asynchronously and
incrementally as files into the checkpoint storage directory:

* ``HashMapStateBackend()`` — Python dictionaries of the process (the default).
* ``EmbeddedRocksDBStateBackend()`` — an embedded RocksDB per operator subtask, in a fresh
  directory under ``set_db_storage_paths(...)`` (default: the system's temporary
  directory): state bounded by disk, not memory; with ``taskmanager.memory.managed.size``
  set, each database's block cache and write buffers are sized to its subtask's share of
  it, as Flink's ``state.backend.rocksdb.memory.managed`` does (see
  :mod:`slipstream.operators.memory`). ``RocksDBStateBackend(dir)`` is the same with its
  checkpoints in ``dir``.
* ``FsStateBackend(dir)`` — heap state checkpointed into ``dir``: sets the checkpoint
  storage directory.
* ``MemoryStateBackend(checkpoint_path=None)`` — heap state; with a path, checkpoints go
  there, else into a temporary directory that lives as long as the job.

Options that have nothing to act on (a maximum state size, synchronous snapshots,
buffer sizes, RocksDB tuning presets) are kept and warned about. Without
``set_state_backend``, the environment variable ``SLIPSTREAM_STATE_BACKEND``
(``hashmap`` or ``rocksdb``) chooses, as Flink's configuration file's ``state.backend.type`` does
(which ``env.configure`` applies too).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import Any, cast

from slipstream.errors import InvalidProgramError
from slipstream.filesystem import normalize

__all__ = ["EmbeddedRocksDBStateBackend", "FsStateBackend", "HashMapStateBackend", "MemoryStateBackend",
           "PredefinedOptions", "RocksDBStateBackend", "StateBackend"]


class StateBackend:
    """Base of the state backend descriptions.

    ``kind`` names where keyed state lives (``hashmap`` or ``rocksdb``); ``checkpoint_directory``
    is the directory it sends checkpoints to (None: the checkpoint config decides); ``unapplied``
    lists the options given that slipstream has nothing to act on.
    """

    kind = "hashmap"

    def checkpoint_directory(self) -> str | None:
        return None

    def unapplied(self) -> list[str]:
        return []

    def _key(self) -> tuple[Any, ...]:
        return ()

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class HashMapStateBackend(StateBackend):
    """Keyed state as objects in the process's memory: what slipstream always does."""


class MemoryStateBackend(StateBackend):
    """Heap state; checkpoints into ``checkpoint_path`` when given (Flink keeps them in the
    JobManager's memory; slipstream in a temporary directory of the job otherwise)."""

    DEFAULT_MAX_STATE_SIZE = 5 * 1024 * 1024
    """Flink's bound of a state snapshot kept in memory; slipstream writes files, without one."""

    def __init__(self, checkpoint_path: str | None = None, savepoint_path: str | None = None,
                 max_state_size: int | None = None, using_asynchronous_snapshots: bool | None = None) -> None:
        self._checkpoint_path = None if checkpoint_path is None else normalize(checkpoint_path, "checkpoint_path")
        self._options: dict[str, Any] = {"savepoint_path": savepoint_path, "max_state_size": max_state_size,
                                         "using_asynchronous_snapshots": using_asynchronous_snapshots}

    def checkpoint_directory(self) -> str | None:
        return self._checkpoint_path

    def get_max_state_size(self) -> int | None:
        return cast("int | None", self._options["max_state_size"])

    def is_using_asynchronous_snapshots(self) -> bool:
        """Snapshots are always asynchronous here (a background writer), whatever was asked."""
        return True

    def unapplied(self) -> list[str]:
        return [name for name, value in self._options.items() if value is not None]

    def _key(self) -> tuple[Any, ...]:
        return (self._checkpoint_path, tuple(sorted(self._options.items())))


class FsStateBackend(StateBackend):
    """Heap state checkpointed as files into ``checkpoint_directory_uri``."""

    def __init__(self, checkpoint_directory_uri: str, default_savepoint_directory_uri: str | None = None,
                 file_state_size_threshold: int | None = None, write_buffer_size: int | None = None,
                 using_asynchronous_snapshots: bool | None = None) -> None:
        self._directory = normalize(checkpoint_directory_uri, "checkpoint_directory_uri")
        self._options = {"default_savepoint_directory_uri": default_savepoint_directory_uri,
                         "using_asynchronous_snapshots": using_asynchronous_snapshots,
                         "file_state_size_threshold": file_state_size_threshold,
                         "write_buffer_size": write_buffer_size}

    def get_checkpoint_path(self) -> str:
        return self._directory

    def get_min_file_size_threshold(self) -> int | None:
        return cast("int | None", self._options["file_state_size_threshold"])

    def get_write_buffer_size(self) -> int | None:
        return cast("int | None", self._options["write_buffer_size"])

    def is_using_asynchronous_snapshots(self) -> bool:
        """Snapshots are always asynchronous here (a background writer), whatever was asked."""
        return True

    def checkpoint_directory(self) -> str | None:
        return self._directory

    def unapplied(self) -> list[str]:
        return [name for name, value in self._options.items() if value is not None]

    def _key(self) -> tuple[Any, ...]:
        return (self._directory, tuple(sorted(self._options.items())))

    def __repr__(self) -> str:
        return f"FsStateBackend({self._directory!r})"


class PredefinedOptions(Enum):
    """RocksDB tuning presets (accepted, and warned about: slipstream keeps RocksDB's defaults)."""

    DEFAULT = 0
    SPINNING_DISK_OPTIMIZED = 1
    SPINNING_DISK_OPTIMIZED_HIGH_MEM = 2
    FLASH_SSD_OPTIMIZED = 3


class EmbeddedRocksDBStateBackend(StateBackend):
    """Keyed state in an embedded RocksDB, one per operator subtask (state beyond memory).

    Checkpoints are always incremental in slipstream; ``enable_incremental_checkpointing=False``
    is warned about."""

    kind = "rocksdb"

    def __init__(self, enable_incremental_checkpointing: bool | None = None) -> None:
        self._incremental = enable_incremental_checkpointing
        self._paths: tuple[str, ...] = ()
        self._predefined: PredefinedOptions | None = None
        self._options_factory: str | None = None
        self._transfer_threads: int | None = None

    def set_number_of_transfer_threads(self, number_of_transfering_threads: int) -> None:
        """Kept (Flink's threads copying files to checkpoint storage; slipstream's writer is one thread)."""
        if not isinstance(number_of_transfering_threads, int) or number_of_transfering_threads < 1:
            raise InvalidProgramError("the number of transfer threads must be >= 1, "
                                      f"got {number_of_transfering_threads!r}")
        self._transfer_threads = number_of_transfering_threads

    def get_number_of_transfer_threads(self) -> int:
        return self._transfer_threads or 4  # Flink's default

    set_number_of_transfering_threads = set_number_of_transfer_threads  # Flink's older spelling
    get_number_of_transfering_threads = get_number_of_transfer_threads

    def set_options(self, options_factory_class_name: str) -> None:
        """Kept: it names a Java ``RocksDBOptionsFactory`` class, which slipstream cannot load."""
        self._options_factory = options_factory_class_name

    def get_options(self) -> str | None:
        return self._options_factory

    def is_incremental_checkpoints_enabled(self) -> bool:
        return self._incremental is not False

    def set_db_storage_paths(self, *paths: str) -> None:
        """The local directories the databases live in (each subtask's in a fresh directory of the first)."""
        self._paths = tuple(normalize(path, "db storage path") for path in paths)

    def get_db_storage_paths(self) -> list[str]:
        return list(self._paths)

    def local_directory(self) -> str | None:
        """Where each subtask's database gets its fresh directory (None: the system's temporary directory)."""
        return self._paths[0] if self._paths else None

    def set_predefined_options(self, options: PredefinedOptions) -> None:
        self._predefined = options

    def get_predefined_options(self) -> PredefinedOptions:
        return self._predefined or PredefinedOptions.DEFAULT

    def unapplied(self) -> list[str]:
        unapplied = ["enable_incremental_checkpointing=False"] if self._incremental is False else []
        if self._options_factory is not None:
            unapplied.append("options (a Java options factory)")
        if self._transfer_threads is not None:
            unapplied.append("number_of_transfer_threads")
        return unapplied + (["predefined_options"] if self._predefined not in (None, PredefinedOptions.DEFAULT)
                            else [])

    def _key(self) -> tuple[Any, ...]:
        return (self._incremental, self._paths, self._predefined)


class RocksDBStateBackend(EmbeddedRocksDBStateBackend):
    """Flink's older name for RocksDB state with its checkpoints in ``checkpoint_data_uri``."""

    def __init__(self, checkpoint_data_uri: str | None = None, enable_incremental_checkpointing: bool | None = None,
                 checkpoint_stream_backend: StateBackend | None = None) -> None:
        super().__init__(enable_incremental_checkpointing)
        self._checkpoint_data_uri = None if checkpoint_data_uri is None else \
            normalize(checkpoint_data_uri, "checkpoint_data_uri")
        self._checkpoint_backend = checkpoint_stream_backend

    def get_checkpoint_backend(self) -> StateBackend:
        """Where checkpoints go, as a state backend: the one given, else files in ``checkpoint_data_uri``."""
        if self._checkpoint_backend is not None:
            return self._checkpoint_backend
        if self._checkpoint_data_uri is not None:
            return FsStateBackend(self._checkpoint_data_uri)
        return MemoryStateBackend()

    def checkpoint_directory(self) -> str | None:
        return self._checkpoint_data_uri

    def _key(self) -> tuple[Any, ...]:
        return (*super()._key(), self._checkpoint_data_uri)


DEFAULT_VARIABLE = "SLIPSTREAM_STATE_BACKEND"
"""The environment variable naming the state backend of jobs that set none (``hashmap``, ``rocksdb``)."""


def default_state_backend() -> StateBackend:
    """The state backend of a job that sets none: ``SLIPSTREAM_STATE_BACKEND``'s, else the heap."""
    name = os.environ.get(DEFAULT_VARIABLE, "hashmap").strip().lower()
    backends: dict[str, type[StateBackend]] = {"hashmap": HashMapStateBackend,
                                               "rocksdb": EmbeddedRocksDBStateBackend}
    if name not in backends:
        raise ValueError(f"{DEFAULT_VARIABLE}={name!r} is not one of {sorted(backends)}")
    return backends[name]()

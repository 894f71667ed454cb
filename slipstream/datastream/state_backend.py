"""State backends, as ``pyflink.datastream.state_backend``.

slipstream has one state backend: keyed state in Python dictionaries of the
process (Flink's ``HashMapStateBackend``), checkpointed as files into the
checkpoint storage directory. ``env.set_state_backend`` therefore accepts the
heap backends and applies what they say about checkpoints:

* ``HashMapStateBackend()`` — exactly slipstream's backend.
* ``FsStateBackend(dir)`` — heap state checkpointed into ``dir``: sets the checkpoint
  storage directory.
* ``MemoryStateBackend(checkpoint_path=None)`` — heap state; with a path, checkpoints go
  there, else (as today) into a temporary directory that lives as long as the job.

Options that have nothing to act on (a maximum state size, asynchronous snapshots,
buffer sizes) are kept and warned about. The RocksDB backends
(``EmbeddedRocksDBStateBackend``, ``RocksDBStateBackend``) are refused by
``set_state_backend`` with an error: they promise state beyond memory, which the
dictionary backend cannot keep.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from slipstream.filesystem import normalize

__all__ = ["EmbeddedRocksDBStateBackend", "FsStateBackend", "HashMapStateBackend", "MemoryStateBackend",
           "PredefinedOptions", "RocksDBStateBackend", "StateBackend"]


class StateBackend:
    """Base of the state backend descriptions.

    ``heap`` says whether slipstream can run it; ``checkpoint_directory`` is the directory it
    sends checkpoints to (None: the checkpoint config decides); ``unapplied`` lists the options
    given that slipstream has nothing to act on.
    """

    heap = True

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

    def __init__(self, checkpoint_path: str | None = None, savepoint_path: str | None = None,
                 max_state_size: int | None = None, using_asynchronous_snapshots: bool | None = None) -> None:
        self._checkpoint_path = None if checkpoint_path is None else normalize(checkpoint_path, "checkpoint_path")
        self._options: dict[str, Any] = {"savepoint_path": savepoint_path, "max_state_size": max_state_size,
                                         "using_asynchronous_snapshots": using_asynchronous_snapshots}

    def checkpoint_directory(self) -> str | None:
        return self._checkpoint_path

    def get_max_state_size(self) -> int | None:
        return self._options["max_state_size"]

    def unapplied(self) -> list[str]:
        return [name for name, value in self._options.items() if value is not None]

    def _key(self) -> tuple[Any, ...]:
        return (self._checkpoint_path, tuple(sorted(self._options.items())))


class FsStateBackend(StateBackend):
    """Heap state checkpointed as files into ``checkpoint_directory_uri``."""

    def __init__(self, checkpoint_directory_uri: str, default_savepoint_directory_uri: str | None = None,
                 using_asynchronous_snapshots: bool | None = None, file_state_size_threshold: int | None = None,
                 write_buffer_size: int | None = None) -> None:
        self._directory = normalize(checkpoint_directory_uri, "checkpoint_directory_uri")
        self._options = {"default_savepoint_directory_uri": default_savepoint_directory_uri,
                         "using_asynchronous_snapshots": using_asynchronous_snapshots,
                         "file_state_size_threshold": file_state_size_threshold,
                         "write_buffer_size": write_buffer_size}

    def get_checkpoint_path(self) -> str:
        return self._directory

    def checkpoint_directory(self) -> str | None:
        return self._directory

    def unapplied(self) -> list[str]:
        return [name for name, value in self._options.items() if value is not None]

    def _key(self) -> tuple[Any, ...]:
        return (self._directory, tuple(sorted(self._options.items())))

    def __repr__(self) -> str:
        return f"FsStateBackend({self._directory!r})"


class PredefinedOptions(Enum):
    """RocksDB tuning presets (accepted for the RocksDB backends, which slipstream refuses)."""

    DEFAULT = 0
    SPINNING_DISK_OPTIMIZED = 1
    SPINNING_DISK_OPTIMIZED_HIGH_MEM = 2
    FLASH_SSD_OPTIMIZED = 3


class EmbeddedRocksDBStateBackend(StateBackend):
    """State in an embedded RocksDB (beyond memory). Not available: ``set_state_backend`` refuses it."""

    heap = False

    def __init__(self, enable_incremental_checkpointing: bool | None = None) -> None:
        self._incremental = enable_incremental_checkpointing

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self._incremental)

    def _key(self) -> tuple[Any, ...]:
        return (self._incremental,)


class RocksDBStateBackend(EmbeddedRocksDBStateBackend):
    """Flink's older name for RocksDB state with file checkpoints. Refused as the embedded one."""

    def __init__(self, checkpoint_data_uri: str | None = None, enable_incremental_checkpointing: bool | None = None,
                 checkpoint_stream_backend: StateBackend | None = None) -> None:
        super().__init__(enable_incremental_checkpointing)
        self._checkpoint_data_uri = checkpoint_data_uri

    def _key(self) -> tuple[Any, ...]:
        return (self._incremental, self._checkpoint_data_uri)

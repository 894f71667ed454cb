"""State backends: where keyed state lives while a job runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from slipstream.datastream.state_backend import StateBackend, default_state_backend

if TYPE_CHECKING:
    from slipstream.runtime.state.heap_backend import KeyedBackendBase


def create_keyed_backend(description: StateBackend | None, max_parallelism: int,
                         now: Callable[[], int]) -> KeyedBackendBase:
    """The keyed state backend of one operator subtask, as ``description`` (the job's
    ``set_state_backend``; None: :func:`default_state_backend`) says."""
    description = description or default_state_backend()
    if description.kind == "rocksdb":
        from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend
        return RocksDBKeyedStateBackend(max_parallelism, now, description.local_directory())  # type: ignore[attr-defined]
    from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
    return HeapKeyedStateBackend(max_parallelism, now)

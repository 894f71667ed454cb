"""State backends: where keyed state lives while a job runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slipstream.datastream.state_backend import StateBackend, default_state_backend

if TYPE_CHECKING:
    from slipstream.operators.memory import MemoryBudgets
    from slipstream.runtime.state.heap_backend import KeyedBackendBase


def create_keyed_backend(description: StateBackend | None, max_parallelism: int, now: Callable[[], int],
                         memory: MemoryBudgets | None = None, owner: str = "",
                         metrics: dict[str, Any] | None = None) -> KeyedBackendBase:
    """The keyed state backend of one operator subtask, as ``description`` (the job's
    ``set_state_backend``; None: :func:`default_state_backend`) says, with its share of the job's
    ``memory`` for ``owner``: of the task heap for the heap backend, of managed memory for RocksDB
    (Flink's ``state.backend.rocksdb.memory.managed``), its usage in the operator's ``metrics``."""
    description = description or default_state_backend()
    if description.kind == "rocksdb":
        from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend
        budget = None if memory is None else memory.managed.budget(owner, metrics)
        return RocksDBKeyedStateBackend(max_parallelism, now, description.local_directory(),  # type: ignore[attr-defined]
                                        budget)
    from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
    budget = None if memory is None else memory.task_heap.budget(owner, metrics)
    return HeapKeyedStateBackend(max_parallelism, now, budget)

"""Memory budgets of a job, in bytes, with Flink's names for its memory pools.

A job (the embedded runtime is one TaskManager) has three pools, each off unless set:

* ``taskmanager.memory.managed.size`` (``env.configure(managed_memory=...)``): the
  buffers of operators — an iteration's replay cache and held feedback, the sort and
  columnar buffers of an operator sorting its backlog, what a source reads ahead
  (``from_spark`` reads pieces that fit its share) — and the memory of keyed state in
  RocksDB (its write buffers and block cache, as Flink's
  ``state.backend.rocksdb.memory.managed``), shared equally by the operator subtasks that
  use it (Flink divides managed memory among the slots' consumers, and uses it for sorting
  and caching too). Past its share a buffer spills to disk, and RocksDB flushes its write
  buffers into table files on disk.
* ``taskmanager.memory.task.heap.size`` (``task_heap_memory``): keyed state kept as
  Python objects (the heap backend), shared equally by the keyed operator subtasks.
  Past its share the job fails with :class:`~slipstream.errors.MemoryBudgetError`
  naming the operator and the budget, before the operating system would kill the
  process for running out of memory; a state backend that keeps state on disk is the
  way to hold more.
* ``taskmanager.memory.network.max`` (``network_memory``): what BLOCKING and FEEDBACK
  channels keep in memory before they spill (``channel_memory_budget_bytes`` each),
  shared equally by those channels.

Usage is estimated cheaply: Arrow buffers by their exact size, Python records by
sampling a few per batch (:meth:`~slipstream.operators.elements.RecordBatch.estimated_bytes`),
keyed state by sampling entries (:func:`entry_bytes`). An operator's usage,
over its subtasks, is its metric ``memory_bytes.<pool>`` (``execute()``'s accumulators), and
their sum its ``memory_bytes`` in progress reports and Prometheus' ``memoryBytes``.

Sizes read as Flink writes them: ``1048576``, ``512 kb``, ``64m``, ``1 gb``
(:func:`slipstream.datastream.pipeline_options.parse_memory_size`).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slipstream.datastream.pipeline_options import MANAGED, NETWORK, TASK_HEAP
from slipstream.errors import MemoryBudgetError
from slipstream.operators.columnar_buffer import BYTES_PER_RECORD
from slipstream.operators.elements import record_bytes

if TYPE_CHECKING:
    from slipstream.operators.base import OperatorContext

POOL_NAMES = {MANAGED: "managed", TASK_HEAP: "task heap", NETWORK: "network"}
SAMPLE_ENTRIES = 16
"""Entries of a keyed state measured to estimate the bytes of all of them."""


@dataclass
class MemoryPool:
    """One pool of a job: its size (None: unlimited) shared equally by the budgets taken from it."""

    option: str
    size: int | None
    budgets: list[MemoryBudget] = field(default_factory=list)

    def budget(self, owner: str, metrics: dict[str, Any] | None = None) -> MemoryBudget | None:
        """A share of the pool for ``owner`` (None when the pool is unlimited)."""
        if self.size is None:
            return None
        budget = MemoryBudget(self, owner, metrics if metrics is not None else {})
        self.budgets.append(budget)
        return budget

    @property
    def share(self) -> int:
        return self.size // max(1, len(self.budgets))  # type: ignore[operator]


class MemoryBudget:
    """One consumer's share of a pool: what it may hold in memory, and what it holds now."""

    def __init__(self, pool: MemoryPool, owner: str, metrics: dict[str, Any]) -> None:
        self.pool, self.owner, self.used = pool, owner, 0
        self._metrics = metrics
        self._metric = f"memory_bytes.{POOL_NAMES[pool.option].replace(' ', '_')}"

    @property
    def limit(self) -> int:
        return self.pool.share

    def fits(self, used: int) -> bool:
        return used <= self.limit

    def set_usage(self, used: int) -> None:
        """Record what the consumer holds now; the operator's metric is the total over its subtasks."""
        self._metrics[self._metric] = self._metrics.get(self._metric, 0) + used - self.used
        self.used = used

    def check(self, used: int, what: str, remedy: str) -> None:
        """Record ``used``; past the budget raise :class:`MemoryBudgetError` naming the owner."""
        self.set_usage(used)
        if used > self.limit:
            pool = self.pool
            raise MemoryBudgetError(
                f"{self.owner}: {what} takes about {used:,} bytes, past its budget of {self.limit:,} bytes "
                f"(its share of {pool.option} = {pool.size:,} bytes, shared by {len(pool.budgets)} "
                f"consumer(s)); {remedy}")


@dataclass
class MemoryBudgets:
    """The pools of one run of a job."""

    managed: MemoryPool
    task_heap: MemoryPool
    network: MemoryPool

    @staticmethod
    def of(options: Any) -> MemoryBudgets:
        return MemoryBudgets(MemoryPool(MANAGED, options.managed_memory),
                             MemoryPool(TASK_HEAP, options.task_heap_memory),
                             MemoryPool(NETWORK, options.network_memory))


def sort_buffer_records(ctx: OperatorContext) -> int:
    """Records an operator's sort buffers keep before they spill: ``sort_memory_budget``, within
    the operator's share of managed memory when the job sets one (at ``BYTES_PER_RECORD`` each)."""
    budget = ctx.sort_budget
    if budget is None:
        return ctx.sort_memory_budget
    return max(1, min(ctx.sort_memory_budget, budget.limit // BYTES_PER_RECORD))


def columnar_buffer_bytes(ctx: OperatorContext) -> int:
    """Bytes of Arrow data an operator's columnar buffers keep before they spill: the Arrow size of
    ``sort_memory_budget`` records, within its share of managed memory when the job sets one."""
    budget = ctx.sort_budget
    default = ctx.sort_memory_budget * BYTES_PER_RECORD
    return default if budget is None else max(1, min(default, budget.limit))


def share_network_memory(pool: MemoryPool, channels: Iterable[Any]) -> None:
    """Give every spilling (BLOCKING or FEEDBACK) channel its share of the network pool as the
    bytes it keeps in memory (never more than it had)."""
    if pool.size is None:
        return
    spilling = [channel for channel in channels if hasattr(channel, "memory_budget_bytes")]
    for channel in spilling:
        pool.budget(channel.name)
    for channel in spilling:
        channel.memory_budget_bytes = min(channel.memory_budget_bytes, pool.share)


def check_state(ctx: OperatorContext) -> None:
    """A subtask's keyed state against its budget, after each turn of its task: past its share of
    the task heap the heap backend fails the job naming the operator; RocksDB, within its share of
    managed memory, writes past it to disk."""
    if ctx.keyed_backend is not None:
        ctx.keyed_backend.account_memory()


def entry_bytes(sample: Iterable[tuple[Any, Any]]) -> float:
    """The mean bytes of one keyed state entry in ``sample`` (its key and value with what they
    directly hold, and its slot in the table); 0 for no entries."""
    sizes = [_sampled_bytes(key) + _sampled_bytes(value) for key, value in sample]
    return sum(sizes) / len(sizes) + _DICT_SLOT_BYTES if sizes else 0.0


def _sampled_bytes(value: Any) -> int:
    """A value's size with what it directly holds; of a large collection (list state, map state),
    its length times the mean size of a few of its items."""
    if not isinstance(value, (list, dict)) or len(value) <= SAMPLE_ENTRIES:
        return record_bytes(value)
    items = value if isinstance(value, list) else value.items()
    step = max(1, len(value) // SAMPLE_ENTRIES)
    sample = list(itertools.islice(items, 0, None, step))[:SAMPLE_ENTRIES]
    return sys.getsizeof(value) + len(value) * sum(map(record_bytes, sample)) // len(sample)


_DICT_SLOT_BYTES = 100
"""What a dict entry costs beyond its key and value (the slot, the index, amortised growth)."""


__all__ = ["MemoryBudget", "MemoryBudgets", "MemoryPool",
           "check_state", "columnar_buffer_bytes", "entry_bytes", "share_network_memory",
           "sort_buffer_records"]

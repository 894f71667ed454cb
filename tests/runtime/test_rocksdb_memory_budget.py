"""Keyed state larger than its memory budget: on RocksDB it goes to disk and the job completes with
the right output (its cache and write buffers sized to the subtask's share of managed memory, as
Flink's ``state.backend.rocksdb.memory.managed``), while on the heap it fails naming the operator."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import (
    EmbeddedRocksDBStateBackend,
    HashMapStateBackend,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.pipeline_options import MANAGED
from slipstream.datastream.state_backend import StateBackend
from slipstream.errors import MemoryBudgetError
from slipstream.operators.memory import MemoryPool
from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend

PAYLOAD = 1_000
KEYS = 16_000
BUDGET = 4 << 20
"""16,000 keys of 1,000 bytes each: four times the budget."""


def payload(value: int) -> bytes:
    """``value`` in PAYLOAD bytes that do not compress (RocksDB's table files are compressed)."""
    return value.to_bytes(4, "big") + random.Random(value).randbytes(PAYLOAD - 4)


class Remember(KeyedProcessFunction):
    """Keeps its key's latest record as a payload; emits each record with the one it replaces."""

    def open(self, runtime_context: Any) -> None:
        self.latest = runtime_context.get_state(ValueStateDescriptor("latest"))

    def process_element(self, value: int, ctx: Any) -> Any:
        previous = self.latest.value()
        self.latest.update(payload(value))
        yield value, None if previous is None else int.from_bytes(previous[:4], "big")


def remembering_job(backend: StateBackend, n: int, parallelism: int, seed: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_state_backend(backend)
    env.configure(scheduler_seed=seed, backlog_sorting=False, managed_memory=BUDGET, task_heap_memory=BUDGET)
    out: list = []
    env.from_collection(list(range(n))).key_by(lambda x: x % KEYS).process(Remember()).name("Remember") \
        .add_sink(out.append)
    env.out = out  # type: ignore[attr-defined]
    return env


def oracle(n: int) -> Counter:
    """Each number with the one before it of its key (records of a key arrive in order: one source)."""
    return Counter((value, value - KEYS if value >= KEYS else None) for value in range(n))


@pytest.mark.one_process("the budget is one task manager's managed memory; each worker process has its own")
@pytest.mark.parametrize("parallelism,seed", [(1, 0), (2, 1), (4, 2)])
def test_state_past_the_managed_budget_goes_to_disk_on_rocksdb_and_fails_on_the_heap(parallelism, seed):
    n = 2 * KEYS
    rocksdb = remembering_job(EmbeddedRocksDBStateBackend(), n, parallelism, seed)
    result = rocksdb.execute("state four times its budget, on RocksDB")
    assert Counter(rocksdb.out) == oracle(n)  # type: ignore[attr-defined]
    used = result.get_accumulator_result("Remember")["memory_bytes.managed"]
    assert 0 < used <= 1.25 * BUDGET  # over the subtasks, each within its share
    heap = remembering_job(HashMapStateBackend(), n, parallelism, seed)
    with pytest.raises(MemoryBudgetError) as caught:
        heap.execute("state four times its budget, on the heap")
    message = str(caught.value)
    assert "operator 'Remember'" in message and "taskmanager.memory.task.heap.size" in message
    assert f"budget of {BUDGET // parallelism:,} bytes" in message


@pytest.mark.parametrize("consumers", [1, 3])
def test_rocksdb_keeps_within_its_share_of_managed_memory_and_writes_the_rest_to_table_files(consumers):
    pool = MemoryPool(MANAGED, BUDGET)
    budget = pool.budget("operator 'Remember' (subtask 1/1)")
    assert budget is not None
    for other in range(1, consumers):  # consumers taking their shares after the backend was made
        pool.budget(f"another consumer {other}")
    backend = RocksDBKeyedStateBackend(128, budget=budget)
    state = backend.get_state(ValueStateDescriptor("latest"))
    peak = 0
    for key in range(KEYS):
        backend.set_current_key(key)
        state.update(payload(key))
        if key % 50 == 49:  # as the task does after each turn
            backend.account_memory()
            peak = max(peak, budget.used)
    backend.account_memory()
    try:
        assert budget.limit == BUDGET // consumers
        assert 0 < peak <= 1.25 * budget.limit
        on_disk = backend._columns["latest"].family.property_int_value("rocksdb.total-sst-files-size")
        assert on_disk is not None and on_disk > budget.limit
        for key in range(0, KEYS, 7):
            backend.set_current_key(key)
            assert state.value() == payload(key)
    finally:
        backend.dispose()

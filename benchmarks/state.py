"""Keyed state at 10^5, 10^6 and 10^7 keys on both state backends: records/s, peak RSS,
checkpoint sizes (full, and incremental with 1% of the keys changed) and the longest pause
of the task's turn while a checkpoint is taken and written.

Each key gets one record; a ``KeyedProcessFunction`` keeps a ``ValueState`` (a count) and a
``MapState`` (four entries) per key. A loop does what the task does per record (set the
key, call ``process_element``) in turns of ``TURN`` records; the checkpoint is taken and
written as the coordinator does it (the keyed state frozen on the task's turn, then the
``CheckpointWriter`` in its own thread while turns go on, then the changes merged back a
budget per turn). *freeze* is the CPU time the task's thread spends taking the checkpoint (the
only part on its turn); *pause* is the longest turn (wall time) from the barrier until the
writer is done and every change is merged back, against *turn w/o*, the longest turn
without a checkpoint (on a loaded machine both are mostly the operating system's time
slices). Rates are given by wall time and by the process's CPU time (all its threads,
RocksDB's own included), which other work on the machine does not change. A plain
hand-written dict loop doing the same work runs first, as a baseline. Each configuration
runs in a child process of its own, so its peak RSS is its own.

With ``--managed-memory 512mb`` each backend gets that budget as a job's only keyed subtask
would (``taskmanager.memory.managed.size`` bounds RocksDB's cache and write buffers;
``taskmanager.memory.task.heap.size`` the heap's state, which fails past it), checked after every
turn as the task does. After the table, the issue's aims and whether each row meets them (the
KMeans aim is ``benchmarks/iteration.py``'s).

Run: ``python benchmarks/state.py [--keys 100000 1000000 10000000] [--backends hashmap rocksdb]
[--managed-memory SIZE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

TURN = 256
"""Records per task turn (the scheduler's quantum is of this order)."""
CHANGED = 0.01
MAX_PARALLELISM = 128
PAUSE_AIM_MS, PAUSE_AIM_KEYS = 50, 1_000_000
INCREMENTAL_AIM = 0.05
RSS_AIM_MB, RSS_AIM_KEYS = 2_048, 10_000_000


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def baseline(keys: int) -> dict[str, Any]:
    """The same work in two plain dicts: the floor a state backend is measured against."""
    counts: dict[int, int] = {}
    maps: dict[int, dict[int, int]] = {}
    started, cpu = time.perf_counter(), time.process_time()
    for key in range(keys):
        count = counts.get(key, 0) + 1
        counts[key] = count
        entries = maps.get(key)
        if entries is None:
            maps[key] = entries = {}
        for slot in range(4):
            entries[slot] = count + slot
    elapsed, elapsed_cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"records_per_s": keys / elapsed, "records_per_cpu_s": keys / elapsed_cpu, "peak_rss_mb": peak_rss_mb()}


def measured(keys: int, kind: str, memory: int | None = None) -> dict[str, Any]:
    """Load ``keys`` keys through a keyed process function on backend ``kind``, checkpoint fully
    while 1% of the keys change, then checkpoint again (incrementally); with ``memory`` bytes as
    the subtask's budget (managed memory for RocksDB, task heap for the heap)."""
    from slipstream.datastream.functions import KeyedProcessFunction
    from slipstream.datastream.job_spec import RuntimeOptions
    from slipstream.datastream.state import MapStateDescriptor, ValueStateDescriptor
    from slipstream.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend
    from slipstream.operators.memory import MemoryBudgets
    from slipstream.runtime.checkpoint.coordinator import MERGE_BUDGET, CheckpointWriter
    from slipstream.runtime.checkpoint.manifest import Manifest
    from slipstream.runtime.checkpoint.snapshot import OperatorSnapshot
    from slipstream.runtime.checkpoint.storage import CheckpointStorage
    from slipstream.runtime.state import create_keyed_backend

    budgets = None if memory is None else MemoryBudgets.of(RuntimeOptions(managed_memory=memory,
                                                                          task_heap_memory=memory))
    backend = create_keyed_backend(EmbeddedRocksDBStateBackend() if kind == "rocksdb" else HashMapStateBackend(),
                                   MAX_PARALLELISM, lambda: int(time.time() * 1000), budgets, "the benchmark")

    class Counting(KeyedProcessFunction):
        def __init__(self) -> None:
            self.count = backend.get_state(ValueStateDescriptor("count"))
            self.slots = backend.get_state(MapStateDescriptor("slots"))

        def process_element(self, value: Any, ctx: Any) -> None:
            count = (self.count.value() or 0) + 1
            self.count.update(count)
            for slot in range(4):
                self.slots.put(slot, count + slot)

    function = Counting()
    set_key, process = backend.set_current_key, function.process_element
    longest_turn = 0.0

    def turn(records: list[int]) -> float:
        """Process ``records`` as one turn of the task; its wall time."""
        started = time.perf_counter()
        for key in records:
            set_key(key)
            process(key, None)
        backend.account_memory()
        return time.perf_counter() - started

    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, keys, TURN):
        longest_turn = max(longest_turn, turn(list(range(start, min(start + TURN, keys)))))
    records_per_s, records_per_cpu_s = keys / (time.perf_counter() - started), keys / (time.process_time() - cpu)
    storage = CheckpointStorage(tempfile.mkdtemp(prefix="slipstream-state-bench-"))
    changed = random.Random(7).sample(range(keys), int(keys * CHANGED))

    def checkpoint(checkpoint_id: int, records: list[int]) -> tuple[int, float, float]:
        """One checkpoint while ``records`` are processed turn by turn: its size, the freeze's
        pause and the longest turn until the writer is done and the changes are merged back."""
        started, cpu = time.perf_counter(), time.thread_time()
        view = backend.freeze()
        freeze_cpu = time.thread_time() - cpu
        snapshot = OperatorSnapshot("op", "KeyedProcess", 0, 1, MAX_PARALLELISM, view, (0, MAX_PARALLELISM), None)
        writer = CheckpointWriter(storage, Manifest(checkpoint_id, "state", "fp", 0, "EXACTLY_ONCE"), [snapshot])
        writer.start()
        freeze = time.perf_counter() - started
        longest, position = freeze, 0
        released = False
        while not released or backend.merging:
            turn_started = time.perf_counter()
            if writer.finished and not released:
                if writer.error is not None:
                    raise writer.error
                backend.release()
                released = True
            elif released:
                backend.merge_some(MERGE_BUDGET)
            if position < len(records):
                turn(records[position:position + TURN])
                position += TURN
            longest = max(longest, time.perf_counter() - turn_started)
            if not released and position >= len(records):
                time.sleep(0.001)
        turn(records[position:])
        return writer.size_bytes, freeze_cpu, longest

    full, freeze_full, pause_full = checkpoint(1, changed)
    incremental, freeze_incremental, pause_incremental = checkpoint(2, [])
    storage.remove_all()
    backend.dispose()
    return {"records_per_s": records_per_s, "records_per_cpu_s": records_per_cpu_s, "peak_rss_mb": peak_rss_mb(),
            "full_bytes": full, "incremental_bytes": incremental,
            "freeze_ms": max(freeze_full, freeze_incremental) * 1000,
            "pause_ms": max(pause_full, pause_incremental) * 1000, "turn_without_ms": longest_turn * 1000}


def child(keys: int, kind: str, memory: str | None) -> dict[str, Any]:
    """One configuration in a process of its own."""
    result = subprocess.run([sys.executable, __file__, "--child", kind, str(keys),
                             *(["--managed-memory", memory] if memory else [])], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise SystemExit(f"{kind} at {keys:,} keys failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--backends", nargs="+", default=["hashmap", "rocksdb"], choices=["hashmap", "rocksdb"])
    parser.add_argument("--managed-memory", help="each backend's memory budget, e.g. 512mb (default: none)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        from slipstream.datastream.pipeline_options import MANAGED, parse_memory_size
        kind, keys = args.child[0], int(args.child[1])
        memory = None if args.managed_memory is None else parse_memory_size(args.managed_memory, MANAGED)
        from slipstream.errors import MemoryBudgetError
        try:
            print(json.dumps(baseline(keys) if kind == "baseline" else measured(keys, kind, memory)))
        except MemoryBudgetError as error:  # the heap past its budget: a row of its own, not the end of the run
            print(json.dumps({"error": str(error)}))
        return
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load {os.getloadavg()[0]:.1f}")
    print(f"{'keys':>11} {'backend':>9} {'records/s':>10} {'per CPU s':>10} {'peak RSS':>9} {'full ckpt':>10} "
          f"{'incr. 1%':>9} {'incr/full':>9} {'freeze':>8} {'pause':>8} {'turn w/o':>8}")
    rows = []
    for keys in args.keys:
        for kind in ["baseline", *args.backends]:
            row = child(keys, kind, args.managed_memory)
            if "error" in row:
                print(f"{keys:>11,} {kind:>9} failed: {row['error']}", flush=True)
                continue
            line = (f"{keys:>11,} {kind:>9} {row['records_per_s']:>10,.0f} {row['records_per_cpu_s']:>10,.0f} "
                    f"{row['peak_rss_mb']:>7,.0f}MB")
            if kind != "baseline":
                line += (f" {row['full_bytes'] / 1e6:>8,.1f}MB {row['incremental_bytes'] / 1e6:>7,.2f}MB "
                         f"{row['incremental_bytes'] / row['full_bytes']:>9.2%} {row['freeze_ms']:>6,.1f}ms "
                         f"{row['pause_ms']:>6,.1f}ms {row['turn_without_ms']:>6,.1f}ms")
                rows.append((keys, kind, row))
            print(line, flush=True)
    print_aims(rows)


def print_aims(rows: list[tuple[int, str, dict[str, Any]]]) -> None:
    """The issue's aims, and for each measured row whether it meets them."""
    print(f"\naims: the task stops (freeze) < {PAUSE_AIM_MS} ms at {PAUSE_AIM_KEYS:,} keys; an incremental "
          f"checkpoint of {CHANGED:.0%} changed keys < {INCREMENTAL_AIM:.0%} of a full one; {RSS_AIM_KEYS:,} keys "
          f"on RocksDB within {RSS_AIM_MB:,} MB of RSS; KMeans with checkpoints every 500 ms >= 90% of its speed "
          "without (benchmarks/iteration.py)")
    for keys, kind, row in rows:
        verdicts = [f"incremental {row['incremental_bytes'] / row['full_bytes']:.2%} "
                    f"{_met(row['incremental_bytes'] < INCREMENTAL_AIM * row['full_bytes'])}"]
        if keys == PAUSE_AIM_KEYS:
            verdicts.append(f"freeze {row['freeze_ms']:.1f} ms {_met(row['freeze_ms'] < PAUSE_AIM_MS)}")
        if keys == RSS_AIM_KEYS and kind == "rocksdb":
            verdicts.append(f"peak RSS {row['peak_rss_mb']:,.0f} MB {_met(row['peak_rss_mb'] <= RSS_AIM_MB)}")
        print(f"{keys:>11,} {kind:>9}: " + "; ".join(verdicts))


def _met(holds: bool) -> str:
    return "met" if holds else "MISSED"


if __name__ == "__main__":
    main()

"""Size of an incremental checkpoint against a full one: keyed state of ``--keys`` keys (a value
state of ints and one of rows, as the latency benchmark's profiles), checkpointed once, then
``--changed`` of the keys read and updated (as the latency benchmark's records do) and checkpointed again; prints the bytes each wrote and the
writer's time.

Run: ``python benchmarks/incremental_size.py [--keys 1000000] [--changed 0.01]``.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.typeinfo import Row
from slipstream.runtime.checkpoint.manifest import Manifest
from slipstream.runtime.checkpoint.snapshot import OperatorSnapshot, build_manifest_and_files, commit_keyed
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend

MAX_PARALLELISM = 128


def checkpoint(storage: CheckpointStorage, backend: HeapKeyedStateBackend, checkpoint_id: int) -> tuple[int, float]:
    """Write one checkpoint of ``backend`` as the coordinator does; the bytes written and seconds taken."""
    started = time.perf_counter()
    manifest = Manifest(checkpoint_id, "size", "fp", 0, "EXACTLY_ONCE")
    snapshots = [OperatorSnapshot("op", "KeyedProcess", 0, 1, MAX_PARALLELISM, backend.freeze(),
                                  (0, MAX_PARALLELISM), None)]
    files, shared = build_manifest_and_files(manifest, snapshots)
    storage.write(manifest, files, shared)
    commit_keyed(snapshots)
    storage.prune(checkpoint_id)
    backend.release()
    return sum(len(data) for data in [*files.values(), *shared.values()]), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--changed", type=float, default=0.01, help="share of the keys changed")
    args = parser.parse_args()
    backend = HeapKeyedStateBackend(MAX_PARALLELISM)
    seen, profile = backend.get_state(ValueStateDescriptor("seen")), backend.get_state(ValueStateDescriptor("profile"))
    for key in range(args.keys):
        backend.set_current_key(key)
        seen.update(key % 7)
        profile.update(Row(user_id=key, segment="retail", avg_amount=key % 997 / 10, credit_limit=500.0))
    storage = CheckpointStorage(tempfile.mkdtemp(prefix="slipstream-incremental-"))
    full, full_s = checkpoint(storage, backend, 1)
    for key in random.Random(7).sample(range(args.keys), int(args.keys * args.changed)):
        backend.set_current_key(key)
        seen.update(seen.value() + 1 if profile.value() is not None else 0)  # a row read may be changed in place: written too
    incremental, incremental_s = checkpoint(storage, backend, 2)
    print(f"load {os.getloadavg()[0]:.2f}; {args.keys:,} keys, {args.changed:.1%} changed")
    print(f"full checkpoint:        {full:>12,} bytes, written in {full_s * 1000:,.0f} ms")
    print(f"incremental checkpoint: {incremental:>12,} bytes, written in {incremental_s * 1000:,.0f} ms "
          f"({incremental / full:.2%} of the full one)")
    storage.remove_all()


if __name__ == "__main__":
    main()

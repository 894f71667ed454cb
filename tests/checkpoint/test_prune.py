"""Pruning retained checkpoints: the shared files no complete checkpoint lists are deleted, and each
manifest is read once per storage, not once per checkpoint taken (a job retaining hundreds of
checkpoints read them all after every one: its checkpoints slowed from 15 ms to 600 ms)."""

from __future__ import annotations

import os
from collections import Counter

from slipstream.runtime.checkpoint.manifest import MANIFEST_NAME, SHARED_DIR, Manifest, sha256_hex
from slipstream.runtime.checkpoint.storage import CheckpointStorage


def shared_name(content: str) -> str:
    """The file name of a shared file holding ``content`` (its SHA-256)."""
    return f"{sha256_hex(content.encode())}.seg"


def write_checkpoint(storage: CheckpointStorage, checkpoint_id: int, contents: list[str]) -> None:
    """Checkpoint ``checkpoint_id`` with one state file and a shared file for each of ``contents``."""
    shared = {f"{SHARED_DIR}/{shared_name(content)}": memoryview(content.encode()) for content in contents}
    manifest = Manifest(checkpoint_id, "job", "fingerprint", 0, "STREAMING",
                        shared={name: {"sha256": sha256_hex(data), "size": len(data)} for name, data in shared.items()})
    storage.write(manifest, {"op0-0.state.pkl": b"state"}, shared)
    storage.prune(checkpoint_id)


def counting_manifest_reads(storage: CheckpointStorage) -> Counter:
    """Count, per checkpoint directory, the manifests ``storage`` reads from now on."""
    reads: Counter = Counter()
    read_file = storage.fs.read_file

    def counted(path: str, *args, **kwargs):
        if os.path.basename(path) == MANIFEST_NAME:
            reads[os.path.basename(os.path.dirname(path))] += 1
        return read_file(path, *args, **kwargs)
    storage.fs.read_file = counted  # type: ignore[method-assign]
    return reads


def shared_files(directory) -> set[str]:
    return set(os.listdir(directory / SHARED_DIR))


def test_pruning_keeps_what_the_retained_checkpoints_list_and_reads_no_manifest_it_wrote(tmp_path):
    storage = CheckpointStorage(str(tmp_path), num_retained=3)
    reads = counting_manifest_reads(storage)
    for checkpoint_id in range(1, 41):
        write_checkpoint(storage, checkpoint_id, ["common", f"own-{checkpoint_id}"])
    assert storage.complete_ids() == [38, 39, 40]
    assert shared_files(tmp_path) == {shared_name(content) for content in ("common", "own-38", "own-39", "own-40")}
    assert not reads


def test_a_new_storage_reads_each_retained_manifest_once(tmp_path):
    first = CheckpointStorage(str(tmp_path), num_retained=100)
    for checkpoint_id in range(1, 31):
        write_checkpoint(first, checkpoint_id, [f"own-{checkpoint_id}"])
    (tmp_path / SHARED_DIR / shared_name("orphan")).write_bytes(b"orphan")
    again = CheckpointStorage(str(tmp_path), num_retained=100)  # as after a restart
    reads = counting_manifest_reads(again)
    for checkpoint_id in range(31, 61):
        write_checkpoint(again, checkpoint_id, [f"own-{checkpoint_id}"])
    assert reads == Counter({f"chk-{checkpoint_id:06d}": 1 for checkpoint_id in range(1, 31)})
    assert shared_files(tmp_path) == {shared_name(f"own-{checkpoint_id}") for checkpoint_id in range(1, 61)}

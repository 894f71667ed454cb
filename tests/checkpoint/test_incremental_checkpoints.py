"""Incremental checkpoints of both state backends: a checkpoint writes only the entries changed since
the previous completed one and shares the other files, content-addressed; every checkpoint that
lists a shared file checks it; pruning keeps every file a retained checkpoint lists; restore (also
at another parallelism) folds the layers."""

from __future__ import annotations

import json
import os
import random

import pytest
from click.testing import CliRunner

from slipstream.cli.main import main as cli
from slipstream.datastream.state import ListStateDescriptor, ValueStateDescriptor
from slipstream.errors import CorruptCheckpointError
from slipstream.runtime.checkpoint.fs import FaultInjectingFileSystem, SimulatedCrash
from slipstream.runtime.checkpoint.manifest import MANIFEST_NAME, Manifest
from slipstream.runtime.checkpoint import snapshot as snapshot_module
from slipstream.runtime.checkpoint.recovery import find_restore_point
from slipstream.runtime.checkpoint.snapshot import (
    OperatorSnapshot,
    build_manifest_and_files,
    commit_keyed,
    keyed_layers,
)
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.clock import SystemClock
from slipstream.runtime.key_groups import key_group_range
from slipstream.runtime.state import create_keyed_backend
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend, KeyedBackendBase
from test_kill_recovery import run_until_done

MAX_PARALLELISM = 128
KEYS = 10_000
COUNT, SEEN = ValueStateDescriptor("count"), ListStateDescriptor("seen")


def new_backend() -> KeyedBackendBase:
    """A backend of the kind the reliability suite runs on (see conftest.py)."""
    return create_keyed_backend(None, MAX_PARALLELISM, SystemClock().now_ms)


class Subtask:
    """One keyed subtask's backend, checkpointed into a storage the way the coordinator does, with
    its state as a plain dict beside it (the oracle)."""

    def __init__(self, storage: CheckpointStorage) -> None:
        self.storage, self.backend, self.next_id = storage, new_backend(), 1
        self.expected: dict[str, dict] = {"count": {}, "seen": {}}

    def put(self, key: int, count: int | None, seen: int | None = None) -> None:
        self.backend.set_current_key(key)
        self.backend.get_state(COUNT).update(count)
        if count is None:
            self.expected["count"].pop(key, None)
        else:
            self.expected["count"][key] = count
        if seen is not None and key in self.expected["seen"]:
            self.backend.get_state(SEEN).get().append(seen)  # in place, in the list read from state
        elif seen is not None:
            self.backend.get_state(SEEN).add(seen)
        if seen is not None:
            self.expected["seen"].setdefault(key, []).append(seen)

    def freeze(self) -> tuple[Manifest, list[OperatorSnapshot]]:
        manifest = Manifest(self.next_id, "job", "fp", 0, "EXACTLY_ONCE")
        self.next_id += 1
        return manifest, [OperatorSnapshot("op", "KeyedProcess", 0, 1, MAX_PARALLELISM, self.backend.freeze(),
                                           (0, MAX_PARALLELISM), None)]

    def write(self, manifest: Manifest, snapshots: list[OperatorSnapshot]) -> dict[str, int]:
        """Write the frozen checkpoint and release the state; the bytes of the new shared files."""
        files, shared = build_manifest_and_files(manifest, snapshots)
        self.storage.write(manifest, files, shared)
        commit_keyed(snapshots)
        self.storage.prune(manifest.checkpoint_id)
        self.backend.release()
        return {name: len(data) for name, data in shared.items()}

    def checkpoint(self) -> dict[str, int]:
        return self.write(*self.freeze())


def restored(storage: CheckpointStorage, checkpoint_id: int, key_groups: range | None = None) -> dict[str, dict]:
    """The state of a checkpoint as a fresh backend restores it (only ``key_groups``: a rescaled subtask)."""
    checkpoint = storage.read_verified(storage.path_of(checkpoint_id), "fp")
    subtask = checkpoint.manifest.operators["op"].subtasks[0]
    backend = new_backend()
    for layer in keyed_layers(subtask, checkpoint.files, checkpoint.path):
        backend.restore(layer, key_groups=key_groups)
    return {name: {key: value for entries in groups.values() for key, value in entries}
            for name, groups in backend.snapshot().items()}


def filled(tmp_path, retained: int = 1) -> Subtask:
    subtask = Subtask(CheckpointStorage(str(tmp_path / "chk"), retained))
    for key in range(KEYS):
        subtask.put(key, key, seen=key)
    return subtask


def change_one_percent(subtask: Subtask, rng: random.Random) -> None:
    """Updates, removals, in-place list appends and new keys: 1% of the keys in all."""
    for key in rng.sample(range(KEYS), KEYS // 100 - 10):
        subtask.put(key, rng.randrange(1000), seen=rng.randrange(1000))
    for key in rng.sample(range(KEYS), 5):
        subtask.put(key, None)
    for key in range(KEYS, KEYS + 5):
        subtask.put(key, key)


def test_a_checkpoint_after_one_percent_of_changes_writes_only_those_and_restores_exactly(tmp_path):
    subtask = filled(tmp_path)
    full = sum(subtask.checkpoint().values())
    change_one_percent(subtask, random.Random(1))
    written = sum(subtask.checkpoint().values())
    assert written < 0.05 * full, (written, full)
    manifest = subtask.storage.read_verified(subtask.storage.path_of(2), "fp").manifest
    assert len(manifest.operators["op"].subtasks[0].keyed_deltas) == 1
    assert restored(subtask.storage, 2) == subtask.expected


@pytest.mark.parametrize("parallelism", [2, 4])
def test_the_layers_restore_at_another_parallelism(tmp_path, parallelism):
    subtask = filled(tmp_path)
    rng = random.Random(parallelism)
    for _ in range(3):
        subtask.checkpoint()
        change_one_percent(subtask, rng)
    subtask.checkpoint()
    union: dict[str, dict] = {"count": {}, "seen": {}}
    for index in range(parallelism):
        for name, table in restored(subtask.storage, 4, key_group_range(MAX_PARALLELISM, parallelism, index)).items():
            assert not set(table) & set(union[name]), "a key restored by two subtasks"
            union[name].update(table)
    assert union == subtask.expected


def test_changes_made_while_a_checkpoint_is_written_are_in_the_next(tmp_path):
    subtask = filled(tmp_path)
    subtask.checkpoint()
    manifest, snapshots = subtask.freeze()
    at_barrier = {name: dict(table) for name, table in subtask.expected.items()}
    at_barrier["seen"] = {key: list(values) for key, values in subtask.expected["seen"].items()}
    subtask.put(1, 111, seen=7)  # while frozen: goes to the delta
    subtask.put(2, None)
    subtask.write(manifest, snapshots)
    assert restored(subtask.storage, 2) == at_barrier
    subtask.put(3, 333)  # after the release, while merging or merged
    subtask.checkpoint()
    assert restored(subtask.storage, 3) == subtask.expected


def test_a_checkpoint_that_fails_leaves_its_changes_to_the_next(tmp_path):
    subtask = filled(tmp_path)
    subtask.checkpoint()
    change_one_percent(subtask, random.Random(3))
    subtask.freeze()
    subtask.backend.release()  # given up: never written
    subtask.put(5, 55)
    subtask.checkpoint()
    assert restored(subtask.storage, 3) == subtask.expected
    assert len(subtask.storage.read_verified(subtask.storage.path_of(3), "fp").manifest
               .operators["op"].subtasks[0].keyed_deltas) == 1


def listed_shared(storage: CheckpointStorage, checkpoint_id: int) -> set[str]:
    with open(os.path.join(storage.path_of(checkpoint_id), MANIFEST_NAME)) as handle:
        return set(json.load(handle)["shared"])


def test_a_damaged_shared_file_is_refused_by_every_checkpoint_that_lists_it_and_older_ones_restore(tmp_path):
    subtask = filled(tmp_path, retained=4)
    rng = random.Random(4)
    subtask.checkpoint()  # 1: every entry
    change_one_percent(subtask, rng)
    subtask.checkpoint()  # 2: the changes since 1
    older = restored(subtask.storage, 2)
    for _ in range(2):
        change_one_percent(subtask, rng)
        subtask.checkpoint()  # 3 and 4 list 2's changes too
    storage = subtask.storage
    damaged = sorted(listed_shared(storage, 2) - listed_shared(storage, 1))[0]
    assert all(damaged in listed_shared(storage, i) for i in (3, 4))
    with open(os.path.join(storage.directory, damaged), "r+b") as handle:
        handle.seek(40)
        byte = handle.read(1)
        handle.seek(40)
        handle.write(bytes([byte[0] ^ 0x01]))
    for checkpoint_id in (2, 3, 4):
        with pytest.raises(CorruptCheckpointError, match="checksum") as caught:
            storage.read_verified(storage.path_of(checkpoint_id), "fp")
        assert caught.value.file == damaged and caught.value.checkpoint == storage.path_of(checkpoint_id)
    assert find_restore_point(storage, "latest", "fp").checkpoint_id == 1
    assert restored(storage, 1) != older  # checkpoint 1 is the state before the changes
    report = CliRunner().invoke(cli, ["checkpoints", "verify", storage.directory])
    assert "chk-000001: OK" in report.output
    assert all(f"chk-00000{i}: DAMAGED" in report.output and damaged in report.output for i in (2, 3, 4))


def test_pruning_keeps_exactly_the_files_the_retained_checkpoints_list(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot_module, "MAX_DELTAS", 3)  # every fourth checkpoint writes every entry again
    subtask = filled(tmp_path, retained=2)
    storage, rng, first_base = subtask.storage, random.Random(5), None
    for _ in range(9):
        subtask.checkpoint()
        first_base = first_base or listed_shared(storage, 1)
        change_one_percent(subtask, rng)
        retained = storage.complete_ids()
        on_disk = {f"shared/{name}" for name in os.listdir(os.path.join(storage.directory, "shared"))}
        assert on_disk == set().union(*(listed_shared(storage, i) for i in retained))
    assert not first_base & on_disk, "the first base went once no retained checkpoint listed it"
    subtask.checkpoint()
    assert restored(storage, 10) == subtask.expected


def test_inspect_lists_the_shared_files_and_layers(tmp_path):
    subtask = filled(tmp_path)
    subtask.checkpoint()
    change_one_percent(subtask, random.Random(6))
    subtask.checkpoint()
    report = CliRunner().invoke(cli, ["checkpoints", "inspect", subtask.storage.path_of(2)])
    assert report.exit_code == 0, report.output
    for name in listed_shared(subtask.storage, 2):
        assert name in report.output
    assert "shared files (" in report.output and "changes 1" in report.output


def test_sigkill_with_incremental_checkpoints_gives_exactly_once_output(tmp_path):
    """Killed while checkpoints share files and add layers of changes: nothing lost or duplicated.
    The first kill lands just after a checkpoint with layers completed, each later one just after
    the restarted job completed a checkpoint of its own. (Most of the job's checkpoints have layers:
    after its first pass over the keys it changes a few hot ones; a run that ends before a layered
    checkpoint was seen is checked too, and another one started.)"""
    layered: list[bool] = []
    restored_from: list[int] = []

    def latest(checkpoints: str) -> tuple[int, bool]:
        """The latest complete checkpoint's id (0: none) and whether it has layers of changes."""
        storage = CheckpointStorage(checkpoints)
        for checkpoint_id in storage.complete_ids()[-1:]:
            with open(os.path.join(storage.path_of(checkpoint_id), MANIFEST_NAME)) as handle:
                body = json.load(handle)
            return checkpoint_id, any(s["keyed_deltas"] for op in body["operators"].values() for s in op["subtasks"])
        return 0, False

    def after_kill(checkpoints: str) -> None:
        checkpoint_id, with_layers = latest(checkpoints)
        layered.append(with_layers)
        restored_from.append(checkpoint_id)

    def kill_soon(checkpoints: str) -> bool:
        checkpoint_id, with_layers = latest(checkpoints)
        return checkpoint_id > restored_from[-1] if restored_from else with_layers

    rng = random.Random("kill-incremental")
    for attempt in range(5):  # on a loaded machine a full checkpoint may complete between the layered one and the kill
        layered.clear()
        restored_from.clear()
        if run_until_done("wide", 400_000, str(tmp_path / f"run{attempt}"), rng, 3, async_writes=True,
                          after_kill=after_kill, delays=(0.0, 0.1), kill_after=kill_soon) and layered[0]:
            break
    assert len(layered) == 3
    assert layered[0], layered


def test_every_crash_point_of_an_incremental_checkpoint_leaves_the_old_or_the_new_one(tmp_path):
    def first(directory) -> tuple[Subtask, dict]:
        subtask = Subtask(CheckpointStorage(str(directory), 1))
        for key in range(2_000):
            subtask.put(key, key, seen=key)
        subtask.checkpoint()
        at_first = restored(subtask.storage, 1)
        change_one_percent(subtask, random.Random(7))
        return subtask, at_first

    counter = FaultInjectingFileSystem()
    subtask, _ = first(tmp_path / "count")
    subtask.storage = CheckpointStorage(subtask.storage.directory, 1, counter)
    subtask.checkpoint()
    assert any(op.startswith("rename") for op in counter.operations)
    outcomes = set()
    for crash_after in range(1, len(counter.operations) + 1):
        subtask, at_first = first(tmp_path / f"crash{crash_after}")
        directory = subtask.storage.directory
        subtask.storage = CheckpointStorage(directory, 1, FaultInjectingFileSystem(crash_after))
        with pytest.raises(SimulatedCrash):
            subtask.checkpoint()
        storage = CheckpointStorage(directory, 1)
        found = find_restore_point(storage, "latest", "fp")
        expected = at_first if found.checkpoint_id == 1 else subtask.expected
        assert restored(storage, found.checkpoint_id) == expected, f"crash after {counter.operations[crash_after - 1]}"
        outcomes.add(found.checkpoint_id)
    assert outcomes == {1, 2}


def test_changes_are_tracked_only_from_the_first_freeze_on():
    """A job without checkpoints keeps no set of every key it wrote; after a freeze, changes are tracked."""
    backend = HeapKeyedStateBackend(MAX_PARALLELISM)
    get, put = backend.value_accessors(COUNT)
    for key in range(1_000):
        backend.set_current_key(key)
        backend.get_state(COUNT).update(key)
        put(key, key + 1)
    assert backend._dirty is None
    backend.freeze()
    backend.release()
    backend.set_current_key(3)
    backend.get_state(COUNT).update(0)
    assert backend._dirty == {"count": {3}}

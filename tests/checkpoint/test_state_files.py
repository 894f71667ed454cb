"""Keyed state files: Arrow IPC when keys and values are primitives, pickle per state otherwise;
both verified against the manifest before anything is read."""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest
from crash_job import build, oracle
from test_kill_recovery import committed_output

from slipstream.errors import CorruptCheckpointError
from slipstream.runtime.checkpoint import state_files
from slipstream.runtime.checkpoint.state_files import (
    ARROW,
    PICKLE,
    decode_state_file,
    encode_keyed_state,
)
from slipstream.runtime.checkpoint.storage import CheckpointStorage


@pytest.mark.parametrize("entries", [
    {0: [(1, 10), (2, -3)], 5: [(7, 1 << 62)]},
    {1: [("a", 1.5), ("b", float("inf"))]},
    {2: [(b"k", b"\x00v"), (b"l", None)]},
    {3: [(True, "x"), (False, None)]},
    {},
])
def test_primitive_state_is_written_as_arrow_and_round_trips(entries):
    [(name, kind, data)] = encode_keyed_state({"s": entries})
    assert (name, kind) == ("s", ARROW)
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()  # plain Arrow: any Arrow reader opens it
    assert table.column_names == ["key_group", "key", "value"]
    assert decode_state_file(kind, data) == entries


@pytest.mark.parametrize("entries", [
    {0: [(1, 1), ("a", 2)]},            # keys of two types
    {0: [(1, 1), (2, 2.5)]},            # int and float values: Arrow would turn 1 into 1.0
    {0: [(1, True), (2, 3)]},           # bool is not int
    {0: [(1, 1 << 70)]},                # beyond 64 bits
    {0: [(1, (1, 2))]},                 # a tuple (reduce state)
    {0: [(1, [1, 2])]},                 # list state
    {0: [((1, "window"), 5)]},          # a namespaced key
    {0: [(None, 5)]},                   # a None key
])
def test_other_state_falls_back_to_pickle_per_state_and_round_trips(entries):
    parts = encode_keyed_state({"odd": entries, "plain": {0: [(1, 2)]}})
    assert [(name, kind) for name, kind, _ in parts] == [("odd", PICKLE), ("plain", ARROW)]
    assert decode_state_file(PICKLE, parts[0][2]) == entries


def run_union(root: str, restore: str | None = None) -> None:
    build("union", os.path.join(root, "out"), os.path.join(root, "chk"), 6_000, interval_ms=None,
          records=500).execute("union", restore_from=restore)


@pytest.fixture(scope="module")
def union_job(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("union"))
    run_union(root)
    return root


def arrow_files(checkpoint: str) -> list[str]:
    return sorted(name for name in os.listdir(checkpoint) if name.endswith(".arrow"))


def test_a_jobs_value_state_is_checkpointed_as_arrow(union_job):
    storage = CheckpointStorage(os.path.join(union_job, "chk"))
    latest = storage.path_of(storage.complete_ids()[-1])
    names = arrow_files(latest)
    assert names, os.listdir(latest)  # the KeyedProcessFunction's ValueState[int] of int keys
    manifest = storage.read_verified(latest, None).manifest
    listed = [f for entry in manifest.operators.values() for s in entry.subtasks for f in s.keyed_states]
    assert {f["file"] for f in listed if f["format"] == "arrow"} == set(names)
    assert {f["state"] for f in listed if f["format"] == "arrow"} == {"count"}
    counts = pa.concat_tables(pa.ipc.open_file(os.path.join(latest, name)).read_all() for name in names)
    assert sorted(counts.column("key").to_pylist()) == list(range(13))



def test_arrow_state_restores_after_a_failure(tmp_path):
    """The job's counts come back from the Arrow files: a lost or doubled count breaks the oracle."""
    from slipstream.datastream import RestartStrategies

    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    seen = []

    def fail(value):
        seen.append(value)
        if len(seen) == 4_000:
            raise RuntimeError("injected")
    env = build("union", out, chk, 6_000, interval_ms=None, records=500,
                restart=RestartStrategies.fixed_delay_restart(1, 0), fail=fail)
    result = env.execute("restart")
    assert result.get_accumulator_result("checkpoints")["restarts"] == 1
    assert committed_output(out) == oracle("union", 6_000)


def test_a_damaged_arrow_state_file_is_caught_before_it_is_read(union_job, tmp_path, monkeypatch):
    copy = str(tmp_path / "copy")
    shutil.copytree(union_job, copy)
    storage = CheckpointStorage(os.path.join(copy, "chk"))
    latest = storage.path_of(storage.complete_ids()[-1])
    name = arrow_files(latest)[0]
    path = os.path.join(latest, name)
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    data[len(data) // 2] ^= 0xFF
    with open(path, "wb") as handle:
        handle.write(bytes(data))

    def refuse(*args, **kwargs):
        raise AssertionError("a state file was read before the checkpoint was verified")
    monkeypatch.setattr(state_files.pa.ipc, "open_file", refuse)
    monkeypatch.setattr(state_files.pickle, "loads", refuse)
    with pytest.raises(CorruptCheckpointError) as caught:
        run_union(copy, restore=latest)
    assert caught.value.file == name and "checksum" in str(caught.value)

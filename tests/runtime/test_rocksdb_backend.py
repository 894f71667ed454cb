"""The RocksDB keyed-state backend against the heap backend as oracle: every state kind, per key
and per namespace, values changed in place, checkpoints (full and incremental table files) that
keep the state as at the freeze while it changes, restores at other parallelisms, bulk loads."""

from __future__ import annotations

import copy
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_heap_backend import Average

from slipstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from slipstream.datastream.time import Time
from slipstream.runtime.checkpoint.state_files import SST, SstFile, decode_state_file
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.runtime.state import rocksdb_backend
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend
from slipstream.testing import ManualClock


def states(backend, namespaced: bool) -> dict:  # noqa: ANN001
    return {"value": backend.get_state(ValueStateDescriptor("v"), namespaced),
            "list": backend.get_state(ListStateDescriptor("l"), namespaced),
            "map": backend.get_state(MapStateDescriptor("m"), namespaced),
            "reducing": backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b), namespaced),
            "aggregating": backend.get_state(AggregatingStateDescriptor("a", Average()), namespaced)}


KEYS = st.one_of(st.integers(0, 5), st.sampled_from(["a", "b", ("t", 1), b"x", 2.5, None]))
OPERATION = st.tuples(st.sampled_from(["update", "clear", "add", "add_all", "put", "remove", "reduce", "aggregate",
                                       "mutate_value", "mutate_map", "list_update"]),
                      KEYS, st.sampled_from([None, "w1", ("w", 2)]), st.integers(0, 4))


def apply(backend, operation: tuple) -> object:  # noqa: ANN001
    """Do one operation and return what reading every state then gives."""
    kind, key, namespace, n = operation
    backend.set_current_key(key)
    handles = states(backend, namespace is not None)
    if namespace is not None:
        for handle in handles.values():
            handle.set_current_namespace(namespace)
    if kind == "update":
        handles["value"].update([n] if n % 2 else ("v", n))
    elif kind == "clear":
        list(handles.values())[n].clear()
    elif kind == "add":
        handles["list"].add(n)
    elif kind == "add_all":
        handles["list"].add_all([n, str(n)])
    elif kind == "list_update":
        handles["list"].update([n] * n)
    elif kind == "put":
        handles["map"].put(n, {"n": [n]})
    elif kind == "remove":
        handles["map"].remove(n)
    elif kind == "reduce":
        handles["reducing"].add(n)
    elif kind == "aggregate":
        handles["aggregating"].add(n)
    elif kind == "mutate_value" and isinstance(handles["value"].value(), list):
        handles["value"].value().append(n)  # changed in place, right away
    elif kind == "mutate_map" and handles["map"].get(n) is not None:
        handles["map"].get(n)["n"].append(n)
    return read(handles)


def read(handles: dict) -> tuple:
    return (handles["value"].value(), handles["list"].get(), sorted(handles["map"].items(), key=repr),
            handles["reducing"].get(), handles["aggregating"].get(), handles["map"].is_empty(),
            handles["map"].contains(1))


def unordered(snapshot: dict) -> dict:
    return {name: {group: sorted(pairs, key=repr) for group, pairs in groups.items() if pairs}
            for name, groups in snapshot.items() if any(groups.values())}


@pytest.fixture(autouse=True)
def small_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flush the write-back cache often, so the tests go through the database and the delta."""
    monkeypatch.setattr(rocksdb_backend, "FLUSH_ENTRIES", 3)


@given(st.lists(OPERATION, max_size=60))
@settings(max_examples=150, deadline=None)
def test_every_state_kind_reads_as_on_the_heap(operations: list) -> None:
    rocks, heap = RocksDBKeyedStateBackend(8), HeapKeyedStateBackend(8)
    for operation in operations:
        assert apply(rocks, operation) == apply(heap, operation)
    assert unordered(rocks.snapshot()) == unordered(heap.snapshot())
    assert {name: sorted(rocks.keys(name), key=repr) for name in "vlmra"} == \
        {name: sorted(heap.keys(name), key=repr) for name in "vlmra"}


def restored(layers: list[list[tuple]], max_parallelism: int, key_groups: range | None = None
             ) -> RocksDBKeyedStateBackend:
    """A fresh backend restored from checkpoint layers (each a list of (state, format, contents))."""
    backend = RocksDBKeyedStateBackend(max_parallelism)
    for layer in layers:
        backend.restore({name: decode_state_file(kind, bytes(data)) for name, kind, data in layer}, key_groups)
    return backend


@given(st.lists(st.tuples(st.lists(OPERATION, max_size=25), st.lists(OPERATION, max_size=10), st.booleans()),
                min_size=1, max_size=4))
@settings(max_examples=60, deadline=None)
def test_checkpoints_keep_the_state_of_their_freeze_and_restore_it_layer_by_layer(rounds: list) -> None:
    """Each round: changes, a freeze, changes while frozen, the layer written (every entry the
    first time, then only the changes), the release (a checkpoint that did not complete keeps its
    changes for the next). Restoring the completed layers gives the heap's state at that freeze."""
    rocks, heap = RocksDBKeyedStateBackend(8), HeapKeyedStateBackend(8)
    layers: list[list[tuple]] = []
    for before, during, completes in rounds:
        for operation in before:
            assert apply(rocks, operation) == apply(heap, operation)
        expected = copy.deepcopy(unordered(heap.snapshot()))  # the heap shares nested values with it
        view = rocks.freeze()
        for operation in during:
            assert apply(rocks, operation) == apply(heap, operation)
        files, _ = view.encode_layer(incremental=bool(layers))
        assert all(kind == SST for _, kind, _ in files)
        if completes:
            view.completed = "files"
            layers.append(files)
            assert unordered(restored(layers, 8).snapshot()) == expected
        rocks.release()
    assert unordered(rocks.snapshot()) == unordered(heap.snapshot())


def test_an_incremental_layer_holds_only_the_changed_entries() -> None:
    backend = RocksDBKeyedStateBackend(128)
    value = backend.get_state(ValueStateDescriptor("v"))
    for key in range(10_000):
        backend.set_current_key(key)
        value.update(key)
    view = backend.freeze()
    full, entries = view.encode_layer(False)
    view.completed = "base"
    backend.release()
    for key in range(0, 10_000, 100):
        backend.set_current_key(key)
        value.update(-key)
    view = backend.freeze()
    changes, changed = view.encode_layer(True)
    backend.release()
    assert (entries, changed) == (10_000, 100)
    assert len(changes[0][2]) < 0.05 * len(full[0][2])
    back = restored([full, changes], 128)
    handle = back.get_state(ValueStateDescriptor("v"))
    back.set_current_key(300)
    assert handle.value() == -300


@pytest.mark.parametrize("namespaced", [False, True])
def test_a_restore_at_another_parallelism_reads_only_its_key_groups(namespaced: bool) -> None:
    max_parallelism = 16
    backend = RocksDBKeyedStateBackend(max_parallelism)
    for key in range(200):
        apply(backend, ("update", key, "w" if namespaced else None, 1))
    files, _ = backend.freeze().encode_layer(False)
    owners = {}
    for subtask in range(3):
        groups = key_group_range(max_parallelism, 3, subtask)
        part = restored([files], max_parallelism, groups)
        for key in part.keys("v"):
            record_key = key[0] if namespaced else key
            assert assign_to_key_group(record_key, max_parallelism) in groups and record_key not in owners
            owners[record_key] = subtask
    assert sorted(owners) == list(range(200))


def test_a_heap_checkpoint_restores_into_rocksdb_and_bulk_loads_match_the_heap() -> None:
    heap = HeapKeyedStateBackend(8)
    for key in range(50):
        apply(heap, ("put", key, None, key % 4))
    rocks = RocksDBKeyedStateBackend(8)
    rocks.restore(heap.snapshot())
    assert unordered(rocks.snapshot()) == unordered(heap.snapshot())
    descriptor = ValueStateDescriptor("loaded")
    keys, values = list(range(1_000)), [None if k % 7 == 0 else (k, str(k)) for k in range(1_000)]
    for backend in (rocks, heap):
        backend.bulk_load(descriptor, keys, values)
    assert unordered(rocks.snapshot()) == unordered(heap.snapshot())


def test_bulk_loads_while_frozen_wait_for_the_release() -> None:
    backend = RocksDBKeyedStateBackend(8)
    view = backend.freeze()
    backend.bulk_load(ValueStateDescriptor("v"), [1, 2], ["a", "b"])
    assert view.encode_layer(False) == ([], 0)
    backend.release()
    assert sorted(backend.keys("v")) == [1, 2]


def test_the_database_directory_is_local_and_goes_with_the_backend(tmp_path) -> None:  # noqa: ANN001
    backend = RocksDBKeyedStateBackend(8, local_dir=str(tmp_path / "local"))
    apply(backend, ("update", 1, None, 1))
    directory = backend.directory
    assert os.path.dirname(directory) == str(tmp_path / "local") and os.listdir(directory)
    backend.dispose()
    assert not os.path.exists(directory)


def test_a_table_file_is_refused_by_the_heap_backend_naming_the_state() -> None:
    rocks = RocksDBKeyedStateBackend(8)
    apply(rocks, ("update", 1, None, 1))
    files, _ = rocks.freeze().encode_layer(False)
    with pytest.raises(Exception, match="state 'v' was checkpointed by EmbeddedRocksDBStateBackend"):
        HeapKeyedStateBackend(8).restore({name: SstFile(data) for name, _, data in files})


def test_ttl_incremental_cleanup_walks_the_database_a_page_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Going round every entry, it reads a page of keys at a time, never the whole key list."""
    monkeypatch.setattr(rocksdb_backend, "CLEANUP_PAGE", 4)
    clock = ManualClock()
    backend = RocksDBKeyedStateBackend(8, clock.now_ms)
    monkeypatch.setattr(backend, "keys", lambda name: pytest.fail("the cleanup listed every key"))
    ttl = StateTtlConfig.new_builder(Time.milliseconds(100)).cleanup_incrementally(3, True).build()
    descriptor = ValueStateDescriptor("v")
    descriptor.enable_time_to_live(ttl)
    state = backend.get_state(descriptor)
    for key in range(30):
        backend.set_current_key(key)
        state.update(key)
    clock.set(100)
    for key in range(10):  # 3 entries checked per new key: 30 entries in 10 records
        backend.set_current_key(("unseen", key))
    assert backend.snapshot() == {"v": {}}


def test_a_disposed_backend_closes_every_column_family_before_its_directory_goes() -> None:
    """Each column family's handle holds the database open: left open, the last one collected would
    flush into the removed directory, and RocksDB's error recovery held the thread a second."""
    backend = RocksDBKeyedStateBackend(8)
    backend.set_current_key(1)
    handles = states(backend, namespaced=False)
    handles["value"].update(3)
    handles["map"].put(1, 2)
    families, directory = list(backend._families), backend.directory
    assert len(families) >= 2
    backend._finalizer()
    assert not os.path.exists(directory)
    for family in families:
        with pytest.raises(Exception, match="closed"):
            family.get(b"any key")

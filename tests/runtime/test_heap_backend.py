"""The heap keyed-state backend: every state kind scoped per key and namespace; snapshots by key group;
frozen views that stay as they were while the state goes on (copy-on-write)."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream.functions import AggregateFunction
from slipstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend


class Average(AggregateFunction):
    def create_accumulator(self):  # noqa: ANN201
        return (0, 0)

    def add(self, value, accumulator):  # noqa: ANN001, ANN201
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):  # noqa: ANN001, ANN201
        return accumulator[0] / accumulator[1]


def descriptors() -> dict:
    return {
        "value": ValueStateDescriptor("v"),
        "list": ListStateDescriptor("l"),
        "map": MapStateDescriptor("m"),
        "reducing": ReducingStateDescriptor("r", lambda a, b: a + b),
        "aggregating": AggregatingStateDescriptor("a", Average()),
    }


def write_all(backend: HeapKeyedStateBackend, key: object, n: int, namespaced: bool = False,
              namespace: object = None) -> None:
    """Write ``n`` into every kind of state for ``key`` (and ``namespace``)."""
    backend.set_current_key(key)
    states = {kind: backend.get_state(d, namespaced) for kind, d in descriptors().items()}
    if namespaced:
        for state in states.values():
            state.set_current_namespace(namespace)
    states["value"].update(n)
    states["list"].add(n)
    states["list"].add(n + 1)
    states["map"].put("n", n)
    states["reducing"].add(n)
    states["reducing"].add(n)
    states["aggregating"].add(n)
    states["aggregating"].add(n + 2)


def read_all(backend: HeapKeyedStateBackend, key: object, namespaced: bool = False,
             namespace: object = None) -> dict:
    backend.set_current_key(key)
    states = {kind: backend.get_state(d, namespaced) for kind, d in descriptors().items()}
    if namespaced:
        for state in states.values():
            state.set_current_namespace(namespace)
    return {"value": states["value"].value(), "list": list(states["list"].get()),
            "map": dict(states["map"].items()), "reducing": states["reducing"].get(),
            "aggregating": states["aggregating"].get()}


def expected(n: int) -> dict:
    return {"value": n, "list": [n, n + 1], "map": {"n": n}, "reducing": 2 * n, "aggregating": n + 1}


EMPTY = {"value": None, "list": [], "map": {}, "reducing": None, "aggregating": None}


def test_every_state_kind_is_scoped_per_key() -> None:
    backend = HeapKeyedStateBackend(128)
    write_all(backend, "a", 10)
    write_all(backend, ("b", 2), 20)
    assert read_all(backend, "a") == expected(10)
    assert read_all(backend, ("b", 2)) == expected(20)
    assert read_all(backend, "c") == EMPTY


def test_every_state_kind_is_scoped_per_namespace() -> None:
    backend = HeapKeyedStateBackend(128)
    write_all(backend, "a", 1, namespaced=True, namespace="w1")
    write_all(backend, "a", 2, namespaced=True, namespace="w2")
    write_all(backend, "b", 3, namespaced=True, namespace="w1")
    assert read_all(backend, "a", True, "w1") == expected(1)
    assert read_all(backend, "a", True, "w2") == expected(2)
    assert read_all(backend, "b", True, "w1") == expected(3)
    assert read_all(backend, "b", True, "w2") == EMPTY
    assert read_all(backend, "a") == EMPTY  # the un-namespaced view of the same names is separate


def test_clear_removes_only_the_current_key_and_namespace() -> None:
    backend = HeapKeyedStateBackend(128)
    write_all(backend, "a", 1)
    write_all(backend, "b", 2)
    backend.set_current_key("a")
    for descriptor in descriptors().values():
        backend.get_state(descriptor).clear()
    assert read_all(backend, "a") == EMPTY
    assert read_all(backend, "b") == expected(2)


def test_value_state_update_none_clears_and_map_remove_drops_empty_maps() -> None:
    backend = HeapKeyedStateBackend(128)
    backend.set_current_key("k")
    value = backend.get_state(ValueStateDescriptor("v"))
    value.update(5)
    value.update(None)
    assert value.value() is None and backend.keys("v") == []
    mapping = backend.get_state(MapStateDescriptor("m"))
    mapping.put("x", 1)
    mapping.put_all({"y": 2})
    assert mapping.contains("x") and sorted(mapping.keys()) == ["x", "y"]
    mapping.remove("x")
    mapping.remove("y")
    assert mapping.is_empty() and backend.keys("m") == []


def test_list_state_update_replaces_and_refuses_none() -> None:
    backend = HeapKeyedStateBackend(128)
    backend.set_current_key("k")
    state = backend.get_state(ListStateDescriptor("l"))
    state.add_all([1, 2])
    state.update([3])
    assert list(state) == [3]
    with pytest.raises(ValueError, match="cannot add None"):
        state.add(None)
    state.update([])
    assert state.get() == [] and backend.keys("l") == []


def test_the_same_descriptor_name_returns_the_same_state() -> None:
    backend = HeapKeyedStateBackend(128)
    assert backend.get_state(ValueStateDescriptor("v")) is backend.get_state(ValueStateDescriptor("v"))


def test_same_name_with_another_kind_is_refused() -> None:
    backend = HeapKeyedStateBackend(128)
    backend.get_state(ValueStateDescriptor("s"))
    with pytest.raises(ValueError, match="'s' was registered as value state, now asked for as list state"):
        backend.get_state(ListStateDescriptor("s"))


KEYS = [f"user-{i}" for i in range(200)] + list(range(100)) + [("t", i) for i in range(50)]


def filled_backend(max_parallelism: int, namespaced: bool = False) -> HeapKeyedStateBackend:
    backend = HeapKeyedStateBackend(max_parallelism)
    for n, key in enumerate(KEYS):
        write_all(backend, key, n, namespaced, namespace="w" if namespaced else None)
    return backend


def test_snapshot_groups_entries_by_their_key_group() -> None:
    backend = filled_backend(16)
    snapshot = backend.snapshot()
    assert set(snapshot) == {"v", "l", "m", "r", "a"}
    for groups in snapshot.values():
        keys = [key for group, entries in groups.items() for key, _ in entries]
        assert sorted(map(repr, keys)) == sorted(map(repr, KEYS))
        for group, entries in groups.items():
            assert all(assign_to_key_group(key, 16) == group for key, _ in entries)


@pytest.mark.parametrize("namespaced", [False, True])
def test_restore_at_parallelism_two_puts_each_key_in_exactly_one_backend(namespaced: bool) -> None:
    max_parallelism = 16
    snapshot = filled_backend(max_parallelism, namespaced).snapshot()
    restored = []
    for subtask in range(2):
        backend = HeapKeyedStateBackend(max_parallelism)
        backend.restore(snapshot, key_group_range(max_parallelism, 2, subtask))
        restored.append(backend)
    namespace = "w" if namespaced else None
    for n, key in enumerate(KEYS):
        owner = 0 if assign_to_key_group(key, max_parallelism) in key_group_range(max_parallelism, 2, 0) else 1
        assert read_all(restored[owner], key, namespaced, namespace) == expected(n)
        assert read_all(restored[1 - owner], key, namespaced, namespace) == EMPTY
    sizes = [len(b.keys("v")) for b in restored]
    assert sum(sizes) == len(KEYS) and min(sizes) > 0


def test_restore_without_a_range_takes_everything() -> None:
    snapshot = filled_backend(8).snapshot()
    backend = HeapKeyedStateBackend(8)
    backend.restore(snapshot)
    for n, key in enumerate(KEYS):
        assert read_all(backend, key) == expected(n)


def test_a_snapshot_is_not_changed_by_later_updates() -> None:
    backend = HeapKeyedStateBackend(128)
    write_all(backend, "a", 1)
    snapshot = backend.snapshot()
    write_all(backend, "a", 5)  # appends to the list, puts into the map
    restored = HeapKeyedStateBackend(128)
    restored.restore(snapshot)
    assert read_all(restored, "a") == expected(1)
    write_all(restored, "a", 7)  # and restoring did not tie the new state to the snapshot
    again = HeapKeyedStateBackend(128)
    again.restore(snapshot)
    assert read_all(again, "a") == expected(1)


# -- freezing for a checkpoint written while the job goes on (copy-on-write) ---------------------------------
class Box:
    """A user object kept in state and changed in place."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and other.items == self.items

    def __repr__(self) -> str:
        return f"Box({self.items!r})"


def change_everything(backend: HeapKeyedStateBackend, namespaced: bool) -> None:
    """Every way to change state: updates, in-place adds and puts, removals, clears, new keys, and a
    user object and a list changed in place after being read."""
    namespace = "w" if namespaced else None
    for n, key in enumerate(KEYS[:120]):
        write_all(backend, key, n + 1000, namespaced, namespace)
    backend.set_current_key(KEYS[0])
    for descriptor in descriptors().values():
        state = backend.get_state(descriptor, namespaced)
        state.set_current_namespace(namespace)
        state.clear()
    backend.set_current_key(KEYS[1])
    mapping = backend.get_state(MapStateDescriptor("m"), namespaced)
    mapping.set_current_namespace(namespace)
    mapping.remove("n")
    write_all(backend, "a new key", 7, namespaced, namespace)
    boxes = backend.get_state(ValueStateDescriptor("box"), namespaced)
    boxes.set_current_namespace(namespace)
    for key in KEYS[:50]:
        backend.set_current_key(key)
        boxes.value().items.append("changed in place")
        values = backend.get_state(ListStateDescriptor("l"), namespaced)
        values.set_current_namespace(namespace)
        values.get().append(-1)


def with_boxes(backend: HeapKeyedStateBackend, namespaced: bool) -> HeapKeyedStateBackend:
    boxes = backend.get_state(ValueStateDescriptor("box"), namespaced)
    boxes.set_current_namespace("w" if namespaced else None)
    for key in KEYS:
        backend.set_current_key(key)
        boxes.update(Box([key]))
    return backend


def view_entries(view) -> dict:
    """What a checkpoint writer reads from a frozen view, as ``{state: {key group: entries}}``."""
    entries: dict = {}
    for name in view.names:
        state, groups = view.entries(name), entries.setdefault(name, {})
        for keys, values in state.chunks(7):
            for group, key, value in zip(state.key_groups(keys), keys, values):
                groups.setdefault(group, []).append((key, value))
    return entries


@pytest.mark.parametrize("namespaced", [False, True])
def test_a_frozen_view_keeps_the_state_as_it_was_while_the_state_changes(namespaced: bool) -> None:
    backend = with_boxes(filled_backend(16, namespaced), namespaced)
    twin = with_boxes(filled_backend(16, namespaced), namespaced)  # never frozen: the oracle
    before = copy.deepcopy(twin.snapshot())
    view = backend.freeze()
    change_everything(backend, namespaced)
    change_everything(twin, namespaced)
    assert view_entries(view) == before
    for key in KEYS + ["a new key"]:  # the live state already shows every change
        assert read_all(backend, key, namespaced, "w" if namespaced else None) == \
            read_all(twin, key, namespaced, "w" if namespaced else None)
    assert sorted(map(repr, backend.keys("v"))) == sorted(map(repr, twin.keys("v")))
    backend.release()
    assert unordered(backend.snapshot()) == unordered(twin.snapshot())


def test_value_accessors_of_a_frozen_state_write_beside_the_view() -> None:
    backend = HeapKeyedStateBackend(8)
    descriptor = ValueStateDescriptor("acc")
    get, put = backend.value_accessors(descriptor)
    put("k", [1])
    put("j", (1, 2))
    view = backend.freeze()
    get, put = backend.value_accessors(descriptor)
    get("k").append(2)  # a mutable value comes out as the live state's own copy
    put("j", (3, 4))
    put("new", [5])
    assert sorted(pair for pairs in view_entries(view)["acc"].values() for pair in pairs) == \
        [("j", (1, 2)), ("k", [1])]
    assert (get("k"), get("j"), get("new")) == ([1, 2], (3, 4), [5])
    backend.release()
    get, _ = backend.value_accessors(descriptor)
    assert (get("k"), get("j"), get("new")) == ([1, 2], (3, 4), [5])


def test_a_frozen_backend_cannot_be_frozen_again_until_released() -> None:
    backend = filled_backend(8)
    backend.freeze()
    with pytest.raises(Exception, match="already frozen"):
        backend.freeze()
    backend.release()
    backend.freeze()


OPERATIONS = st.lists(st.tuples(st.sampled_from(["update", "clear", "add", "put", "remove", "reduce", "mutate"]),
                                st.integers(0, 6), st.integers(0, 3)), max_size=40)


def apply(backend: HeapKeyedStateBackend, operations: list) -> None:
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    mapping = backend.get_state(MapStateDescriptor("m"))
    total = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b))
    for operation, key, n in operations:
        backend.set_current_key(key)
        if operation == "update":
            value.update([n])
        elif operation == "clear":
            (value, items, mapping, total)[n].clear()
        elif operation == "add":
            items.add(n)
        elif operation == "put":
            mapping.put(n, [n])
        elif operation == "remove":
            mapping.remove(n)
        elif operation == "reduce":
            total.add(n)
        elif value.value() is not None:  # a list held in value state, changed in place
            value.value().append(n)


@given(before=OPERATIONS, during=OPERATIONS, after=OPERATIONS, budget=st.integers(1, 5))
@settings(max_examples=300, deadline=None)
def test_any_changes_while_frozen_leave_the_view_as_at_the_freeze(before: list, during: list, after: list,
                                                                 budget: int) -> None:
    """And once released, while the changes are folded back a few at a time, the state is the
    same as one never frozen, whatever changes meanwhile."""
    backend, twin = HeapKeyedStateBackend(4), HeapKeyedStateBackend(4)
    apply(backend, before)
    apply(twin, before)
    expected = copy.deepcopy(twin.snapshot())
    view = backend.freeze()
    apply(backend, during)
    apply(twin, during)
    assert unordered(view_entries(view)) == unordered(expected)
    backend.release()
    for operation in after:
        backend.merge_some(budget)
        apply(backend, [operation])
        apply(twin, [operation])
        assert {key: read(backend, key) for key in range(7)} == {key: read(twin, key) for key in range(7)}
    assert unordered(backend.snapshot()) == unordered(twin.snapshot())
    assert not backend.merging


def read(backend: HeapKeyedStateBackend, key: int) -> tuple:
    backend.set_current_key(key)
    return (backend.get_state(ValueStateDescriptor("v")).value(), backend.get_state(ListStateDescriptor("l")).get(),
            backend.get_state(MapStateDescriptor("m")).items(),
            backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b)).get())


def unordered(snapshot: dict) -> dict:
    """A snapshot's entries, ignoring their order within a key group (insertion order after a release
    differs from that of a state never frozen; a restore does not depend on it)."""
    return {name: {group: sorted(pairs, key=repr) for group, pairs in groups.items()}
            for name, groups in snapshot.items() if groups}


@pytest.mark.parametrize("backend_kind", ["heap", "rocksdb"])
@pytest.mark.parametrize("when", ["never frozen", "after a checkpoint", "while frozen"])
def test_install_namespaced_gives_what_adding_entry_by_entry_gives(backend_kind: str, when: str) -> None:
    """The open windows of a sorted backlog go into state in one call: the same entries, readable per
    key and namespace, as making each key and namespace current and adding its value; and a checkpoint
    after it carries them (its changed entries are tracked)."""
    from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend

    make = HeapKeyedStateBackend if backend_kind == "heap" else RocksDBKeyedStateBackend
    reducing, value = ReducingStateDescriptor("r", lambda a, b: a + b), ValueStateDescriptor("v")
    keys, namespaces = [f"k{i % 7}" for i in range(40)], [("w", i) for i in range(40)]
    installed, added = make(16), make(16)
    try:
        for backend in (installed, added):
            backend.set_current_key("old")
            backend.get_state(reducing, namespaced=True).add(1)
            if when != "never frozen":
                backend.freeze()
                if when == "after a checkpoint":
                    backend.release()
        installed.install_namespaced(reducing, keys, namespaces, range(40))
        installed.install_namespaced(value, keys, namespaces, [str(i) for i in range(40)])
        for key, namespace, number in zip(keys, namespaces, range(40)):
            added.set_current_key(key)
            for descriptor, item in ((reducing, number), (value, str(number))):
                handle = added.get_state(descriptor, namespaced=True)
                handle.set_current_namespace(namespace)
                handle.add(item) if descriptor is reducing else handle.update(item)
        for backend in (installed, added):
            if when == "while frozen":
                backend.release()
            while backend.merging:
                backend.merge_some(1000)
        for key, namespace, number in zip(keys, namespaces, range(40)):
            installed.set_current_key(key)
            installed.get_state(reducing, namespaced=True).set_current_namespace(namespace)
            assert installed.get_state(reducing, namespaced=True).get() == number
        assert unordered(installed.snapshot()) == unordered(added.snapshot())
        if when != "never frozen":
            assert freeze_changes(installed) == freeze_changes(added)
    finally:
        for backend in (installed, added):
            if hasattr(backend, "dispose"):
                backend.dispose()


@pytest.mark.parametrize("when", ["never frozen", "after a checkpoint", "while frozen"])
def test_bulk_load_gives_what_updating_key_by_key_gives(when: str) -> None:
    """A sorted backlog's final values go into a value state in one call: the same entries as making
    each key current and updating it (a None value leaves its key), and the next checkpoint carries
    them as changed."""
    descriptor = ValueStateDescriptor("v")
    keys, values = [f"k{i}" for i in range(30)], [None if i % 5 == 0 else i for i in range(30)]
    loaded, updated = HeapKeyedStateBackend(16), HeapKeyedStateBackend(16)
    for backend in (loaded, updated):
        backend.set_current_key("k0")
        backend.get_state(descriptor).update("kept")
        if when != "never frozen":
            backend.freeze()
            if when == "after a checkpoint":
                backend.release()
    loaded.bulk_load(descriptor, keys, values)
    for key, value in zip(keys, values):
        if value is not None:
            updated.set_current_key(key)
            updated.get_state(descriptor).update(value)
    for backend in (loaded, updated):
        if when == "while frozen":
            backend.release()
        while backend.merging:
            backend.merge_some(1000)
    loaded.set_current_key("k0")
    assert loaded.get_state(descriptor).value() == "kept"
    assert unordered(loaded.snapshot()) == unordered(updated.snapshot())
    if when != "never frozen":
        assert freeze_changes(loaded) == freeze_changes(updated)


def freeze_changes(backend) -> dict:  # noqa: ANN001
    """What the next checkpoint writes as changed: per state, the entries changed since the last freeze."""
    view = backend.freeze()
    try:
        return {name: sorted(map(repr, entries)) for name, entries in view.dirty.items() if entries}
    finally:
        backend.release()

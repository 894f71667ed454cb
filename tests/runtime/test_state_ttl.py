"""State time-to-live on both state backends, with Flink's StateTtlConfig semantics: entries expire by
processing time (a manual clock here), per list element and per map entry; update types,
visibilities, on-read, incremental and full-snapshot cleanup; timestamps survive a restore at
another parallelism; a checkpoint being written keeps what it froze. Every test runs on the heap
and on RocksDB (its write-back cache flushed every few entries, so values go through the
database and their encoding)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream.functions import AggregateFunction
from slipstream.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from slipstream.datastream.time import Time
from slipstream.errors import SlipstreamError
from slipstream.runtime.checkpoint.state_files import decode_state_file
from slipstream.runtime.key_groups import key_group_range
from slipstream.runtime.state import rocksdb_backend
from slipstream.runtime.state.heap_backend import FrozenView, HeapKeyedStateBackend, KeyedBackendBase
from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend
from slipstream.testing import ManualClock

TTL = 1_000
BACKEND: list[type[KeyedBackendBase]] = [HeapKeyedStateBackend]


@pytest.fixture(autouse=True, scope="module", params=[HeapKeyedStateBackend, RocksDBKeyedStateBackend],
                ids=["hashmap", "rocksdb"])
def ttl_backend(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test runs on each backend; RocksDB writes its cached values every 3 entries."""
    BACKEND[0] = request.param
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rocksdb_backend, "FLUSH_ENTRIES", 3)
        yield
    BACKEND[0] = HeapKeyedStateBackend


class Sum(AggregateFunction):
    def create_accumulator(self):  # noqa: ANN201
        return 0

    def add(self, value, accumulator):  # noqa: ANN001, ANN201
        return accumulator + value

    def get_result(self, accumulator):  # noqa: ANN001, ANN201
        return accumulator


def config(*, read: bool = False, return_expired: bool = False, full_snapshot: bool = False,
           incremental: tuple[int, bool] | None = None, background: bool = True) -> StateTtlConfig:
    builder = StateTtlConfig.new_builder(Time.milliseconds(TTL))
    builder.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite if read
                            else StateTtlConfig.UpdateType.OnCreateAndWrite)
    builder.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp if return_expired
                                 else StateTtlConfig.StateVisibility.NeverReturnExpired)
    if full_snapshot:
        builder.cleanup_full_snapshot()
    if incremental is not None:
        builder.cleanup_incrementally(*incremental)
    if not background:
        builder.disable_cleanup_in_background()
    return builder.build()


def with_ttl(descriptor, ttl_config: StateTtlConfig):  # noqa: ANN001, ANN201
    descriptor.enable_time_to_live(ttl_config)
    return descriptor


def backend_at(clock: ManualClock, max_parallelism: int = 128) -> KeyedBackendBase:
    return BACKEND[0](max_parallelism, clock.now_ms)


def restored(clock: ManualClock, *layers: list[tuple[str, str, Any]]) -> KeyedBackendBase:
    """A fresh backend of the same kind with the checkpoint layers ``layers`` (each what a frozen
    view's ``encode_layer`` gives) restored in order."""
    backend = backend_at(clock)
    for layer in layers:
        backend.restore({name: decode_state_file(kind, bytes(data)) for name, kind, data in layer})
    return backend


def entries_of(backend: KeyedBackendBase, name: str) -> dict[Any, Any]:
    """State ``name``'s stored entries (TTL values with their timestamps) by entry key."""
    return {key: value for pairs in backend.snapshot().get(name, {}).values() for key, value in pairs}


def frozen_entries(clock: ManualClock, view: FrozenView, name: str) -> dict[Any, Any]:
    """What a full checkpoint of ``view`` holds of state ``name``, read back through a restore."""
    return entries_of(restored(clock, view.encode_layer(incremental=False)[0]), name)


def test_a_value_expires_ttl_after_its_last_write() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config()))
    backend.set_current_key("a")
    state.update(1)
    clock.set(600)
    state.update(2)  # a write restarts the TTL
    clock.set(1_599)
    assert state.value() == 2
    clock.set(1_600)
    assert state.value() is None
    assert backend.keys("v") == []  # read and found expired: removed


def test_a_read_extends_the_ttl_only_with_on_read_and_write() -> None:
    for read, expected in ((False, None), (True, 1)):
        clock = ManualClock()
        backend = backend_at(clock)
        state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(read=read)))
        backend.set_current_key("a")
        state.update(1)
        clock.set(900)
        assert state.value() == 1
        clock.set(1_500)
        assert state.value() == expected


def test_an_expired_value_is_returned_once_when_visibility_allows_it() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(return_expired=True, background=False)))
    backend.set_current_key("a")
    state.update("old")
    clock.set(TTL)
    assert state.value() == "old"  # not cleaned up yet: returned, and removed by this read
    assert state.value() is None


def test_list_elements_expire_one_by_one() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ListStateDescriptor("l"), config()))
    backend.set_current_key("a")
    state.add("x")
    clock.set(400)
    state.add_all(["y", "z"])
    clock.set(999)
    assert state.get() == ["x", "y", "z"]
    clock.set(1_000)
    assert state.get() == ["y", "z"]
    clock.set(1_400)
    assert state.get() == []
    assert backend.keys("l") == []


def test_map_entries_expire_one_by_one_and_contains_follows_them() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(MapStateDescriptor("m"), config()))
    backend.set_current_key("a")
    state.put("x", 1)
    clock.set(400)
    state.put_all({"y": 2, "z": 3})
    clock.set(1_000)
    assert not state.contains("x") and state.get("x") is None
    assert dict(state.items()) == {"y": 2, "z": 3}
    assert sorted(state.keys()) == ["y", "z"] and sorted(state.values()) == [2, 3]
    clock.set(1_400)
    assert state.is_empty()
    assert backend.keys("m") == []


def test_reducing_and_aggregating_state_start_afresh_after_expiry() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    reducing = backend.get_state(with_ttl(ReducingStateDescriptor("r", lambda a, b: a + b), config()))
    aggregating = backend.get_state(with_ttl(AggregatingStateDescriptor("g", Sum()), config()))
    backend.set_current_key("a")
    for value in (1, 2):
        reducing.add(value)
        aggregating.add(value)
    assert (reducing.get(), aggregating.get()) == (3, 3)
    clock.set(TTL)
    reducing.add(10)
    aggregating.add(10)
    assert (reducing.get(), aggregating.get()) == (10, 10)
    clock.set(2 * TTL)
    assert (reducing.get(), aggregating.get()) == (None, None)


def test_a_full_snapshot_leaves_out_what_has_expired_and_keeps_it_in_memory() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    kinds = {"value": ValueStateDescriptor("v"), "list": ListStateDescriptor("l"), "map": MapStateDescriptor("m")}
    states = {kind: backend.get_state(with_ttl(d, config(full_snapshot=True, return_expired=True,
                                                         background=False)))
              for kind, d in kinds.items()}
    for key in ("old", "mixed"):
        backend.set_current_key(key)
        states["value"].update(key)
        states["list"].add(key)
        states["map"].put("first", key)
    clock.set(500)
    backend.set_current_key("mixed")
    states["list"].add("later")
    states["map"].put("second", "later")
    clock.set(TTL)
    snapshot = backend.snapshot()
    entries = {name: {key: value for pairs in groups.values() for key, value in pairs}
               for name, groups in snapshot.items()}
    assert entries["v"] == {}
    assert {key: [item.value for item in items] for key, items in entries["l"].items()} == {"mixed": ["later"]}
    assert {key: {k: item.value for k, item in items.items()} for key, items in entries["m"].items()} == \
        {"mixed": {"second": "later"}}
    backend.set_current_key("old")  # still in memory: returned once, as the visibility allows
    assert states["value"].value() == "old" and states["list"].get() == ["old"]


def test_without_full_snapshot_cleanup_expired_entries_are_written() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(background=False)))
    backend.set_current_key("a")
    state.update(1)
    clock.set(TTL)
    assert [key for pairs in backend.snapshot()["v"].values() for key, _ in pairs] == ["a"]


def test_incremental_cleanup_removes_expired_entries_of_other_keys_on_access() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(incremental=(3, False))))
    for key in range(10):
        backend.set_current_key(key)
        state.update(key)
    clock.set(TTL)
    backend.set_current_key("fresh")
    state.update("new")  # each access checks 3 entries
    assert len(backend.keys("v")) == 11 - 3
    for _ in range(3):
        state.value()
    assert backend.keys("v") == ["fresh"]


def test_incremental_cleanup_for_every_record_runs_on_each_new_key() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(MapStateDescriptor("m"), config(incremental=(2, True))))
    for key in range(6):
        backend.set_current_key(key)
        state.put("k", key)
    clock.set(TTL)
    for key in range(3):
        backend.set_current_key(("other", key))  # no state access at all
    assert backend.keys("m") == []


def test_no_cleanup_in_background_keeps_entries_until_read() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(background=False)))
    for key in range(5):
        backend.set_current_key(key)
        state.update(key)
    clock.set(TTL)
    backend.set_current_key(0)
    assert state.value() is None
    assert sorted(backend.keys("v")) == [1, 2, 3, 4]


def test_ttl_timestamps_survive_a_restore_at_another_parallelism() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    descriptors = lambda: {"v": with_ttl(ValueStateDescriptor("v"), config(read=True)),  # noqa: E731
                           "l": with_ttl(ListStateDescriptor("l"), config())}
    states = {name: backend.get_state(d) for name, d in descriptors().items()}
    for key in range(20):
        backend.set_current_key(key)
        states["v"].update(key)
        states["l"].add(key)
    clock.set(800)
    for key in range(0, 20, 2):  # read: extends the TTL of even keys' values
        backend.set_current_key(key)
        assert states["v"].value() == key
    snapshot = backend.snapshot()
    clock.set(1_000)
    for subtask in range(3):
        restored = backend_at(clock)
        groups = key_group_range(128, 3, subtask)
        restored.restore(snapshot, groups)
        states = {name: restored.get_state(d) for name, d in descriptors().items()}
        for key in restored.keys("v"):
            restored.set_current_key(key)
            assert states["v"].value() == (key if key % 2 == 0 else None)
            assert states["l"].get() == []


def test_a_frozen_checkpoint_keeps_what_ttl_reads_and_cleanups_change_meanwhile() -> None:
    clock = ManualClock()
    backend = backend_at(clock)
    values = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(incremental=(100, False))))
    lists = backend.get_state(with_ttl(ListStateDescriptor("l"), config(read=True)))
    for key in range(5):
        backend.set_current_key(key)
        values.update([key])
        lists.add(key)
    clock.set(500)
    backend.set_current_key(0)
    lists.add(100)
    view = backend.freeze()
    clock.set(TTL)
    backend.set_current_key(0)
    assert lists.get() == [100]  # the expired element goes, the other is restamped
    lists.add(101)
    assert values.value() is None  # and the incremental cleanup removes every other expired value
    assert backend.keys("v") == []
    frozen = {name: frozen_entries(clock, view, name) for name in ("v", "l")}
    backend.release()
    assert {key: item.value for key, item in frozen["v"].items()} == {key: [key] for key in range(5)}
    assert [(item.value, item.last_access) for item in frozen["l"][0]] == [(0, 0), (100, 500)]
    backend.set_current_key(0)
    clock.set(1_499)
    assert lists.get() == [100, 101]


def test_state_written_without_ttl_is_refused_by_a_ttl_handle() -> None:
    clock = ManualClock()
    plain = backend_at(clock)
    plain.get_state(ValueStateDescriptor("v"))
    plain.set_current_key("a")
    plain.get_state(ValueStateDescriptor("v")).update(1)
    restored = backend_at(clock)
    restored.restore(plain.snapshot())
    restored.set_current_key("a")
    with pytest.raises(SlipstreamError, match="written without"):
        restored.get_state(with_ttl(ValueStateDescriptor("v"), config())).value()


def test_the_builder_has_pyflinks_names() -> None:
    ttl_config = (StateTtlConfig.new_builder(Time.seconds(1))
                  .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
                  .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
                  .set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)
                  .cleanup_full_snapshot()
                  .cleanup_incrementally(10, True)
                  .build())
    assert ttl_config.get_ttl().to_milliseconds() == 1_000 and ttl_config.is_enabled()
    assert ttl_config.get_update_type() is StateTtlConfig.UpdateType.OnReadAndWrite
    assert ttl_config.get_state_visibility() is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
    assert ttl_config.get_ttl_time_characteristic() is StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
    strategies = ttl_config.get_cleanup_strategies()
    assert strategies.in_full_snapshot() and strategies.is_cleanup_in_background()
    incremental = strategies.get_incremental_cleanup_strategy()
    assert (incremental.get_cleanup_size(), incremental.run_cleanup_for_every_record()) == (10, True)
    default = StateTtlConfig.new_builder(Time.seconds(1)).build().get_cleanup_strategies()
    assert default.get_incremental_cleanup_strategy().get_cleanup_size() == 5 and not default.in_full_snapshot()
    assert StateTtlConfig.new_builder(Time.seconds(1)).disable_cleanup_in_background().build() \
        .get_cleanup_strategies().get_incremental_cleanup_strategy() is None
    assert not StateTtlConfig.new_builder(Time.seconds(1)).set_update_type(
        StateTtlConfig.UpdateType.Disabled).build().is_enabled()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["write", "read", "wait"]), st.integers(0, 3), st.integers(0, 700)),
                max_size=40),
       st.booleans(), st.booleans())
def test_value_state_matches_a_plain_model(ops: list, read_extends: bool, return_expired: bool) -> None:
    """The oracle: per key, a value and the time of its last counted access, in plain Python."""
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(read=read_extends,
                                                                         return_expired=return_expired,
                                                                         background=False)))
    model: dict[int, tuple[int, int]] = {}
    for op, key, amount in ops:
        now = clock.now_ms()
        backend.set_current_key(key)
        if op == "wait":
            clock.advance(amount)
        elif op == "write":
            state.update(amount)
            model[key] = (amount, now)
        else:
            value, stamp = model.get(key, (None, None))
            if value is not None and stamp + TTL <= now:
                del model[key]
                value = value if return_expired else None
            elif value is not None and read_extends:
                model[key] = (value, now)
            assert state.value() == value


def test_a_layer_of_changes_writes_a_changed_entry_that_expired_as_removed() -> None:
    """Incremental checkpoints with full-snapshot cleanup: an entry changed since the last
    checkpoint that has expired by the next is written as removed, so a restore of both drops it."""
    clock = ManualClock()
    backend = backend_at(clock)
    state = backend.get_state(with_ttl(ValueStateDescriptor("v"), config(full_snapshot=True, background=False)))
    backend.set_current_key("a")
    state.update(1)
    view = backend.freeze()
    first, _ = view.encode_layer(incremental=False)
    view.completed = "first checkpoint"   # as the writer marks a durable checkpoint
    backend.release()
    clock.set(TTL - 100)
    backend.set_current_key("b")
    state.update(2)
    backend.set_current_key("a")
    state.update(3)
    clock.set(2 * TTL)   # both changed entries have expired
    view = backend.freeze()
    changes, changed = view.encode_layer(incremental=True)
    full, _ = view.encode_layer(incremental=False)
    backend.release()
    assert changed == 2
    assert [item.value for item in entries_of(restored(clock, first), "v").values()] == [1]
    assert entries_of(restored(clock, first, changes), "v") == {}
    assert entries_of(restored(clock, full), "v") == {}

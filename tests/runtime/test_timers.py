"""The internal timer service: ordering, deduplication, deletion, firing with the key set, snapshots;
with its timers kept by either state backend (per timestamp in dicts on the heap, on disk in RocksDB)."""

import pickle
import threading
from collections.abc import Iterator
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.operators.timers import InternalTimer, InternalTimerService, KeyedTimerService, TimerQueue
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
from slipstream.runtime.state.rocksdb_backend import RocksDBKeyedStateBackend
from slipstream.runtime.task import TaskProcessingTimeService
from slipstream.testing import ManualClock

BACKEND: list[type] = [HeapKeyedStateBackend]


@pytest.fixture(autouse=True, scope="module", params=[HeapKeyedStateBackend, RocksDBKeyedStateBackend],
                ids=["hashmap", "rocksdb"])
def timers_backend(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test runs with the timers of each backend."""
    BACKEND[0] = request.param
    yield
    BACKEND[0] = HeapKeyedStateBackend


class Harness:
    """An InternalTimerService on a heap backend and the task's processing-time service, on the
    kit's manual clock; records what fires."""

    def __init__(self) -> None:
        self.backend = BACKEND[0](128)
        self.clock = ManualClock()
        self.wakeups = TaskProcessingTimeService(self.clock)
        self.fired: list[tuple[str, int, Any, Any]] = []
        self.on_event: Callable[[InternalTimer], None] = lambda timer: None
        self.service = InternalTimerService(self.backend, self.wakeups, self._event, self._processing)

    def _event(self, timer: InternalTimer) -> None:
        assert self.backend.get_current_key() == timer.key, "the timer's key is current when it fires"
        self.fired.append(("event", timer.timestamp, timer.key, timer.namespace))
        self.on_event(timer)

    def _processing(self, timer: InternalTimer) -> None:
        assert self.backend.get_current_key() == timer.key
        self.fired.append(("processing", timer.timestamp, timer.key, timer.namespace))

    def advance_to(self, now: int) -> None:
        """Processing time reaches ``now``: the due wakeups fire in time order, as in a task's turn."""
        self.clock.set(now)
        self.wakeups.fire_due(now)

    def event(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        self.backend.set_current_key(key)
        self.service.register_event_time_timer(namespace, timestamp)

    def processing(self, key: Any, timestamp: int, namespace: Any = None) -> None:
        self.backend.set_current_key(key)
        self.service.register_processing_time_timer(namespace, timestamp)


def test_event_timers_fire_in_timestamp_order_then_registration_order() -> None:
    h = Harness()
    h.event("b", 30)
    h.event("a", 10)
    h.event("c", 20)
    h.event("a", 20)
    h.event("z", 40)
    h.service.advance_watermark(25)
    assert h.fired == [("event", 10, "a", None), ("event", 20, "c", None), ("event", 20, "a", None)]
    assert h.service.current_watermark == 25
    assert h.service.num_event_time_timers() == 2
    h.fired.clear()
    h.service.advance_watermark(40)
    assert [f[1:3] for f in h.fired] == [(30, "b"), (40, "z")]


def test_a_timer_exactly_at_the_watermark_fires_and_later_ones_wait() -> None:
    h = Harness()
    h.event("a", 10)
    h.event("a", 11)
    h.service.advance_watermark(10)
    assert [f[1] for f in h.fired] == [10]


def test_duplicate_timers_fire_once_per_key_and_namespace() -> None:
    h = Harness()
    h.event("a", 10)
    h.event("a", 10)
    h.event("a", 10, namespace="w")
    h.event("b", 10)
    assert h.service.num_event_time_timers() == 3
    h.service.advance_watermark(100)
    assert [f[2:] for f in h.fired] == [("a", None), ("a", "w"), ("b", None)]


def test_deleted_timers_do_not_fire_and_can_be_registered_again() -> None:
    h = Harness()
    h.event("a", 10)
    h.event("a", 20)
    h.event("b", 10)
    h.backend.set_current_key("a")
    h.service.delete_event_time_timer(None, 10)
    h.service.delete_event_time_timer(None, 99)  # deleting an unknown timer is fine
    assert h.service.num_event_time_timers() == 2
    h.service.advance_watermark(15)
    assert [f[1:3] for f in h.fired] == [(10, "b")]
    h.event("a", 10)  # re-registered after deletion: fires (once) at the next watermark
    h.service.advance_watermark(30)
    assert [f[1:3] for f in h.fired] == [(10, "b"), (10, "a"), (20, "a")]


def test_deleted_timers_leave_nothing_behind_and_keys_are_never_compared() -> None:
    """A deletion takes the timer out of the stored timers at once (no tombstone left for a
    pop to skip later); keys of types that cannot be ordered (ints, strings) coexist."""
    h = Harness()
    keys = [k if k % 2 else f"k{k}" for k in range(500)]
    for key in keys:
        h.event(key, 1_000 - len(str(key)))
    for key in keys[:-3]:
        h.backend.set_current_key(key)
        h.service.delete_event_time_timer(None, 1_000 - len(str(key)))
    queue = h.service._event
    assert stored(queue) == len(queue) == h.service.num_event_time_timers() == 3
    h.service.advance_watermark(1_000)
    assert [f[1:3] for f in h.fired] == [(996, "k498"), (997, 497), (997, 499)]


def stored(queue: Any) -> int:
    """The timers a queue stores: in its dicts per timestamp (heap) or its column family by firing order (RocksDB)."""
    if isinstance(queue, TimerQueue):
        return sum(map(len, queue._buckets.values()))
    return sum(1 for _ in queue._order.keys())


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "delete", "advance", "freeze"]),
                          st.sampled_from([1, 2, "x", (1, None)]), st.integers(0, 20),
                          st.sampled_from([None, None, None, "w"])), max_size=60))
def test_timers_fire_as_a_plain_model_says(ops: list) -> None:
    """The oracle: live timers with their registration number; due ones fire by (time, number). Timers
    with and without a namespace mix (the heap backend keeps keys alone until the first namespace comes),
    and a frozen copy taken on the way reads, after the changes up to the next one (a checkpoint's is
    read before the next checkpoint freezes), the timers of its moment."""
    h = Harness()
    live: dict[tuple[int, Any, Any], int] = {}
    expected: list[tuple[int, Any, Any]] = []
    frozen: tuple[Any, list[tuple[int, Any, Any]]] | None = None
    watermark = -1
    for number, (op, key, timestamp, namespace) in enumerate(ops):
        h.backend.set_current_key(key)
        if op == "add" and timestamp > watermark:
            h.service.register_event_time_timer(namespace, timestamp)
            live.setdefault((timestamp, key, namespace), number)
        elif op == "delete":
            h.service.delete_event_time_timer(namespace, timestamp)
            live.pop((timestamp, key, namespace), None)
        elif op == "advance" and timestamp > watermark:
            watermark = timestamp
            h.service.advance_watermark(watermark)
            due = sorted((item for item in live.items() if item[0][0] <= watermark),
                         key=lambda item: (item[0][0], item[1]))
            expected += [ident for ident, _ in due]
            for ident, _ in due:
                del live[ident]
        elif op == "freeze":
            if frozen is not None:
                assert frozen[0].lists()["event"] == frozen[1]
            in_order = sorted(live.items(), key=lambda item: (item[0][0], item[1]))
            frozen = (h.service.freeze(), [ident for ident, _ in in_order])
        assert stored(h.service._event) == len(live)
    assert [f[1:4] for f in h.fired] == expected
    if frozen is not None:
        assert frozen[0].lists()["event"] == frozen[1]


def test_timers_registered_while_firing_at_or_before_the_watermark_fire_in_the_same_advance() -> None:
    h = Harness()

    def chain_timer(timer: InternalTimer) -> None:
        if timer.timestamp < 30:
            h.service.register_event_time_timer(None, timer.timestamp + 10)

    h.on_event = chain_timer
    h.event("k", 10)
    h.service.advance_watermark(35)
    assert [f[1] for f in h.fired] == [10, 20, 30]


def test_a_timer_registered_while_firing_before_the_rest_of_a_timestamp_fires_first() -> None:
    """As Flink's timer service, which fires whatever is first in its queue: a timer registered
    by an ``on_timer`` at an earlier time fires before the timers left at the time firing, and one at
    that same time after them (registration order); a timer the firing deletes does not fire."""
    h = Harness()

    def register_and_delete(timer: InternalTimer) -> None:
        if timer.key == "a" and len(h.fired) == 1:
            h.service.register_event_time_timer(None, 15)  # for "a", earlier than the 20s still waiting
            h.service.register_event_time_timer(None, 20)  # a duplicate of the one firing: it was popped
            h.backend.set_current_key("c")
            h.service.delete_event_time_timer(None, 20)

    h.on_event = register_and_delete
    for key in ("a", "b", "c", "d"):
        h.event(key, 20)
    h.service.advance_watermark(20)
    assert [f[1:3] for f in h.fired] == [(20, "a"), (15, "a"), (20, "b"), (20, "d"), (20, "a")]
    assert h.service.num_event_time_timers() == 0


def test_a_first_timer_with_a_namespace_registered_while_firing_leaves_the_rest_to_fire() -> None:
    """The heap backend keeps timers by key until one has a namespace; the first such, registered by an
    ``on_timer`` while a timestamp fires, must not lose the timers of that timestamp still to fire."""
    h = Harness()

    def register_with_a_namespace(timer: InternalTimer) -> None:
        if timer.key == "a" and timer.namespace is None:
            h.service.register_event_time_timer("window", 20)

    h.on_event = register_with_a_namespace
    for key in ("a", "b", "c"):
        h.event(key, 20)
    h.service.advance_watermark(20)
    assert [f[1:4] for f in h.fired] == [(20, "a", None), (20, "b", None), (20, "c", None), (20, "a", "window")]
    assert h.service.num_event_time_timers() == 0


def test_timestamps_whose_timers_were_all_deleted_do_not_pile_up() -> None:
    """The heap backend's queue keeps a timestamp whose timers were all deleted only until such
    timestamps are half its heap (a timeout registered and deleted on every record would otherwise
    grow it without end)."""
    queue = TimerQueue()
    queue.add(5, "kept", None)
    for timestamp in range(10, 10_010):
        queue.add(timestamp, "k", None)
        queue.remove(timestamp, "k", None)
    assert len(queue) == stored(queue) == 1
    assert len(queue._times) <= 2 * len(queue._buckets) + 64
    assert queue.pop_due(20_000) == InternalTimer(5, "kept", None)
    assert queue.pop_due(20_000) is None and not queue._times


def test_processing_timers_wake_the_task_once_per_timestamp_and_fire_with_their_key() -> None:
    h = Harness()
    h.processing("a", 100)
    h.processing("b", 100)
    h.processing("a", 100)  # duplicate
    h.processing("c", 50)
    assert h.wakeups.deadlines() == [50, 100]
    assert h.service.num_processing_time_timers() == 3
    h.advance_to(60)
    assert h.fired == [("processing", 50, "c", None)]
    h.advance_to(100)
    assert h.fired[1:] == [("processing", 100, "a", None), ("processing", 100, "b", None)]
    assert h.service.num_processing_time_timers() == 0


def test_deleted_processing_timer_does_not_fire() -> None:
    h = Harness()
    h.processing("a", 100)
    h.processing("b", 100)
    h.backend.set_current_key("a")
    h.service.delete_processing_time_timer(None, 100)
    h.advance_to(200)
    assert h.fired == [("processing", 100, "b", None)]


def test_processing_timer_registered_again_after_it_fired_wakes_the_task_again() -> None:
    h = Harness()
    h.processing("a", 100)
    h.advance_to(100)
    h.processing("a", 100)
    assert h.wakeups.deadlines() == [100]
    h.advance_to(100)
    assert [f[1] for f in h.fired] == [100, 100]


def test_event_and_processing_timers_are_separate() -> None:
    h = Harness()
    h.event("a", 10)
    h.processing("a", 10)
    h.service.advance_watermark(10)
    assert h.fired == [("event", 10, "a", None)]
    h.advance_to(10)
    assert h.fired[1:] == [("processing", 10, "a", None)]


def test_snapshot_and_restore_keep_timers_and_their_order() -> None:
    h = Harness()
    h.event("b", 20)
    h.event("a", 20)
    h.event("c", 5, namespace=("window", 0, 10))
    h.processing("x", 300)
    h.processing("y", 200)
    snapshot = h.service.snapshot()

    restored = Harness()
    restored.service.restore(snapshot)
    assert restored.service.num_event_time_timers() == 3
    assert restored.service.num_processing_time_timers() == 2
    assert restored.wakeups.deadlines() == [200, 300]
    restored.service.advance_watermark(100)
    assert [f[1:] for f in restored.fired] == [(5, "c", ("window", 0, 10)), (20, "b", None), (20, "a", None)]
    restored.fired.clear()
    restored.advance_to(1000)
    assert [f[1:3] for f in restored.fired] == [(200, "y"), (300, "x")]
    # the original is untouched by what the restored copy fired
    assert h.service.num_event_time_timers() == 3


def test_frozen_timers_are_read_later_as_they_were_at_the_freeze_and_pickle_as_the_snapshot() -> None:
    """A checkpoint freezes the timers on the task's turn and reads them in its writer's thread
    while timers fire, are deleted and are registered; it gets those of the freeze."""
    h = Harness()
    for key in range(50):
        h.event(key, 100 + key % 7)
        h.processing(("p", key), 1_000 + key)
    expected = h.service.snapshot()
    frozen = h.service.freeze()
    h.service.advance_watermark(103)  # fires (and removes) some
    h.backend.set_current_key(3)
    h.service.delete_event_time_timer(None, 103)
    h.service.delete_processing_time_timer(None, 1_003)
    h.event("new", 50)
    h.processing("new", 900)
    lists = {}
    reader = threading.Thread(target=lambda: lists.update(frozen.lists()))
    reader.start()
    reader.join()
    assert lists == expected
    assert pickle.loads(pickle.dumps(frozen)) == expected
    assert h.service.snapshot() != expected


def test_keyed_timer_service_is_the_users_view_for_the_current_key() -> None:
    h = Harness()
    user = KeyedTimerService(h.service)
    h.clock.set(1234)
    assert user.current_processing_time() == 1234
    h.backend.set_current_key("k")
    user.register_event_time_timer(7.0)  # coerced to int
    user.register_event_time_timer(8)
    user.delete_event_time_timer(8)
    h.service.advance_watermark(10)
    assert h.fired == [("event", 7, "k", None)]
    assert user.current_watermark() == 10

"""Python's cyclic GC while jobs run: full collections walk only what is new, the whole heap is
walked at the switch and after a quarter's growth, and everything is unfrozen when jobs end."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from slipstream.datastream import (
    KeyedCoProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.runtime import gc_policy
from slipstream.testing import CollectingSink


class Node:
    """An object in a reference cycle with itself, as garbage only the cyclic GC frees."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def policy():
    assert gc.get_freeze_count() == 0
    assert gc_policy.job_started()
    try:
        yield
    finally:
        gc_policy.job_ended()
    assert gc.get_freeze_count() == 0


def test_a_full_collection_freezes_its_survivors_until_the_job_ends(policy) -> None:
    survivors = [[i] for i in range(10_000)]
    gc.collect()
    assert gc.get_freeze_count() >= len(survivors)
    assert not gc.get_objects(2) or len(gc.get_objects(2)) < len(survivors)  # the next walk skips them


def test_frozen_cycles_are_collected_once_the_heap_grew_by_a_quarter(policy) -> None:
    node = Node()
    alive = weakref.ref(node)
    gc_policy.freeze_now()  # as at a switch: node is frozen
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert alive() is not None  # frozen garbage waits
    growth = [[i] for i in range(sys.getallocatedblocks() // 4)]  # three blocks each
    gc.collect()  # the heap grew by more than a quarter: unfrozen, so that the next walk is whole
    gc.collect()
    assert alive() is None
    del growth


def test_a_process_that_froze_objects_itself_is_left_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert not gc_policy.job_started()
        gc.collect()
        # not unfrozen (that would empty it); a frozen object may still die by its reference count
        assert frozen - 100 <= gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


class Profiles(KeyedCoProcessFunction):
    """Input 2 is the backlog (profiles into state); each live record reports what is frozen."""

    def __init__(self, profiles: int, loaded: threading.Event) -> None:
        self.profiles, self.loaded, self.seen = profiles, loaded, 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))

    def process_element1(self, key: int, ctx: Any):
        yield key, self.profile.value(), gc.get_freeze_count()

    def process_element2(self, key: int, ctx: Any):
        self.profile.update([key, str(key)])
        self.seen += 1
        if self.seen == self.profiles:
            self.loaded.set()
        return ()


def test_the_state_a_backlog_left_is_frozen_once_the_job_switched_to_streaming() -> None:
    profiles, loaded = 20_000, threading.Event()

    def live():
        loaded.wait(60)
        yield from range(5)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    out: list[Any] = []
    env.from_source(IteratorSource(live, bounded=False), None, "live") \
        .connect(env.from_collection(list(range(profiles)))) \
        .key_by(lambda key: key, lambda key: key).process(Profiles(profiles, loaded)).add_sink(out.append)
    result = env.execute("switch")
    assert [(key, profile) for key, profile, _ in out] == [(k, [k, str(k)]) for k in range(5)]
    assert all(frozen >= profiles for _, _, frozen in out)
    assert result.get_accumulator_result("job")["switched_ms"] > 0
    assert gc.get_freeze_count() == 0


def test_what_the_process_holds_when_a_job_starts_is_frozen_so_no_full_collection_walks_it() -> None:
    held = [[i] for i in range(10_000)]  # as the imports and the job are when a worker starts its run
    frozen_during_the_run: list[int] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    env.from_collection([1, 2, 3]).map(lambda x: frozen_during_the_run.append(gc.get_freeze_count()) or x) \
        .add_sink(lambda _: None)
    env.execute("frozen at the start")
    assert min(frozen_during_the_run) >= len(held)
    assert gc.get_freeze_count() == 0  # the job ended: everything unfrozen


def test_a_bounded_job_never_switches_and_never_walks_the_heap_for_it() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    env.from_collection(list(range(1000))).key_by(lambda x: x % 10).reduce(lambda a, b: a + b).add_sink(
        lambda _: None)
    result = env.execute("bounded")
    assert result.get_accumulator_result("job") is None


def test_a_generation_1_collection_freezes_its_survivors_so_a_full_one_walks_next_to_nothing(policy) -> None:
    gc_policy.freeze_now()  # as at a switch
    survivors = [[i] for i in range(10_000)]  # what the state gains while the job streams
    gc.collect(1)
    assert len(gc.get_objects(2)) < 100 and gc.get_freeze_count() >= len(survivors)
    del survivors


def test_generation_1_survivors_are_not_frozen_while_the_next_full_collection_is_to_walk_everything(policy) -> None:
    survivors = [[i] for i in range(10_000)]  # no switch yet: the first full collection walks everything
    gc.collect(1)
    assert len(gc.get_objects(2)) >= len(survivors)
    del survivors



class FrozenProfiles(KeyedCoProcessFunction):
    """Input 2 is the backlog (profiles into state, each noted in the file ``loaded``); each live
    record reports whether its profile is frozen — not among the objects a collection walks — and
    notes a frozen one's key in the file ``frozen``."""

    def __init__(self, loaded: str, frozen: str) -> None:
        self.loaded, self.frozen = loaded, frozen

    def open(self, runtime_context: RuntimeContext) -> None:
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))

    def process_element1(self, key: int, ctx: Any):
        profile = self.profile.value()
        frozen = not any(tracked is profile for tracked in gc.get_objects())
        if frozen:
            with open(self.frozen, "a") as noted:
                noted.write(f"{key}\n")
        yield key, profile, frozen

    def process_element2(self, key: int, ctx: Any):
        self.profile.update([key, str(key)])
        with open(self.loaded, "a") as loaded:
            loaded.write("+")
        return ()


KEYS_LIVE = 6


def live_until_frozen(loaded: str, profiles: int, frozen: str) -> Iterator[int]:
    """Once every profile is in state (whichever worker holds it): the live keys, again every 20 ms
    until each was reported frozen (the workers switch when their backlog ends, a moment after the
    last profile) or 30 s passed — the source going on meanwhile, as a job whose sources all ended
    by the end of its backlog never switches."""
    while not os.path.exists(loaded) or os.path.getsize(loaded) < profiles:
        time.sleep(0.01)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        yield from range(KEYS_LIVE)
        time.sleep(0.02)
        if os.path.exists(frozen) and len(set(Path(frozen).read_text().split())) == KEYS_LIVE:
            return


def test_a_worker_process_freezes_the_state_its_backlog_left_as_a_driver_does(tmp_path) -> None:
    """A worker is forked from a server that froze its imports; the policy is still the worker's to
    apply (it once left a worker's collector alone, so its full collections walked all its state)."""
    profiles, loaded, frozen = 2_000, str(tmp_path / "loaded"), str(tmp_path / "frozen")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(workers=2, show_progress=False)
    sink = CollectingSink()
    live = IteratorSource(partial(live_until_frozen, loaded, profiles, frozen), bounded=False)
    env.from_source(live, None, "live").connect(env.from_collection(list(range(profiles)))) \
        .key_by(lambda key: key, lambda key: key).process(FrozenProfiles(loaded, frozen)).sink_to(sink)
    result = env.execute("switch on workers")
    assert all(profile == [key, str(key)] for key, profile, _ in sink.values)
    assert {key for key, _, frozen in sink.values if frozen} == set(range(KEYS_LIVE))
    assert result.get_accumulator_result("job")["switched_ms"] > 0

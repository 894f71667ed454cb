"""What changed in keyed state while a checkpoint was written is folded back while the tasks wait
for input, a small step at a time, so that a record does not wait behind it; once the next checkpoint
is due a job that is never idle folds it back before its turns."""

from __future__ import annotations

from typing import Any

from slipstream.datastream.checkpoint_config import CheckpointConfig
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.runtime.checkpoint.coordinator import MERGE_BUDGET, CheckpointCoordinator
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.clock import SystemClock
from slipstream.runtime.scheduler import Scheduler
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
from slipstream.testing import ManualClock


def released_with_changes(changes: int) -> HeapKeyedStateBackend:
    """A heap backend whose ``changes`` entries, changed while it was frozen, wait to be folded back."""
    backend = HeapKeyedStateBackend(128)
    state = backend.get_state(ValueStateDescriptor("v"))
    backend.freeze()
    for key in range(changes):
        backend.set_current_key(key)
        state.update(key)
    backend.release()
    assert backend.merging
    return backend


class Budgets:
    """A backend's ``merge_some`` that notes each budget it is given."""

    def __init__(self, backend: HeapKeyedStateBackend) -> None:
        self.budgets: list[int] = []
        self._merge = backend.merge_some
        backend.merge_some = self  # type: ignore[method-assign]

    def __call__(self, budget: int) -> bool:
        self.budgets.append(budget)
        return self._merge(budget)


def coordinator(tmp_path: Any, clock: ManualClock) -> CheckpointCoordinator:
    config = CheckpointConfig()
    config.set_checkpoint_interval(1000)
    return CheckpointCoordinator([], config, CheckpointStorage(str(tmp_path)), "fingerprint", "job", clock, 1)


def test_changes_are_folded_back_in_idle_steps_not_before_turns(tmp_path) -> None:
    clock = ManualClock(0)
    coordinating = coordinator(tmp_path, clock)
    backend = released_with_changes(3 * MERGE_BUDGET)
    budgets = Budgets(backend)
    coordinating._merging = [backend]
    coordinating.on_turn(clock.now_ms())  # the next checkpoint is not due: the turn goes ahead at once
    assert budgets.budgets == []
    steps = 0
    while coordinating.merge_idle():
        steps += 1
    assert budgets.budgets == [MERGE_BUDGET] * 3 and steps == 2
    assert not backend.merging
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in (0, 3 * MERGE_BUDGET - 1):
        backend.set_current_key(key)
        assert state.value() == key


def test_a_due_checkpoint_has_the_changes_folded_back_before_turns_first(tmp_path) -> None:
    clock = ManualClock(0)
    coordinating = coordinator(tmp_path, clock)
    backend = released_with_changes(MERGE_BUDGET + 1)
    budgets = Budgets(backend)
    coordinating._merging = [backend]
    clock.advance(1000)
    coordinating.on_turn(clock.now_ms())
    coordinating.on_turn(clock.now_ms())
    assert budgets.budgets == [MERGE_BUDGET, MERGE_BUDGET] and not backend.merging
    assert coordinating.pending is None  # triggered only on the turn after the last change went back
    coordinating.on_turn(clock.now_ms())
    assert coordinating.pending is not None


class Idle:
    """A task that becomes runnable once the scheduler's idle work is done, and finishes on its turn."""

    def __init__(self) -> None:
        self.finished = False
        self.work_left = 3
        self.order: list[str] = []

    def work(self) -> bool:
        self.work_left -= 1
        self.order.append("idle work")
        return self.work_left > 0

    def is_runnable(self, now: int) -> bool:
        return self.work_left == 0 and not self.finished

    def step(self) -> None:
        self.order.append("turn")
        self.finished = True

    def next_deadline(self) -> int | None:
        return 0  # due at once: the scheduler never sleeps in this test


def test_the_scheduler_does_its_idle_work_when_no_task_can_run() -> None:
    task = Idle()
    scheduler = Scheduler([task], SystemClock(), seed=0)  # type: ignore[list-item]
    scheduler.idle_work = task.work
    assert scheduler.run_turn()
    assert task.order == ["idle work"] * 3 + ["turn"]

"""The cooperative scheduler: runs every task of a job in one thread, one turn at a time.

Which runnable task goes next is drawn from a seeded random generator, so a run
is repeatable for a seed and tests can explore other interleavings by changing it.
When nothing is runnable the scheduler sleeps until a processing-time deadline or
until a source's reader thread signals new records; if neither can ever come, the
job is deadlocked and that is reported rather than waited on.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

from slipstream.errors import DeadlockError
from slipstream.runtime.clock import Clock
from slipstream.runtime.task import SourceTask, StreamTask

MAX_IDLE_WAIT_S = 0.5
"""Longest single sleep while waiting for the outside world (re-checks state after it)."""


def _no_work() -> bool:
    return False


class Wakeup(Protocol):
    """What an idle scheduler waits on: set from any thread, waited on and cleared by the scheduler's.
    A :class:`threading.Event` in one process; on a worker, the sockets to the other workers too
    (:class:`~slipstream.runtime.workers.links.WorkerLinks`), so their input wakes it directly."""

    def set(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def clear(self) -> None: ...


class Scheduler:
    def __init__(self, tasks: list[StreamTask], clock: Clock, seed: int, wakeup: Wakeup | None = None) -> None:
        self.tasks = tasks
        self.clock = clock
        self._rng = random.Random(seed)
        self._wake: Wakeup = wakeup or threading.Event()
        self.idle = threading.Event()
        """Set while the scheduler waits for the outside world: a background checkpoint writer works then."""
        self.idle_work: Callable[[], bool] = _no_work
        """A step of work to do when no task is runnable, before waiting (a checkpoint's changes folded
        back into keyed state); returns whether some is left."""
        self.turns = 0
        for task in tasks:
            if isinstance(task, SourceTask):
                task.wakeup = self.wake
        self._active = list(tasks)

    def wake(self) -> None:
        """Cut an idle wait short (from any thread): something outside the tasks changed."""
        self._wake.set()

    def run(self) -> None:
        """Run until every task has finished."""
        while self.run_turn():
            pass

    def run_turn(self) -> bool:
        """Give one runnable task a turn, waiting for one if needed; False once all finished."""
        while True:
            if self.finished:
                return False
            now = self.clock.now_ms()
            if self.try_turn(now):
                return True
            if self.idle_work():
                time.sleep(0)  # lets a source's thread take the interpreter to hand over what arrived
                continue
            self._wait(now)

    @property
    def finished(self) -> bool:
        """Whether every task finished."""
        for task in self._active:  # a plain loop: asked at every turn, it costs more as a generator
            if task.finished:
                self._active = [task for task in self._active if not task.finished]
                break
        return not self._active

    def try_turn(self, now: int) -> bool:
        """Give one runnable task a turn if there is one (drawn by the seed); whether one ran."""
        runnable = [task for task in self._active if task.is_runnable(now)]
        if not runnable:
            return False
        task = runnable[self._rng.randrange(len(runnable))] if len(runnable) > 1 else runnable[0]
        self.turns += 1
        task.step()
        return True

    def idle_wait(self, now: int, longest_s: float) -> None:
        """Sleep until woken, the next processing-time deadline or ``longest_s``, whichever comes first
        (a worker process: its input may come from other processes, so idling is no deadlock)."""
        deadlines = self._deadlines()
        self.wait_for_wake(longest_s if not deadlines else max(0.0, min(longest_s, (min(deadlines) - now) / 1000)))

    def wait_for_wake(self, timeout: float) -> None:
        """Sleep until woken or for ``timeout`` seconds, whatever the tasks' deadlines (a worker waiting
        for its run to start: its sources' first polls are due at once, and counted they made it spin)."""
        self.idle.set()
        self._wake.wait(timeout)
        self.idle.clear()
        self._wake.clear()

    def _deadlines(self) -> list[int]:
        """When tasks have something to do without new input (none counts under a manual clock)."""
        if self.clock.is_manual():
            return []
        return [d for d in (task.next_deadline() for task in self._active) if d is not None]

    def _wait(self, now: int) -> None:
        if self.clock.on_idle():  # a manual clock moved: timers may be due, a source may go on
            return
        sources_waiting = any(isinstance(task, SourceTask) for task in self._active)
        if not self._deadlines() and not sources_waiting:
            raise DeadlockError(self._describe_deadlock())
        self.idle_wait(now, MAX_IDLE_WAIT_S)

    def _describe_deadlock(self) -> str:
        lines = ["no task can make progress:"]
        for task in self._active:
            queued = sum(len(c.channel.queue) for c in task.inputs)
            lines.append(f"  {task}: {queued} queued input element(s), "
                         f"output {'full' if not task.can_write() else 'free'}")
        return "\n".join(lines)

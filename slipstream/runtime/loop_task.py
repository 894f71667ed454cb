"""The task that hosts a loop head: a :class:`StreamTask` whose end is decided, not observed.

A plain task ends when all its inputs ended. A loop head's feedback input ends only
after the head itself ended (the end of input has to go round the loop first), so
the head ends when the termination protocol says its scope is complete
(:class:`slipstream.runtime.termination.HeadControl`): it then finishes its chain and
sends end of input into the body — but keeps reading its feedback until that ends
too, failing loudly on any record that still comes back.
"""

from __future__ import annotations

import time
from typing import Any

from slipstream.errors import SlipstreamError
from slipstream.operators.elements import RecordBatch, TerminationAttempt
from slipstream.runtime.task import SourceTask, StreamTask
from slipstream.runtime.termination import Broadcast, HeadControl, TaskTermination, TerminationCoordinator

FEEDBACK_INPUT = 1
"""The input index of a loop head's feedback edge."""


class LoopHeadTask(StreamTask):
    """A loop head's subtask: reads feedback first, and runs the head side of the protocol."""

    control: HeadControl

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scope_terminated = False
        self.regular_inputs = [c for c in self.inputs if c.input_index != FEEDBACK_INPUT]
        self.feedback_inputs = [c for c in self.inputs if c.input_index == FEEDBACK_INPUT]

    def is_runnable(self, now: int) -> bool:
        if self.deployed and not self.finished and self.control.has_commands():
            return True  # a baton to send or an end to make: never mistaken for a deadlock
        return super().is_runnable(now)

    def step(self) -> None:
        if self.deployed:
            self.control.run_commands()
        super().step()

    def _dispatch(self, source: Any, element: Any) -> None:
        if source.input_index == FEEDBACK_INPUT and type(element) is RecordBatch:
            self.control.on_feedback_records(len(element))
        super()._dispatch(source, element)

    def terminate_scope(self) -> None:
        """The loop is complete: finish the chain and send end of input into the body."""
        self.scope_terminated = True
        StreamTask._finish(self)
        self.finished = False  # still reading the feedback until its end of input arrives
        self.finished_at = None

    def _finish(self) -> None:
        if not self.scope_terminated:
            raise SlipstreamError(f"loop head {self}: its inputs ended before the loop terminated "
                                  "(termination protocol out of step)")
        self.finished = True
        self.finished_at = time.perf_counter()


def attach_termination(tasks: list[StreamTask]) -> TerminationCoordinator:
    """Give every task reading channels its part of the termination protocol; one coordinator."""
    coordinator = TerminationCoordinator()
    for task in tasks:
        if isinstance(task, SourceTask):
            continue
        scope = task.head.transformation.scope
        broadcast = _broadcaster(task)

        def busy(task: StreamTask = task) -> bool:
            return task.timers.next_deadline() is not None

        if isinstance(task, LoopHeadTask):
            task.control = task.termination = HeadControl(
                task.name, task.subtask_index, scope, task.regular_inputs, task.feedback_inputs,
                coordinator, broadcast, busy, task.terminate_scope)
        else:
            task.termination = TaskTermination(scope, task.inputs, broadcast, busy,
                                               lambda task=task: task.finished)
    return coordinator


def _broadcaster(task: StreamTask) -> Broadcast:
    writers = task.writers

    def broadcast(baton: TerminationAttempt) -> None:
        for writer in writers:
            writer.broadcast_event(baton)

    return broadcast

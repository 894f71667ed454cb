"""The task that hosts a loop head: a :class:`StreamTask` whose end is decided, not observed.

A plain task ends when all its inputs ended. A loop head's feedback input ends only
after the head itself ended (the end of input has to go round the loop first), so
the head ends when the termination protocol says its scope is complete
(:class:`slipstream.runtime.termination.HeadControl`): it then finishes its chain and
sends end of input into the body — but keeps reading its feedback until that ends
too, failing loudly on any record that still comes back.

With checkpointing on, the head's task takes its snapshot as FLINK-3257 proposes
(:class:`slipstream.runtime.checkpoint.feedback_log.FeedbackLogBarrierHandler`): it logs
what comes back round the loop between forwarding a barrier and receiving it back, and
that log is part of its snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from slipstream.datastream.transformations import HeadRole, IterationHeadTransformation
from slipstream.errors import SlipstreamError
from slipstream.operators.elements import RecordBatch, TerminationAttempt
from slipstream.runtime.checkpoint.barriers import BarrierHandler
from slipstream.runtime.checkpoint.feedback_log import FeedbackLogBarrierHandler
from slipstream.runtime.task import SourceTask, StreamTask
from slipstream.runtime.termination import (
    Broadcast,
    HeadControl,
    IterationHeadControl,
    TaskTermination,
    TerminationCoordinator,
    lies_within,
)

FEEDBACK_INPUT = 1
"""The input index of a loop head's feedback edge."""


class LoopHeadTask(StreamTask):
    """A loop head's subtask: reads feedback first, and runs the head side of the protocol."""

    control: HeadControl
    barrier_handler_class: type[BarrierHandler] = FeedbackLogBarrierHandler

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
            if self.barrier_handler is not None:
                self.barrier_handler.log(source, element)
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


class IterationHeadTask(LoopHeadTask):
    """An iteration head's subtask (FLIP-176): a loop head whose end is decided by epoch rounds.

    A data head has no feedback input and waits, once its input ended, for the iteration to
    end; a criteria head has no regular input. After the iteration ended, records still
    coming back round are dropped (their round never runs).
    """

    control: IterationHeadControl

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for index, channels in enumerate(self._by_input):
            if not channels:
                self._input_ended[index] = True  # a criteria head's missing regular input

    def deploy(self) -> None:
        super().deploy()
        self.control.start()

    def _dispatch(self, source: Any, element: Any) -> None:
        if type(element) is RecordBatch:
            if source.input_index == FEEDBACK_INPUT:
                if self.scope_terminated:
                    return
            elif self.control.role is HeadRole.DATA:
                self.control.count(len(element))
        super()._dispatch(source, element)

    def terminate_scope(self) -> None:
        super().terminate_scope()
        # A criteria head may see its feedback end (the body ended once the other heads
        # terminated) before it runs its own termination: nothing more will come to read.
        if not self.feedback_inputs or all(self._input_ended):
            self.finished = True
            self.finished_at = time.perf_counter()

    def _finish(self) -> None:
        if self.scope_terminated:
            super()._finish()
        # else: a data head's input ended; it stays open until the iteration ends


class EpochHook:
    """A task's part in an iteration: epoch watermarks and the iteration's end reach its operators."""

    def __init__(self, task: StreamTask) -> None:
        self.task = task

    def on_epoch(self, epoch: int) -> None:
        from slipstream.operators.iteration import notify_epoch_watermark
        for operator in self.task.operators:
            notify_epoch_watermark(operator, epoch)

    def on_terminated(self, operator: Any) -> None:
        from slipstream.operators.iteration import notify_iteration_terminated
        notify_iteration_terminated(operator)


def attach_termination(tasks: list[StreamTask]) -> TerminationCoordinator:
    """Give every task reading channels its part of the termination protocol; one coordinator."""
    coordinator = TerminationCoordinator()
    iterations = _iteration_scopes(tasks)
    for scope, has_criteria in iterations.items():
        coordinator.add_iteration(scope, has_criteria)
    for task in tasks:
        if not isinstance(task, SourceTask):
            _attach(task, coordinator, iterations)
    return coordinator


def _iteration_scopes(tasks: list[StreamTask]) -> dict[Any, bool]:
    """Each iteration scope of the job, and whether it has a termination-criteria stream."""
    iterations: dict[Any, bool] = {}
    for task in tasks:
        if isinstance(task, IterationHeadTask):
            transformation = cast(IterationHeadTransformation, task.head.transformation)
            iterations[transformation.scope] = iterations.get(transformation.scope, False) or \
                transformation.role is HeadRole.CRITERIA
    return iterations


def _attach(task: StreamTask, coordinator: TerminationCoordinator, iterations: dict[Any, bool]) -> None:
    """``task``'s part: a head's control (an iteration's or a loop's), or a plain task's alignment."""
    scope = task.head.transformation.scope
    broadcast = _broadcaster(task)

    def busy() -> bool:
        return task.timers.next_deadline() is not None

    in_iteration = any(lies_within(scope, s) for s in iterations)
    if in_iteration:
        task.iteration = EpochHook(task)
    if isinstance(task, IterationHeadTask):
        transformation = cast(IterationHeadTransformation, task.head.transformation)
        task.control = task.termination = IterationHeadControl(
            task.name, task.subtask_index, scope, task.regular_inputs, task.feedback_inputs,
            coordinator, broadcast, busy, task.terminate_scope, transformation.role,
            transformation.bounded, task.iteration.on_epoch)
    elif isinstance(task, LoopHeadTask):
        task.control = task.termination = HeadControl(
            task.name, task.subtask_index, scope, task.regular_inputs, task.feedback_inputs,
            coordinator, broadcast, busy, task.terminate_scope,
            task.iteration.on_epoch if in_iteration else None)
    else:
        task.termination = TaskTermination(scope, task.inputs, broadcast, busy, lambda: task.finished,
                                           _epoch_on_aligned(task, iterations) if in_iteration else None,
                                           iterations)


def _epoch_on_aligned(task: StreamTask, iterations: dict[Any, bool]) -> Callable[[TerminationAttempt], None]:
    """A plain task in an iteration: an aligned epoch baton is its epoch watermark."""
    hook: EpochHook = task.iteration

    def on_aligned(baton: TerminationAttempt) -> None:
        if baton.scope in iterations:
            hook.on_epoch(baton.attempt_id)

    return on_aligned


def _broadcaster(task: StreamTask) -> Broadcast:
    writers = task.writers

    def broadcast(baton: TerminationAttempt) -> None:
        for writer in writers:
            writer.broadcast_event(baton)

    return broadcast

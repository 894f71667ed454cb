"""The task that hosts a loop head: a :class:`StreamTask` whose end is decided, not observed.

A plain task ends when all its inputs ended. A loop head's feedback input ends only
after the head itself ended (the end of input has to go round the loop first), so
the head ends when the termination protocol says its scope is complete
(:class:`slipstream.runtime.termination.HeadControl`): it then finishes its chain and
sends end of input into the body — but keeps reading its feedback until that ends
too, failing loudly on any record that still comes back.

With checkpointing on, the head's task takes its snapshot as FLINK-3257 proposes
(:class:`FeedbackLogBarrierHandler`): it logs what comes back round the loop between
forwarding a barrier and receiving it back, and that log is part of its snapshot.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import replace
from typing import Any, cast

from slipstream.datastream.transformations import IterationHeadTransformation
from slipstream.errors import CheckpointError, SlipstreamError
from slipstream.operators.elements import RecordBatch, TerminationAttempt
from slipstream.runtime.checkpoint.barriers import BarrierHandler, CheckpointBarrier
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
    barrier_handler_class: type = BarrierHandler  # FeedbackLogBarrierHandler, set below

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
            elif self.control.role == "data":
                self.control.count(len(element))
        super()._dispatch(source, element)

    def terminate_scope(self) -> None:
        super().terminate_scope()
        if not self.feedback_inputs:
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
    iterations: dict[Any, bool] = {}  # iteration scope -> whether it has a termination-criteria stream
    for task in tasks:
        if isinstance(task, IterationHeadTask):
            transformation = cast(IterationHeadTransformation, task.head.transformation)
            iterations[transformation.scope] = iterations.get(transformation.scope, False) or \
                transformation.role == "criteria"
    for scope, has_criteria in iterations.items():
        coordinator.add_iteration(scope, has_criteria)
    for task in tasks:
        if isinstance(task, SourceTask):
            continue
        scope = task.head.transformation.scope
        broadcast = _broadcaster(task)

        def busy(task: StreamTask = task) -> bool:
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
            on_aligned = None
            if in_iteration:
                def on_aligned(baton: TerminationAttempt, hook: EpochHook = task.iteration) -> None:
                    if baton.scope in iterations:
                        hook.on_epoch(baton.attempt_id)

            def finished(task: StreamTask = task) -> bool:
                return task.finished

            task.termination = TaskTermination(scope, task.inputs, broadcast, busy, finished, on_aligned, iterations)
    return coordinator


def _broadcaster(task: StreamTask) -> Broadcast:
    writers = task.writers

    def broadcast(baton: TerminationAttempt) -> None:
        for writer in writers:
            writer.broadcast_event(baton)

    return broadcast


class FeedbackLogBarrierHandler(BarrierHandler):
    """Checkpoints in a cycle, as FLINK-3257 proposes, at a loop head's task.

    A barrier is aligned on the head's regular inputs only (waiting for the feedback
    would wait for itself). Then the head snapshots its chain, forwards the barrier
    into the body and starts logging: every record that comes back through the feedback
    until the barrier has come back through every feedback channel is kept — these are
    the records that were going round at the checkpoint's cut. They are processed as
    usual too. When the barrier is back, the log becomes the head operator's state in
    the snapshot, and the task acknowledges; on restore the head replays the log before
    anything else (:meth:`LoopHeadOperator.open`). Feedback channels are never blocked.
    """

    def __init__(self, task: LoopHeadTask, listener: Any, exactly_once: bool) -> None:
        super().__init__(task, listener, exactly_once)
        self._feedback_ids = {id(c) for c in task.feedback_inputs}
        self.logging_id: int | None = None
        self._log: list[tuple[list[Any], list[Any] | None]] = []
        self._snapshots: list[Any] = []
        self._returned: set[int] = set()

    def on_barrier(self, channel: Any, barrier: CheckpointBarrier) -> None:
        if id(channel) not in self._feedback_ids:
            super().on_barrier(channel, barrier)
        elif barrier.checkpoint_id == self.logging_id:
            self._returned.add(id(channel))
            self._check_returned()

    def on_channel_ended(self, channel: Any) -> None:
        if id(channel) not in self._feedback_ids:
            super().on_channel_ended(channel)
        elif self.logging_id is not None:
            self._check_returned()

    def log(self, channel: Any, batch: RecordBatch) -> None:
        """A feedback record arrived: keep it while a checkpoint waits for its barrier to come back
        through that channel (what follows the barrier is produced again after a restore)."""
        if self.logging_id is not None and len(batch) and id(channel) not in self._returned:
            self._log.append((list(batch.values), None if batch.timestamps is None else list(batch.timestamps)))

    def abort(self, checkpoint_id: int) -> None:
        super().abort(checkpoint_id)
        if self.logging_id == checkpoint_id:
            self._stop_logging()

    def _check_complete(self) -> None:
        if self.pending_id is None:
            return
        for channel in self.task.regular_inputs:
            if not channel.ended and id(channel) not in self._delivered:
                return
        self._complete()

    def _complete(self) -> None:
        """The barrier is aligned on the regular inputs: snapshot, forward it, start logging."""
        from slipstream.runtime.checkpoint.snapshot import snapshot_task

        checkpoint_id = self.pending_id
        assert checkpoint_id is not None  # completing the pending checkpoint
        task = self.task
        live = not task.finished and not task.scope_terminated
        if live:
            for operator in task.operators:
                operator.prepare_snapshot_pre_barrier(checkpoint_id)
        self._snapshots = snapshot_task(task)
        if live:
            barrier = CheckpointBarrier(checkpoint_id, self.pending_timestamp)
            for writer in task.writers:
                writer.broadcast_event(barrier)
        self._release()
        self.pending_id = None
        self.last_done_id = checkpoint_id
        self.logging_id = checkpoint_id
        self._log = []
        self._returned = set()
        self._check_returned()

    def _check_returned(self) -> None:
        for channel in self.task.feedback_inputs:
            if not channel.ended and id(channel) not in self._returned:
                return
        checkpoint_id, snapshots = self.logging_id, self._snapshots
        assert checkpoint_id is not None  # the feedback of this checkpoint is being logged
        head = snapshots[0]
        try:
            state = pickle.dumps({"feedback_log": self._log}, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise CheckpointError(f"loop head '{self.task.name}', subtask {self.task.subtask_index + 1}: "
                                  f"the records going round its loop cannot be written to a checkpoint: "
                                  f"{type(exc).__name__}: {exc}") from exc
        self._stop_logging()
        self.listener.acknowledge(self.task, checkpoint_id, [replace(head, state=state), *snapshots[1:]])

    def _stop_logging(self) -> None:
        self.logging_id = None
        self._log = []
        self._snapshots = []
        self._returned = set()


LoopHeadTask.barrier_handler_class = FeedbackLogBarrierHandler

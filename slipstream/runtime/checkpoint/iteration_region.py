"""Checkpoints of FLIP-176 iterations: every task of an iteration is captured at one instant.

A loop (FLIP-15) checkpoints as FLINK-3257 proposes: its head logs what comes back round
the loop until the barrier returns (:class:`slipstream.runtime.checkpoint.feedback_log.FeedbackLogBarrierHandler`).
An iteration keeps more state in its cycle than records: epoch batons travelling between
them, batons half-aligned at every task, the rounds each head counted and the
coordinator's decisions. Cutting all of that consistently with barriers would need the
coordinator in the marker protocol (as Flink ML's head operator coordinator is) and every
baton logged with the records. The embedded runtime runs all tasks of an iteration in one
thread (on worker processes, the iteration is placed whole on one worker: see
:mod:`slipstream.runtime.workers.placement`), between turns, so an iteration is captured whole instead:

1. The barrier is aligned at every head of the iteration on its inputs from outside (in
   EXACTLY_ONCE mode a channel that delivered it is blocked, as alignment always does); a
   head whose inputs ended is aligned at once.
2. When the last head is aligned, every task of the iteration (heads, body, feedback
   tails) is snapshotted in that instant: its operators' state, the elements waiting in
   every channel between them (records and batons in flight, feedback included, spilled
   ones too), each task's and head's protocol state, the coordinator's rounds, and the
   state of every user function (its attributes: see
   :func:`slipstream.operators.iteration.snapshot_functions`).
3. The barrier then leaves the iteration on every edge into the enclosing scope, so what
   follows it aligns as usual.

After a restore every task of the iteration resumes where it was, so each epoch's
listener call happened before the cut or happens after it, never both. An iteration is
restored only at the parallelism it was checkpointed at: its epochs in flight belong to
subtasks — unless it had ended by then: it then ends again at once, at any parallelism.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from slipstream.datastream.scope import StreamScope
from slipstream.datastream.time import MAX_WATERMARK
from slipstream.errors import CheckpointError, CorruptCheckpointError, SlipstreamError
from slipstream.operators.elements import TerminationAttempt
from slipstream.operators.iteration import restore_functions, snapshot_functions
from slipstream.operators.segments import Sharing, dumps_plain_or_shared
from slipstream.runtime.checkpoint.barriers import (
    BarrierHandler,
    CheckpointBarrier,
    CheckpointListener,
)
from slipstream.runtime.checkpoint.manifest import Manifest
from slipstream.runtime.checkpoint.snapshot import OperatorSnapshot, loads_checkpointed, snapshot_task
from slipstream.runtime.loop_task import FEEDBACK_INPUT, IterationHeadTask, LoopHeadTask
from slipstream.runtime.record_writer import RecordWriter
from slipstream.runtime.task import SourceTask, StreamTask
from slipstream.runtime.termination import ScopeMap, lies_within

REGION_KIND = "IterationRegion"
"""The kind of the manifest entry that holds an iteration's state beside its operators'."""


def iteration_regions(tasks: list[StreamTask]) -> list[tuple[StreamScope, list[StreamTask]]]:
    """Each iteration scope of the job with its tasks, in the job's task order."""
    scopes: list[StreamScope] = []
    for task in tasks:
        if isinstance(task, IterationHeadTask) and task.head.transformation.scope not in scopes:
            scopes.append(task.head.transformation.scope)
    return [(scope, [task for task in tasks if not isinstance(task, SourceTask)
                     and lies_within(task.head.transformation.scope, scope)]) for scope in scopes]


def _scopes(scope: StreamScope, tasks: list[StreamTask]) -> list[StreamScope]:
    """The iteration's scope, then the scopes of the loops inside it, in task order."""
    scopes = [scope]
    for task in tasks:
        if task.head.transformation.scope not in scopes:
            scopes.append(task.head.transformation.scope)
    return scopes


def _head_uid(task: StreamTask) -> str:
    """The uid of ``task``'s head operator (the planner gives every stateful operator one)."""
    uid = task.head.ctx.uid
    assert uid is not None
    return uid


def _region_uid(tasks: list[StreamTask]) -> str:
    return "iteration:" + min(_head_uid(task) for task in tasks if isinstance(task, IterationHeadTask))


def _layout(tasks: list[StreamTask]) -> list[tuple[str, int, int]]:
    return [(_head_uid(task), task.subtask_index, task.head.ctx.parallelism) for task in tasks]


def _leaving(task: StreamTask, scope: StreamScope) -> list[RecordWriter]:
    """The task's writers into the enclosing scope (to the iteration's exits, or side outputs)."""
    return [writer for writer in task.writers if not lies_within(writer.edge.target.transformation.scope, scope)]


def _is_live(task: StreamTask) -> bool:
    return not task.finished and not getattr(task, "scope_terminated", False)


class IterationRegion:
    """The tasks of one iteration, checkpointed together (see the module docstring)."""

    def __init__(self, scope: StreamScope, tasks: list[StreamTask], listener: CheckpointListener,
                 exactly_once: bool) -> None:
        self.scope = scope
        self.tasks = tasks
        self.listener = listener
        self.uid = _region_uid(tasks)
        self.heads = [task for task in tasks if isinstance(task, IterationHeadTask)]
        self._exits = [(task, writer) for task in tasks for writer in _leaving(task, scope)]
        for task in tasks:
            task.barrier_handler = IterationHeadBarrierHandler(task, self, exactly_once) \
                if isinstance(task, IterationHeadTask) else IterationMemberBarrierHandler(task, listener, exactly_once)

    def check(self, checkpoint_id: int) -> None:
        """A head is aligned: once all are, snapshot the iteration."""
        if all(head.barrier_handler.is_aligned(checkpoint_id) for head in self.heads):
            self._snapshot(checkpoint_id)

    def _snapshot(self, checkpoint_id: int) -> None:
        for task in self.tasks:
            if _is_live(task):
                for operator in task.operators:
                    operator.prepare_snapshot_pre_barrier(checkpoint_id)
            task.flush()  # the head whose barrier completed the alignment is in the middle of its turn
        scopes = _scopes(self.scope, self.tasks)
        sharing = Sharing.of(operator for task in self.tasks for operator in task.operators)
        state = {"layout": _layout(self.tasks), "scopes": scopes,
                 "coordinator": self.heads[0].control.coordinator.snapshot_scopes(scopes),
                 "tasks": [self._task_state(task, sharing) for task in self.tasks]}
        try:
            data = dumps_plain_or_shared(state, sharing)
        except Exception as exc:
            raise CheckpointError(f"iteration '{self.heads[0].name}': the records going round it cannot be "
                                  f"written to a checkpoint: {type(exc).__name__}: {exc}") from exc
        region = OperatorSnapshot(self.uid, REGION_KIND, 0, 1, 1, None, None, data,
                                  segments=sharing.take_used() if sharing is not None else {})
        for position, task in enumerate(self.tasks):
            self.listener.acknowledge(task, checkpoint_id,
                                      snapshot_task(task, sharing) + ([region] if position == 0 else []))
        barrier = CheckpointBarrier(checkpoint_id, self.heads[0].barrier_handler.pending_timestamp)
        for task, writer in self._exits:
            if not task.finished:
                writer.broadcast_event(barrier)
        for head in self.heads:
            head.barrier_handler.done(checkpoint_id)

    @staticmethod
    def _task_state(task: StreamTask, sharing: Sharing | None) -> dict[str, Any]:
        head = isinstance(task, IterationHeadTask)  # its regular inputs come from outside the iteration
        return {"finished": task.finished, "scope_terminated": getattr(task, "scope_terminated", False),
                "channels": task.snapshot_channels(lambda c: not head or c.input_index == FEEDBACK_INPUT),
                "protocol": task.termination.snapshot(), "writers": [writer.snapshot() for writer in task.writers],
                "functions": [snapshot_functions(operator, sharing) for operator in task.operators]}


class IterationHeadBarrierHandler(BarrierHandler):
    """At an iteration head: aligns the barrier on the inputs from outside, then asks the region."""

    def __init__(self, task: IterationHeadTask, region: IterationRegion, exactly_once: bool) -> None:
        super().__init__(task, region.listener, exactly_once)
        self.region = region

    def on_trigger(self, checkpoint_id: int, timestamp: int) -> None:
        self.expect(checkpoint_id, timestamp)

    def is_aligned(self, checkpoint_id: int) -> bool:
        if self.pending_id != checkpoint_id:
            return False
        return self.task.finished or all(channel.ended or id(channel) in self._delivered
                                         for channel in self.task.regular_inputs)

    def done(self, checkpoint_id: int) -> None:
        self._release()
        self.pending_id = None
        self.last_done_id = checkpoint_id

    def _check_complete(self) -> None:
        if self.pending_id is not None and self.is_aligned(self.pending_id):
            self.region.check(self.pending_id)


class IterationMemberBarrierHandler(BarrierHandler):
    """At any other task of an iteration: the region snapshots it, and no barrier comes in."""

    def on_trigger(self, checkpoint_id: int, timestamp: int) -> None:
        """The region acknowledges this task with the others."""

    def on_barrier(self, channel: Any, barrier: CheckpointBarrier) -> None:
        raise SlipstreamError(f"task {self.task}: checkpoint barrier {barrier.checkpoint_id} reached the inside "
                              "of an iteration (only its heads align barriers)")


def attach_iteration_regions(tasks: list[StreamTask], listener: CheckpointListener,
                             exactly_once: bool) -> list[IterationRegion]:
    """Give the tasks of every iteration the barrier handlers that checkpoint it whole."""
    return [IterationRegion(scope, members, listener, exactly_once) for scope, members in iteration_regions(tasks)]


def restore_iteration_regions(tasks: list[StreamTask], manifest: Manifest, files: dict[str, bytes],
                              checkpoint: str) -> list[StreamTask]:
    """Put every iteration back as it was at the checkpoint (freshly built tasks, before they run).

    An iteration that had ended before the checkpoint (training on the history done) may be
    restored at another parallelism: it ends again at once, and its tasks are returned — their
    operators start without their old state, which nothing will read any more.
    """
    def loads(data: bytes) -> Any:
        return loads_checkpointed(data, files, checkpoint)

    ended: list[StreamTask] = []
    for scope, members in iteration_regions(tasks):
        uid = _region_uid(members)
        entry = manifest.operators.get(uid)
        if entry is None or entry.kind != REGION_KIND or entry.subtasks[0].operator is None:
            raise CorruptCheckpointError(f"the checkpoint has no state for iteration '{members[0].name}'",
                                         checkpoint=checkpoint, expected=f"an entry '{uid}'",
                                         actual=f"uids {sorted(manifest.operators)}")
        state = loads(files[entry.subtasks[0].operator])
        if state["layout"] != _layout(members) and all(task_state["finished"] for task_state in state["tasks"]):
            _restore_ended(scope, members)
            ended += members
            continue
        if state["layout"] != _layout(members):
            old = {uid: parallelism for uid, _, parallelism in state["layout"]}
            new = {uid: parallelism for uid, _, parallelism in _layout(members)}
            raise CheckpointError(
                f"iteration '{members[0].name}' was checkpointed with parallelism {old} and the job now has "
                f"{new}: an iteration is restored only at the parallelism it was checkpointed at (its records "
                "and epochs in flight belong to subtasks)")
        heads = [task for task in members if isinstance(task, IterationHeadTask)]
        scopes = _scopes(scope, members)
        heads[0].control.coordinator.restore_scopes(scopes, state["coordinator"])
        in_this_run = dict(zip(state["scopes"], scopes, strict=True)).__getitem__
        for task, task_state in zip(members, state["tasks"]):
            _restore_task(task, task_state, in_this_run, scope, loads)
    return ended


def _restore_ended(scope: StreamScope, members: list[StreamTask]) -> None:
    """An iteration that had ended: its tasks end at once; nothing of it runs again."""
    coordinator = next(task for task in members if isinstance(task, IterationHeadTask)).control.coordinator
    coordinator.iterations[scope].terminated = True
    coordinator.completed.append(scope)
    for task in members:
        if isinstance(task, LoopHeadTask):
            task.scope_terminated = True
        _end_restored(task, scope)


def _end_restored(task: StreamTask, scope: StreamScope) -> None:
    """A task restored as finished: what follows the iteration starts afresh, so it gets the task's
    final watermark and end of input again."""
    task.finished = True
    for input_channel in task.inputs:
        input_channel.channel.finish_consumer()
    for writer in _leaving(task, scope):
        writer.broadcast_event(MAX_WATERMARK)
        writer.finish()


def _restore_task(task: StreamTask, state: dict[str, Any], in_this_run: ScopeMap, scope: StreamScope,
                  loads: Callable[[bytes], Any]) -> None:
    def element_in_this_run(element: Any) -> Any:
        if type(element) is TerminationAttempt:
            return dataclasses.replace(element, scope=in_this_run(element.scope))
        return element

    def restore_user_functions() -> None:
        for operator, functions in zip(task.operators, state["functions"]):
            restore_functions(operator, functions, loads)

    if state["finished"]:
        restore_user_functions()  # never opened again; what it holds goes into the next checkpoints
    else:
        task.after_open.append(restore_user_functions)
    task.restore_channels([None if channel is None else
                           dict(channel, elements=[element_in_this_run(e) for e in channel["elements"]])
                           for channel in state["channels"]])
    task.termination.restore(state["protocol"], in_this_run)
    for writer, writer_state in zip(task.writers, state["writers"], strict=True):
        writer.restore(writer_state)
    if isinstance(task, LoopHeadTask):
        task.scope_terminated = state["scope_terminated"]
    if state["finished"]:
        _end_restored(task, scope)

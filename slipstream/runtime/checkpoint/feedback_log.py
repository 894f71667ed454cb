"""Checkpoints in a cycle (FLINK-3257): the barrier handler of a loop head's task.

A loop's feedback edge makes its graph a cycle, so a barrier cannot be aligned on every
input of the head: the feedback would wait for the barrier the head itself has to send.
:class:`FeedbackLogBarrierHandler` aligns on the head's regular inputs only, and keeps
the records that were going round the loop at the checkpoint's cut as the head's state
(:class:`slipstream.operators.loops.LoopHeadOperator` replays them on restore).
FLIP-176 iterations are checkpointed whole instead (:mod:`.iteration_region`).
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from slipstream.errors import CheckpointError
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.checkpoint.barriers import BarrierHandler, CheckpointBarrier

if TYPE_CHECKING:
    from slipstream.runtime.loop_task import LoopHeadTask

__all__ = ["FeedbackLogBarrierHandler"]


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
        checkpoint_id = self.pending_id
        self._snapshots = self._snapshot_and_forward(live=not self.task.finished and not self.task.scope_terminated)
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

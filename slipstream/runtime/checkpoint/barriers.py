"""Checkpoint barriers and their alignment at tasks.

A barrier travels in band, after every record that belongs before the checkpoint.
Sources emit it when the coordinator triggers a checkpoint; a task with several
input channels takes its snapshot once every channel delivered the barrier or
ended. In EXACTLY_ONCE mode a channel that delivered the barrier is blocked until
then (alignment), so no record from after the barrier reaches the state before the
snapshot; in AT_LEAST_ONCE mode channels are never blocked, and records that
overtake the barrier are replayed after a restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from slipstream.runtime.checkpoint.snapshot import OperatorSnapshot


@dataclass(frozen=True, slots=True)
class CheckpointBarrier:
    """Everything before this element on its channel belongs to checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    timestamp: int


class CheckpointListener(Protocol):
    def acknowledge(self, task: Any, checkpoint_id: int, snapshots: list[OperatorSnapshot]) -> None: ...


class BarrierHandler:
    """One task's view of the checkpoint in flight: which channels delivered its barrier."""

    def __init__(self, task: Any, listener: CheckpointListener, exactly_once: bool) -> None:
        self.task = task
        self.listener = listener
        self.exactly_once = exactly_once
        self.pending_id: int | None = None
        self.pending_timestamp = 0
        self._delivered: set[int] = set()  # id() of the InputChannels that delivered the barrier
        self.last_done_id = -1

    # -- driven by the coordinator ------------------------------------------------------------
    def on_trigger(self, checkpoint_id: int, timestamp: int) -> None:
        """Checkpoint ``checkpoint_id`` was triggered: a finished task acknowledges its final state
        at once; a running one expects the barrier."""
        if self.task.finished:
            from slipstream.runtime.checkpoint.snapshot import snapshot_task
            self.listener.acknowledge(self.task, checkpoint_id, snapshot_task(self.task))
        else:
            self.expect(checkpoint_id, timestamp)

    def expect(self, checkpoint_id: int, timestamp: int) -> None:
        """Checkpoint ``checkpoint_id`` was triggered: its barrier will come on every live channel."""
        self._release()
        self.pending_id = checkpoint_id
        self.pending_timestamp = timestamp
        self._delivered = set()
        self._check_complete()

    def trigger_source(self, checkpoint_id: int, timestamp: int) -> None:
        """A source task: snapshot now and emit the barrier after everything emitted so far."""
        self.pending_id = checkpoint_id
        self.pending_timestamp = timestamp
        self._complete()

    def abort(self, checkpoint_id: int) -> None:
        if self.pending_id == checkpoint_id:
            self._release()
            self.pending_id = None
            self.last_done_id = checkpoint_id

    # -- driven by the task ---------------------------------------------------------------------
    def on_barrier(self, channel: Any, barrier: CheckpointBarrier) -> None:
        if barrier.checkpoint_id != self.pending_id:
            return  # a barrier of an aborted checkpoint: it has nothing left to align
        self._delivered.add(id(channel))
        if self.exactly_once:
            channel.blocked = True
        self._check_complete()

    def on_channel_ended(self, channel: Any) -> None:
        if self.pending_id is not None:
            self._check_complete()

    def log(self, channel: Any, batch: Any) -> None:
        """A record came back round a loop: only a loop head checkpointed by FLINK-3257 keeps it
        (``runtime.checkpoint.feedback_log.FeedbackLogBarrierHandler``); everyone else needs nothing of it."""

    # -- internals --------------------------------------------------------------------------------
    def _check_complete(self) -> None:
        if self.pending_id is None:
            return
        delivered = self._delivered
        for channel in self.task.inputs:
            if not channel.ended and id(channel) not in delivered:
                return
        self._complete()

    def _complete(self) -> None:
        checkpoint_id = self.pending_id
        assert checkpoint_id is not None  # completing the pending checkpoint
        snapshots = self._snapshot_and_forward(live=not self.task.finished)
        self.listener.acknowledge(self.task, checkpoint_id, snapshots)

    def _snapshot_and_forward(self, live: bool) -> list[OperatorSnapshot]:
        """The aligned barrier's cut at this task: snapshot its chain and, while it runs (``live``),
        send the barrier on; the checkpoint is done here."""
        from slipstream.runtime.checkpoint.snapshot import snapshot_task

        checkpoint_id = self.pending_id
        assert checkpoint_id is not None  # completing the pending checkpoint
        task = self.task
        if live:
            for operator in task.operators:
                operator.prepare_snapshot_pre_barrier(checkpoint_id)
        snapshots = snapshot_task(task)
        if live:
            barrier = CheckpointBarrier(checkpoint_id, self.pending_timestamp)
            for writer in task.writers:
                writer.broadcast_event(barrier)
        self._release()
        self.pending_id = None
        self.last_done_id = checkpoint_id
        return snapshots

    def _release(self) -> None:
        for channel in self.task.inputs:
            channel.blocked = False
        self._delivered = set()

"""The checkpoint coordinator: when to checkpoint, collecting snapshots, completing and failing.

It runs in the scheduler's thread, between task turns. A checkpoint is triggered
on the processing-time interval (a separate one while sources report backlog) or
after a number of source records, never sooner than the minimum pause after the
last one. Triggering snapshots every finished task at once, tells every running
task to expect the barrier, and has every running source snapshot itself and emit
the barrier. When all tasks acknowledged, the snapshots are written (data files,
then the manifest), older checkpoints are pruned, and operators are told the
checkpoint completed — two-phase-commit sinks commit then.

FLIP-327: no checkpoint is taken while a task still waits behind a BLOCKING edge
or reads one, or while an operator reports ``is_checkpoint_blocked()`` (a sorter
on backlog input); the skip is logged and counted in the metrics instead.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from slipstream.datastream.checkpoint_config import CheckpointConfig, CheckpointingMode
from slipstream.errors import CheckpointError, SlipstreamError
from slipstream.runtime.checkpoint.barriers import BarrierHandler
from slipstream.runtime.checkpoint.iteration_region import attach_iteration_regions
from slipstream.runtime.checkpoint.manifest import Manifest
from slipstream.runtime.checkpoint.snapshot import OperatorSnapshot, build_manifest_and_files, snapshot_task
from slipstream.runtime.checkpoint.storage import CheckpointStorage

log = logging.getLogger("slipstream.checkpoint")


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    started_ms: int
    final: bool = False
    started_s: float = field(default_factory=time.perf_counter)
    acks: dict[int, list[OperatorSnapshot]] = field(default_factory=dict)  # id(task) -> snapshots


class CheckpointCoordinator:
    """Triggers and completes the checkpoints of one run of a job."""

    def __init__(self, tasks: list[Any], config: CheckpointConfig, storage: CheckpointStorage,
                 fingerprint: str, job_name: str, clock: Any, first_checkpoint_id: int) -> None:
        from slipstream.runtime.task import SourceTask

        self.tasks = tasks
        self.config = config
        self.storage = storage
        self.fingerprint = fingerprint
        self.job_name = job_name
        self.clock = clock
        self.exactly_once = config.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE
        self.next_id = first_checkpoint_id
        self.pending: PendingCheckpoint | None = None
        self.latest_completed_id: int | None = None
        self.latest_completed_path: str | None = None
        self.consecutive_failures = 0
        self.sources = [task for task in tasks if isinstance(task, SourceTask)]
        for task in tasks:
            # a task may bring its own handler: a loop head logs its feedback (FLINK-3257)
            task.barrier_handler = getattr(task, "barrier_handler_class", BarrierHandler)(
                task, self, self.exactly_once)
            for operator in task.operators:
                operator.ctx.checkpointing = True
        attach_iteration_regions(tasks, self, self.exactly_once)  # an iteration is checkpointed whole
        now = clock.now_ms()
        self._last_trigger_ms = now
        self._last_done_ms = now - config.get_min_pause_between_checkpoints()
        self._records_at_trigger = 0
        self._interval_records = config.get_checkpoint_interval_records()
        self._logged_reasons: set[str] = set()
        self.metrics: dict[str, Any] = {"completed": 0, "failed": 0, "skipped": 0, "skip_reasons": {},
                                        "last_duration_ms": None, "last_write_ms": None,
                                        "last_size_bytes": None,
                                        "durations_ms": [], "latest_completed_id": None}

    # -- the scheduler's hook -------------------------------------------------------------------
    def on_turn(self, now: int) -> None:
        """Called before every scheduler turn: finish, time out or start a checkpoint."""
        pending = self.pending
        if pending is not None:
            if len(pending.acks) == len(self.tasks):
                self._complete(pending)
            elif now - pending.started_ms > self.config.get_checkpoint_timeout():
                self._fail(pending, CheckpointError(
                    f"checkpoint {pending.checkpoint_id} timed out after "
                    f"{self.config.get_checkpoint_timeout()} ms"))
            return
        if self._is_due(now):
            self._deploy_ready_tasks()
            reason = self._blocked_reason()
            if reason is not None:
                self._skip(reason, now)
            else:
                self.trigger(now)

    def _source_records(self) -> int:
        return sum(task.head.ctx.metrics.get("records_out", 0) for task in self.sources)

    def _is_due(self, now: int) -> bool:
        if now - self._last_done_ms < self.config.get_min_pause_between_checkpoints():
            return False
        interval = self.config.get_checkpoint_interval()
        backlog_interval = self.config.get_checkpoint_interval_during_backlog()
        if backlog_interval is not None and any(task.head.is_backlog() for task in self.sources
                                                if not task.finished):
            if backlog_interval == 0:
                return False
            interval = backlog_interval
        if interval > 0 and now - self._last_trigger_ms >= interval:
            return True
        return self._interval_records is not None and \
            self._source_records() - self._records_at_trigger >= self._interval_records

    def _deploy_ready_tasks(self) -> None:
        """Open every task that could run but has not had its first turn yet.

        Its state is its restored state (or none), which only exists as operator state once it
        is open; deploying it now, as its first turn would, lets the checkpoint go ahead instead
        of being skipped until the scheduler happens to pick it. Tasks waiting behind a BLOCKING
        edge stay undeployed, and block the checkpoint (FLIP-327).
        """
        for task in self.tasks:
            if not task.finished and not getattr(task, "deployed", True) and task.is_deployable():
                task.deploy()
                task.flush()

    def _blocked_reason(self) -> str | None:
        """Why FLIP-327 forbids a checkpoint now, or None."""
        for task in self.tasks:
            if task.finished:
                continue
            if not getattr(task, "deployed", True):
                return f"task {task} is not deployed yet (not started, or waiting behind a BLOCKING edge)"
            for channel in task.inputs:
                if getattr(channel, "blocking", False) and not channel.ended:
                    return f"a BLOCKING edge into task {task} is in use"
            for operator in task.operators:
                reason = operator.is_checkpoint_blocked()
                if reason:
                    return reason
        return None

    def _skip(self, reason: str, now: int) -> None:
        self.metrics["skipped"] += 1
        reasons = self.metrics["skip_reasons"]
        reasons[reason] = reasons.get(reason, 0) + 1
        if reason not in self._logged_reasons:
            self._logged_reasons.add(reason)
            log.info("checkpoint skipped: %s", reason)
        self._last_trigger_ms = now
        self._records_at_trigger = self._source_records()

    # -- triggering and acknowledgements --------------------------------------------------------
    def trigger(self, now: int, final: bool = False) -> int:
        checkpoint_id = self.next_id
        self.next_id += 1
        self.pending = PendingCheckpoint(checkpoint_id, now, final)
        self._last_trigger_ms = now
        self._records_at_trigger = self._source_records()
        for task in self.tasks:
            if task not in self.sources:
                task.barrier_handler.on_trigger(checkpoint_id, now)
        for task in self.sources:
            if task.finished:
                self.acknowledge(task, checkpoint_id, snapshot_task(task))
            else:
                task.barrier_handler.trigger_source(checkpoint_id, now)
                task.flush()
        return checkpoint_id

    def trigger_savepoint(self, now: int) -> int | None:
        """Trigger a checkpoint now, whatever the interval (a savepoint before a stop); None when one
        is under way or FLIP-327 forbids one now (the caller asks again after the next turn)."""
        if self.pending is not None:
            return None
        self._deploy_ready_tasks()
        if self._blocked_reason() is not None:
            return None
        return self.trigger(now)

    def acknowledge(self, task: Any, checkpoint_id: int, snapshots: list[OperatorSnapshot]) -> None:
        pending = self.pending
        if pending is None or pending.checkpoint_id != checkpoint_id:
            return  # late: that checkpoint was aborted
        pending.acks[id(task)] = snapshots

    def final_checkpoint(self) -> None:
        """Every task finished: checkpoint the final state and commit (the job's last output)."""
        pending = self.pending
        if pending is not None:
            if len(pending.acks) == len(self.tasks):
                self._complete(pending, raise_errors=True)
            else:
                self._abort(pending)
        pending = self.pending
        self.trigger(self.clock.now_ms(), final=True)
        self._complete(self.pending, raise_errors=True)

    # -- completion -----------------------------------------------------------------------------
    def _complete(self, pending: PendingCheckpoint, raise_errors: bool = False) -> None:
        checkpoint_id = pending.checkpoint_id
        manifest = Manifest(checkpoint_id, self.job_name, self.fingerprint, time.time_ns() // 1_000_000,
                            "EXACTLY_ONCE" if self.exactly_once else "AT_LEAST_ONCE")
        snapshots = [snap for task in self.tasks for snap in pending.acks[id(task)]]
        started = time.perf_counter()
        try:
            files = build_manifest_and_files(manifest, snapshots)
            path = self.storage.write(manifest, files)
            self.storage.prune(checkpoint_id)
        except (OSError, SlipstreamError) as exc:
            self._fail(pending, exc, always_raise=raise_errors)
            return
        finished = time.perf_counter()
        write_ms = (finished - started) * 1000
        duration_ms = (finished - pending.started_s) * 1000
        self.pending = None
        self.latest_completed_id = checkpoint_id
        self.latest_completed_path = path
        self.consecutive_failures = 0
        self._last_done_ms = self.clock.now_ms()
        metrics = self.metrics
        metrics["completed"] += 1
        metrics["latest_completed_id"] = checkpoint_id
        metrics["last_duration_ms"] = duration_ms
        metrics["last_write_ms"] = write_ms
        metrics["last_size_bytes"] = sum(len(data) for data in files.values())
        metrics["durations_ms"].append(duration_ms)
        log.debug("checkpoint %d complete: %s (%.1f ms from trigger, %.1f ms writing)", checkpoint_id, path,
                  duration_ms, write_ms)
        for task in self.tasks:
            for operator in task.operators:
                operator.notify_checkpoint_complete(checkpoint_id)

    def _abort(self, pending: PendingCheckpoint) -> None:
        for task in self.tasks:
            task.barrier_handler.abort(pending.checkpoint_id)
            for operator in task.operators:
                operator.notify_checkpoint_aborted(pending.checkpoint_id)
        self.pending = None

    def _fail(self, pending: PendingCheckpoint, error: BaseException, always_raise: bool = False) -> None:
        self._abort(pending)
        self.consecutive_failures += 1
        self.metrics["failed"] += 1
        self._last_done_ms = self.clock.now_ms()
        tolerable = self.config.get_tolerable_checkpoint_failure_number()
        log.warning("checkpoint %d failed (%d consecutive, %d tolerable): %s", pending.checkpoint_id,
                    self.consecutive_failures, tolerable, error)
        if always_raise or self.consecutive_failures > tolerable:
            if isinstance(error, SlipstreamError):
                raise error
            raise CheckpointError(f"checkpoint {pending.checkpoint_id} failed: {type(error).__name__}: "
                                  f"{error}") from error

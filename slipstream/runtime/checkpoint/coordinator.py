"""The checkpoint coordinator: when to checkpoint, collecting snapshots, completing and failing.

It runs in the scheduler's thread, between task turns. A checkpoint is triggered
on the processing-time interval (a separate one while sources report backlog) or
after a number of source records, never sooner than the minimum pause after the
last one. Triggering snapshots every finished task at once, tells every running
task to expect the barrier, and has every running source snapshot itself and emit
the barrier. When all tasks acknowledged, a writer thread serialises the snapshots
and writes them (data files, each fsynced, then the manifest) and prunes older
checkpoints while the tasks go on; once the files are durable the checkpoint is
complete: the tasks' keyed state is released from its copy-on-write freeze (what
changed meanwhile is folded back a little before each turn; no checkpoint is
triggered until it is), and operators are told — two-phase-commit sinks commit then. The timeout applies until
every task acknowledged; a write that has begun is waited for. The job's last
checkpoint, when every task finished, is written in the scheduler's thread.

FLIP-327: no checkpoint is taken while a task still waits behind a BLOCKING edge
or reads one, or while an operator reports ``is_checkpoint_blocked()``; the skip is
logged and counted in the metrics instead. A sorter buffering backlog input does not
block checkpoints (unlike FLIP-327): it puts its buffer into them (see
:mod:`slipstream.operators.backlog`), at the interval during backlog.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from slipstream.datastream.checkpoint_config import CheckpointConfig, CheckpointingMode
from slipstream.errors import CheckpointError, InvalidProgramError, SlipstreamError
from slipstream.runtime.checkpoint.barriers import BarrierHandler, CheckpointListener
from slipstream.runtime.checkpoint.iteration_region import attach_iteration_regions
from slipstream.runtime.checkpoint.manifest import Manifest
from slipstream.runtime.checkpoint.pacing import background_writer
from slipstream.runtime.checkpoint.snapshot import (
    OperatorSnapshot,
    build_manifest_and_files,
    close_snapshot_files,
    commit_keyed,
    release_task,
    snapshot_task,
)
from slipstream.runtime.checkpoint.state_files import prepare_encoder
from slipstream.runtime.checkpoint.storage import CheckpointStorage

log = logging.getLogger("slipstream.checkpoint")

HISTORY = 100
"""How many completed checkpoints the coordinator remembers for progress reports (the web view's history)."""


@dataclass
class PendingCheckpoint:
    checkpoint_id: int
    started_ms: int
    final: bool = False
    started_s: float = field(default_factory=time.perf_counter)
    acks: dict[Any, list[OperatorSnapshot]] = field(default_factory=dict)  # task (or its name) -> snapshots
    writer: CheckpointWriter | None = None  # once every task acknowledged


MERGE_BUDGET = 64
"""Changed entries folded back into the tables per step: while the tasks wait for input, and before a
turn once the next checkpoint is due (a job that is never idle). An entry costs 1-2 us to fold back
into a table of 10^6 (a cache miss or two), so a record arriving meanwhile waits about 0.1 ms. On
latency.py's checkpoint run (10^4 records/s, 10^6 keys, each checkpoint's changes folded back while
the next is already due) p99 was 14.5-15.8 ms with 1,024 entries before a turn and 256 in idle
steps, 4.2-4.5 ms with 128 for both, 3.2 ms with 64."""

WRITING_SWITCH_INTERVAL_S = 0.0005
"""The interpreter's switch interval while a checkpoint writer thread runs (Python's default: 5 ms)."""

_switching_lock = threading.Lock()
_writers_running = 0
_switch_interval_before = 0.0


def _writer_started() -> None:
    """The job's thread waits for the interpreter lock at most one switch interval while the writer
    holds it: 0.5 ms while any writer runs, so a record never waits the default 5 ms."""
    global _writers_running, _switch_interval_before
    with _switching_lock:
        if _writers_running == 0:
            _switch_interval_before = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_interval_before, WRITING_SWITCH_INTERVAL_S))
        _writers_running += 1


def _writer_ended() -> None:
    global _writers_running
    with _switching_lock:
        _writers_running -= 1
        if _writers_running == 0 and sys.getswitchinterval() == min(_switch_interval_before,
                                                                    WRITING_SWITCH_INTERVAL_S):
            sys.setswitchinterval(_switch_interval_before)  # unless someone else changed it meanwhile


class CheckpointWriter:
    """Serialises and writes one checkpoint, in a thread of its own (:meth:`start`, then ``done``
    is called from it) or in the caller's (:meth:`run`); the outcome is kept for the scheduler's
    thread."""

    def __init__(self, storage: CheckpointStorage, manifest: Manifest, snapshots: list[OperatorSnapshot],
                 done: Callable[[], None] = lambda: None, job_idle: threading.Event | None = None) -> None:
        self._storage, self._manifest, self._snapshots, self._done = storage, manifest, snapshots, done
        self._job_idle = job_idle  # a writer thread encodes heap state while this is set (see pacing)
        self.path: str | None = None
        self.size_bytes = 0
        self.write_ms = 0.0
        self.error: BaseException | None = None
        self.finished = False
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        started = time.perf_counter()
        try:
            self._write()
        except BaseException as exc:  # noqa: BLE001 - handed to the scheduler's thread, which decides
            self.error = exc
        close_snapshot_files(self._snapshots)
        self._snapshots = []
        self.write_ms = (time.perf_counter() - started) * 1000
        self.finished = True

    def _write(self) -> None:
        files, shared = build_manifest_and_files(self._manifest, self._snapshots)
        storage = self._storage
        new = [data for name, data in shared.items() if not storage.fs.exists(os.path.join(storage.directory, name))]
        self.size_bytes = sum(len(data) for data in [*files.values(), *new])  # shared files stored before are not
        self.path = self._storage.write(self._manifest, files, shared)
        commit_keyed(self._snapshots)
        self._storage.prune(self._manifest.checkpoint_id)

    def start(self) -> None:
        _writer_started()
        self._thread = threading.Thread(target=self._run_in_thread,
                                        name=f"checkpoint {self._manifest.checkpoint_id} writer", daemon=True)
        self._thread.start()

    def _run_in_thread(self) -> None:
        try:
            with background_writer(self._job_idle):
                self.run()
        finally:
            _writer_ended()
            self._done()

    def wait(self) -> None:
        """Until the writer thread is done; the job's thread waits meanwhile, so the writer need not
        wait for it to go idle."""
        if self._thread is not None:
            if self._job_idle is not None:
                self._job_idle.set()
            self._thread.join()
            if self._job_idle is not None:
                self._job_idle.clear()


def _check_backlog_interval(config: CheckpointConfig) -> None:
    """Flink's rule for ``execution.checkpointing.interval-during-backlog``: unset, the interval applies
    during backlog too; 0, no checkpoint while a source reports backlog; otherwise at least the interval."""
    during, interval = config.get_checkpoint_interval_during_backlog(), config.get_checkpoint_interval()
    if during and 0 < during < interval:
        raise InvalidProgramError(
            f"execution.checkpointing.interval-during-backlog ({during} ms) must be 0 (no checkpoints during "
            f"backlog) or at least execution.checkpointing.interval ({interval} ms), as in Flink")


class CheckpointParticipants(Protocol):
    """The tasks a coordinator checkpoints, wherever they run: in this process (:class:`LocalTasks`)
    or on worker processes (:mod:`slipstream.runtime.workers`). Each acknowledges through the
    listener given to :meth:`attach`, once per participant and checkpoint."""

    def attach(self, listener: CheckpointListener, exactly_once: bool) -> None: ...
    def count(self) -> int: ...
    def trigger(self, checkpoint_id: int, now: int) -> None: ...
    def deploy_ready(self) -> None: ...
    def blocked_reason(self) -> str | None: ...
    def source_records(self) -> int: ...
    def sources_in_backlog(self) -> bool: ...
    def notify_complete(self, checkpoint_id: int) -> None: ...
    def abort(self, checkpoint_id: int) -> None: ...
    def release(self) -> list[Any]: ...
    def await_acks(self, done: Callable[[], bool]) -> None: ...


class LocalTasks:
    """The tasks of this process as checkpoint participants: each task acknowledges for itself
    (an iteration's tasks together, through its region; see :mod:`iteration_region`)."""

    def __init__(self, tasks: list[Any]) -> None:
        from slipstream.runtime.task import SourceTask

        self.tasks = tasks
        self.sources = [task for task in tasks if isinstance(task, SourceTask)]
        self.listener: CheckpointListener | None = None

    def attach(self, listener: CheckpointListener, exactly_once: bool) -> None:
        self.listener = listener
        for task in self.tasks:
            # a task may bring its own handler: a loop head logs its feedback (FLINK-3257)
            task.barrier_handler = getattr(task, "barrier_handler_class", BarrierHandler)(
                task, listener, exactly_once)
            for operator in task.operators:
                operator.ctx.checkpointing = True
        attach_iteration_regions(self.tasks, listener, exactly_once)  # an iteration is checkpointed whole

    def count(self) -> int:
        return len(self.tasks)

    def trigger(self, checkpoint_id: int, now: int) -> None:
        """Every running task expects the barrier; running sources snapshot and emit it, finished
        tasks acknowledge their final state at once."""
        assert self.listener is not None  # attached by the coordinator
        for task in self.tasks:
            if task not in self.sources:
                task.barrier_handler.on_trigger(checkpoint_id, now)
        for task in self.sources:
            if task.finished:
                self.listener.acknowledge(task, checkpoint_id, snapshot_task(task))
            else:
                task.barrier_handler.trigger_source(checkpoint_id, now)
                task.flush()

    def deploy_ready(self) -> None:
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

    def blocked_reason(self, as_if_deployed: bool = False) -> str | None:
        """Why FLIP-327 forbids a checkpoint now, or None.

        ``as_if_deployed``: answer for the moment after ``deploy_ready`` - what a worker reports to
        the driver, whose trigger deploys the tasks that merely have not had their first turn.
        """
        for task in self.tasks:
            if task.finished:
                continue
            if not getattr(task, "deployed", True) and not (as_if_deployed and task.is_deployable()):
                return f"task {task} is not deployed yet (not started, or waiting behind a BLOCKING edge)"
            for channel in task.inputs:
                if getattr(channel, "blocking", False) and not channel.ended:
                    return f"a BLOCKING edge into task {task} is in use"
            for operator in task.operators:
                reason: str | None = operator.is_checkpoint_blocked()
                if reason:
                    return reason
        return None

    def source_records(self) -> int:
        return sum(task.head.ctx.metrics.get("records_out", 0) for task in self.sources)

    def sources_in_backlog(self) -> bool:
        return any(task.head.is_backlog() for task in self.sources if not task.finished)

    def notify_complete(self, checkpoint_id: int) -> None:
        for task in self.tasks:
            for operator in task.operators:
                operator.notify_checkpoint_complete(checkpoint_id)

    def abort(self, checkpoint_id: int) -> None:
        for task in self.tasks:
            task.barrier_handler.abort(checkpoint_id)
            for operator in task.operators:
                operator.notify_checkpoint_aborted(checkpoint_id)

    def release(self) -> list[Any]:
        """Let every task's frozen keyed state go on; the backends that now fold their changes back."""
        return [backend for task in self.tasks for backend in release_task(task)]

    def await_acks(self, done: Callable[[], bool]) -> None:
        """Tasks of this process acknowledge within the trigger (a finished task at once)."""
        assert done()


class CheckpointCoordinator:
    """Triggers and completes the checkpoints of one run of a job, of ``participants`` (a list of
    tasks means the :class:`LocalTasks` of this process)."""

    def __init__(self, participants: CheckpointParticipants | list[Any], config: CheckpointConfig,
                 storage: CheckpointStorage, fingerprint: str, job_name: str, clock: Any,
                 first_checkpoint_id: int) -> None:
        _check_backlog_interval(config)
        self.participants = LocalTasks(participants) if isinstance(participants, list) else participants
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
        self.wakeup: Callable[[], None] = lambda: None  # wakes the scheduler when a write is done
        self.job_idle: threading.Event | None = None  # set while the tasks of this process wait for input
        self._merging: list[Any] = []  # keyed backends folding back what changed during the last write
        self.participants.attach(self, self.exactly_once)
        prepare_encoder()
        now = clock.now_ms()
        self._last_trigger_ms = now
        self._last_done_ms = now - config.get_min_pause_between_checkpoints()
        self._records_at_trigger = 0
        self._interval_records = config.get_checkpoint_interval_records()
        self._logged_reasons: set[str] = set()
        self.metrics: dict[str, Any] = {"completed": 0, "failed": 0, "skipped": 0, "skip_reasons": {},
                                        "last_duration_ms": None, "last_write_ms": None,
                                        "last_pause_ms": None, "last_size_bytes": None,
                                        "durations_ms": [], "pauses_ms": [], "latest_completed_id": None}
        # the latest completed checkpoints: (id, duration ms, size bytes, completed at, epoch seconds)
        self.history: deque[tuple[int, float, int, float]] = deque(maxlen=HISTORY)

    # -- the scheduler's hook -------------------------------------------------------------------
    def on_turn(self, now: int) -> None:
        """Called before every scheduler turn: finish, time out or start a checkpoint. What changed while
        the last one was written is folded back first, by :meth:`merge_idle` while the tasks wait for
        input, here (a budget per turn) once the next checkpoint is due: a job that is never idle."""
        if self._merging:
            if self._is_due(now):
                self._merge_step(MERGE_BUDGET)
            return
        pending = self.pending
        if pending is not None:
            if pending.writer is not None:
                if pending.writer.finished:
                    self._complete(pending)
            elif len(pending.acks) == self.participants.count():
                self._start_writing(pending)
            elif now - pending.started_ms > self.config.get_checkpoint_timeout():
                self._fail(pending, CheckpointError(
                    f"checkpoint {pending.checkpoint_id} timed out after "
                    f"{self.config.get_checkpoint_timeout()} ms"))
            return
        if self._is_due(now):
            self.participants.deploy_ready()
            reason = self.participants.blocked_reason()
            if reason is not None:
                self._skip(reason, now)
            else:
                self.trigger(now)

    def merge_idle(self) -> bool:
        """The scheduler's idle work: fold back a step of what changed while the last checkpoint was
        written; whether some is left."""
        if self._merging:
            self._merge_step(MERGE_BUDGET)
        return bool(self._merging)

    def _merge_step(self, budget: int) -> None:
        if self._merging[0].merge_some(budget):
            self._merging.pop(0)

    def _source_records(self) -> int:
        return self.participants.source_records()

    def _is_due(self, now: int) -> bool:
        if now - self._last_done_ms < self.config.get_min_pause_between_checkpoints():
            return False
        interval = self.config.get_checkpoint_interval()
        backlog_interval = self.config.get_checkpoint_interval_during_backlog()
        if backlog_interval is not None and self.participants.sources_in_backlog():
            if backlog_interval == 0:
                return False
            interval = backlog_interval
        if interval > 0 and now - self._last_trigger_ms >= interval:
            return True
        return self._interval_records is not None and \
            self._source_records() - self._records_at_trigger >= self._interval_records

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
        self.participants.trigger(checkpoint_id, now)
        return checkpoint_id

    def trigger_savepoint(self, now: int) -> int | None:
        """Trigger a checkpoint now, whatever the interval (a savepoint before a stop); None when one
        is under way or FLIP-327 forbids one now (the caller asks again after the next turn)."""
        if self.pending is not None:
            return None
        self.participants.deploy_ready()
        if self.participants.blocked_reason() is not None:
            return None
        return self.trigger(now)

    def acknowledge(self, task: Any, checkpoint_id: int, snapshots: list[OperatorSnapshot]) -> None:
        """``task`` (a task, or any participant's hashable name for one) took its snapshots."""
        pending = self.pending
        if pending is None or pending.checkpoint_id != checkpoint_id:
            return  # late: that checkpoint was aborted
        pending.acks[task] = snapshots

    def decline(self, checkpoint_id: int, reason: str) -> None:
        """A participant found checkpoint ``checkpoint_id`` forbidden when its trigger came (FLIP-327):
        it is aborted and counted as skipped."""
        pending = self.pending
        if pending is not None and pending.checkpoint_id == checkpoint_id:
            self._abort(pending)
            self._skip(reason, self.clock.now_ms())

    def final_checkpoint(self) -> None:
        """Every task finished: checkpoint the final state and commit (the job's last output)."""
        pending = self.pending
        if pending is not None:
            if pending.writer is None and len(pending.acks) == self.participants.count():
                self._writer(pending).run()
            if pending.writer is not None:
                pending.writer.wait()
                self._complete(pending)  # failing, it counts against the tolerated failures as ever
            else:
                self._abort(pending)
        self.trigger(self.clock.now_ms(), final=True)
        pending = self.pending
        assert pending is not None  # the final trigger always starts one
        self.participants.await_acks(lambda: len(pending.acks) == self.participants.count())
        self._writer(pending).run()
        self._complete(pending, raise_errors=True)

    def close(self) -> None:
        """The run ends (failed or interrupted): wait for a write in progress, release the state."""
        pending, self.pending = self.pending, None
        if pending is not None and pending.writer is not None:
            pending.writer.wait()
        elif pending is not None:
            close_snapshot_files([snap for snapshots in pending.acks.values() for snap in snapshots])
        self._release()

    # -- writing and completion -----------------------------------------------------------------
    def _writer(self, pending: PendingCheckpoint, done: Callable[[], None] = lambda: None) -> CheckpointWriter:
        manifest = Manifest(pending.checkpoint_id, self.job_name, self.fingerprint, time.time_ns() // 1_000_000,
                            "EXACTLY_ONCE" if self.exactly_once else "AT_LEAST_ONCE")
        snapshots = [snap for acked in pending.acks.values() for snap in acked]
        pending.writer = CheckpointWriter(self.storage, manifest, snapshots, done, self.job_idle)
        return pending.writer

    def _start_writing(self, pending: PendingCheckpoint) -> None:
        """Every task acknowledged: write the checkpoint in the writer's thread, or now if its
        keyed state is small (see ``CheckpointConfig.set_async_write_threshold``)."""
        writer = self._writer(pending, self.wakeup)
        entries = sum(snap.keyed.size for snapshots in pending.acks.values() for snap in snapshots
                      if snap.keyed is not None)
        if entries < self.config.get_async_write_threshold():
            writer.run()
            self._complete(pending)
            self._merge_all()  # small: no need to spread it over turns
        else:
            writer.start()

    def _merge_all(self) -> None:
        for backend in self._merging:
            backend.merge_some(1 << 62)
        self._merging = []

    def _release(self) -> None:
        for backend in self.participants.release():
            if backend.merging and backend not in self._merging:
                self._merging.append(backend)

    def _complete(self, pending: PendingCheckpoint, raise_errors: bool = False) -> None:
        """The writer is done: complete the checkpoint, or fail it with the writer's error."""
        writer = pending.writer
        assert writer is not None  # it ran
        self._release()
        error = writer.error
        if error is not None:
            if not isinstance(error, (OSError, SlipstreamError)):
                self.pending = None
                raise error  # a bug, or a simulated crash: not a checkpoint failure
            self._fail(pending, error, always_raise=raise_errors)
            return
        checkpoint_id = pending.checkpoint_id
        duration_ms = (time.perf_counter() - pending.started_s) * 1000
        pause_ms = sum(snap.taken_ms for snapshots in pending.acks.values() for snap in snapshots)
        self.pending = None
        self.latest_completed_id = checkpoint_id
        self.latest_completed_path = writer.path
        self.consecutive_failures = 0
        self._last_done_ms = self.clock.now_ms()
        metrics = self.metrics
        metrics["completed"] += 1
        metrics["latest_completed_id"] = checkpoint_id
        metrics["last_duration_ms"] = duration_ms
        metrics["last_write_ms"] = writer.write_ms
        metrics["last_pause_ms"] = pause_ms
        metrics["last_size_bytes"] = writer.size_bytes
        self.history.append((checkpoint_id, duration_ms, metrics["last_size_bytes"], time.time()))
        metrics["durations_ms"].append(duration_ms)
        metrics["pauses_ms"].append(pause_ms)
        log.debug("checkpoint %d complete: %s (%.1f ms from trigger, %.1f ms writing, tasks stopped %.1f ms)",
                  checkpoint_id, writer.path, duration_ms, writer.write_ms, pause_ms)
        self.participants.notify_complete(checkpoint_id)

    def _abort(self, pending: PendingCheckpoint) -> None:
        if pending.writer is None:  # a writer releases the files it was given itself
            close_snapshot_files([snap for snapshots in pending.acks.values() for snap in snapshots])
        self.participants.abort(pending.checkpoint_id)
        self._release()
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

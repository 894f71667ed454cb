"""The driver: the one place that opens, drives and closes the runs of a job.

Every way of running a job is a client of :class:`JobDriver`, which takes the job's frozen
:class:`~slipstream.datastream.job_spec.JobSpec`: ``execute`` drains its turns
(:meth:`JobDriver.run`), ``execute_and_collect`` hands out the collect sink's
records between them (:func:`collect_job`), and a failed run restarts inside the same
loop, from the latest checkpoint, while the restart strategy allows
(:class:`~slipstream.runtime.checkpoint.recovery.Recovery`). So checkpoints, restarts
and restores apply to every job alike, and one error path closes every run.

A live job (:mod:`slipstream.runtime.job_client`) drives the same turns on a thread of its own
and may ask, between two turns, for a savepoint and a stop (:class:`SavepointRequest`). The
driver keeps the job's status and the error it failed with, which every client reads.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from slipstream.datastream.completable_future import CompletableFuture
from slipstream.datastream.data_stream import CloseableIterator
from slipstream.filesystem import normalize
from slipstream.runtime.checkpoint.coordinator import CheckpointCoordinator
from slipstream.runtime.checkpoint.fs import FileSystem
from slipstream.runtime.checkpoint.recovery import Recovery
from slipstream.runtime.checkpoint.storage import copy_checkpoint
from slipstream.runtime.executor import JobRun, Run
from slipstream.runtime.latency import readable_metrics
from slipstream.runtime.monitor import JobMonitor, start_monitor
from slipstream.runtime.planner import plan_job
from slipstream.runtime.workers.fork_server import start_fork_server
from slipstream.runtime.workers.placement import place_subtasks
from slipstream.runtime.workers.run import WorkerRun

if TYPE_CHECKING:
    from slipstream.datastream.connectors.sinks import CollectSink
    from slipstream.datastream.job_spec import JobExecutionResult, JobSpec


class JobStatus(Enum):
    """The states of a job, as Flink's ``JobStatus`` (those a job of the embedded runtime passes)."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"

    def is_globally_terminal_state(self) -> bool:
        """Whether the job has ended (finished, failed or was cancelled) and will not change again."""
        return self in (JobStatus.CANCELED, JobStatus.FINISHED, JobStatus.FAILED)


@dataclass
class SavepointRequest:
    """A request to take a checkpoint now (a savepoint) and, with ``stop``, stop the job once it is complete.

    ``target`` is a directory the savepoint is copied into (None: it stays in the checkpoint
    storage directory); ``path`` is where the savepoint is once it is placed there, and ``placed``
    holds it then. A savepoint that does not stop the job is placed as soon as it completes, and
    the job goes on (a copy that fails fails ``placed``, not the job).
    """

    target: str | None = None
    stop: bool = True
    placed: CompletableFuture[str] = field(default_factory=CompletableFuture)
    checkpoint_id: int | None = None  # the checkpoint of the current run triggered as the savepoint
    path: str | None = None


class JobDriver:
    """Plans a job once, then runs it: one run, or one per attempt when runs fail and restart.

    Planning happens here, so a wrong program fails when it is submitted; runs start only
    when :meth:`turns` is first advanced.
    """

    def __init__(self, spec: JobSpec, restore_from: str | None = None, fs: FileSystem | None = None) -> None:
        self.spec = spec
        self.job_name = spec.job_name
        self.graph = plan_job(spec)
        self.placement = place_subtasks(self.graph, spec)  # None: every subtask in this process
        if self.placement is not None:
            start_fork_server()
        self.recovery = Recovery(spec, self.graph, restore_from, fs)
        self.result: JobExecutionResult | None = None
        self.job_id = uuid.uuid4().hex  # one id for every run of the job, as Flink's across restarts
        self.current_run: Run | None = None  # the current run: its metrics are the job's so far
        self.savepoint_request: SavepointRequest | None = None  # set by a JobClient, read between turns
        self.monitor: JobMonitor | None = None  # while watched: samples the job's progress on its own thread
        self.status = JobStatus.CREATED
        self.error: BaseException | None = None  # what the job failed with, once it has

    def turns(self) -> Generator[None, None, None]:
        """Run the job, yielding after every scheduler turn, until it ends (then :attr:`result`
        holds its result) or fails past its restarts (raised, and kept in :attr:`error`).
        Closing the iterator, or an interrupt, cancels the job; :attr:`status` says which.

        While it runs, a monitor (:mod:`slipstream.runtime.monitor`) reports its progress to
        whoever watches it: listeners, the web view, the metrics endpoint."""
        monitor = self.monitor = self.monitor or start_monitor(self)
        self.status = JobStatus.RUNNING
        ended = JobStatus.CANCELED  # stays so when the iterator is closed (a cancel)
        try:
            yield from self._runs()
            ended = JobStatus.FINISHED
        except GeneratorExit:
            raise
        except BaseException as failure:
            self.error = failure
            if isinstance(failure, Exception):
                ended = JobStatus.FAILED
            raise
        finally:
            self.status = ended
            error = self.error if ended is JobStatus.FAILED else None
            monitor.stop(ended.name, None if error is None else f"{type(error).__name__}: {error}")

    def _runs(self) -> Generator[None, None, None]:
        """The job's runs: one, or one per attempt while failed runs restart."""
        recovery = self.recovery
        try:
            recovery.open()
            while True:
                run = self.current_run = self._new_run()
                run.job_id = self.job_id
                coordinator = None
                try:
                    coordinator = recovery.prepare(run)
                    run.open()
                    stopped = yield from _drive(run, coordinator, self)
                    if coordinator is not None and not stopped:
                        coordinator.final_checkpoint()
                except BaseException as failure:
                    if coordinator is not None:
                        coordinator.close()  # a write under way ends before the next run restores
                    run.close_quietly()
                    if recovery.restart_after(failure):
                        continue
                    raise
                run.close()
                result = recovery.finish(run, coordinator, keep_checkpoints=stopped)
                result.metrics = readable_metrics(result.metrics)
                self.result = result
                self._place_savepoint(coordinator)
                return
        finally:
            recovery.release()

    def _new_run(self) -> Run:
        """A run in this process, or on worker processes (``configure(workers=N)``)."""
        if self.placement is None:
            return JobRun(self.spec, self.graph)
        return WorkerRun(self.spec, self.graph, self.placement)

    def _place_savepoint(self, coordinator: CheckpointCoordinator | None) -> None:
        """Tell a savepoint request where its savepoint is: the one taken, or the final checkpoint
        when the job ended first; copied (and checked) into the request's target if it has one."""
        request = self.savepoint_request
        if request is None or coordinator is None:
            return
        path = request.path or coordinator.latest_completed_path
        if path is not None:
            self.place(request, path)

    def place(self, request: SavepointRequest, path: str) -> None:
        """Put the savepoint at ``path`` where ``request`` wants it (copied and checked into its
        target, if it has one) and tell it where it is."""
        if request.target is not None:
            copy = os.path.join(normalize(request.target, "savepoint target"), os.path.basename(path))
            copy_checkpoint(path, copy)
            assert self.recovery.storage is not None
            self.recovery.storage.read_verified(copy, self.recovery.fingerprint)
            path = copy
        request.path = path
        request.placed.set_result(path)

    def run(self) -> JobExecutionResult:
        """Run the job to its end and return its result."""
        for _ in self.turns():
            pass
        assert self.result is not None
        return self.result


def _drive(run: Run, coordinator: CheckpointCoordinator | None, driver: JobDriver) -> Generator[None, None, bool]:
    """Give ``run``'s tasks their turns until all finished (returns False) or a requested
    savepoint is complete (returns True); the coordinator (if any) checkpoints between turns."""
    clock = run.clock
    while True:
        if coordinator is not None:
            now = clock.now_ms()
            coordinator.on_turn(now)
            request = driver.savepoint_request
            if request is not None and _savepoint_taken(request, coordinator, now):
                if request.stop:
                    return True
                assert request.path is not None  # set by _savepoint_taken
                driver.savepoint_request = None  # placed now, while the job goes on
                try:
                    driver.place(request, request.path)
                except Exception as error:  # noqa: BLE001 - the savepoint's failure, not the job's
                    request.placed.set_exception(error)
        if not run.run_turn():
            return False
        yield


def _savepoint_taken(request: SavepointRequest, coordinator: CheckpointCoordinator, now: int) -> bool:
    """Whether the savepoint ``request`` asked for is complete; if not, trigger it when none is
    under way (first time, or after it failed) and FLIP-327 allows a checkpoint."""
    if request.checkpoint_id is not None and coordinator.latest_completed_id == request.checkpoint_id:
        request.path = coordinator.latest_completed_path
        return True
    if coordinator.pending is None:
        request.checkpoint_id = coordinator.trigger_savepoint(now)
    return False


def collect_job(spec: JobSpec, sink: CollectSink) -> CloseableIterator[Any]:
    """Plan a job and return an iterator that runs it as records are pulled (``execute_and_collect``):
    each record the sink made visible is handed out before the job takes another turn."""
    turns = JobDriver(spec).turns()

    def records() -> Iterator[Any]:
        buffer = sink.buffer
        for _ in turns:
            while buffer:
                yield buffer.popleft()
        while buffer:
            yield buffer.popleft()

    return CloseableIterator(records(), turns.close)


__all__ = ["JobDriver", "JobStatus", "SavepointRequest", "collect_job"]

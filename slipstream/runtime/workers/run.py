"""The driver's side of a run on worker processes: the workers, their heartbeats, the coordinators.

A :class:`WorkerRun` runs on one process per worker (:mod:`slipstream.runtime.workers.worker`;
spares started ahead, :mod:`.spares`), each with a control socket to the driver and a socket to
every other worker, and is driven by
the driver like a :class:`~slipstream.runtime.executor.JobRun`: each turn takes in what the
workers reported. The checkpoint coordinator stays in the driver; its participants are the
workers' tasks (:class:`WorkerTasks`): a trigger goes to every worker, which snapshots where
the state lives and ships it; the coordinator writes the checkpoint and says when it is
complete. A worker that dies (its control socket closes), stays silent past the heartbeat
timeout, or reports a failure (a ``MemoryError`` too) fails the run, and the driver's restart
strategy takes over. However the run ends, every worker process it ran on is ended and reaped
(and ``worker_spares`` processes started ahead for the next run, when configured).
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle

from slipstream.datastream import metrics
from slipstream.datastream.checkpoint_config import CheckpointingMode
from slipstream.datastream.connectors.sinks import RelayedWriteError
from slipstream.datastream.job_spec import JobExecutionResult, JobSpec
from slipstream.errors import InvalidProgramError, JobExecutionError, UserFunctionError, WorkerLostError
from slipstream.filesystem import fsspec_settings
from slipstream.operators.backlog import BACKLOG_PHASES
from slipstream.runtime.checkpoint.barriers import CheckpointListener
from slipstream.runtime.checkpoint.coordinator import CheckpointCoordinator, CheckpointParticipants
from slipstream.runtime.checkpoint.storage import VerifiedCheckpoint
from slipstream.runtime.clock import Clock, SystemClock
from slipstream.runtime.job_graph import JobGraph
from slipstream.runtime.latency import LatencyHistogram
from slipstream.runtime.progress_sampler import SubtasksSeen, combined
from slipstream.runtime.task import StreamTask
from slipstream.runtime.workers import spares
from slipstream.runtime.workers.fork_server import ForkedProcess
from slipstream.runtime.workers.logs import driver_levels, log_in_driver
from slipstream.runtime.workers.placement import Placement, spec_for_workers
from slipstream.runtime.workers.wire import FromWorker, ToWorker, dumps
from slipstream.runtime.workers.worker import WorkerJob, driver_sinks

TURN_WAIT_S = 0.05
"""Longest wait for a worker's message in one of the driver's turns (the coordinator runs between)."""
STARTUP_S = 60.0
"""How long a worker may take to start and restore its subtasks (its first report) at least."""
STOP_WAIT_S = 10.0
"""How long a worker told to shut down may take to say bye before it is killed."""


class WorkerProcess:
    """One worker process as the driver sees it."""

    def __init__(self, index: int, process: ForkedProcess, control: Connection) -> None:
        self.index = index
        self.process = process
        self.control = control
        self.heard_at = time.monotonic()
        self.ready = False
        self.status: dict[str, Any] = {}
        self.final_metrics: dict[str, dict[str, Any]] | None = None  # its bye
        self.gone = False  # its control socket closed

    @property
    def finished(self) -> bool:
        return bool(self.status.get("finished"))

    def __repr__(self) -> str:
        return f"worker {self.index} (pid {self.process.pid})"


class WorkerRun:
    """One run of a job on worker processes (see the module docstring)."""

    def __init__(self, spec: JobSpec, graph: JobGraph, placement: Placement) -> None:
        self.spec = spec
        self.graph = graph
        self.placement = placement
        self.job_id = ""
        options = spec.runtime_options
        self.clock: Clock = options.clock or SystemClock()
        self.metrics: dict[str, dict[str, Any]] = {}
        self.task_metrics: dict[StreamTask, list[dict[str, Any]]] = {}  # the tasks run elsewhere
        self.checkpoint_coordinator: CheckpointCoordinator | None = None
        self.idle: threading.Event | None = None  # the tasks run in the workers, which encode their own state
        self.workers: list[WorkerProcess] = []
        self._attempt = 0
        self._restore_path: str | None = None
        self._participants: WorkerTasks | None = None
        self._sinks = driver_sinks(graph)
        self._warned: set[str] = set()  # the warnings given once per operator that a worker gave
        self._timeout_s = options.heartbeat_timeout_ms / 1000
        self._wake_read, self._wake_write = os.pipe()
        self._started = 0.0
        self._ready_ms: float | None = None  # from the start until every worker restored its subtasks
        self._closed = False

    # -- what the driver and recovery use --------------------------------------------------------
    @property
    def started_at(self) -> float:
        return self._started

    def set_attempt(self, attempt: int) -> None:
        self._attempt = attempt

    def checkpoint_participants(self) -> CheckpointParticipants:
        self._participants = WorkerTasks(self)
        return self._participants

    def restore(self, checkpoint: VerifiedCheckpoint) -> None:
        """Each worker restores its subtasks from ``checkpoint`` (verified again where it is read)."""
        self._restore_path = checkpoint.path

    def wake(self) -> None:
        """Cut the driver's wait short (a checkpoint writer thread finished)."""
        if not self._closed:
            os.write(self._wake_write, b"x")

    def on_idle(self, work: Callable[[], bool]) -> None:
        """Nothing to do in the driver: each worker folds its own state's changes back."""

    def in_backlog(self) -> bool:
        return any(worker.status.get("in_backlog", True) for worker in self.workers)

    def subtasks_elsewhere(self) -> dict[str, SubtasksSeen]:
        """Each operator's subtasks as the workers' latest reports see them, together."""
        reports: dict[str, list[SubtasksSeen]] = {}
        for worker in self.workers:
            for name, seen in worker.status.get("subtasks", {}).items():
                reports.setdefault(name, []).append(seen)
        return {name: combined(seen) for name, seen in reports.items()}

    def open(self) -> None:
        """Start the workers, wait until every one restored its subtasks, then let them all start."""
        self._started = time.perf_counter()
        self._start_workers()
        while not all(worker.ready for worker in self.workers):
            self.pump(TURN_WAIT_S)
        self._ready_ms = (time.perf_counter() - self._started) * 1000
        for worker in self.workers:
            self.send(worker, (ToWorker.START, self._started))  # perf_counter: the machine's monotonic clock

    def run_turn(self) -> bool:
        """Take in what the workers reported (waiting a little for it); False once all finished."""
        if self.workers and all(worker.finished for worker in self.workers):
            return False
        self.pump(TURN_WAIT_S)
        return True

    def result(self) -> JobExecutionResult:
        runtime_ms = int((time.perf_counter() - self._started) * 1000)
        return JobExecutionResult(self.job_id, self.spec.job_name, runtime_ms,
                                  {name: dict(values) for name, values in self.metrics.items()})

    # -- starting --------------------------------------------------------------------------------
    def _start_workers(self) -> None:
        """Give each worker process (a spare, ready: :mod:`.spares`) its sockets to the others, the
        driver's directory, environment and path as they are now, and the job."""
        count = self.placement.workers
        links = {(a, b): socket.socketpair() for a in range(count) for b in range(a + 1, count)}
        config = self.spec.checkpoint_config
        job = _pickled_job(WorkerJob(spec_for_workers(self.spec), self.graph, self.placement, self._attempt,
                                     config.is_checkpointing_enabled(),
                                     config.get_checkpointing_mode() is CheckpointingMode.EXACTLY_ONCE,
                                     self._restore_path))
        taken = spares.take(count)
        try:
            for index, spare in enumerate(taken):
                ends = {b if a == index else a: pair[0 if a == index else 1]
                        for (a, b), pair in links.items() if index in (a, b)}
                boot = pickle.dumps({"sys_path": list(sys.path), "cwd": os.getcwd(), "environ": dict(os.environ),
                                     "fsspec": fsspec_settings(), "log_levels": driver_levels(),
                                     "peers": list(ends), "worker": index})
                try:
                    socket.send_fds(spare.control, [b"B"], [end.fileno() for end in ends.values()])
                    sent = True
                except OSError:
                    sent = False
                worker = WorkerProcess(index, spare.process, Connection(spare.control.detach()))
                self.workers.append(worker)
                if sent:
                    self.send_bytes(worker, boot)
                    self.send_bytes(worker, job)
                else:
                    raise self._lost(worker)
        finally:
            for pair in links.values():
                for end in pair:
                    end.close()
            for spare in taken[len(self.workers):]:  # the run failed before it gave them its job: they exit
                spare.control.close()

    # -- messages --------------------------------------------------------------------------------
    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for messages, take in all that came, check heartbeats."""
        live = {worker.control: worker for worker in self.workers if not worker.gone}
        ready = wait([*live, self._wake_read], timeout)
        if self._wake_read in ready:
            os.read(self._wake_read, 4096)
        for connection in ready:
            worker = live.get(connection)  # type: ignore[call-overload]
            if worker is not None:
                self._take_messages(worker)
        now = time.monotonic()
        for worker in self.workers:
            allowed = self._timeout_s if worker.ready else max(self._timeout_s, STARTUP_S)
            if worker.final_metrics is None and now - worker.heard_at > allowed:
                self._kill_all()
                raise WorkerLostError(f"{worker} sent no heartbeat for {allowed * 1000:.0f} ms "
                                      f"(heartbeat.timeout): taken for hung")

    def send(self, worker: WorkerProcess, message: tuple[Any, ...]) -> None:
        """Send ``message`` to ``worker``; a worker whose socket broke has died (raised as lost)."""
        self.send_bytes(worker, dumps(message))

    def send_bytes(self, worker: WorkerProcess, data: bytes) -> None:
        """Send to ``worker``; one whose socket broke ended: what it reported before (its failure,
        unread yet) is raised as the run's failure, else that it was lost."""
        try:
            worker.control.send_bytes(data)
        except OSError:
            self._take_messages(worker)
            worker.gone = True
            raise self._lost(worker) from None

    def _take_messages(self, worker: WorkerProcess) -> None:
        """Handle what ``worker`` sent. Only the socket's own errors mean it died: a failure it
        reports may be an ``OSError`` too (a file not found), and is raised as what it is."""
        while True:
            try:
                if not worker.control.poll():
                    return
                data = worker.control.recv_bytes()
            except (EOFError, OSError):
                worker.gone = True
                if worker.final_metrics is None:
                    raise self._lost(worker) from None
                return
            self._handle(worker, pickle.loads(data))

    def _root_cause(self, reporting: WorkerProcess) -> WorkerLostError | None:
        """Another worker killed by a signal, if one was: a worker failing because a peer's socket broke
        reports its own failure, but the run failed because the peer died."""
        for worker in self.workers:
            if worker is not reporting and worker.final_metrics is None:
                code = worker.process.poll()
                if code is not None and code < 0:
                    return self._lost(worker)
        return None

    def _killing_all(self, failure: BaseException) -> BaseException:
        self._kill_all()
        return failure

    def _lost(self, worker: WorkerProcess) -> WorkerLostError:
        """``worker``'s control socket closed before it said bye: it died."""
        try:
            code = worker.process.wait(timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        self._kill_all()
        how = "is gone" if code is None else \
            f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return WorkerLostError(f"{worker} {how}")

    def _handle(self, worker: WorkerProcess, message: tuple[Any, ...]) -> None:
        worker.heard_at = time.monotonic()
        kind = message[0]
        if kind is FromWorker.STATUS:
            worker.status = message[1]
            self._merge_metrics()
        elif kind is FromWorker.ACK:
            coordinator = self._coordinator()
            coordinator.acknowledge(message[1], message[2], message[3])
        elif kind is FromWorker.DECLINE:
            self._coordinator().decline(message[1], message[2])
        elif kind is FromWorker.COLLECTED:
            sink, node = self._sinks[message[1]]
            try:
                sink.add_collected(message[2], message[3])
            except RelayedWriteError as exc:
                raise self._killing_all(UserFunctionError(node.name, exc.subtask, exc.parallelism, exc.record,
                                                          exc.cause, uid=node.uid, what="write of")) from exc.cause
        elif kind is FromWorker.LOG:
            log_in_driver(message[1], self._warned)
        elif kind is FromWorker.READY:
            worker.ready = True
        elif kind is FromWorker.BYE:
            worker.final_metrics = message[1]
            self._merge_metrics()
        elif kind is FromWorker.FAILED:
            raise self._root_cause(worker) or self._killing_all(_failure(worker, message[1], message[2], message[3]))
        else:
            raise JobExecutionError(f"{worker} sent an unknown message {kind!r}")

    def _coordinator(self) -> CheckpointCoordinator:
        assert self._participants is not None and self._participants.listener is not None
        return self._participants.listener

    def _merge_metrics(self) -> None:
        """The job's metrics: every worker's, summed (their times: the earliest deployed, the latest finished)."""
        merged: dict[str, dict[str, Any]] = {}
        for worker in self.workers:
            metrics = worker.final_metrics or worker.status.get("metrics", {})
            for name, values in metrics.items():
                target = merged.setdefault(name, {})
                for key, value in values.items():
                    target[key] = _merged(key, target.get(key), value)
        checkpoints = self.metrics.get("checkpoints")
        self.metrics.clear()
        self.metrics.update(merged)
        if checkpoints is not None:
            self.metrics["checkpoints"] = checkpoints
        if self._ready_ms is not None:
            self.metrics.setdefault("job", {})["workers_ready_ms"] = self._ready_ms

    # -- ending ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Tell every worker to shut down, take their last reports, and reap them (killing any that
        does not say bye in time)."""
        if self._closed:
            return
        deadline = time.monotonic() + STOP_WAIT_S
        try:
            for worker in self.workers:
                if not worker.gone:
                    self.send(worker, (ToWorker.SHUTDOWN,))
            while any(worker.final_metrics is None for worker in self.workers) and time.monotonic() < deadline:
                self.pump(TURN_WAIT_S)
        finally:
            self._kill_all()

    def close_quietly(self) -> None:
        """The run failed or was interrupted: end every worker now."""
        self._kill_all()

    def _kill_all(self) -> None:
        """Kill the workers still running and reap every one: no process outlives its run."""
        if self._closed:
            return
        self._closed = True
        for worker in self.workers:
            if worker.process.poll() is None and worker.final_metrics is None:
                worker.process.kill()
        for worker in self.workers:
            try:
                worker.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
            worker.control.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        spares.replenish(self.spec.runtime_options.worker_spares)  # for the next run, or this one's restart


def _pickled_job(job: WorkerJob) -> bytes:
    """The job for a worker, by value where it must be (cloudpickle); a job that cannot travel is
    refused naming what could not."""
    try:
        data: bytes = cloudpickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise InvalidProgramError(f"job '{job.spec.job_name}' cannot be sent to worker processes "
                                  f"(on {job.placement.workers} workers): "
                                  f"{type(exc).__name__}: {exc}") from exc
    return data


def _failure(worker: WorkerProcess, payload: bytes | None, kind: tuple[str, str], text: str) -> BaseException:
    """What a worker failed with: as it was raised there when it unpickles, else an exception of the
    same class with the same message (so the restart strategy judges it alike), else by its text."""
    if payload is not None:
        try:
            failure = pickle.loads(payload)
            if isinstance(failure, BaseException):
                return failure
        except Exception:  # noqa: BLE001 - rebuilt from its class and text below
            pass
    try:
        cls = getattr(importlib.import_module(kind[0]), kind[1])
        if isinstance(cls, type) and issubclass(cls, BaseException):
            rebuilt = cls.__new__(cls)
            rebuilt.args = (text,)
            return rebuilt
    except Exception:  # noqa: BLE001 - a class the driver cannot find: its text
        pass
    return JobExecutionError(f"{worker} failed: {kind[1]}: {text}")


def _merged(key: str, old: Any, new: Any) -> Any:
    if old is None:
        return new
    if key == "deployed_ms":
        return min(old, new)
    if key in ("finished_ms", "switched_ms"):
        return max(old, new)
    if key == "backlog_phase":  # the operator is as far as its least advanced subtasks
        return min(old, new, key=BACKLOG_PHASES.index)
    if isinstance(old, LatencyHistogram):
        return old.merged(new)
    if key == metrics.REPORT_KEY:
        return metrics.merge_reports(old, new)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        return old + new
    return old


class WorkerTasks:
    """The tasks of every worker, as the participants of the driver's checkpoint coordinator.

    FLIP-327's rules are read from the workers' latest reports; a worker that finds a checkpoint
    forbidden when its trigger arrives declines it (the coordinator counts a skip), so a report
    already out of date never lets a forbidden checkpoint through."""

    def __init__(self, run: WorkerRun) -> None:
        self.run = run
        self.listener: CheckpointCoordinator | None = None
        self._count = sum(vertex.parallelism for vertex in run.graph.vertices)

    def attach(self, listener: CheckpointListener, exactly_once: bool) -> None:
        assert isinstance(listener, CheckpointCoordinator)
        self.listener = listener

    def count(self) -> int:
        return self._count

    def _send_all(self, message: tuple[Any, ...]) -> None:
        for worker in self.run.workers:
            if not worker.gone:
                self.run.send(worker, message)

    def trigger(self, checkpoint_id: int, now: int) -> None:
        self._send_all((ToWorker.TRIGGER, checkpoint_id, now))

    def deploy_ready(self) -> None:
        """Workers deploy their ready tasks themselves when a trigger arrives."""

    def blocked_reason(self) -> str | None:
        for worker in self.run.workers:
            reason: str | None = worker.status.get("blocked")
            if reason:
                return reason
        return None

    def source_records(self) -> int:
        return sum(worker.status.get("source_records", 0) for worker in self.run.workers)

    def sources_in_backlog(self) -> bool:
        return any(worker.status.get("sources_in_backlog", False) for worker in self.run.workers)

    def notify_complete(self, checkpoint_id: int) -> None:
        self._send_all((ToWorker.COMPLETE, checkpoint_id))

    def abort(self, checkpoint_id: int) -> None:
        self._send_all((ToWorker.ABORT, checkpoint_id))

    def release(self) -> list[Any]:
        """The workers release their state when told the checkpoint completed or was aborted."""
        return []

    def await_acks(self, done: Callable[[], bool]) -> None:
        """Take in the workers' messages until ``done()`` (every task acknowledged)."""
        while not done():
            self.run.pump(TURN_WAIT_S)


__all__ = ["WorkerRun", "WorkerTasks"]

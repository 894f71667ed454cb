"""A worker process: runs the subtasks of its slots, as the driver's coordinators direct.

Forked by the driver's fork server (:mod:`.fork_server`) — never a fork of the driver itself: the
driver may already run polars' thread pool, a source's reader thread or a web server, and a fork
copies their locks in whatever state they are (polars warns that it can deadlock). A run's
:class:`~slipstream.runtime.workers.run.WorkerRun` sends, on the control socket, the sockets to
the other workers, the driver's ``sys.path``, directory and environment, then the job
(cloudpickled, so lambdas and closures of the driver's ``__main__`` come along).

The worker builds a :class:`~slipstream.runtime.executor.JobRun` of its subtasks, restores them
from the checkpoint the driver names, and reports ready; once every worker is ready the driver
says start (so a restore any operator refuses changes nothing anywhere). From then on it runs
its scheduler's turns and, between them, takes in what the driver and the other workers sent.
It reports its status at least every ``heartbeat_interval_ms`` (the driver's heartbeat), and
exits at once when the driver's end of the control socket closes: a worker never outlives its
driver.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle

from slipstream.datastream.connectors.sinks import CollectSink, RelayedSink
from slipstream.datastream.job_spec import JobSpec
from slipstream.datastream.transformations import SinkTransformation
from slipstream.filesystem import apply_fsspec_settings
from slipstream.runtime import gc_policy
from slipstream.runtime.checkpoint.coordinator import LocalTasks
from slipstream.runtime.checkpoint.snapshot import (
    OperatorSnapshot,
    close_snapshot_files,
    commit_keyed,
    job_fingerprint,
    shipped,
)
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.executor import JobRun
from slipstream.runtime.job_graph import JobGraph, StreamNode
from slipstream.runtime.progress_sampler import seen_in_this_process
from slipstream.runtime.workers.links import WorkerLinks
from slipstream.runtime.workers.logs import ToDriver, apply_levels
from slipstream.runtime.workers.placement import Placement
from slipstream.runtime.workers.spares import MAX_PEERS
from slipstream.runtime.workers.wire import FromWorker, ToWorker, dumps


@dataclass
class WorkerJob:
    """What the driver sends a worker: the job, where its subtasks are, and how this run starts."""

    spec: JobSpec
    graph: JobGraph
    placement: Placement
    attempt: int
    checkpointing: bool
    exactly_once: bool
    restore_path: str | None


DriverSink = CollectSink | RelayedSink
"""A sink whose records end in the driver's process: collected there, printed or given to a callable there."""


def driver_sinks(graph: JobGraph) -> list[tuple[DriverSink, StreamNode]]:
    """The job's sinks whose records a worker relays to the driver, with their operators, in plan
    order (the same order in the driver and in every worker)."""
    sinks: list[tuple[DriverSink, StreamNode]] = []
    for vertex in graph.vertices:
        for node in vertex.nodes:
            sink = getattr(node.transformation, "sink", None)
            if isinstance(node.transformation, SinkTransformation) and isinstance(sink, CollectSink | RelayedSink) \
                    and all(sink is not seen for seen, _ in sinks):
                sinks.append((sink, node))
    return sinks


def task_keys(graph: JobGraph, placement: Placement, worker: int) -> list[str]:
    """The names of a worker's tasks in the order its run builds them (``vertex id:subtask``)."""
    return [f"{vertex.id}:{subtask}" for vertex in graph.vertices for subtask in range(vertex.parallelism)
            if placement.worker_of(vertex.id, subtask) == worker]


class WorkerCheckpoints:
    """The checkpoint listener of a worker's tasks: ships each task's snapshots to the driver's
    coordinator, keeps the originals until the driver says the checkpoint completed or was
    aborted, then lets the state go on and tells the operators (two-phase-commit sinks commit)."""

    def __init__(self, participants: LocalTasks, keys: dict[Any, str], send: Any) -> None:
        self.participants = participants
        self._keys = keys
        self._send = send
        self._kept: dict[int, list[OperatorSnapshot]] = {}

    def acknowledge(self, task: Any, checkpoint_id: int, snapshots: list[OperatorSnapshot]) -> None:
        self._kept.setdefault(checkpoint_id, []).extend(snapshots)
        self._send((FromWorker.ACK, self._keys[task], checkpoint_id, [shipped(snap) for snap in snapshots]))

    def trigger(self, checkpoint_id: int, now: int) -> None:
        """Start checkpoint ``checkpoint_id`` here, unless FLIP-327 forbids one now: then decline it."""
        self.participants.deploy_ready()
        reason = self.participants.blocked_reason()
        if reason is not None:
            self._send((FromWorker.DECLINE, checkpoint_id, reason))
        else:
            self.participants.trigger(checkpoint_id, now)

    def complete(self, checkpoint_id: int) -> None:
        snapshots = self._kept.pop(checkpoint_id, [])
        commit_keyed(snapshots)
        self._release()
        self.participants.notify_complete(checkpoint_id)
        close_snapshot_files(snapshots)

    def abort(self, checkpoint_id: int) -> None:
        self.participants.abort(checkpoint_id)
        self._release()
        close_snapshot_files(self._kept.pop(checkpoint_id, []))

    def _release(self) -> None:
        for backend in self.participants.release():
            if backend.merging:
                backend.merge_some(1 << 62)


class Worker:
    """One worker process's run (see the module docstring)."""

    def __init__(self, job: WorkerJob, index: int, control: Connection, peers: dict[int, socket.socket]) -> None:
        self.job = job
        self.index = index
        self.control = control
        self._control_inbox: deque[tuple[Any, ...]] = deque()
        self._send_lock = threading.RLock()  # a record logged while a message is pickled is sent first
        logging.getLogger().addHandler(ToDriver(self.send, index))
        self.links = WorkerLinks(job.graph, job.placement, index, peers)
        self.run = JobRun(job.spec, job.graph, links=self.links)
        self.run.job_id = f"worker {index}"
        self.run.set_attempt(job.attempt)
        self.checkpoints: WorkerCheckpoints | None = None
        self.participants = LocalTasks(self.run.tasks)
        if job.checkpointing:
            keys = dict(zip(self.run.tasks, task_keys(job.graph, job.placement, index), strict=True))
            self.checkpoints = WorkerCheckpoints(self.participants, keys, self.send)
            self.participants.attach(self.checkpoints, job.exactly_once)
        self.sinks = [sink for sink, _ in driver_sinks(job.graph)]
        for sink in self.sinks:
            sink.take_collected()  # the copy came with what the driver's sink held: not this worker's
            sink.relay_to_driver()
        self._finished_sent = False
        self._stopping = False
        self._status_at = 0.0
        self._driver_started: float | None = None
        # its status (the heartbeat) carries what the coordinator reads: source records, backlog, FLIP-327
        self._interval_s = job.spec.runtime_options.heartbeat_interval_ms / 1000
        # and goes early once its sources read their share of a checkpoint interval in records, so a
        # job checkpointing every N records is not checkpointed only once a heartbeat interval
        every = job.spec.checkpoint_config.get_checkpoint_interval_records() if job.checkpointing else None
        self._records_step = 0 if every is None else max(1, every // job.placement.workers)
        self._records_reported = 0

    def _wake(self) -> None:
        self.run.wake()

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self.control.send_bytes(dumps(message))

    def _receive_control(self) -> None:
        """The control socket's reader thread: the driver's messages, in order; its end closing (the
        driver died, or killed this worker's run) ends the process at once."""
        try:
            while True:
                self._control_inbox.append(pickle.loads(self.control.recv_bytes()))
                self._wake()
        except (EOFError, OSError):
            os._exit(3)

    # -- life cycle -------------------------------------------------------------------------------
    def serve(self) -> None:
        """Restore, report ready, wait for the start, run until told to shut down, report bye."""
        threading.Thread(target=self._receive_control, name="control", daemon=True).start()
        if self.job.restore_path is not None:
            storage = CheckpointStorage(os.path.dirname(self.job.restore_path))
            self.run.restore(storage.read_verified(self.job.restore_path, job_fingerprint(self.job.graph)))
        self.send((FromWorker.READY,))
        while not self._stopping and not self._started():
            self._report(False)  # the heartbeat, while other workers restore
            self.run.scheduler.wait_for_wake(self._interval_s)
        if not self._stopping:
            self.run.open(started_at=self._driver_started)
            self._loop()
        self.run.close()
        self._ship_collected()
        self.send((FromWorker.BYE, self.run.result().metrics))

    def _started(self) -> bool:
        """Whether the driver said start; the run's clock then starts at the driver's start (times in
        the metrics, such as an operator's deployed_ms, are ms since it: comparable across workers)."""
        while self._control_inbox:
            message = self._control_inbox.popleft()
            if message[0] is ToWorker.START:
                self._driver_started = message[1]
                return True
            self._stopping = message[0] is ToWorker.SHUTDOWN
        return False

    def _loop(self) -> None:
        scheduler, clock, links = self.run.scheduler, self.run.clock, self.links
        while not self._stopping:
            self._handle_control()
            links.drain()
            now = clock.now_ms()
            ran = not self._stopping and scheduler.try_turn(now)
            if ran:  # only a task's turn takes elements from its channels
                links.send_credits()
            self._ship_collected()
            self._report(scheduler.finished)
            if not ran and not self._stopping and not self._control_inbox and not links.pending():
                scheduler.idle_wait(now, self._interval_s)

    def _handle_control(self) -> None:
        while self._control_inbox:
            message = self._control_inbox.popleft()
            kind = message[0]
            if kind is ToWorker.SHUTDOWN:
                self._stopping = True
                return
            checkpoints = self.checkpoints
            assert checkpoints is not None  # only a checkpointing job is sent checkpoint messages
            if kind is ToWorker.TRIGGER:
                self.links.triggered = message[1]
                checkpoints.trigger(message[1], message[2])
            elif kind is ToWorker.COMPLETE:
                checkpoints.complete(message[1])
            elif kind is ToWorker.ABORT:
                checkpoints.abort(message[1])
            else:
                raise ValueError(f"worker {self.index}: unknown message from the driver: {kind!r}")

    # -- reports ----------------------------------------------------------------------------------
    def _ship_collected(self) -> None:
        """Hand what the driver sinks' copies here collected (and committed) to the driver's."""
        for index, sink in enumerate(self.sinks):
            records, commits = sink.take_collected()
            if records or commits:
                self.send((FromWorker.COLLECTED, index, records, commits))

    def _report(self, finished: bool) -> None:
        """The status (the heartbeat) when due; ``finished`` once, when every task here finished."""
        now = time.monotonic()
        if finished and not self._finished_sent:
            self._finished_sent = True
            self._status_at = 0.0
        participants = self.participants
        records = participants.source_records() if self._records_step else None
        if now - self._status_at < self._interval_s and (
                records is None or records - self._records_reported < self._records_step):
            return
        if records is None:
            records = participants.source_records()
        self._status_at = now
        self._records_reported = records
        metrics = {name: dict(values) for name, values in self.run.metrics.items()}  # counts before what is left
        self.send((FromWorker.STATUS, {"finished": finished, "in_backlog": self.run.in_backlog(),
                              "blocked": participants.blocked_reason(as_if_deployed=True),
                              "source_records": records,
                              "sources_in_backlog": participants.sources_in_backlog(),
                              "metrics": metrics, "subtasks": seen_in_this_process(self.run)}))


def main(control_fd: int) -> None:
    """The worker process's entry on its control socket (see the module docstring), right after its
    fork server forked it: a spare until a run gives it work. It takes the driver's path, directory,
    environment and fsspec settings (credentials set in code)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle: it stops the workers
    gc_policy.adopt_inherited_freeze()
    waiting = socket.socket(fileno=control_fd)
    given, fds, _, _ = socket.recv_fds(waiting, 1, MAX_PEERS)  # a spare waits here, its imports done
    if not given:  # the driver ended without a run for this spare
        _exit(0)
    control = Connection(waiting.detach())
    boot = pickle.loads(control.recv_bytes())
    sys.path[:] = boot["sys_path"]
    os.chdir(boot["cwd"])
    os.environ.clear()
    os.environ.update(boot["environ"])
    apply_fsspec_settings(boot["fsspec"])
    apply_levels(boot["log_levels"])
    peers = {peer: socket.socket(fileno=fd) for peer, fd in zip(boot["peers"], fds, strict=True)}
    worker: Worker | None = None
    try:
        job: WorkerJob = cloudpickle.loads(control.recv_bytes())
        worker = Worker(job, boot["worker"], control, peers)
        worker.serve()
    except BaseException as failure:  # noqa: BLE001 - every failure is the driver's to handle
        try:
            payload: bytes | None = dumps(failure)
        except Exception:  # noqa: BLE001 - an exception that cannot travel goes as its text
            payload = None
        kind = (type(failure).__module__, type(failure).__qualname__)
        try:
            control.send_bytes(dumps((FromWorker.FAILED, payload, kind, str(failure))))
        except OSError:
            pass
        if worker is not None:
            worker.run.close_quietly()
        _exit(1)
    _exit(0)


def _exit(code: int) -> None:
    """End the process now, whatever threads a source left running, once its output is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

"""The embedded executor: turns a job graph into the tasks and channels of one run.

A :class:`JobRun` is opened, driven turn by turn and closed by the driver
(:mod:`slipstream.runtime.driver`), which every way of running a job goes through.
On worker processes (:mod:`slipstream.runtime.workers`) each worker builds a ``JobRun`` of
the subtasks placed on it (``links``): a channel whose other end is on another worker is
connected through the links instead of held in memory.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import slipstream.operators  # noqa: F401  (registers every operator kind)
from slipstream.datastream.job_spec import JobExecutionResult, JobSpec, RuntimeExecutionMode, RuntimeOptions
from slipstream.datastream.transformations import (
    IterationHeadTransformation,
    LoopHeadTransformation,
    SourceTransformation,
    is_unbounded_source,
)
from slipstream.operators.base import OperatorContext, Output, StreamOperator
from slipstream.operators.iteration import create_operator
from slipstream.operators.memory import MemoryBudgets, share_network_memory
from slipstream.runtime import gc_policy
from slipstream.runtime.batch import make_batch_engine
from slipstream.runtime.channels import Channel, SpillingChannel
from slipstream.runtime.checkpoint.coordinator import CheckpointParticipants, LocalTasks
from slipstream.runtime.checkpoint.iteration_region import restore_iteration_regions
from slipstream.runtime.checkpoint.snapshot import check_restore, restore_tasks
from slipstream.runtime.checkpoint.storage import VerifiedCheckpoint
from slipstream.runtime.clock import Clock, SystemClock
from slipstream.runtime.job_graph import EdgeKind, JobGraph, JobVertex, StreamEdge
from slipstream.runtime.latency import LatencyTracking
from slipstream.runtime.loop_task import IterationHeadTask, LoopHeadTask, attach_termination
from slipstream.runtime.outputs import ChainingOutput, NetworkOutput
from slipstream.runtime.progress_sampler import SubtasksSeen
from slipstream.runtime.record_writer import RecordWriter, target_subtasks
from slipstream.runtime.scheduler import Scheduler, Wakeup
from slipstream.runtime.state import create_keyed_backend
from slipstream.runtime.task import InputChannel, SourceTask, StreamTask, TaskProcessingTimeService


class ChannelLinks(Protocol):
    """Where the subtasks of a run on worker processes are, and the channels between workers."""

    def is_local(self, vertex: JobVertex, subtask: int) -> bool:
        """Whether subtask ``subtask`` of ``vertex`` runs in this process."""
        ...

    def connect(self, edge: StreamEdge, producer: int, consumer: int, channel: Channel) -> Channel:
        """The channel a local end of an edge between two workers uses: ``channel`` itself where the
        consumer is local (it receives), an outbound channel where the producer is local."""
        ...

    @property
    def wakeup(self) -> Wakeup:
        """What the run's scheduler waits on when idle: input from the other workers ends the wait."""
        ...


class Run(Protocol):
    """What the driver, recovery and the monitor use of a run: a :class:`JobRun` in this process,
    or a :class:`~slipstream.runtime.workers.run.WorkerRun` on worker processes."""

    job_id: str
    graph: JobGraph
    metrics: dict[str, dict[str, Any]]
    task_metrics: dict[StreamTask, list[dict[str, Any]]]
    clock: Clock
    checkpoint_coordinator: Any
    idle: threading.Event | None
    """Set while the tasks this process runs wait for input (None: it runs none)."""

    @property
    def started_at(self) -> float: ...
    def set_attempt(self, attempt: int) -> None: ...
    def checkpoint_participants(self) -> CheckpointParticipants: ...
    def restore(self, checkpoint: VerifiedCheckpoint) -> None: ...
    def open(self) -> None: ...
    def run_turn(self) -> bool: ...
    def wake(self) -> None: ...
    def on_idle(self, work: Callable[[], bool]) -> None: ...
    def in_backlog(self) -> bool: ...
    def subtasks_elsewhere(self) -> dict[str, SubtasksSeen]: ...
    def close(self) -> None: ...
    def close_quietly(self) -> None: ...
    def result(self) -> JobExecutionResult: ...


class JobRun:
    """One run of a job graph (planned from ``spec``): its tasks, their scheduler, and the metrics they count.

    With ``links`` (on a worker process) only the subtasks placed on this process are built."""

    def __init__(self, spec: JobSpec, graph: JobGraph, clock: Clock | None = None,
                 links: ChannelLinks | None = None) -> None:
        self.spec = spec
        self.links = links
        self.graph = graph
        self.job_name = spec.job_name
        self.job_id = uuid.uuid4().hex
        options = spec.runtime_options
        self.clock = clock or options.clock or SystemClock()
        self.metrics: dict[str, dict[str, Any]] = {}
        self.checkpoint_coordinator: Any = None  # set by Recovery.prepare when the job checkpoints
        self.task_metrics: dict[StreamTask, list[dict[str, Any]]] = {}
        # FLIP-327: sorting operators run their backlog on this engine (None: record by record)
        self.batch_engine = make_batch_engine(options.batch_engine, options.engine_options) \
            if options.backlog_sorting else None
        self.memory = MemoryBudgets.of(options)
        self.tasks = self._build_tasks(options)
        for task in self.tasks:
            task.backlog_ended = self._after_backlog_ended
        self.scheduler = Scheduler(self.tasks, self.clock, options.scheduler_seed,
                                   None if links is None else links.wakeup)
        self.idle: threading.Event | None = self.scheduler.idle
        self._closed = False
        self._gc_policy = False
        self._switched = False
        self._started = 0.0

    # -- construction -----------------------------------------------------------------------------
    def _metrics_for(self, name: str, uid: str) -> dict[str, Any]:
        key = name if name not in self.metrics or self.metrics[name].get("uid") == uid else f"{name} [{uid}]"
        return self.metrics.setdefault(key, {"uid": uid, "records_in": 0, "records_out": 0})

    def _build_tasks(self, options: RuntimeOptions) -> list[StreamTask]:
        capacity = options.channel_capacity
        channels: dict[tuple[StreamEdge, int, int], Channel] = {}
        links = self.links
        for vertex in self.graph.vertices:
            for edge in vertex.in_edges:
                source = self.graph.vertex_of[edge.source]
                for i in range(edge.source.parallelism):
                    for j in target_subtasks(edge.partitioning, i, edge.source.parallelism,
                                             edge.target.parallelism):
                        producer = links is None or links.is_local(source, i)
                        consumer = links is None or links.is_local(vertex, j)
                        if not (producer or consumer):
                            continue
                        name = f"{edge.source.name}[{i}]->{edge.target.name}[{j}]"
                        channel = Channel(capacity, name) if edge.kind is EdgeKind.PIPELINED \
                            else SpillingChannel(options.channel_memory_budget, name, options.spill_dir,
                                                 options.channel_memory_budget_bytes)
                        if links is not None and producer != consumer:
                            channel = links.connect(edge, i, j, channel)
                        channels[(edge, i, j)] = channel
        tasks: list[StreamTask] = []
        for vertex in self.graph.vertices:
            for subtask in range(vertex.parallelism):
                if links is None or links.is_local(vertex, subtask):
                    tasks.append(self._build_task(vertex, subtask, channels, options.batch_size,
                                                  options.quantum, options.scheduler_seed))
        self.channels = list(channels.values())
        share_network_memory(self.memory.network, self.channels)
        self.termination = attach_termination(tasks)  # loops end by the FLIP-15 protocol
        return tasks

    def _build_task(self, vertex: JobVertex, subtask: int, channels: dict[tuple[StreamEdge, int, int], Channel],
                    batch_size: int, quantum: int, seed: int) -> StreamTask:
        writers_by_edge: dict[StreamEdge, RecordWriter] = {}
        for edge in vertex.out_edges:
            targets = target_subtasks(edge.partitioning, subtask, edge.source.parallelism,
                                      edge.target.parallelism)
            writers_by_edge[edge] = RecordWriter(edge, subtask, [channels[(edge, subtask, j)] for j in targets],
                                                 batch_size, seed)
        timers = TaskProcessingTimeService(self.clock)
        options = self.spec.runtime_options
        operators = [create_operator(node.transformation) for node in vertex.nodes]
        node_metrics = [self._metrics_for(node.name, node.uid) for node in vertex.nodes]
        for position, (node, operator) in enumerate(zip(vertex.nodes, operators)):
            if position + 1 < len(operators):
                output: Output = ChainingOutput(operators[position + 1], node_metrics[position],
                                                node_metrics[position + 1])
            else:
                main = [writers_by_edge[e] for e in node.out_edges if e.side_tag is None]
                side: dict[Any, list[RecordWriter]] = {}
                for edge in node.out_edges:
                    if edge.side_tag is not None:
                        side.setdefault(edge.side_tag, []).append(writers_by_edge[edge])
                output = NetworkOutput(main, side, node_metrics[position])
            keyed = node.transformation.is_keyed
            owner = f"operator '{node.name}' (subtask {subtask + 1}/{node.parallelism})"
            backend = create_keyed_backend(self.spec.state_backend, node.max_parallelism, self.clock.now_ms,
                                           self.memory, owner, node_metrics[position]) if keyed else None
            sorts = not node.backlog_streamed and operator.get_operator_attributes().has_internal_sorter()
            sort_budget = self.memory.managed.budget(owner) if sorts else None
            operator.setup(OperatorContext(
                name=node.name, uid=node.uid, subtask_index=subtask, parallelism=node.parallelism,
                max_parallelism=node.max_parallelism, output=output, processing_time_service=timers,
                keyed_backend=backend, job_parameters=dict(self.spec.job_parameters),
                metrics=node_metrics[position], batch_engine=None if node.backlog_streamed else self.batch_engine,
                batch_mode=self.graph.mode is RuntimeExecutionMode.BATCH,
                sort_every_backlog=options.backlog_sorting == "always",
                sort_memory_budget=options.sort_memory_budget,
                channel_memory_budget=options.channel_memory_budget,
                spill_dir=options.spill_dir, memory=self.memory,
                sort_budget=sort_budget))
        writers = list(writers_by_edge.values())
        task = self._make_task(vertex, subtask, operators, writers, timers, channels, quantum)
        for writer in writers:
            writer.producer_in_backlog = task.in_backlog
        self.task_metrics[task] = node_metrics
        if options.latency_interval_ms > 0 and self.graph.mode is not RuntimeExecutionMode.BATCH:
            recording = node_metrics[1:] if isinstance(task, SourceTask) else node_metrics
            task.latency = LatencyTracking(recording, writers, options.latency_interval_ms)
        return task

    def _make_task(self, vertex: JobVertex, subtask: int, operators: list[StreamOperator],
                   writers: list[RecordWriter], timers: TaskProcessingTimeService,
                   channels: dict[tuple[StreamEdge, int, int], Channel], quantum: int) -> StreamTask:
        name = vertex.name
        if isinstance(vertex.head.transformation, SourceTransformation):
            return SourceTask(name, subtask, operators, writers, timers, self.clock, quantum,
                              self.spec.runtime_options.batch_size)
        # feedback first (FLIP-15); an iteration may ask for it only when the feedback buffer is full;
        # an operator may name an input to read first (a broadcast operator's broadcast input)
        when_full = getattr(vertex.head.transformation, "feedback_first_when_full", False)
        first_input = getattr(vertex.head.transformation, "priority_input", None)
        inputs = [InputChannel(channels[(edge, i, subtask)], edge.input_index,
                               priority=1 if (edge.kind is EdgeKind.FEEDBACK and not when_full)
                               or edge.input_index == first_input else 0,
                               first_when_full=edge.kind is EdgeKind.FEEDBACK and when_full,
                               blocking=edge.kind is EdgeKind.BLOCKING)
                  for edge in vertex.in_edges
                  for i in range(edge.source.parallelism)
                  if (edge, i, subtask) in channels]
        task_cls = LoopHeadTask if isinstance(vertex.head.transformation, LoopHeadTransformation) else StreamTask
        if isinstance(vertex.head.transformation, IterationHeadTransformation):
            task_cls = IterationHeadTask
        return task_cls(name, subtask, operators, inputs, writers, timers, self.clock, quantum)

    # -- checkpoints and restores ---------------------------------------------------------------
    def set_attempt(self, attempt: int) -> None:
        """Number this run's attempt (operators see it as ``ctx.attempt_number``)."""
        for task in self.tasks:
            for operator in task.operators:
                operator.ctx.attempt_number = attempt

    def checkpoint_participants(self) -> CheckpointParticipants:
        return LocalTasks(self.tasks)

    def restore(self, checkpoint: VerifiedCheckpoint) -> None:
        """Put the state of ``checkpoint`` into the (not yet opened) tasks, and let every operator
        refuse it before any opens (see :func:`check_restore`)."""
        ended = restore_iteration_regions(self.tasks, checkpoint.manifest, checkpoint.files, checkpoint.path)
        restore_tasks([task for task in self.tasks if task not in ended], checkpoint.manifest,
                      checkpoint.files, checkpoint.path, checkpoint.stored)
        check_restore(self.tasks)

    # -- running ----------------------------------------------------------------------------------
    def run_turn(self) -> bool:
        """Give one task a turn (waiting for one to be runnable); False once every task finished."""
        return self.scheduler.run_turn()

    def wake(self) -> None:
        """Cut an idle wait short (from any thread)."""
        self.scheduler.wake()

    def on_idle(self, work: Callable[[], bool]) -> None:
        """Have ``work`` done, a step per call, whenever no task is runnable (it says whether some is left)."""
        self.scheduler.idle_work = work

    def open(self, started_at: float | None = None) -> None:
        """Start the clock (at ``started_at``, a worker's: its driver's start) and the garbage collection
        policy of :mod:`~slipstream.runtime.gc_policy`; each task deploys (opens its operators) on its
        first turn."""
        self._started = time.perf_counter() if started_at is None else started_at
        self._gc_policy = gc_policy.job_started()
        if self._gc_policy:
            gc_policy.freeze_now()  # the imports and the job: they outlive the run, no collection need walk them

    @property
    def started_at(self) -> float:
        """When the run opened (``time.perf_counter()``; the operators' ``switched_at`` is on the same clock)."""
        return self._started

    def in_backlog(self) -> bool:
        """Whether some task still has backlog ahead (read by the job monitor's thread)."""
        return any(task.in_backlog() for task in self.tasks)

    def subtasks_elsewhere(self) -> dict[str, SubtasksSeen]:
        """What other processes see of each operator's subtasks: nothing, every task runs here."""
        return {}

    def _after_backlog_ended(self) -> None:
        """A source task or an input of a task left its backlog (a source deployed last, after the
        others' backlog ended, counts too). Once no task has backlog ahead and a source
        goes on, the job has switched to streaming: the moment to freeze the heap the backlog
        left (see :mod:`~slipstream.runtime.gc_policy`). The job's metrics say when, as
        ``job.switched_ms``: milliseconds from the start to the end of the switch."""
        if self._switched or self.in_backlog() or not self._input_goes_on():
            return
        self._switched = True
        if self._gc_policy:
            gc_policy.freeze_now()
        self.metrics["job"] = {"switched_ms": (time.perf_counter() - self._started) * 1000}

    def _input_goes_on(self) -> bool:
        """Whether a source still reads: one here or, on a worker, an unbounded source of the job on
        another worker whose records this process's unfinished tasks go on taking — a worker placed
        without a source of its own switches as the others do."""
        if any(isinstance(task, SourceTask) and not task.finished for task in self.tasks):
            return True
        return self.links is not None and any(not task.finished for task in self.tasks) and any(
            is_unbounded_source(node.transformation) for vertex in self.graph.vertices for node in vertex.nodes)

    def close(self) -> None:
        """Close every task; on failure paths, errors while closing must not hide the first one."""
        if self._closed:
            return
        self._closed = True
        if self._gc_policy:
            gc_policy.job_ended()
        first_error: BaseException | None = None
        for task in self.tasks:
            try:
                task.close()
            except Exception as exc:  # noqa: BLE001 - keep closing the others
                first_error = first_error or exc
        for channel in self.channels:
            if isinstance(channel, SpillingChannel):
                channel.close()
        if first_error is not None:
            raise first_error

    def close_quietly(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a failure is already propagating
            pass

    def result(self) -> JobExecutionResult:
        runtime_ms = int((time.perf_counter() - self._started) * 1000)
        for task, node_metrics in self.task_metrics.items():
            for values in node_metrics:
                self._record_times(values, task)
        metrics = {name: dict(values) for name, values in self.metrics.items()}
        return JobExecutionResult(self.job_id, self.job_name, runtime_ms, metrics)

    def _record_times(self, values: dict[str, Any], task: StreamTask) -> None:
        """When the operator's first subtask was deployed and its last finished, in ms since start."""
        if task.deployed_at is not None:
            deployed = (task.deployed_at - self._started) * 1000
            values["deployed_ms"] = min(values.get("deployed_ms", deployed), deployed)
        if task.finished_at is not None:
            finished = (task.finished_at - self._started) * 1000
            values["finished_ms"] = max(values.get("finished_ms", finished), finished)

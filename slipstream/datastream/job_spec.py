"""The job description the runtime runs: one frozen :class:`JobSpec`, taken from the environment.

``StreamExecutionEnvironment`` is where a job is built and configured, and stays mutable; when
a job is executed (or explained) the environment freezes its graph and settings into a
``JobSpec`` and hands only that to the runtime, through :mod:`slipstream.runtime.entry`. So the
runtime never reads the environment, a change to the environment after ``execute_async`` does
not reach the running job, and a runtime test can build its job description by hand.
The runtime's settings (:class:`RuntimeOptions`), its execution modes and the result it returns
(:class:`JobExecutionResult`) are defined here for the same reason: both sides import them.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from slipstream.datastream.checkpoint_config import CheckpointConfig
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.job_id import JobID
from slipstream.datastream.restart_strategy import RestartStrategyConfiguration
from slipstream.datastream.state_backend import StateBackend
from slipstream.datastream.transformations import Transformation


class RuntimeExecutionMode(Enum):
    """STREAMING processes record by record; BATCH as sorted batch work; AUTOMATIC picks by sources.

    Until the backlog issue lands, BATCH and AUTOMATIC run the same way as STREAMING.
    """

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2


@dataclass
class RuntimeOptions:
    """Knobs of the embedded runtime (slipstream's own; Flink has no equivalent).

    ``scheduler_seed`` fixes the interleaving of subtasks, so a run can be repeated and
    tests can explore other interleavings. ``batch_size`` is how many records travel
    together; ``channel_capacity`` how many batches a channel holds before its
    producer waits (backpressure); ``quantum`` how many batches a task takes per turn;
    ``clock`` a processing-time clock (``slipstream.testing.ManualClock`` in tests).
    BLOCKING and FEEDBACK channels never make their producer wait: past
    ``channel_memory_budget`` records or ``channel_memory_budget_bytes`` bytes they spill.
    """

    scheduler_seed: int = 0
    batch_size: int = 1024
    channel_capacity: int = 8
    quantum: int = 4
    clock: Any = None  # processing time source; None means the wall clock
    channel_memory_budget: int = 100_000  # records an unbounded (blocking or feedback) channel keeps in memory
    channel_memory_budget_bytes: int = 64 * 1024 * 1024  # and bytes (estimated) it keeps in memory
    # FLIP-327: operators with an internal sorter buffer their backlog and run it as sorted batch
    # work (polars) at the switch where that is faster than streaming it (in STREAMING mode the
    # planner streams the kinds it is not for, and explain() says why); "always" sorts every one;
    # False processes backlog record by record instead.
    backlog_sorting: bool | str = True
    # records a sorting operator (or a replay cache) holds in memory before spilling
    sort_memory_budget: int = 1_000_000
    # memory pools in bytes, with Flink's names (slipstream.operators.memory); None: unlimited
    managed_memory: int | None = None  # taskmanager.memory.managed.size: replay caches, sort buffers, RocksDB
    task_heap_memory: int | None = None  # taskmanager.memory.task.heap.size: keyed state on the heap
    network_memory: int | None = None  # taskmanager.memory.network.max: blocking and feedback channels
    spill_dir: str | None = None  # where operators spill (a private 0700 dir inside); None: temp dir
    show_progress: bool = True  # on a terminal, show the backlog phase live (never when output is piped)
    # the engine of the sorted backlog work: "polars" (embedded), "spark", or a BatchEngine object;
    # engine_options are the keyword arguments of the named engine (e.g. master for Spark)
    batch_engine: Any = "polars"
    engine_options: dict[str, Any] = field(default_factory=dict)
    # who watches the job (slipstream.runtime.monitor): listeners get its progress every
    # progress_interval seconds; ui_port serves the web view, metrics_port Prometheus metrics,
    # both on 127.0.0.1 only (0: any free port)
    progress_listeners: list[Any] = field(default_factory=list)
    progress_interval: float = 1.0
    # latency markers (Flink's metrics.latency.interval, ms; 0 disables): streaming sources send one
    # this often, and each operator keeps a latency histogram (slipstream.runtime.latency)
    latency_interval_ms: int = 500
    ui_port: int | None = None
    metrics_port: int | None = None
    # worker processes (Flink's local.number-taskmanager): subtasks run in slots spread over them
    # (slipstream.runtime.workers); None: SLIPSTREAM_WORKERS, else the machine's cores, capped by the
    # job's largest parallelism. Each worker reports its status every heartbeat_interval_ms and is
    # taken for lost (the job fails over) after heartbeat_timeout_ms of silence
    workers: int | None = None
    heartbeat_interval_ms: int = 100
    heartbeat_timeout_ms: int = 50_000
    # worker processes started ahead when a run ends, their imports done, for the next run or a
    # restart to take (slipstream.runtime.workers.spares); 0: every worker process ends with its run
    worker_spares: int = 0
    # who runs the job: "embedded" (this process), "spark" (slipstream.spark_runner on the active
    # SparkSession), or a runner object with execute(spec, restore_from) and explain(spec)
    runner: Any = "embedded"

    @property
    def batch_engine_name(self) -> str:
        """The name of the batch engine: "polars", "spark", or a BatchEngine object's name."""
        engine = self.batch_engine
        return engine if isinstance(engine, str) else getattr(engine, "name", type(engine).__name__)


class JobExecutionResult:
    """What ``execute`` returns: the job's id, its run time, and accumulated metrics."""

    def __init__(self, job_id: str, job_name: str, net_runtime_ms: int,
                 metrics: dict[str, dict[str, Any]]) -> None:
        self._job_id = job_id
        self.job_name = job_name
        self._net_runtime = net_runtime_ms
        self.metrics = metrics

    def get_job_id(self) -> JobID:
        return JobID(self._job_id)

    def is_job_execution_result(self) -> bool:
        """True: the job ran to its end here (Flink's detached submissions have no result)."""
        return True

    def get_job_execution_result(self) -> JobExecutionResult:
        return self

    def get_net_runtime(self) -> int:
        """Milliseconds the job ran."""
        return self._net_runtime

    def get_all_accumulator_results(self) -> dict[str, dict[str, Any]]:
        """Per operator, its counters (records in and out, and operator-specific ones)."""
        return {name: dict(values) for name, values in self.metrics.items()}

    def get_accumulator_result(self, accumulator_name: str) -> Any:
        return self.metrics.get(accumulator_name)

    def __repr__(self) -> str:
        return f"JobExecutionResult(job_id={self._job_id!r}, net_runtime={self._net_runtime} ms)"


@dataclass(frozen=True, eq=False)
class JobSpec:
    """One job as the runtime sees it: its logical graph and every setting that shapes its runs.

    Built once by the environment (``StreamExecutionEnvironment._job_spec``) and holding copies
    of its settings, so it never changes after: the planner (:mod:`slipstream.runtime.planner`), the
    executor, recovery and the driver read this and nothing else. ``max_parallelism`` None
    means Flink's default rule per operator; ``job_parameters`` are the global job parameters
    every operator's runtime context sees.
    """

    job_name: str
    transformations: tuple[Transformation, ...]
    parallelism: int = 1
    max_parallelism: int | None = None
    runtime_mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING
    chaining_enabled: bool = True
    configuration: Configuration = field(default_factory=Configuration)
    job_parameters: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    restart_strategy: RestartStrategyConfiguration | None = None
    state_backend: StateBackend | None = None
    runtime_options: RuntimeOptions = field(default_factory=RuntimeOptions)

    def __post_init__(self) -> None:
        """Hold copies of the mutable settings given, so that later changes to them (the
        environment's, a caller's) never reach the spec."""
        options = self.runtime_options
        copies = {
            "transformations": tuple(self.transformations),
            "configuration": Configuration(self.configuration),
            "job_parameters": MappingProxyType(dict(self.job_parameters)),
            "checkpoint_config": copy.copy(self.checkpoint_config),
            "runtime_options": dataclasses.replace(options, progress_listeners=list(options.progress_listeners),
                                                   engine_options=dict(options.engine_options)),
        }
        for name, value in copies.items():
            object.__setattr__(self, name, value)  # a frozen dataclass sets its own fields so


__all__ = ["JobExecutionResult", "JobSpec", "RuntimeExecutionMode", "RuntimeOptions"]

"""``StreamExecutionEnvironment``: where a job is built and from where it runs.

As ``pyflink.datastream.StreamExecutionEnvironment``. The environment owns the
job's logical graph; ``execute`` hands it to the embedded runtime.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable

from slipstream.datastream.checkpoint_config import RESTORE_ENV_VAR, CheckpointConfig, CheckpointingMode
from slipstream.datastream.connectors.base import Source
from slipstream.datastream.data_stream import CloseableIterator, DataStream
from slipstream.datastream.restart_strategy import RestartStrategyConfiguration
from slipstream.datastream.transformations import SourceTransformation, Transformation
from slipstream.errors import InvalidProgramError


ALREADY_RUN = ("was already handed to an earlier execute() or execute_and_collect(), which takes the "
               "graph built so far and leaves the environment empty (as Flink's execute does)")


class RuntimeExecutionMode(Enum):
    """STREAMING processes record by record; BATCH as sorted batch work; AUTOMATIC picks by sources.

    Until the backlog issue lands, BATCH and AUTOMATIC run the same way as STREAMING.
    """

    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2


@dataclass
class ExecutionConfig:
    """Job-wide settings, as Flink's ``ExecutionConfig`` (the subset that applies here)."""

    auto_watermark_interval: int = 200
    global_job_parameters: dict[str, str] = field(default_factory=dict)

    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        self.auto_watermark_interval = int(interval)
        return self

    def get_auto_watermark_interval(self) -> int:
        return self.auto_watermark_interval

    def set_global_job_parameters(self, global_job_parameters_dict: dict[str, str]) -> ExecutionConfig:
        self.global_job_parameters = dict(global_job_parameters_dict)
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return dict(self.global_job_parameters)


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
    # work (polars) at the switch; False processes backlog record by record instead.
    backlog_sorting: bool = True
    sort_memory_budget: int = 1_000_000  # records a sorting operator (or a replay cache) holds in memory before spilling
    spill_dir: str | None = None  # where operators spill (a private 0700 dir inside); None: temp dir
    show_progress: bool = True  # on a terminal, show the backlog phase live (never when output is piped)
    # the engine of the sorted backlog work: "polars" (embedded), "spark", or a BatchEngine object;
    # engine_options are the keyword arguments of the named engine (e.g. master for Spark)
    batch_engine: Any = "polars"
    engine_options: dict[str, Any] = field(default_factory=dict)


class JobExecutionResult:
    """What ``execute`` returns: the job's id, its run time, and accumulated metrics."""

    def __init__(self, job_id: str, job_name: str, net_runtime_ms: int,
                 metrics: dict[str, dict[str, Any]]) -> None:
        self._job_id = job_id
        self.job_name = job_name
        self._net_runtime = net_runtime_ms
        self.metrics = metrics

    def get_job_id(self) -> str:
        return self._job_id

    def get_net_runtime(self) -> int:
        """Milliseconds the job ran."""
        return self._net_runtime

    def get_all_accumulator_results(self) -> dict[str, dict[str, Any]]:
        """Per operator, its counters (records in and out, and operator-specific ones)."""
        return {name: dict(values) for name, values in self.metrics.items()}

    def get_accumulator_result(self, name: str) -> Any:
        return self.metrics.get(name)

    def __repr__(self) -> str:
        return f"JobExecutionResult(job_id={self._job_id!r}, net_runtime={self._net_runtime} ms)"


class StreamExecutionEnvironment:
    """The context a job is built in and executed from."""

    def __init__(self) -> None:
        self._parallelism = 1
        self._max_parallelism: int | None = None
        self._runtime_mode = RuntimeExecutionMode.STREAMING
        self._config = ExecutionConfig()
        self.runtime_options = RuntimeOptions()
        self._transformations: list[Transformation] = []
        self._ids = itertools.count(1)
        self._uids: dict[str, Transformation] = {}
        self._executed: set[int] = set()  # ids of transformations an earlier run took
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy: RestartStrategyConfiguration | None = None

    @staticmethod
    def get_execution_environment(configuration: Any = None) -> StreamExecutionEnvironment:
        """A new environment with its own empty graph (default parallelism 1, embedded runtime)."""
        return StreamExecutionEnvironment()

    # -- settings --------------------------------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise InvalidProgramError(f"parallelism must be a positive integer, got {parallelism!r}")
        self._parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        """The number of key groups: the most subtasks keyed state can ever be spread over."""
        if not isinstance(max_parallelism, int) or not 0 < max_parallelism <= 32768:
            raise InvalidProgramError(f"max parallelism must be in 1..32768, got {max_parallelism!r}")
        self._max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism or -1

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> StreamExecutionEnvironment:
        if not isinstance(execution_mode, RuntimeExecutionMode):
            raise InvalidProgramError(f"set_runtime_mode expects a RuntimeExecutionMode, got {execution_mode!r}")
        self._runtime_mode = execution_mode
        return self

    def get_runtime_mode(self) -> RuntimeExecutionMode:
        return self._runtime_mode

    def get_config(self) -> ExecutionConfig:
        return self._config

    def configure(self, *, scheduler_seed: int | None = None, batch_size: int | None = None,
                  channel_capacity: int | None = None, quantum: int | None = None,
                  clock: Any = None, backlog_sorting: bool | None = None,
                  sort_memory_budget: int | None = None, channel_memory_budget: int | None = None,
                  channel_memory_budget_bytes: int | None = None, spill_dir: str | None = None,
                  show_progress: bool | None = None) -> StreamExecutionEnvironment:
        """Set the embedded runtime's knobs (see :class:`RuntimeOptions`; the batch engine has
        :meth:`set_batch_engine`); None leaves one as it is."""
        options = self.runtime_options
        if clock is not None:
            options.clock = clock
        if spill_dir is not None:
            options.spill_dir = str(spill_dir)
        for name, value in (("backlog_sorting", backlog_sorting), ("show_progress", show_progress)):
            if value is not None:
                if not isinstance(value, bool):
                    raise InvalidProgramError(f"{name} must be True or False, got {value!r}")
                setattr(options, name, value)
        for name, value in (("scheduler_seed", scheduler_seed), ("batch_size", batch_size),
                            ("channel_capacity", channel_capacity), ("quantum", quantum),
                            ("sort_memory_budget", sort_memory_budget),
                            ("channel_memory_budget", channel_memory_budget),
                            ("channel_memory_budget_bytes", channel_memory_budget_bytes)):
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or (name != "scheduler_seed" and value < 1):
                raise InvalidProgramError(f"{name} must be a positive integer, got {value!r}")
            setattr(options, name, value)
        return self

    def set_batch_engine(self, engine: Any = "polars", *, master: str | None = None,
                         session: Any = None) -> StreamExecutionEnvironment:
        """Choose the engine that runs backlog as sorted batch work (FLIP-327).

        ``"polars"`` (the default) runs it in this process; ``"spark"`` runs it as Spark jobs
        (``pip install 'slipstream[spark]'``, Java 17): on ``session`` if given, else on the
        active SparkSession when slipstream runs inside a Spark application, else on a session
        started on first use with ``master`` (``local[*]`` by default). A ``BatchEngine``
        object is used as it is. Both engines give the same results.

        Example:
            >>> env = StreamExecutionEnvironment.get_execution_environment()
            >>> env = env.set_batch_engine("spark", master="local[2]")
        """
        if isinstance(engine, str):
            if engine not in ("polars", "spark"):
                raise InvalidProgramError(f"set_batch_engine expects 'polars', 'spark' or a BatchEngine, "
                                          f"got {engine!r}")
            if engine == "polars" and (master is not None or session is not None):
                raise InvalidProgramError("master and session apply to the 'spark' batch engine only")
        elif not (hasattr(engine, "sort") and hasattr(engine, "group_aggregate")):
            raise InvalidProgramError(f"set_batch_engine expects 'polars', 'spark' or a BatchEngine, got {engine!r}")
        self.runtime_options.batch_engine = engine
        self.runtime_options.engine_options = {name: value for name, value in
                                               (("master", master), ("session", session)) if value is not None}
        return self

    def get_batch_engine(self) -> str:
        """The name of the batch engine chosen with :meth:`set_batch_engine` ("polars" by default)."""
        engine = self.runtime_options.batch_engine
        return engine if isinstance(engine, str) else getattr(engine, "name", type(engine).__name__)

    # -- checkpoints and restarts ------------------------------------------------------------------
    def enable_checkpointing(self, interval: int,
                             mode: CheckpointingMode | None = None) -> StreamExecutionEnvironment:
        """Checkpoint every ``interval`` ms (see :mod:`slipstream.datastream.checkpoint_config`)."""
        self._checkpoint_config.set_checkpoint_interval(interval)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def get_checkpoint_interval(self) -> int:
        return self._checkpoint_config.get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._checkpoint_config.get_checkpointing_mode()

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration
                             ) -> StreamExecutionEnvironment:
        """How a failed job restarts (``RestartStrategies.fixed_delay_restart``/``no_restart``)."""
        if not isinstance(restart_strategy_configuration, RestartStrategyConfiguration):
            raise InvalidProgramError(f"expected a restart strategy from RestartStrategies, "
                                      f"got {restart_strategy_configuration!r}")
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration | None:
        return self._restart_strategy

    # -- sources ---------------------------------------------------------------------------------
    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> DataStream:
        """A bounded stream of the collection's elements, in order."""
        from slipstream.datastream.connectors.iterator import CollectionSource
        if isinstance(collection, (str, bytes)) or not isinstance(collection, Iterable):
            raise InvalidProgramError(f"from_collection expects a collection, got {collection!r}")
        return self.from_source(CollectionSource(list(collection)), None, "Collection Source", type_info)

    def from_spark(self, dataframe: Any, type_info: Any = None, source_name: str = "Spark Source") -> DataStream:
        """A bounded (backlog) stream of a Spark DataFrame's rows (named ``Row`` records).

        The rows come as Arrow batches, read partition by partition (the driver holds one
        partition at a time); with the Spark batch engine, a vectorised co_group with
        EndOfStreamWindows, or (in BATCH mode) a built-in keyed aggregation, directly after it
        runs as one Spark query (see :mod:`slipstream.datastream.connectors.spark`). For a Parquet dataset:
        ``env.from_spark(spark.read.parquet(path))``.
        """
        from slipstream.datastream.connectors.spark import SparkSource
        return self.from_source(SparkSource(dataframe), None, source_name, type_info)

    def from_source(self, source: Source, watermark_strategy: Any, source_name: str,
                    type_info: Any = None) -> DataStream:
        """A stream read from ``source``; ``watermark_strategy`` (or None) assigns event time."""
        if not isinstance(source, Source):
            raise InvalidProgramError(f"from_source expects a Source, got {source!r}")
        if watermark_strategy is not None and not hasattr(watermark_strategy, "create_watermark_generator"):
            raise InvalidProgramError(f"from_source expects a WatermarkStrategy or None, got {watermark_strategy!r}")
        transformation = self._add_transformation(
            SourceTransformation, source_name or source.default_name(), [], output_type=type_info,
            source=source, watermark_strategy=watermark_strategy)
        limit = source.max_parallelism()
        if limit is not None and self._parallelism > limit:
            transformation.parallelism = limit
            transformation.parallelism_fixed = True
        return DataStream(self, transformation)

    # -- execution -------------------------------------------------------------------------------
    def execute(self, job_name: str | None = None, restore_from: str | None = None) -> JobExecutionResult:
        """Run the job to its end (bounded sources) and return its result.

        ``restore_from`` resumes from a checkpoint: ``"latest"`` (the newest complete one in
        the checkpoint storage directory, or a fresh start when there is none) or the path of a
        checkpoint directory. When not given, the ``SLIPSTREAM_RESTORE_FROM`` environment
        variable is read, so the same script restarts from the command line.
        """
        import os
        from slipstream.runtime.driver import execute_job
        if restore_from is None:
            restore_from = os.environ.get(RESTORE_ENV_VAR) or None
        return execute_job(self, self._take_graph(), job_name or "slipstream job", restore_from=restore_from)

    def _execute_collecting(self, sink: Any, job_name: str | None) -> CloseableIterator:
        from slipstream.runtime.driver import collect_job
        return collect_job(self, self._take_graph(), job_name or "slipstream job", sink)

    def get_execution_plan(self) -> str:
        """The job graph this environment would run, as text (see :meth:`explain`)."""
        return self.explain()

    def explain(self) -> str:
        """The job graph as text: tasks, chained operators, parallelism and edges."""
        from slipstream.runtime.planner import plan_job
        return plan_job(self, list(self._transformations)).explain()

    def _take_graph(self) -> list[Transformation]:
        """Hand the graph to a run; the environment starts afresh, as Flink clears it on execute."""
        if not self._transformations and self._executed:
            raise InvalidProgramError(f"nothing to execute: every stream of this environment {ALREADY_RUN}; "
                                      "build the job again, from its sources, to run it again")
        if not any(type(t).__name__ == "SinkTransformation" for t in self._transformations):
            raise InvalidProgramError("the job has no sink: add print(), sink_to(...) or use "
                                      "execute_and_collect()")
        graph, self._transformations = self._transformations, []
        self._executed.update(t.id for t in graph)
        return graph

    # -- graph building (used by the stream handles) ---------------------------------------------
    def _add_transformation(self, cls: type[Transformation], name: str, inputs: list[Transformation],
                            output_type: Any = None, key_selectors: list | None = None,
                            **fields: Any) -> Transformation:
        self._check_not_executed(name, inputs)
        scope = inputs[0].scope if inputs else None
        extra = {"scope": scope} if scope is not None else {}
        transformation = cls(id=next(self._ids), name=name, inputs=list(inputs), output_type=output_type,
                             key_selectors=list(key_selectors or []), **extra, **fields)
        self._transformations.append(transformation)
        return transformation

    def _check_not_executed(self, name: str, inputs: list[Transformation]) -> None:
        """Refuse to build on a stream whose graph a run already took (a second collect of the
        same stream, a sink added after execute()): that stream no longer belongs to any job."""
        for upstream in inputs:
            if upstream.id in self._executed:
                raise InvalidProgramError(f"cannot add '{name}' after '{upstream.name}': '{upstream.name}' "
                                          f"{ALREADY_RUN}; build the stream again from its source for a new "
                                          "job, or keep the records the first run returned")

    def _claim_uid(self, uid: str, transformation: Transformation) -> None:
        owner = self._uids.get(uid)
        if owner is not None and owner is not transformation:
            raise InvalidProgramError(f"uid {uid!r} is already used by operator '{owner.name}'; "
                                      "uids must be unique in a job")
        self._uids[uid] = transformation

    def _check_same_environment(self, stream: DataStream, what: str) -> None:
        if stream._env is not self:
            raise InvalidProgramError(f"cannot {what} streams of different environments")

    def _check_same_scope(self, inputs: list[Transformation], what: str) -> None:
        scopes = {t.scope for t in inputs}
        if len(scopes) > 1:
            names = ", ".join(f"'{t.name}' in scope {t.scope}" for t in inputs)
            raise InvalidProgramError(f"cannot {what} streams of different loop scopes: {names}")

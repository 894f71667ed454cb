"""``StreamExecutionEnvironment``: where a job is built and from where it runs.

As ``pyflink.datastream.StreamExecutionEnvironment``. The environment owns the
job's logical graph; ``execute`` freezes it, with every setting, into one
:class:`~slipstream.datastream.job_spec.JobSpec` and hands that to the embedded runtime.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from slipstream.datastream import python_dependencies
from slipstream.datastream import slot_sharing_group as slot_sharing
from slipstream.datastream.cache import CacheReplaySource, CacheTransformation
from slipstream.datastream.checkpoint_config import RESTORE_ENV_VAR, CheckpointConfig, CheckpointingMode
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.connectors.base import Source
from slipstream.datastream.context import current_context
from slipstream.datastream.data_stream import CloseableIterator, DataStream
from slipstream.datastream.execution_config import ExecutionConfig
from slipstream.datastream.job_spec import JobExecutionResult, JobSpec, RuntimeExecutionMode, RuntimeOptions
from slipstream.datastream.pipeline_options import (
    CHANGELOG,
    MANAGED,
    NETWORK,
    SAVEPOINT_DIRECTORY,
    TASK_HEAP,
    PipelineSettings,
    apply_configuration,
    parse_memory_size,
)
from slipstream.datastream.progress_listener import JobProgressListener
from slipstream.datastream.restart_strategy import RestartStrategyConfiguration
from slipstream.datastream.slot_sharing_group import SlotSharingGroup
from slipstream.datastream.state_backend import StateBackend
from slipstream.datastream.time_characteristic import TimeCharacteristic
from slipstream.datastream.transformations import SourceTransformation, Transformation
from slipstream.errors import InvalidProgramError
from slipstream.filesystem import normalize

if TYPE_CHECKING:
    from slipstream.runtime.entry import JobClient

TransformationT = TypeVar("TransformationT", bound=Transformation)


def with_upstream(transformations: list[Transformation]) -> list[Transformation]:
    """``transformations`` and every one they read from (through inputs and loops' feedback edges):
    a job's whole graph, including streams an earlier job ran, each after its inputs (in the order
    they were built where that allows: a cached stream's replay source is built after its readers)."""
    graph: dict[int, Transformation] = {}
    stack = list(transformations)
    while stack:
        transformation = stack.pop()
        if transformation.id in graph:
            continue
        graph[transformation.id] = transformation
        stack.extend(transformation.inputs)
        feedback = getattr(transformation, "feedback", None)
        if feedback is not None:
            stack.append(feedback)
    ordered: list[Transformation] = []
    placed: set[int] = set()

    def place(transformation: Transformation) -> None:
        if transformation.id in placed:
            return
        placed.add(transformation.id)
        for upstream in sorted(transformation.inputs, key=lambda t: t.id):
            place(upstream)
        ordered.append(transformation)

    for key in sorted(graph):
        place(graph[key])
    return ordered


def _restore_point(restore_from: str | None) -> str | None:
    """``restore_from``, or when not given the ``SLIPSTREAM_RESTORE_FROM`` environment variable."""
    return restore_from if restore_from is not None else os.environ.get(RESTORE_ENV_VAR) or None


class StreamExecutionEnvironment:
    """The context a job is built in and executed from."""

    _default_local_parallelism = 1
    """The parallelism environments start with (``set_default_local_parallelism``)."""

    def __init__(self) -> None:
        self._parallelism = StreamExecutionEnvironment._default_local_parallelism
        self._max_parallelism: int | None = None
        self._runtime_mode = RuntimeExecutionMode.STREAMING
        self._config = ExecutionConfig(self)
        self.runtime_options = RuntimeOptions()
        self._transformations: list[Transformation] = []
        self._ids = itertools.count(1)
        self._uids: dict[str, Transformation] = {}
        self._executed = False  # whether a run took a graph (an empty environment then says so)
        self._cache_root: str | None = None  # the directory of the cached streams' records, once one is
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy: RestartStrategyConfiguration | None = None
        self._pipeline = PipelineSettings()
        context = current_context()
        if context is not None:  # run by a launcher (``slipstream run``): its settings are the defaults
            context.configure(self)

    @staticmethod
    def get_execution_environment(configuration: Configuration | None = None) -> StreamExecutionEnvironment:
        """A new environment with its own empty graph (parallelism 1 unless
        :meth:`set_default_local_parallelism` said otherwise; embedded runtime), configured with
        ``configuration`` when given (see :meth:`configure`)."""
        env = StreamExecutionEnvironment()
        if configuration is not None:
            env.configure(configuration)
        return env

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

    def configure(self, configuration: Configuration | None = None, *, scheduler_seed: int | None = None,
                  batch_size: int | None = None,
                  channel_capacity: int | None = None, quantum: int | None = None,
                  clock: Any = None, backlog_sorting: bool | str | None = None,
                  sort_memory_budget: int | None = None, channel_memory_budget: int | None = None,
                  channel_memory_budget_bytes: int | None = None, spill_dir: str | None = None,
                  show_progress: bool | None = None, progress_interval: float | None = None,
                  ui_port: int | None = None, metrics_port: int | None = None,
                  managed_memory: int | str | None = None, task_heap_memory: int | str | None = None,
                  network_memory: int | str | None = None, workers: int | None = None,
                  heartbeat_interval_ms: int | None = None, heartbeat_timeout_ms: int | None = None,
                  worker_spares: int | None = None) -> StreamExecutionEnvironment:
        """Apply a PyFlink ``Configuration`` (Flink's keys, see
        :mod:`slipstream.datastream.pipeline_options`; other keys are kept and readable with
        :meth:`get_configuration`), and set the embedded runtime's knobs given by keyword (see
        :class:`RuntimeOptions`; the batch engine has :meth:`set_batch_engine`); None leaves one
        as it is. ``ui_port`` serves the web view of the running job and ``metrics_port`` its
        metrics for Prometheus, on 127.0.0.1 (0: a free port, logged when the job starts).
        ``managed_memory``, ``task_heap_memory`` and ``network_memory`` are the job's memory
        budgets in bytes (or ``"64 mb"``), Flink's ``taskmanager.memory.managed.size``,
        ``.task.heap.size`` and ``.network.max`` (see :mod:`slipstream.operators.memory`).
        ``workers`` is how many worker processes run the job's subtasks (Flink's
        ``local.number-taskmanager``; 1 runs everything in this process; by default the
        ``SLIPSTREAM_WORKERS`` environment variable, else one per core, never more than the job's
        largest parallelism: a job at parallelism 1 stays in this process);
        ``heartbeat_interval_ms`` and ``heartbeat_timeout_ms`` are how often a worker reports and
        how long its silence fails the job (Flink's ``heartbeat.interval`` and ``heartbeat.timeout``);
        ``worker_spares`` worker processes are forked ahead when a run ends, for the next run or a
        restart to take (0, the default: no worker process outlives its run)."""
        if configuration is not None:
            apply_configuration(self, configuration)
        options = self.runtime_options
        if clock is not None:
            options.clock = clock
        if spill_dir is not None:
            options.spill_dir = str(spill_dir)
        if backlog_sorting is not None:
            if not isinstance(backlog_sorting, bool) and backlog_sorting != "always":
                raise InvalidProgramError(f"backlog_sorting must be True, False or 'always', got {backlog_sorting!r}")
            options.backlog_sorting = backlog_sorting
        if show_progress is not None:
            if not isinstance(show_progress, bool):
                raise InvalidProgramError(f"show_progress must be True or False, got {show_progress!r}")
            options.show_progress = show_progress
        for name, value in (("scheduler_seed", scheduler_seed), ("batch_size", batch_size),
                            ("channel_capacity", channel_capacity), ("quantum", quantum),
                            ("sort_memory_budget", sort_memory_budget),
                            ("channel_memory_budget", channel_memory_budget),
                            ("channel_memory_budget_bytes", channel_memory_budget_bytes),
                            ("workers", workers), ("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("heartbeat_timeout_ms", heartbeat_timeout_ms)):
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or (name != "scheduler_seed" and value < 1):
                raise InvalidProgramError(f"{name} must be a positive integer, got {value!r}")
            setattr(options, name, value)
        if worker_spares is not None:
            if not isinstance(worker_spares, int) or isinstance(worker_spares, bool) or worker_spares < 0:
                raise InvalidProgramError(f"worker_spares must be a non-negative integer, got {worker_spares!r}")
            options.worker_spares = worker_spares
        for name, value in (("ui_port", ui_port), ("metrics_port", metrics_port)):
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 65535:
                    raise InvalidProgramError(f"{name} must be a port number in 0..65535, got {value!r}")
                setattr(options, name, value)
        for name, size, option in (("managed_memory", managed_memory, MANAGED),
                                   ("task_heap_memory", task_heap_memory, TASK_HEAP),
                                   ("network_memory", network_memory, NETWORK)):
            if size is not None:
                setattr(options, name, parse_memory_size(size, f"{name} ({option})"))
        if progress_interval is not None:
            if not isinstance(progress_interval, (int, float)) or isinstance(progress_interval, bool) \
                    or not progress_interval > 0:
                raise InvalidProgramError(f"progress_interval must be a positive number of seconds, "
                                          f"got {progress_interval!r}")
            options.progress_interval = float(progress_interval)
        return self

    def add_progress_listener(self, listener: JobProgressListener) -> StreamExecutionEnvironment:
        """Report the progress of this environment's jobs to ``listener`` (as Spark's
        ``streams.addListener``): see :mod:`slipstream.datastream.progress_listener`."""
        if not isinstance(listener, JobProgressListener):
            raise InvalidProgramError(f"add_progress_listener expects a JobProgressListener, got {listener!r}")
        self.runtime_options.progress_listeners.append(listener)
        return self

    def set_batch_engine(self, engine: Any = "polars", *, master: str | None = None,
                         session: Any = None) -> StreamExecutionEnvironment:
        """Choose the engine that runs backlog as sorted batch work (FLIP-327).

        ``"polars"`` (the default) runs it in this process; ``"spark"`` runs it as Spark jobs
        (``pip install 'slipstream[spark]'``, Java 17): on ``session`` if given, else on the
        active SparkSession when slipstream runs inside a Spark application, else on a session
        started on first use with ``master`` (``local[*]`` by default). A ``BatchEngine``
        object is used as it is. Both engines give the same results.

        Examples:
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

    def set_runner(self, runner: Any = "embedded") -> StreamExecutionEnvironment:
        """Choose who runs the job: ``"embedded"`` (the default: this process), ``"spark"`` (one
        Spark Structured Streaming query on the active SparkSession, see
        :mod:`slipstream.spark_runner`), or a runner object such as ``SparkRunner(...)``.
        ``explain()`` shows the chosen runner's plan; what a runner cannot run is refused when
        the job is planned, naming the operator.

        Examples:
            >>> env = StreamExecutionEnvironment.get_execution_environment().set_runner("spark")
        """
        if isinstance(runner, str):
            if runner not in ("embedded", "spark"):
                raise InvalidProgramError(f"set_runner expects 'embedded', 'spark' or a runner, got {runner!r}")
        elif not (hasattr(runner, "execute") and hasattr(runner, "explain")):
            raise InvalidProgramError(f"set_runner expects 'embedded', 'spark' or a runner (with execute and "
                                      f"explain), got {runner!r}")
        self.runtime_options.runner = runner
        return self

    def get_batch_engine(self) -> str:
        """The name of the batch engine chosen with :meth:`set_batch_engine` ("polars" by default)."""
        return self.runtime_options.batch_engine_name

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

    get_checkpointing_consistency_mode = get_checkpointing_mode  # PyFlink 2's name

    def is_chaining_of_operators_with_different_max_parallelism_enabled(self) -> bool:
        """True: operators chain whatever their maximum parallelism (it only sizes key groups)."""
        return True

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

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._checkpoint_config.is_unaligned_checkpoints_enabled()

    def is_force_unaligned_checkpoints(self) -> bool:
        return self._checkpoint_config.is_force_unaligned_checkpoints()

    def set_state_backend(self, state_backend: StateBackend) -> StreamExecutionEnvironment:
        """Keep keyed state where ``state_backend`` says (see :mod:`slipstream.datastream.state_backend`):
        a backend that names a checkpoint directory sets the checkpoint storage directory."""
        if not isinstance(state_backend, StateBackend):
            raise InvalidProgramError(f"set_state_backend expects a StateBackend (e.g. HashMapStateBackend()), "
                                      f"got {state_backend!r}")
        directory = state_backend.checkpoint_directory()
        if directory is not None:
            self._checkpoint_config.set_checkpoint_storage_dir(directory)
        unapplied = state_backend.unapplied()
        if unapplied:
            python_dependencies.warn_not_applied(
                f"{type(state_backend).__name__}({', '.join(unapplied)})",
                "slipstream snapshots keyed state asynchronously and incrementally into the checkpoint directory")
        self._pipeline.state_backend = state_backend
        return self

    def get_state_backend(self) -> StateBackend | None:
        """The state backend given to :meth:`set_state_backend`; None when none was."""
        return self._pipeline.state_backend

    # -- PyFlink's pipeline settings -----------------------------------------------------------------
    def get_configuration(self) -> Configuration:
        """A copy of every key given to :meth:`configure` (applied or not) and of the dependencies
        recorded by ``add_python_file``, ``add_jars`` and the like."""
        return Configuration(self._pipeline.configuration)

    def set_stream_time_characteristic(self, characteristic: TimeCharacteristic) -> StreamExecutionEnvironment:
        """Kept for :meth:`get_stream_time_characteristic`. Windows name their own clock (event time by
        default, as since Flink 1.12), so anything but EventTime changes nothing and is warned about."""
        if not isinstance(characteristic, TimeCharacteristic):
            raise InvalidProgramError(f"expected a TimeCharacteristic, got {characteristic!r}")
        if characteristic is not TimeCharacteristic.EventTime:
            python_dependencies.warn_not_applied(
                f"set_stream_time_characteristic({characteristic.name})",
                "windows choose their clock themselves (e.g. TumblingProcessingTimeWindows)")
        self._pipeline.time_characteristic = characteristic
        return self

    def get_stream_time_characteristic(self) -> TimeCharacteristic:
        return self._pipeline.time_characteristic

    def set_buffer_timeout(self, timeout_millis: int) -> StreamExecutionEnvironment:
        """Kept for :meth:`get_buffer_timeout` (default 100 ms); not applied, which is warned about:
        a task flushes its output at the end of every scheduler turn, whatever the timeout."""
        if not isinstance(timeout_millis, int) or isinstance(timeout_millis, bool) or timeout_millis < -1:
            raise InvalidProgramError(f"the buffer timeout must be milliseconds >= -1, got {timeout_millis!r}")
        python_dependencies.warn_not_applied(
            f"set_buffer_timeout({timeout_millis})", "a task flushes its output after every scheduler turn")
        self._pipeline.buffer_timeout = timeout_millis
        return self

    def get_buffer_timeout(self) -> int:
        return self._pipeline.buffer_timeout

    def disable_operator_chaining(self) -> StreamExecutionEnvironment:
        """Plan every operator as a task of its own (each edge becomes a channel)."""
        self._pipeline.chaining_enabled = False
        return self

    def is_chaining_enabled(self) -> bool:
        return self._pipeline.chaining_enabled

    def register_slot_sharing_group(self, slot_sharing_group: SlotSharingGroup) -> StreamExecutionEnvironment:
        """Kept by name; warned about, since it places nothing (see :mod:`slipstream.datastream.slot_sharing_group`)."""
        if not isinstance(slot_sharing_group, SlotSharingGroup):
            raise InvalidProgramError(f"expected a SlotSharingGroup, got {slot_sharing_group!r}")
        python_dependencies.warn_not_applied(f"slot sharing group {slot_sharing_group.get_name()!r}",
                                             slot_sharing.NOT_APPLIED)
        self._pipeline.slot_sharing_groups[slot_sharing_group.get_name()] = slot_sharing_group
        return self

    def add_python_file(self, file_path: str) -> StreamExecutionEnvironment:
        """Make a Python file, package, directory or zip importable by the job's functions (they run in
        this interpreter, so it goes onto ``sys.path``)."""
        python_dependencies.make_importable(file_path)
        self._pipeline.append_to("python.files", str(file_path), ",")
        return self

    def add_python_archive(self, archive_path: str, target_dir: str | None = None) -> StreamExecutionEnvironment:
        """Recorded, but not applied (warned about): functions run in this process and its working
        directory; nothing is extracted for them."""
        python_dependencies.warn_not_applied(f"add_python_archive({archive_path!r})",
                                             "functions run in this process; archives are not extracted")
        self._pipeline.append_to("python.archives", archive_path if target_dir is None
                                 else f"{archive_path}#{target_dir}", ",")
        return self

    def set_python_requirements(self, requirements_file_path: str,
                                requirements_cache_dir: str | None = None) -> StreamExecutionEnvironment:
        """Check that the requirements are installed in this interpreter (nothing is installed);
        warns naming those that are not."""
        python_dependencies.check_requirements(requirements_file_path)
        self._pipeline.configuration.set_string("python.requirements", requirements_file_path
                                                if requirements_cache_dir is None
                                                else f"{requirements_file_path}#{requirements_cache_dir}")
        return self

    def set_python_executable(self, python_exec: str) -> StreamExecutionEnvironment:
        """Applies when ``python_exec`` is this interpreter; warns otherwise (functions run here)."""
        python_dependencies.check_python_executable(python_exec)
        self._pipeline.configuration.set_string("python.executable", python_exec)
        return self

    def add_jars(self, *jars_path: str) -> StreamExecutionEnvironment:
        """Recorded, not applied (warned about): there is no JVM."""
        return self._record_java_paths("add_jars", "pipeline.jars", jars_path)

    def add_classpaths(self, *classpaths: str) -> StreamExecutionEnvironment:
        """Recorded, not applied (warned about): there is no JVM."""
        return self._record_java_paths("add_classpaths", "pipeline.classpaths", classpaths)

    def _record_java_paths(self, call: str, key: str, paths: tuple[str, ...]) -> StreamExecutionEnvironment:
        python_dependencies.warn_not_applied(f"{call}({', '.join(map(repr, paths))})",
                                             "slipstream runs no JVM, nothing is loaded from it")
        for path in paths:
            self._pipeline.append_to(key, path, ";")
        return self

    def set_default_local_parallelism(self, parallelism: int) -> None:
        """The parallelism of every environment created from now on (as Flink's, which its local
        environments start with; slipstream's start with 1, a job in one process)."""
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
            raise InvalidProgramError(f"parallelism must be a positive integer, got {parallelism!r}")
        StreamExecutionEnvironment._default_local_parallelism = parallelism

    def get_default_local_parallelism(self) -> int:
        return StreamExecutionEnvironment._default_local_parallelism

    def set_default_savepoint_directory(self, directory: str) -> StreamExecutionEnvironment:
        """Where a savepoint goes when none is named: ``JobClient.stop_with_savepoint()`` without a
        path, and ``slipstream run``'s Ctrl-C (Flink's ``execution.checkpointing.savepoint-dir``)."""
        if not isinstance(directory, str) or not directory:
            raise InvalidProgramError(f"the default savepoint directory must be a path, got {directory!r}")
        self._pipeline.configuration.set_string(SAVEPOINT_DIRECTORY, directory)
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._pipeline.configuration.get_string(SAVEPOINT_DIRECTORY, None)

    def enable_changelog_state_backend(self, enabled: bool) -> StreamExecutionEnvironment:
        """Kept (:meth:`is_changelog_state_backend_enabled`); enabling it is warned about as changing
        nothing: every checkpoint here writes only what changed since the last, which is what Flink's
        changelog backend is for."""
        if not isinstance(enabled, bool):
            raise InvalidProgramError(f"enable_changelog_state_backend expects a bool, got {enabled!r}")
        if enabled:
            python_dependencies.warn_not_applied(
                "enable_changelog_state_backend(True)", "checkpoints are always incremental here")
        self._pipeline.configuration.set_string(CHANGELOG, str(enabled).lower())
        return self

    def is_changelog_state_backend_enabled(self) -> bool | None:
        """What :meth:`enable_changelog_state_backend` set; None when it was not called (as Flink's)."""
        value = self._pipeline.configuration.get_string(CHANGELOG, None)
        return None if value is None else value == "true"

    def register_type(self, type_class_name: str) -> None:
        """Kept (``get_config().get_registered_pojo_types()``) and warned about: it registers a Java class
        with Flink's serializers; records here are Python objects, pickled where they cross processes."""
        self.get_config().register_pojo_type(type_class_name)

    def add_default_kryo_serializer(self, type_class_name: str, serializer_class_name: str) -> None:
        """Kept (``get_config().get_default_kryo_serializer_classes()``) and warned about: there is no Kryo."""
        self.get_config().add_default_kryo_serializer(type_class_name, serializer_class_name)

    def register_type_with_kryo_serializer(self, type_class_name: str, serializer_class_name: str) -> None:
        """Kept (``get_config().get_registered_types_with_kryo_serializer_classes()``) and warned about."""
        self.get_config().register_type_with_kryo_serializer(type_class_name, serializer_class_name)

    def register_cached_file(self, file_path: str, name: str, executable: bool = False) -> None:
        """Recorded (``pipeline.cached-files``, as Flink's) and warned about: Flink copies the file to
        every task manager, while slipstream's functions run on this machine and read it at its path."""
        python_dependencies.warn_not_applied(f"register_cached_file({file_path!r}, {name!r})",
                                             "functions run on this machine: they read the file at its own path")
        self._pipeline.append_to("pipeline.cached-files",
                                 f"name:{name},path:{file_path},executable:{str(executable).lower()}", ";")

    def add_source(self, source_func: Any, source_name: str = "Custom Source", type_info: Any = None) -> Any:
        """Refused, saying what to use: PyFlink's ``SourceFunction`` wraps a Java source, which
        slipstream cannot run."""
        raise InvalidProgramError(
            f"add_source({source_func!r}) takes a SourceFunction, which wraps a Java source: use "
            "from_source(...) with a slipstream source (IteratorSource for a Python generator or iterable, "
            "FileSource, NumberSequenceSource, HybridSource, ArrowSource) or from_collection(...)")

    def create_input(self, input_format: Any, type_info: Any = None) -> Any:
        """Refused, saying what to use: an ``InputFormat`` is a Java class."""
        raise InvalidProgramError(
            f"create_input({input_format!r}) takes a Java InputFormat: read files with "
            "from_source(FileSource...) or read_text_file(...), Python data with from_collection(...) or "
            "from_source(IteratorSource(...))")

    def close(self) -> None:
        """Release what this environment holds: the graph built since its last run, the records of its
        cached streams (``DataStream.cache()``), and the spare worker processes runs left
        (``configure(worker_spares=N)``)."""
        from slipstream.runtime import entry
        self._transformations = []
        if self._cache_root is not None:
            shutil.rmtree(self._cache_root, ignore_errors=True)
            self._cache_root = None
        entry.stop_spare_workers()

    # -- sources ---------------------------------------------------------------------------------
    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> DataStream[Any]:
        """A bounded stream of the collection's elements, in order.

        As PyFlink's, the source runs as one subtask (``set_parallelism(n)`` on the stream splits
        the collection into ``n`` contiguous slices instead), and with ``type_info`` every element
        is converted to the type at once (a tuple becomes a ``Row`` for ``Types.ROW``); an element
        that does not fit is refused here, naming it, where PyFlink would silently wrap an integer.
        """
        from slipstream.datastream.connectors.iterator import CollectionSource
        if isinstance(collection, (str, bytes)) or not isinstance(collection, Iterable):
            raise InvalidProgramError(f"from_collection expects a collection, got {collection!r}")
        elements = list(collection)
        if type_info is not None:
            elements = _typed_elements(elements, type_info)
        stream = self.from_source(CollectionSource(elements), None, "Collection Source", type_info)
        stream.get_transformation().parallelism = 1
        return stream

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> DataStream[Any]:
        """A bounded stream of the lines of a file (or of the files of a directory), as strings."""
        from slipstream.datastream.connectors.file_system import FileSource
        from slipstream.datastream.formats.text import TextLineInputFormat
        from slipstream.datastream.typeinfo import Types
        source = FileSource.for_record_stream_format(TextLineInputFormat(charset_name),
                                                     normalize(file_path, "read_text_file")).build()
        return self.from_source(source, None, f"Text File Source ({file_path})", Types.STRING())

    def from_spark(self, dataframe: Any, type_info: Any = None, source_name: str = "Spark Source") -> DataStream[Any]:
        """A bounded (backlog) stream of a Spark DataFrame's rows (named ``Row`` records).

        The DataFrame stays in Spark; its rows come as Arrow batches, read in pieces of bounded
        size (a reader holds at most ``SparkSource.buffer_bytes``, 64 MiB, within its share of
        managed memory). In BATCH mode a built-in keyed aggregation directly after it, and with
        the Spark batch engine a vectorised co_group with EndOfStreamWindows, runs as one Spark
        query (see :mod:`slipstream.datastream.connectors.spark`). For a Parquet dataset:
        ``env.from_spark(spark.read.parquet(path))``.
        """
        from slipstream.datastream.connectors.spark import SparkSource
        return self.from_source(SparkSource(dataframe), None, source_name, type_info)

    def from_source(self, source: Source, watermark_strategy: Any, source_name: str,
                    type_info: Any = None) -> DataStream[Any]:
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
    def execute(self, job_name: str | None = None, restore_from: str | None = None, *,
                runner: Any = None) -> JobExecutionResult:
        """Run the job to its end (bounded sources) and return its result.

        ``runner`` runs this job on another runner than :meth:`set_runner` chose (a
        ``SparkRunner``, or "spark" / "embedded").

        ``restore_from`` resumes from a checkpoint: ``"latest"`` (the newest complete one in
        the checkpoint storage directory, or a fresh start when there is none) or the path of a
        checkpoint directory. When not given, the ``SLIPSTREAM_RESTORE_FROM`` environment
        variable is read, so the same script restarts from the command line.
        """
        from slipstream.runtime import entry
        if runner is not None:
            self.set_runner(runner)
        context = current_context()
        if context is not None:
            return context.execute(self, job_name, restore_from)
        return entry.execute(self._take_job(job_name), _restore_point(restore_from))

    def execute_async(self, job_name: str | None = None, restore_from: str | None = None) -> JobClient:
        """Start the job on a thread of its own and return its ``JobClient`` at once: its status,
        metrics so far, ``cancel()``, ``stop_with_savepoint()`` and ``get_job_execution_result()``
        (see :mod:`slipstream.runtime.job_client`). ``restore_from`` as for :meth:`execute`.
        """
        from slipstream.runtime import entry
        context = current_context()
        if context is not None:
            context.submit(self)
        return entry.execute_async(self._take_job(job_name), _restore_point(restore_from))

    def _execute_collecting(self, sink: Any, job_name: str | None) -> CloseableIterator[Any]:
        from slipstream.runtime import entry
        context = current_context()
        if context is not None:
            context.submit(self)
        return entry.execute_and_collect(self._take_job(job_name), sink)

    def get_execution_plan(self) -> str:
        """The job graph this environment would run, as Flink's JSON plan (``nodes`` with ``id``,
        ``type``, ``pact``, ``contents``, ``parallelism`` and ``predecessors`` with ``id`` and
        ``ship_strategy``), which Flink's plan visualiser draws; :meth:`explain` says more, as text."""
        from slipstream.runtime import entry
        return entry.execution_plan(self._job_spec(self._job_graph(self._transformations)))

    def explain(self, format: str = "text") -> str:
        """The job graph as text: tasks, chained operators, parallelism and edges; ``format``
        "json", "mermaid" or "dot" gives the same plan as a document or a picture
        (see :mod:`slipstream.runtime.plan_formats`)."""
        from slipstream.runtime import entry
        return entry.explain(self._job_spec(self._job_graph(self._transformations)), format)

    def _job_spec(self, transformations: list[Transformation], job_name: str | None = None) -> JobSpec:
        """``transformations`` and this environment's settings as they are now, frozen for the runtime."""
        return JobSpec(
            job_name=job_name or "slipstream job", transformations=tuple(transformations),
            parallelism=self._parallelism, max_parallelism=self._max_parallelism, runtime_mode=self._runtime_mode,
            chaining_enabled=self._pipeline.chaining_enabled, configuration=self._pipeline.configuration,
            job_parameters=self._config.get_global_job_parameters(), checkpoint_config=self._checkpoint_config,
            restart_strategy=self._restart_strategy, state_backend=self._pipeline.state_backend,
            runtime_options=self.runtime_options)

    def _take_job(self, job_name: str | None = None) -> JobSpec:
        """Hand the graph built so far to a run, as a frozen job (see :meth:`_take_graph`)."""
        return self._job_spec(self._take_graph(), job_name)

    def _job_graph(self, pending: list[Transformation]) -> list[Transformation]:
        """``pending`` and everything it reads from, as the next job runs it: a cached stream whose
        cache is complete reads the cache (nothing upstream of it runs); one whose cache is not
        writes it too, through its cache sink (:mod:`slipstream.datastream.cache`)."""
        graph = with_upstream(pending)
        caches = [t for t in graph if isinstance(t, CacheTransformation)]
        if not caches:
            return graph
        if self._runtime_mode is RuntimeExecutionMode.STREAMING:
            raise InvalidProgramError(f"'{caches[0].upstream.name}' is cached, which needs BATCH mode "
                                      "(set_runtime_mode(RuntimeExecutionMode.BATCH)), as Flink's cache()")
        writers: list[Transformation] = []
        for cache in caches:
            parts = cache.complete()
            if parts is None:
                cache.invalidate()  # a partial cache (a job that failed) is written anew
                writers.append(cast(Transformation, cache.writer))
            elif cache.replay is None:
                cache.replay = SourceTransformation(
                    id=next(self._ids), name=f"Cache: {cache.upstream.name}", output_type=cache.output_type,
                    parallelism=parts, parallelism_fixed=True, scope=cache.scope,
                    source=CacheReplaySource(cache.directory, parts))
                cache.inputs = [cache.replay]
        return with_upstream(pending + writers)

    def _cache_directory(self) -> str:
        """A new directory for one cached stream, under this environment's (deleted by :meth:`close`)."""
        if self._cache_root is None:
            root = self.runtime_options.spill_dir
            if root is not None:
                os.makedirs(root, exist_ok=True)
            self._cache_root = tempfile.mkdtemp(prefix="slipstream-cache-", dir=root)  # mode 0700
        return tempfile.mkdtemp(prefix="stream-", dir=self._cache_root)

    def _take_graph(self) -> list[Transformation]:
        """Hand the graph to a run; the environment starts afresh, as Flink clears it on execute.
        As in Flink, the streams keep their upstream: a sink added later to a stream that already
        ran makes a new job that runs that stream again from its sources."""
        if not self._transformations and self._executed:
            raise InvalidProgramError("nothing to execute: an earlier execute() or execute_and_collect() took "
                                      "every operator added to this environment, and none was added since")
        if not any(type(t).__name__ == "SinkTransformation" for t in self._transformations):
            raise InvalidProgramError("the job has no sink: add print(), sink_to(...) or use "
                                      "execute_and_collect()")
        graph = self._job_graph(self._transformations)
        self._transformations = []
        self._executed = True
        return graph

    # -- graph building (used by the stream handles) ---------------------------------------------
    def _add_transformation(self, cls: type[TransformationT], name: str, inputs: list[Transformation],
                            output_type: Any = None, key_selectors: list[Any] | None = None,
                            **fields: Any) -> TransformationT:
        scope = inputs[0].scope if inputs else None
        extra: dict[str, Any] = {"scope": scope} if scope is not None else {}
        transformation = cls(id=next(self._ids), name=name, inputs=list(inputs), output_type=output_type,
                             key_selectors=list(key_selectors or []), **extra, **fields)
        self._transformations.append(transformation)
        return transformation

    def _claim_uid(self, uid: str, transformation: Transformation) -> None:
        owner = self._uids.get(uid)
        if owner is not None and owner is not transformation:
            raise InvalidProgramError(f"uid {uid!r} is already used by operator '{owner.name}'; "
                                      "uids must be unique in a job")
        self._uids[uid] = transformation

    def _check_same_environment(self, stream: DataStream[Any], what: str) -> None:
        if stream._env is not self:
            raise InvalidProgramError(f"cannot {what} streams of different environments")

    def _check_same_scope(self, inputs: list[Transformation], what: str) -> None:
        scopes = {t.scope for t in inputs}
        if len(scopes) > 1:
            names = ", ".join(f"'{t.name}' in scope {t.scope}" for t in inputs)
            raise InvalidProgramError(f"cannot {what} streams of different loop scopes: {names}")


def _typed_elements(elements: list[Any], type_info: Any) -> list[Any]:
    """``elements`` converted to ``type_info`` (PyFlink's ``to_internal_type``), refusing any that do
    not fit: a value too wide for its integer type raises here instead of wrapping around."""
    if not callable(getattr(type_info, "from_python", None)):
        raise InvalidProgramError(f"from_collection: type_info must be a TypeInformation (e.g. Types.ROW([...])), "
                                  f"got {type_info!r}")
    converted = []
    for index, element in enumerate(elements):
        try:
            converted.append(type_info.from_python(element))
        except TypeError as exc:
            raise InvalidProgramError(f"from_collection: element {index} ({element!r}) does not fit the declared "
                                      f"type {type_info!r}: {exc}") from None
    return converted

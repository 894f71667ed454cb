"""The operator contract: what every physical operator implements and what the runtime gives it.

One operator is driven by one task, never concurrently (Flink's mailbox rule).
Records arrive as :class:`RecordBatch`; watermarks, record attributes and end of
input as typed calls. Output goes to an :class:`Output`, which is the next
chained operator or a channel writer.
"""

from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from slipstream.attributes import OperatorAttributes, RecordAttributes
from slipstream.datastream.functions import Function, RuntimeContext
from slipstream.datastream.metrics import OperatorMetricGroup
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.state import S, StateDescriptor
from slipstream.datastream.time import MIN_TIMESTAMP, Watermark
from slipstream.datastream.transformations import Transformation
from slipstream.errors import SlipstreamError, UserFunctionError, user_code
from slipstream.operators.backlog_path import BacklogDeclaration
from slipstream.operators.elements import RecordBatch, WatermarkStatus

if TYPE_CHECKING:
    from slipstream.operators.memory import MemoryBudget, MemoryBudgets

log = logging.getLogger("slipstream.operators")


class Output(ABC):
    """Where an operator sends what it produces."""

    @abstractmethod
    def collect_batch(self, batch: RecordBatch) -> None: ...

    def collect(self, value: Any, timestamp: int | None = None) -> None:
        self.collect_batch(RecordBatch([value], None if timestamp is None else [timestamp]))

    @abstractmethod
    def collect_side(self, tag: OutputTag, batch: RecordBatch) -> None: ...

    @abstractmethod
    def emit_watermark(self, watermark: Watermark) -> None: ...

    @abstractmethod
    def emit_record_attributes(self, attributes: RecordAttributes) -> None: ...

    @abstractmethod
    def emit_watermark_status(self, status: WatermarkStatus) -> None: ...


class DeclaredTypeOutput(Output):
    """Checks what an operator emits against the type the user declared for it (``output_type``,
    a source's ``type_info``, an ``OutputTag``'s type), and gives records of a row or tuple type
    their shape, as PyFlink does: a ``Types.ROW``/``ROW_NAMED`` record becomes a ``Row`` with the
    type's field names, a ``Types.TUPLE`` record a tuple (nested ones too).

    The first record of each batch is checked against the whole type, which keeps the cost per
    batch and still stops a function that returns the wrong kind of value at its first output;
    the shape is given to every record by the type's :meth:`~TypeInformation.record_converter`,
    which checks field counts and names only. Columnar batches pass as they are.
    """

    def __init__(self, inner: Output, operator: StreamOperator, declared: Any) -> None:
        self._inner = inner
        self._operator = operator
        self._declared = declared
        self._converters: dict[Any, Callable[[Any], Any] | None] = {}

    def _converter(self, declared: Any) -> Callable[[Any], Any] | None:
        if declared not in self._converters:
            self._converters[declared] = declared.record_converter()
        return self._converters[declared]

    def _conform(self, batch: RecordBatch, declared: Any, what: str) -> RecordBatch:
        if not _is_type_information(declared) or batch.is_columnar or not len(batch):
            return batch
        values = batch.values
        record = values[0]
        try:
            declared.from_python(record)
            convert = self._converter(declared)
            if convert is None:
                return batch
            converted: list[Any] = []
            append = converted.append
            for record in values:
                append(convert(record))
        except TypeError as exc:
            raise self._operator.user_error(record, TypeError(
                f"the {what} does not match the declared type {declared!r}: {exc}"), what=what) from None
        return RecordBatch(converted, batch.timestamps)

    def collect_batch(self, batch: RecordBatch) -> None:
        self._inner.collect_batch(self._conform(batch, self._declared, "output record"))

    def collect_side(self, tag: OutputTag, batch: RecordBatch) -> None:
        self._inner.collect_side(tag, self._conform(batch, tag.type_info, f"side output record for '{tag.tag_id}'"))

    def emit_watermark(self, watermark: Watermark) -> None:
        self._inner.emit_watermark(watermark)

    def emit_record_attributes(self, attributes: RecordAttributes) -> None:
        self._inner.emit_record_attributes(attributes)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._inner.emit_watermark_status(status)


def _is_type_information(declared: Any) -> bool:
    return callable(getattr(declared, "from_python", None)) and callable(getattr(declared, "record_converter", None))


class KeyedStateBackend(Protocol):
    """Keyed state of one operator subtask, scoped to the current key."""

    def get_state(self, descriptor: StateDescriptor[S], namespaced: bool = False) -> S: ...

    def value_accessors(
        self, descriptor: StateDescriptor[Any]
    ) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]: ...

    def bulk_load(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], values: Iterable[Any]) -> None: ...

    def install_namespaced(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], namespaces: Iterable[Any],
                           values: Iterable[Any]) -> None: ...

    def timer_queue(self, domain: str) -> Any: ...

    def set_current_key(self, key: Any) -> None: ...

    def unset_current_key(self, reason: str) -> None: ...

    def get_current_key(self) -> Any: ...

    def keys(self, state_name: str) -> Iterable[Any]: ...

    def snapshot(self) -> Any: ...

    def restore(self, snapshot: Any) -> None: ...

    def account_memory(self) -> None: ...

    def fresh(self) -> KeyedStateBackend: ...

    def dispose(self) -> None: ...


class ProcessingTimeService(Protocol):
    """The task's wall clock and its processing-time callbacks."""

    def get_current_processing_time(self) -> int: ...

    def register_timer(self, timestamp: int, callback: Callable[[int], None]) -> None: ...


@dataclass
class OperatorContext:
    """Everything the runtime hands an operator at set-up."""

    name: str
    uid: str | None
    subtask_index: int
    parallelism: int
    max_parallelism: int
    output: Output
    processing_time_service: ProcessingTimeService
    keyed_backend: KeyedStateBackend | None = None
    job_parameters: dict[str, str] = field(default_factory=dict)
    attempt_number: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    checkpointing: bool = False  # the job takes checkpoints: two-phase-commit sinks commit only on them
    batch_engine: Any = None  # runs sorted backlog work (FLIP-327); None disables the batch path
    batch_mode: bool = False  # the job runs in BATCH mode: rolling operators emit final values only
    sort_every_backlog: bool = False  # backlog_sorting="always": sort a backlog even where streaming it is faster
    sort_memory_budget: int = 1_000_000  # records a sorting operator (or a replay cache) buffers before spilling
    # records feedback (in a channel, or held at an iteration head) keeps in memory
    channel_memory_budget: int = 100_000
    spill_dir: str | None = None  # where sorting operators spill; None means the system temp dir
    memory: MemoryBudgets | None = None  # the job's memory pools (slipstream.operators.memory)
    sort_budget: MemoryBudget | None = None  # its share of managed memory for sorting its backlog
    metric_group: OperatorMetricGroup | None = None  # the user metrics' group, made on first use


def operator_metric_group(ctx: OperatorContext) -> OperatorMetricGroup:
    """The subtask's metric group (``get_metrics_group()``), reporting into the operator's metrics."""
    if ctx.metric_group is None:
        ctx.metric_group = OperatorMetricGroup(ctx.metrics, ctx.name, ctx.subtask_index, ctx.parallelism)
    return ctx.metric_group


class StreamRuntimeContext(RuntimeContext):
    """The :class:`RuntimeContext` functions receive in ``open``."""

    def __init__(self, ctx: OperatorContext) -> None:
        self._ctx = ctx

    def get_task_name(self) -> str:
        return self._ctx.name

    def get_number_of_parallel_subtasks(self) -> int:
        return self._ctx.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._ctx.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self._ctx.subtask_index

    def get_attempt_number(self) -> int:
        return self._ctx.attempt_number

    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None:
        return self._ctx.job_parameters.get(key, default_value)

    def get_metrics_group(self) -> OperatorMetricGroup:
        return operator_metric_group(self._ctx)

    def _backend(self, descriptor: StateDescriptor[Any]) -> KeyedStateBackend:
        if self._ctx.keyed_backend is None:
            raise SlipstreamError(
                f"operator '{self._ctx.name}' asked for keyed state {descriptor.name!r}, but keyed "
                "state is only available on a keyed stream (after key_by)")
        return self._ctx.keyed_backend

    def get_state(self, state_descriptor: StateDescriptor[S]) -> S:
        return self._backend(state_descriptor).get_state(state_descriptor)

    get_list_state = get_state
    get_map_state = get_state
    get_reducing_state = get_state
    get_aggregating_state = get_state


class StreamOperator(ABC):
    """Base of all physical operators.

    Subclasses override ``process_batch`` and, where they need them, the other
    hooks. Watermarks of several inputs are combined here (the minimum), so
    subclasses see one event-time clock through :meth:`on_watermark`.
    """

    transformation_type: ClassVar[type[Transformation] | None] = None
    emits_declared_type: ClassVar[bool] = False
    """Whether this kind makes new records whose type the user may declare (``output_type``),
    so its output is checked against it; pass-through kinds (filter, partitioning) are not."""
    registry: ClassVar[dict[type[Transformation], type[StreamOperator]]] = {}
    backlog: ClassVar[BacklogDeclaration | None] = None
    """The path this kind's backlog takes, when it does not depend on the transformation (see :meth:`backlog_path`)."""
    num_inputs: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("transformation_type")
        if kind is not None:
            StreamOperator.registry[kind] = cls

    @classmethod
    def for_transformation(cls, transformation: Transformation) -> StreamOperator:
        """Create the physical operator that implements ``transformation``."""
        try:
            operator_cls = StreamOperator.registry[type(transformation)]
        except KeyError:
            raise SlipstreamError(f"no operator implements {type(transformation).__name__}") from None
        return operator_cls.from_transformation(_with_own_functions(transformation))

    @classmethod
    def from_transformation(cls, transformation: Transformation) -> StreamOperator:
        return cls(transformation)

    def __init__(self, transformation: Transformation) -> None:
        self.transformation = transformation
        self.ctx: OperatorContext
        self.output: Output
        self.current_watermark = MIN_TIMESTAMP
        self._input_watermarks = [MIN_TIMESTAMP] * self.num_inputs
        self._input_idle = [False] * self.num_inputs
        self._input_backlog = [False] * self.num_inputs
        self._output_backlog = False

    # -- life cycle ---------------------------------------------------------------------------
    def setup(self, ctx: OperatorContext) -> None:
        self.ctx = ctx
        self.output = DeclaredTypeOutput(ctx.output, self, self.transformation.output_type) \
            if self.emits_declared_type else ctx.output

    def open(self) -> None:
        """Called once before the first element; opens user functions."""
        for fn in self.user_functions():
            self.call_user(fn.open, StreamRuntimeContext(self.ctx), what="open()")

    def finish(self) -> None:
        """Called once after all inputs ended, before ``close``: emit what is buffered."""

    def close(self) -> None:
        for fn in self.user_functions():
            fn.close()
        if self.ctx.metric_group is not None:
            self.ctx.metric_group.report()

    def user_functions(self) -> list[Function]:
        """The user functions this operator opens and closes."""
        return []

    # -- elements -----------------------------------------------------------------------------
    @abstractmethod
    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None: ...

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        self._input_watermarks[input_index] = watermark.timestamp
        self._advance_combined_watermark()

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        """An input became idle or active; the output is idle while every input is."""
        was_idle = all(self._input_idle)
        self._input_idle[input_index] = idle
        now_idle = all(self._input_idle)
        if now_idle != was_idle:
            self.output.emit_watermark_status(WatermarkStatus(now_idle))
        self._advance_combined_watermark()

    def _combined_input_watermark(self) -> int | None:
        """The watermark every active input has reached; None while all inputs are idle."""
        active = [w for w, idle in zip(self._input_watermarks, self._input_idle) if not idle]
        return min(active) if active else None

    def _advance_combined_watermark(self) -> None:
        combined = self._combined_input_watermark()
        if combined is not None and combined > self.current_watermark:
            self.current_watermark = combined
            self.on_watermark(Watermark(combined))

    def on_watermark(self, watermark: Watermark) -> None:
        """Event time advanced for this operator: fire what is due, then forward the watermark."""
        self.output.emit_watermark(watermark)

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        """Output is backlog while any input is; forward only when that changes."""
        self._input_backlog[input_index] = attributes.is_backlog()
        backlog = any(self._input_backlog)
        if backlog != self._output_backlog:
            self._output_backlog = backlog
            self.output.emit_record_attributes(RecordAttributes(backlog))

    def is_backlog(self) -> bool:
        return self._output_backlog

    def end_input(self, input_index: int = 0) -> None:
        """Input ``input_index`` has ended (after its final watermark)."""

    # -- state ----------------------------------------------------------------------------------
    def snapshot_state(self) -> Any:
        """This operator's own (non-keyed) state for a checkpoint; None when it has none."""
        return None

    def initialize_state(self, state: Any) -> None:
        """Restore what :meth:`snapshot_state` returned."""

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        """Restore from the snapshots of every subtask of a run at another parallelism.

        ``owns_key(key)`` says whether a key now belongs to this subtask. Keyed state is
        redistributed by the runtime; operator state only by operators that know how
        (timers do), so by default anything but empty state refuses to be rescaled.
        """
        present = [state for state in states if state is not None]
        if not present:
            return
        raise SlipstreamError(
            f"operator '{self.ctx.name}' (uid '{self.ctx.uid}') cannot restore its state at another "
            f"parallelism: the checkpoint has {len(states)} subtask(s), the job now "
            f"{self.ctx.parallelism}; give it its old parallelism with set_parallelism()")

    def snapshot_backlog(self) -> Any:
        """The backlog this operator buffers now, for a checkpoint taken while it sorts (FLIP-327);
        None when it buffers none. Immutable files in it go as
        :class:`~slipstream.operators.spill_file.CheckpointFile` objects (stored once, shared)."""
        return None

    def restore_backlog(self, state: Any) -> None:
        """Restore what :meth:`snapshot_backlog` returned (each ``CheckpointFile`` as its bytes)."""
        raise SlipstreamError(f"{self.where()} has no backlog buffer to restore the checkpoint's into")

    def check_restore(self) -> None:
        """Step one of a restore, once every operator of the job has its state and before any
        opens: raise if this operator cannot resume from it, reading only. Opening applies a
        restore (a file sink renames and deletes part files), so checking every operator first
        means a refused restore changes nothing."""

    # -- checkpoints ----------------------------------------------------------------------------
    def shared_segments(self) -> list[Any]:
        """The immutable segments of records this operator keeps (an iteration's replay cache), which
        a checkpoint writes once and later ones refer to (see
        :mod:`slipstream.operators.segments`); called at a checkpoint, it seals them."""
        return []

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        """Called before the snapshot of checkpoint ``checkpoint_id``, before its barrier goes
        downstream: an ``is_output_on_checkpoint`` operator emits what it buffered here."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` is durable: a two-phase-commit sink commits here."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` was abandoned (a timeout, a write error)."""

    def is_checkpoint_blocked(self) -> str | None:
        """Why no checkpoint may be taken now, or None (FLIP-327: an operator with an internal
        sorter does not checkpoint while it sorts backlog input)."""
        if any(self._input_backlog) and self.get_operator_attributes().has_internal_sorter():
            return f"operator '{self.ctx.name}' is sorting backlog input"
        return None

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        """What this operator kind declares when it implements ``transformation``; none by default."""
        return OperatorAttributes()

    def get_operator_attributes(self) -> OperatorAttributes:
        return operator_attributes(self.transformation)

    @classmethod
    def backlog_path(cls, transformation: Transformation) -> BacklogDeclaration:
        """The path this kind's backlog takes for ``transformation``: sorted, vectorised or streamed
        (:mod:`slipstream.operators.backlog_path`). By default the kind's :attr:`backlog`; a kind
        whose path depends on its function overrides this. Every kind declares its own (a test checks)."""
        if cls.backlog is None:
            raise NotImplementedError(f"operator kind {cls.__name__} declares no backlog path")
        return cls.backlog

    @classmethod
    def backlog_differences(cls, transformation: Transformation) -> list[str]:
        """What of this operator's results a sorted backlog cannot give as streaming the same
        backlog does, for ``explain()`` in STREAMING mode (see :mod:`slipstream.operators.backlog`)."""
        return []

    @classmethod
    def plan_notes(cls, transformation: Transformation) -> list[str]:
        """What ``explain()`` says about this operator beyond its attributes; nothing by default."""
        return []

    @classmethod
    def backlog_work(cls, transformation: Transformation, batch_engine: str) -> str | None:
        """What ``explain()`` says this operator does with a backlog it does not stream (None: it
        sorts it and runs it as batch work on ``batch_engine``)."""
        return None

    # -- helpers --------------------------------------------------------------------------------
    def where(self) -> str:
        """This operator subtask as error messages name it."""
        return (f"operator '{self.ctx.name}' (uid '{self.ctx.uid}'), "
                f"subtask {self.ctx.subtask_index + 1}/{self.ctx.parallelism}")

    def keyed_backend(self) -> KeyedStateBackend:
        """The subtask's keyed state, which a keyed operator has from setup on."""
        backend = self.ctx.keyed_backend
        if backend is None:
            raise SlipstreamError(f"operator '{self.ctx.name}' needs keyed state, which only a keyed stream "
                                  "(after key_by) has")
        return backend

    def user_error(self, record: Any, cause: BaseException, what: str = "record") -> UserFunctionError:
        return UserFunctionError(self.ctx.name, self.ctx.subtask_index, self.ctx.parallelism,
                                 record, cause, uid=self.ctx.uid, what=what)

    def call_user(self, fn: Callable[..., Any], *args: Any, what: str) -> Any:
        """Call a user function outside the per-record loop, naming ``what`` if it raises."""
        with user_code(self, lambda: args[0] if args else None, what=what):
            return fn(*args)


WARNED_ONCE = "slipstream_warned_once"
"""The log record attribute naming a warning given once per operator and metric: worker processes
each give it once, and the driver passes on the first of them only."""


def count_and_warn(ctx: OperatorContext, name: str, count: int, warning: Callable[[], str]) -> None:
    """Add ``count`` to the operator's metric ``name`` (shared by its subtasks) and log ``warning()``
    when the metric first grows, so that what a job loses or gets differently is never silent."""
    metrics = ctx.metrics
    before = metrics.get(name, 0)
    metrics[name] = before + count
    if not before and count:
        log.warning(warning(), extra={WARNED_ONCE: f"{ctx.uid or ctx.name}/{name}"})


def operator_attributes(transformation: Transformation) -> OperatorAttributes:
    """The attributes of ``transformation``'s operator: its kind's, or-ed with its user functions'."""
    operator_cls = StreamOperator.registry.get(type(transformation))
    attributes = [operator_cls.attributes_for(transformation)] if operator_cls else []
    for name in ("function", "window_function"):
        fn = getattr(transformation, name, None)
        declared = fn.get_operator_attributes() if isinstance(fn, Function) else None
        if declared is not None:
            attributes.append(declared)
    return OperatorAttributes(
        output_on_eof=any(a.is_output_on_eof() for a in attributes),
        output_on_checkpoint=any(a.is_output_on_checkpoint() for a in attributes),
        internal_sorter=any(a.has_internal_sorter() for a in attributes))


def _with_own_functions(transformation: Transformation) -> Transformation:
    """A copy of ``transformation`` whose user functions are this subtask's own copies.

    Flink (and PyFlink) deserialise one instance of a user function per subtask, so what
    ``open`` stores on ``self`` (state handles, caches) is never shared between subtasks.
    A function that cannot be deep-copied (it holds a lock, a socket) is copied shallowly.
    """
    copies = {}
    for name in ("function", "window_function"):
        fn = getattr(transformation, name, None)
        if isinstance(fn, Function):
            try:
                copies[name] = copy.deepcopy(fn)
            except Exception:  # noqa: BLE001 - uncopyable members: share them, not the instance
                copies[name] = copy.copy(fn)
    if not copies:
        return transformation
    clone = copy.copy(transformation)
    for name, fn in copies.items():
        setattr(clone, name, fn)
    return clone


def split_outputs(results: Any, timestamp: int | None, values: list[Any], timestamps: list[Any] | None,
                  side: dict[OutputTag, RecordBatch]) -> None:
    """Sort what a process function yielded into main outputs and ``(OutputTag, value)`` side outputs."""
    if results is None:
        return
    for out in results:
        if type(out) is tuple and len(out) == 2 and isinstance(out[0], OutputTag):
            batch = side.get(out[0])
            if batch is None:
                batch = side[out[0]] = RecordBatch([], [] if timestamps is not None else None)
            batch.values.append(out[1])
            if batch.timestamps is not None:
                batch.timestamps.append(timestamp)
        else:
            values.append(out)
            if timestamps is not None:
                timestamps.append(timestamp)

"""The window operator: assigns records to windows per key, runs triggers, evaluates windows.

Follows Flink's ``WindowOperator`` (and ``EvictingWindowOperator`` when an evictor is
set). Window contents live in namespaced keyed state (namespace = window): a
``ReducingState`` for reduce, an ``AggregatingState`` for aggregate, a ``ListState``
for apply/process and whenever an evictor is set. A window's results carry the
timestamp ``window.max_timestamp()``.

Event time: an element whose every window is already past ``max_timestamp() +
allowed_lateness`` (by the watermark) is late: it goes to the late-data side output
when one is set, otherwise it is dropped and counted in
``metrics['num_late_records_dropped']`` (summed over subtasks; a warning is logged when
the count first grows, so a drop is never silent). Windows are cleaned up by a timer at
``max_timestamp() + allowed_lateness``; until then late elements re-fire them.

End of input: the runtime first sends the final (maximum) watermark, which fires
every event-time window. Processing-time windows would be dropped by Flink in
STREAMING mode; here, so that nothing is silently lost, every window that still has
a pending processing-time timer is evaluated once at ``end_input`` and cleared.

During backlog, given a batch engine, it buffers its input and at the switch runs it —
tumbling and sliding event-time windows with the default trigger key by key, each
window function called once per window (:mod:`slipstream.operators.window_replay`), others
in STREAMING mode interval by interval with the held watermarks applied between the
intervals, so windows fire and records are late exactly as when the backlog streams; in
BATCH mode key by key in timestamp order, then the final watermark fires the windows
(the shared logic and its contract: :mod:`slipstream.operators.backlog`). A built-in
aggregation (``window(...).sum(f)``) over tumbling, sliding or session event-time windows or
count windows runs its backlog as one polars query instead — on the columns when it arrives as Arrow keyed
by a field —, with the same output, late records and open windows
(:mod:`slipstream.operators.vectorised_windows`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, cast

from slipstream.attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.datastream.fields import get_field
from slipstream.datastream.metrics import OperatorMetricGroup
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.state import (
    AggregatingStateDescriptor,
    InternalAggregatingState,
    InternalKvState,
    ListState,
    ListStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    S,
    StateDescriptor,
    ValueStateDescriptor,
)
from slipstream.datastream.time import MAX_TIMESTAMP, Watermark
from slipstream.datastream.transformations import Transformation, WindowTransformation
from slipstream.datastream.window import (
    AllWindowFunction,
    EventTimeTrigger,
    Evictor,
    KeyedStateStore,
    MergingWindowAssigner,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    TimestampedValue,
    Trigger,
    Window,
    WindowAssigner,
    WindowFunction,
    is_end_of_stream_window,
)
from slipstream.errors import JobExecutionError, SlipstreamError, UserCode, user_code
from slipstream.operators.backlog import uses_processing_time
from slipstream.operators.backlog_path import SORTED, VECTORISED, BacklogDeclaration
from slipstream.operators.base import StreamRuntimeContext, count_and_warn, operator_metric_group, split_outputs
from slipstream.operators.columnar_backlog import ColumnarBacklog, IntervalColumns
from slipstream.operators.elements import RecordBatch
from slipstream.operators.sort_buffer import BufferOrder, SortBuffer
from slipstream.operators.timers import InternalTimer, InternalTimerService, merge_timer_snapshots
from slipstream.operators.window_replay import replay_windows, replays_windows_by_key

CONTENTS_STATE = "window-contents"
MERGING_WINDOWS_STATE = "merging-window-set"
LATE_DROPPED_METRIC = "num_late_records_dropped"


def merge_namespaces(state: InternalKvState, descriptor: StateDescriptor[Any], target: Window,
                     sources: Iterable[Window]) -> None:
    """Fold the contents ``state`` holds for ``sources`` into ``target`` and clear the sources.

    List, reducing and aggregating state can merge; other kinds cannot (as in Flink).
    """
    sources = [s for s in sources if s != target]
    if isinstance(state, ListState):
        collected: list[Any] = []
        for source in sources:
            state.set_current_namespace(source)
            collected.extend(state.get())
            state.clear()
        state.set_current_namespace(target)
        state.add_all(collected)
    elif isinstance(state, ReducingState):
        values = []
        for source in sources:
            state.set_current_namespace(source)
            value = state.get()
            if value is not None:
                values.append(value)
            state.clear()
        state.set_current_namespace(target)
        for value in values:
            state.add(value)
    elif isinstance(state, InternalAggregatingState):
        merge = cast(AggregatingStateDescriptor, descriptor).agg_function.merge
        merged = None
        for source in [target, *sources]:
            state.set_current_namespace(source)
            accumulator = state.get_accumulator()
            if accumulator is not None:
                merged = accumulator if merged is None else merge(merged, accumulator)
            state.clear()
        state.set_current_namespace(target)
        if merged is not None:
            state.set_accumulator(merged)
    else:
        raise JobExecutionError(f"state {descriptor.name!r} ({descriptor.kind} state) cannot be merged "
                                "when session windows merge; use list, reducing or aggregating state")


class MergingWindowSet:
    """The live windows of one key of a merging assigner, each mapped to the window whose
    namespace holds its state (Flink's ``MergingWindowSet``).

    Merging re-maps windows instead of moving state: the merged window inherits the state
    window of one of the windows it covers, and the others' state is folded into it.
    """

    def __init__(self, assigner: MergingWindowAssigner[Any, Any], mapping: dict[Window, Window]) -> None:
        self.assigner = assigner
        self.mapping = mapping

    def get_state_window(self, window: Window) -> Window | None:
        return self.mapping.get(window)

    def state_window_of(self, window: Window) -> Window:
        """The state window of a window in the set, as :meth:`add_window` returned it."""
        return self.mapping[window]

    def retire_window(self, window: Window) -> None:
        if self.mapping.pop(window, None) is None:
            raise JobExecutionError(f"window {window!r} is not in the merging window set")

    def add_window(self, new_window: Window,
                   merge_function: Callable[[Window, list[Window], Window, list[Window]], None]) -> Window:
        """Add ``new_window``, merging as the assigner says; return the window it ended up in.

        ``merge_function(result, merged_windows, state_window, merged_state_windows)`` is
        called for every merge so the caller can merge trigger state and contents.
        """
        merges: list[tuple[Window, list[Window]]] = []
        collector = _MergeCollector(merges)
        self.assigner.merge_windows([*self.mapping, new_window], collector)
        result_window = new_window
        merged_new_window = False
        for merge_result, merged_windows in merges:
            merged = list(merged_windows)
            if new_window in merged:
                merged.remove(new_window)
                merged_new_window = True
                result_window = merge_result
            if not merged:
                continue
            state_window = self.mapping[merged[0]]
            merged_state_windows = [self.mapping.pop(w) for w in merged]
            merged_state_windows.remove(state_window)
            self.mapping[merge_result] = state_window
            if not (len(merged) == 1 and merged[0] == merge_result):
                merge_function(merge_result, merged, state_window, merged_state_windows)
        if not merges or (result_window == new_window and not merged_new_window):
            self.mapping[result_window] = result_window
        return result_window


def _builtin_aggregation(transformation: WindowTransformation) -> tuple[str, int | str] | None:
    from slipstream.operators.vectorised_windows import builtin_aggregation  # polars, only when planned or run
    return builtin_aggregation(transformation)


class _MergeCollector(MergingWindowAssigner.MergeCallback[Window]):
    def __init__(self, merges: list[tuple[Window, list[Window]]]) -> None:
        self._merges = merges

    def merge(self, to_be_merged: Iterable[Window], merge_result: Window) -> None:
        self._merges.append((merge_result, list(to_be_merged)))


class WindowOperator(ColumnarBacklog):
    """Keyed windows: assign, trigger, evaluate, clean up (all-windows use one constant key)."""

    transformation_type: ClassVar[type[Transformation] | None] = WindowTransformation  # CoGroupOperator's differs
    emits_declared_type = True
    _windows_by_key = False
    timers: InternalTimerService  # made in open (None before: only initialize_state sees that)
    _firing: InternalTimer  # the timer being fired, which its guard names

    def __init__(self, transformation: WindowTransformation) -> None:
        super().__init__(transformation)
        self.assigner: WindowAssigner[Any, Any] = transformation.assigner
        self.trigger: Trigger[Any, Any] = transformation.trigger or self.assigner.get_default_trigger()
        self.evictor: Evictor[Any, Any] | None = transformation.evictor
        self.allowed_lateness = transformation.allowed_lateness
        self.late_data_tag: OutputTag | None = transformation.late_data_tag
        self.kind = transformation.function_kind
        self.function = transformation.function
        self.window_function = transformation.window_function
        key_selector = transformation.key_selectors[0]
        if key_selector is None:  # keyed windows have the user's key, all-windows a constant one
            raise SlipstreamError(f"window operator '{transformation.name}' has no key selector")
        self._key_selector = key_selector
        self._merging = isinstance(self.assigner, MergingWindowAssigner)
        self._event_time = self.assigner.is_event_time()
        self.contents_descriptor = self._make_contents_descriptor()
        self._aggregation = _builtin_aggregation(transformation)
        self._restored_timers: dict[str, list[Any]] | None = None
        self._values: list[Any] = []
        self._timestamps: list[Any] = []
        self._side: dict[OutputTag, RecordBatch] = {}

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        """EndOfStreamWindows (with its own trigger) emit only at end of input and may sort backlog."""
        window = cast(WindowTransformation, transformation)  # the registry pairs the two
        assigner = window.assigner
        trigger = window.trigger or (assigner.get_default_trigger() if assigner else None)
        if is_end_of_stream_window(assigner, trigger):
            return OperatorAttributesBuilder().set_is_output_on_eof(True).set_has_internal_sorter(True).build()
        return super().attributes_for(transformation)  # every keyed window sorts its backlog

    @classmethod
    def backlog_path(cls, transformation: Transformation) -> BacklogDeclaration:
        """A built-in aggregation over windows a query can evaluate runs its backlog as that query;
        other windows sort it, each window function called once per window."""
        window = cast(WindowTransformation, transformation)  # the registry pairs the two
        return VECTORISED if _builtin_aggregation(window) is not None else SORTED

    @classmethod
    def backlog_differences(cls, transformation: Transformation) -> list[str]:
        """Windows whose assigner, trigger, evictor or function use processing time."""
        window = cast(WindowTransformation, transformation)  # the registry pairs the two
        assigner = window.assigner
        parts = {"windows": assigner, "trigger": window.trigger or assigner.get_default_trigger(),
                 "evictor": window.evictor, "function": window.function,
                 "window function": getattr(window, "window_function", None)}
        users = [name for name, part in parts.items() if part is not None and uses_processing_time(part)]
        if not users:
            return []
        return [f"its {' and '.join(users)} use processing time: during the backlog that is the clock at the "
                "switch, so results that depend on it differ from streaming the backlog"]

    def _make_contents_descriptor(self) -> StateDescriptor[Any]:
        if self.evictor is not None or self.kind in ("process", "apply"):
            return ListStateDescriptor(CONTENTS_STATE)
        if self.kind == "reduce":
            return ReducingStateDescriptor(CONTENTS_STATE, self.function)
        if self.kind == "aggregate":
            return AggregatingStateDescriptor(CONTENTS_STATE, self.function)
        raise SlipstreamError(f"unknown window function kind {self.kind!r}")

    def user_functions(self) -> list[Any]:
        return [fn for fn in (self.function, self.window_function) if fn is not None]

    # -- life cycle ---------------------------------------------------------------------------
    def open(self) -> None:
        backend = self.ctx.keyed_backend
        if backend is None:
            raise SlipstreamError(f"window operator '{self.ctx.name}' needs a keyed state backend")
        self.backend = backend
        self.ctx.metrics.setdefault(LATE_DROPPED_METRIC, 0)
        self.timers = InternalTimerService(backend, self.ctx.processing_time_service,
                                           self._on_event_time, self._on_processing_time)
        if self._restored_timers is not None:
            self.timers.restore(self._restored_timers)
        self.contents = backend.get_state(self.contents_descriptor, namespaced=True)
        self.runtime_context = StreamRuntimeContext(self.ctx)
        self.trigger_context = _TriggerContext(self)
        self.window_context = _WindowContext(self)
        self.assigner_context = _AssignerContext(self)
        self.evictor_context = _EvictorContext(self)
        self._call_evaluator = self._evaluator_call()
        self._contents_listed = isinstance(self.contents, ListState)  # (looked up once: an ABC check costs)
        self._evaluator_clears = isinstance(self._evaluator(), (ProcessWindowFunction, ProcessAllWindowFunction))
        if self.uses_default_event_time_trigger():
            self._process_element = self._process_element_by_event_time  # type: ignore[method-assign]
            self._on_timer = self._on_timer_by_event_time  # type: ignore[method-assign]
        super().open()

    def uses_default_event_time_trigger(self) -> bool:
        """Whether these are the usual windows — by event time, not merging, Flink's ``EventTimeTrigger``, no
        evictor — whose trigger's rules the operator applies itself, calling it for nothing."""
        return (self._event_time and not self._merging and self.evictor is None
                and type(self.trigger) is EventTimeTrigger)

    def snapshot_state(self) -> dict[str, Any]:
        """The timers (window contents and trigger state are keyed state, snapshotted by the backend)."""
        return {"timers": self.timers.freeze()}

    def initialize_state(self, state: Any) -> None:
        if not state:
            return
        if self.timers is not None:
            self.timers.restore(state["timers"])
        else:
            self._restored_timers = state["timers"]

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        timers = [state["timers"] for state in states if state]
        self.initialize_state({"timers": merge_timer_snapshots(timers, owns_key)} if timers else None)

    # -- backlog: built-in aggregations as one query, Python functions key by key ---------------
    def backlog_field(self) -> Callable[[Any], Any] | None:
        """The aggregated field of a built-in window aggregation (``window(...).sum(f)``), kept as a
        column so the backlog can run as one query (:mod:`slipstream.operators.vectorised_windows`)."""
        aggregation = self.columnar_aggregation()
        if aggregation is None:
            return None
        field = aggregation[1]
        return lambda value: get_field(value, field)

    def columnar_aggregation(self) -> tuple[str, int | str] | None:
        return self._aggregation

    def run_columns(self, columns: IntervalColumns, frames: list[Any]) -> bool:
        from slipstream.operators.vectorised_windows import run_columnar_window_aggregation
        return run_columnar_window_aggregation(self, columns, frames)

    def backlog_order(self) -> BufferOrder:
        """Built-in aggregations keep the buffer's default order for their query; Python window
        functions replay key by key in arrival order (:mod:`slipstream.operators.window_replay`)."""
        self._windows_by_key = self.columnar_aggregation() is None and replays_windows_by_key(self)
        if self._windows_by_key and not self.ctx.batch_mode:
            return BufferOrder.ARRIVAL
        return super().backlog_order()

    def process_backlog(self, buffer: SortBuffer) -> None:
        from slipstream.operators.vectorised_windows import run_window_aggregation
        if self._windows_by_key:
            replay_windows(self, self.key_replay(buffer))
        elif not run_window_aggregation(self, buffer):
            self.replay_backlog([buffer])

    # -- elements -----------------------------------------------------------------------------
    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if self._buffering:  # FLIP-327 backlog: sorted and replayed at the switch
            self.buffer_backlog(batch)
            return
        timestamps = batch.timestamps
        value = None
        with user_code(self, lambda: value):
            for i, value in enumerate(batch.values):
                self._process_element(value, None if timestamps is None else timestamps[i])
        self._flush()

    def _process_element(self, value: Any, timestamp: int | None) -> None:
        self.backend.set_current_key(self._key_selector(value))
        windows = self.assigner.assign_windows(value, timestamp, self.assigner_context)
        merging = self._merging_window_set() if self._merging else None
        skipped = True
        for assigned in windows:
            window = assigned
            if merging is not None:
                window = merging.add_window(assigned, self._merge)
                if self._is_window_late(window):
                    merging.retire_window(window)
                    continue
                state_window = merging.state_window_of(window)
            else:
                if self._is_window_late(window):
                    continue
                state_window = window
            skipped = False
            self.contents.set_current_namespace(state_window)
            self.contents.add(value if self.evictor is None else TimestampedValue(value, timestamp))
            self.trigger_context.window = window
            result = self.trigger.on_element(value, timestamp, window, self.trigger_context)
            self._apply_trigger_result(result, window, state_window)
            self._register_cleanup_timer(window)
        if merging is not None:
            self._persist(merging)
        if skipped and self._is_element_late(timestamp):
            self._late(value, timestamp)

    def _process_element_by_event_time(self, value: Any, timestamp: int | None) -> None:
        """:meth:`_process_element` with ``EventTimeTrigger``'s rules inlined (see
        :meth:`uses_default_event_time_trigger`): a window fires on an element that comes once the watermark passed
        its end (within the allowed lateness), else its end gets a timer; its cleanup timer, at the same
        instant without allowed lateness, is that one. The same state, timers and outputs, in the same order."""
        self.backend.set_current_key(self._key_selector(value))
        watermark = self.timers.current_watermark
        lateness = self.allowed_lateness
        register = self.timers.register_event_time_timer
        skipped = True
        for window in self.assigner.assign_windows(value, timestamp, self.assigner_context):
            end = window.max_timestamp()
            cleanup = min(end + lateness, MAX_TIMESTAMP)
            if cleanup <= watermark:
                continue  # the window is late: gone already
            skipped = False
            self.contents.set_current_namespace(window)
            self.contents.add(value)
            if end <= watermark:
                self._fire(window, window)
            else:
                register(window, end)
            if cleanup not in (end, MAX_TIMESTAMP):
                register(window, cleanup)
        if skipped and timestamp is not None and timestamp + lateness <= watermark:
            self._late(value, timestamp)

    def _late(self, value: Any, timestamp: int | None) -> None:
        if self.late_data_tag is None:
            count_and_warn(self.ctx, LATE_DROPPED_METRIC, 1, lambda: (
                f"window operator '{self.ctx.name}' dropped a late record ({value!r} @ {timestamp}, watermark "
                f"{self.timers.current_watermark}); late records are counted in {LATE_DROPPED_METRIC} (set "
                "allowed_lateness, or side_output_late_data to keep them)"))
            return
        split_outputs([(self.late_data_tag, value)], timestamp, self._values, self._timestamps, self._side)

    # -- time -----------------------------------------------------------------------------------
    def on_watermark(self, watermark: Watermark) -> None:
        self.timers.advance_watermark(watermark.timestamp)
        self._flush()
        self.output.emit_watermark(watermark)

    def _on_event_time(self, timer: InternalTimer) -> None:
        self._guarded(timer, self._on_timer, timer, True)

    def _on_processing_time(self, timer: InternalTimer) -> None:
        self._guarded(timer, self._on_timer, timer, False)
        self._flush()

    def _guarded(self, timer: InternalTimer, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn``, turning a user failure into an error naming the key and window."""
        self._firing = timer
        with self._timer_guard:
            fn(*args)

    @functools.cached_property
    def _timer_guard(self) -> UserCode:
        """One guard for every timer this operator fires (building one per timer costs more than a window)."""
        return user_code(self, lambda: self._firing.namespace, what=lambda: f"key {self._firing.key!r}, window")

    def _on_timer(self, timer: InternalTimer, event_time: bool) -> None:
        window = timer.namespace
        merging = self._merging_window_set() if self._merging else None
        state_window = window if merging is None else merging.get_state_window(window)
        if state_window is None:
            return  # the window was merged away; its trigger state went with it
        self.trigger_context.window = window
        if event_time:
            result = self.trigger.on_event_time(timer.timestamp, window, self.trigger_context)
        else:
            result = self.trigger.on_processing_time(timer.timestamp, window, self.trigger_context)
        self._apply_trigger_result(result, window, state_window)
        if event_time == self._event_time and timer.timestamp == self._cleanup_time(window):
            self._clear_all_state(window, state_window, merging)
        if merging is not None:
            self._persist(merging)

    def _on_timer_by_event_time(self, timer: InternalTimer, event_time: bool) -> None:
        """:meth:`_on_timer` with ``EventTimeTrigger``'s rules inlined (see :meth:`uses_default_event_time_trigger`):
        its timer at the window's end fires the window; the cleanup timer clears it."""
        if not event_time:
            return  # the trigger ignores processing time, and so does the cleanup of event-time windows
        window = timer.namespace
        end = window.max_timestamp()
        if timer.timestamp == end:
            self._fire(window, window)
        if timer.timestamp == min(end + self.allowed_lateness, MAX_TIMESTAMP):
            self.contents.set_current_namespace(window)
            self.contents.clear()  # (the trigger's one timer, at the window's end, has fired: it has nothing to clear)
            self._clear_function_state(window)

    def end_input(self, input_index: int = 0) -> None:
        """Processing time jumps to the end of time for the windows still waiting: their
        processing-time timers fire in timestamp order through the trigger (a processing-time
        trigger fires the window, a count trigger that has not fired lets it be cleared), as
        Flink's batch execution fires them; so do those of event-time windows in BATCH mode."""
        super().end_input(input_index)  # runs a backlog still buffered once every input ended
        if not self._event_time or self.ctx.batch_mode:
            self.timers.fire_processing_timers_at_end()
        self._flush()

    # -- windows ----------------------------------------------------------------------------------
    def _cleanup_time(self, window: Window) -> int:
        if self._event_time:
            return min(window.max_timestamp() + self.allowed_lateness, MAX_TIMESTAMP)
        return window.max_timestamp()

    def _is_window_late(self, window: Window) -> bool:
        return self._event_time and self._cleanup_time(window) <= self.timers.current_watermark

    def _is_element_late(self, timestamp: int | None) -> bool:
        return (self._event_time and timestamp is not None
                and timestamp + self.allowed_lateness <= self.timers.current_watermark)

    def _register_cleanup_timer(self, window: Window) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup == MAX_TIMESTAMP:
            return  # a window that never ends is never cleaned up
        if self._event_time:
            self.timers.register_event_time_timer(window, cleanup)
        else:
            self.timers.register_processing_time_timer(window, cleanup)

    def _delete_cleanup_timer(self, window: Window) -> None:
        cleanup = self._cleanup_time(window)
        if self._event_time:
            self.timers.delete_event_time_timer(window, cleanup)
        else:
            self.timers.delete_processing_time_timer(window, cleanup)

    def _apply_trigger_result(self, result: Any, window: Window, state_window: Window) -> None:
        if result.is_fire():
            self._fire(window, state_window)
        if result.is_purge():
            self.contents.set_current_namespace(state_window)
            self.contents.clear()

    def _clear_all_state(self, window: Window, state_window: Window,
                         merging: MergingWindowSet | None) -> None:
        self.contents.set_current_namespace(state_window)
        self.contents.clear()
        self.trigger_context.window = window
        self.trigger.clear(window, self.trigger_context)
        self._clear_function_state(window)
        if merging is not None:
            merging.retire_window(window)

    def _clear_function_state(self, window: Window) -> None:
        """Let a process window function clear its per-window state (``ProcessWindowFunction.clear``)."""
        if self._evaluator_clears:
            self.window_context.current_window = window
            self._evaluator().clear(self.window_context)

    def _merging_window_set(self) -> MergingWindowSet:
        mapping = self.backend.get_state(_MERGING_DESCRIPTOR).value()
        assigner = cast(MergingWindowAssigner[Any, Any], self.assigner)  # only merging windows ask for the set
        return MergingWindowSet(assigner, dict(mapping) if mapping else {})

    def _persist(self, merging: MergingWindowSet) -> None:
        state = self.backend.get_state(_MERGING_DESCRIPTOR)
        if merging.mapping:
            state.update(dict(merging.mapping))
        else:
            state.clear()

    def _merge(self, result: Window, merged: list[Window], state_window: Window,
               merged_state_windows: list[Window]) -> None:
        if self._is_window_late(result):
            raise JobExecutionError(f"window operator '{self.ctx.name}': merging produced {result!r}, "
                                    "which ends before the current watermark "
                                    f"{self.timers.current_watermark}")
        ctx = self.trigger_context
        ctx.window = result
        ctx.merged_windows = merged
        self.trigger.on_merge(result, ctx)
        ctx.merged_windows = []
        for window in merged:
            ctx.window = window
            self.trigger.clear(window, ctx)
            self._delete_cleanup_timer(window)
        merge_namespaces(self.contents, self.contents_descriptor, state_window, merged_state_windows)

    # -- evaluation -------------------------------------------------------------------------------
    def _evaluator(self) -> Any:
        """The function that gets a window's elements: the window function, if any."""
        return self.function if self.kind in ("process", "apply") else self.window_function

    def _fire(self, window: Window, state_window: Window) -> None:
        self.contents.set_current_namespace(state_window)
        if self.evictor is None:
            contents = self.contents.get()
            if contents is None or (self._contents_listed and not contents):
                return
            inputs = list(contents) if self._contents_listed else [contents]
            self._evaluate(window, inputs)
            return
        elements = list(self.contents.get())
        if not elements:
            return
        self.evictor_context.window = window
        self.evictor.evict_before(elements, len(elements), window, self.evictor_context)
        self._evaluate(window, self._combine([e.value for e in elements]))
        self.evictor.evict_after(elements, len(elements), window, self.evictor_context)
        self.contents.set_current_namespace(state_window)
        self.contents.update(elements)

    def _combine(self, values: list[Any]) -> list[Any]:
        """With an evictor, reduce/aggregate run over the remaining elements when the window fires."""
        if self.kind == "reduce":
            return [functools.reduce(self.function.reduce, values)] if values else []
        if self.kind == "aggregate":
            accumulator = self.function.create_accumulator()
            for value in values:
                accumulator = self.function.add(value, accumulator)
            return [self.function.get_result(accumulator)]
        return values

    def _evaluate(self, window: Window, inputs: list[Any]) -> None:
        results = self._call_evaluator(self.backend.get_current_key(), window, inputs)
        split_outputs(results, window.max_timestamp(), self._values, self._timestamps, self._side)

    def _evaluator_call(self) -> Callable[[Any, Window, list[Any]], Any]:
        """``(key, window, inputs) -> results`` of the evaluator, its kind looked up once."""
        evaluator = self._evaluator()
        context = self.window_context
        if evaluator is None:
            return lambda key, window, inputs: inputs
        if isinstance(evaluator, WindowFunction):
            return evaluator.apply
        if isinstance(evaluator, AllWindowFunction):
            return lambda key, window, inputs: evaluator.apply(window, inputs)
        keyed = isinstance(evaluator, ProcessWindowFunction)

        def process(key: Any, window: Window, inputs: list[Any]) -> Any:
            context.current_window = window
            return evaluator.process(key, context, inputs) if keyed else evaluator.process(context, inputs)
        return process

    def _flush(self) -> None:
        if self._values:
            batch = RecordBatch(self._values, self._timestamps)
            self._values, self._timestamps = [], []
            self.output.collect_batch(batch)
        if self._side:
            side, self._side = self._side, {}
            for tag, batch in side.items():
                self.output.collect_side(tag, batch)


_MERGING_DESCRIPTOR = ValueStateDescriptor(MERGING_WINDOWS_STATE)


class _AssignerContext(WindowAssigner.WindowAssignerContext):
    def __init__(self, operator: WindowOperator) -> None:
        self._operator = operator

    def get_current_processing_time(self) -> int:
        return self._operator.timers.current_processing_time()

    def get_runtime_context(self) -> StreamRuntimeContext:
        return self._operator.runtime_context


class _TriggerContext(Trigger.OnMergeContext):
    """Timers and state of ``window`` for the current key; ``merged_windows`` during ``on_merge``."""

    def __init__(self, operator: WindowOperator) -> None:
        self._operator = operator
        self.window: Window  # set before every call into the trigger
        self.merged_windows: list[Window] = []

    def get_current_processing_time(self) -> int:
        return self._operator.timers.current_processing_time()

    def get_metric_group(self) -> OperatorMetricGroup:
        return operator_metric_group(self._operator.ctx)

    def get_current_watermark(self) -> int:
        return self._operator.timers.current_watermark

    def register_processing_time_timer(self, time: int) -> None:
        self._operator.timers.register_processing_time_timer(self.window, int(time))

    def register_event_time_timer(self, time: int) -> None:
        self._operator.timers.register_event_time_timer(self.window, int(time))

    def delete_processing_time_timer(self, time: int) -> None:
        self._operator.timers.delete_processing_time_timer(self.window, int(time))

    def delete_event_time_timer(self, time: int) -> None:
        self._operator.timers.delete_event_time_timer(self.window, int(time))

    def get_partitioned_state(self, state_descriptor: StateDescriptor[S]) -> S:
        state = self._operator.backend.get_state(state_descriptor, namespaced=True)
        state.set_current_namespace(self.window)
        return state

    def merge_partitioned_state(self, state_descriptor: StateDescriptor[Any]) -> None:
        if self.merged_windows:
            state = self._operator.backend.get_state(state_descriptor, namespaced=True)
            merge_namespaces(state, state_descriptor, self.window, self.merged_windows)


class _StateStore(KeyedStateStore):
    """Keyed state for window functions: per window (``namespaced``) or per key."""

    def __init__(self, operator: WindowOperator, namespaced: bool) -> None:
        self._operator = operator
        self._namespaced = namespaced

    def get_state(self, state_descriptor: StateDescriptor[S]) -> S:
        operator = self._operator
        if not self._namespaced:
            return operator.backend.get_state(state_descriptor)
        if operator._merging:
            raise JobExecutionError(f"window operator '{operator.ctx.name}': per-window state is not "
                                    "available with merging (session) windows")
        state = operator.backend.get_state(state_descriptor, namespaced=True)
        state.set_current_namespace(operator.window_context.current_window)
        return state


class _WindowContext(ProcessWindowFunction.Context[Window], ProcessAllWindowFunction.Context[Window]):
    def __init__(self, operator: WindowOperator) -> None:
        self._operator = operator
        self.current_window: Window  # set before every call into the window function
        self._window_state = _StateStore(operator, namespaced=True)
        self._global_state = _StateStore(operator, namespaced=False)

    def window(self) -> Window:
        return self.current_window

    def current_processing_time(self) -> int:
        return self._operator.timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.timers.current_watermark

    def window_state(self) -> KeyedStateStore:
        return self._window_state

    def global_state(self) -> KeyedStateStore:
        return self._global_state

    def output(self, output_tag: OutputTag, value: Any) -> None:
        operator = self._operator
        split_outputs([(output_tag, value)], self.current_window.max_timestamp(), operator._values,
                      operator._timestamps, operator._side)


class _EvictorContext(Evictor.EvictorContext):
    def __init__(self, operator: WindowOperator) -> None:
        self._operator = operator
        self.window: Window  # set before every call into the evictor

    def get_current_processing_time(self) -> int:
        return self._operator.timers.current_processing_time()

    def get_current_watermark(self) -> int:
        return self._operator.timers.current_watermark

    def get_metric_group(self) -> OperatorMetricGroup:
        return operator_metric_group(self._operator.ctx)

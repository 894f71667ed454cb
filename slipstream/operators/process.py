"""Operators that run process functions: ``ProcessOperator`` (unkeyed), ``KeyedProcessOperator``,
and the shared loop that feeds a batch through a process function.

Outputs inherit the timestamp of the record that caused them; ``yield tag, value``
and ``ctx.output(tag, value)`` emit to side outputs. During backlog these run
record by record, except ``KeyedProcessOperator`` given a batch engine: it buffers its
backlog and at the switch runs it key by key through ``process_element`` — in STREAMING
mode each record at the watermark it arrived at, the key's event-time timers fired at the
watermarks that fire them streamed; in BATCH mode in timestamp order, the key's timers at
the end of its run (see :mod:`slipstream.operators.key_replay`). In STREAMING mode the
planner streams its backlog instead unless told to sort every kind: the function is called
once per record either way, so sorting only adds its own cost.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from slipstream.datastream.bootstrap import KeyedStateBootstrapFunction
from slipstream.datastream.functions import (
    Function,
    KeyedProcessFunction,
    ProcessFunction,
    TimeDomain,
    TimerService,
)
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.transformations import KeyedProcessTransformation, ProcessTransformation, Transformation
from slipstream.errors import UserCode, raise_user_error, user_code
from slipstream.operators.backlog import BacklogSortingOperator, uses_processing_time
from slipstream.operators.backlog_bootstrap import BootstrapBacklog
from slipstream.operators.backlog_path import VECTORISED, BacklogDeclaration, sorted_unless_streaming, streamed
from slipstream.operators.base import OperatorContext, StreamOperator, split_outputs
from slipstream.operators.elements import RecordBatch
from slipstream.operators.key_replay import IntervalOutputs, KeyReplay
from slipstream.operators.sort_buffer import SortBuffer
from slipstream.operators.timers import InternalTimer, InternalTimerService, KeyedTimerService, merge_timer_snapshots


class UnkeyedTimerService(TimerService):
    """Clocks readable, timers refused: timers need keyed state to fire into."""

    def __init__(self, operator: StreamOperator) -> None:
        self._operator = operator

    def current_processing_time(self) -> int:
        return self._operator.ctx.processing_time_service.get_current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.current_watermark

    def _refuse(self, timestamp: int) -> None:
        """Raised in the user's function, whose guard names the operator, subtask and record."""
        raise RuntimeError("timers can only be used on a keyed stream (key_by before process), as in Flink")

    register_processing_time_timer = _refuse
    register_event_time_timer = _refuse
    delete_processing_time_timer = _refuse
    delete_event_time_timer = _refuse


class ProcessContext(KeyedProcessFunction.OnTimerContext):
    """The context passed to process functions, keyed or not, per record and per timer."""

    def __init__(self, operator: StreamOperator, timer_service: TimerService) -> None:
        self._operator = operator
        self._timer_service = timer_service
        self.current_timestamp: int | None = None
        self.current_time_domain = TimeDomain.EVENT_TIME
        self.side: dict[OutputTag, RecordBatch] = {}

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def timer_service(self) -> TimerService:
        return self._timer_service

    def get_current_key(self) -> Any:
        backend = self._operator.ctx.keyed_backend
        return None if backend is None else backend.get_current_key()

    def time_domain(self) -> TimeDomain:
        return self.current_time_domain

    def output(self, output_tag: OutputTag, value: Any) -> None:
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"ctx.output expects an OutputTag, got {output_tag!r}")
        split_outputs([(output_tag, value)], self.current_timestamp, [], [], self.side)

    def is_backlog(self) -> bool:
        return self._operator.is_backlog()


ProcessFunction.Context.register(ProcessContext)


def emit(operator: StreamOperator, values: list[Any], timestamps: list[Any] | None, ctx: ProcessContext) -> None:
    """Send the main outputs, then each side output, collected for one batch or timer."""
    if values:
        operator.output.collect_batch(RecordBatch(values, timestamps))
    if ctx.side:
        for tag, batch in ctx.side.items():
            if batch.timestamps is not None and all(ts is None for ts in batch.timestamps):
                batch.timestamps = None
            operator.output.collect_side(tag, batch)
        ctx.side = {}


def run_process_function(operator: StreamOperator, method: Callable[[Any, Any], Any], batch: RecordBatch,
                         ctx: ProcessContext, key_selector: Callable[[Any], Any] | None) -> None:
    """Feed every record of ``batch`` to ``method(value, ctx)`` and emit what it yields.

    This is the per-record hot path of every process function, so it binds what it
    needs to locals and checks the rare cases (side outputs, a non-iterable result)
    as cheaply as it can.
    """
    values_out: list[Any] = []
    append = values_out.append
    timestamps_in = batch.timestamps
    timestamps_out: list[Any] | None = None if timestamps_in is None else []
    backend = operator.ctx.keyed_backend
    set_key = backend.set_current_key if key_selector is not None and backend is not None else None
    key_of = cast(Callable[[Any], Any], key_selector)  # called only when set_key is
    tag_type = OutputTag
    value = results = None
    timestamp = ctx.current_timestamp = None
    with user_code(operator, lambda: value, explain=lambda exc: process_cause(exc, results)):
        for index, value in enumerate(batch.values):
            if timestamps_in is not None:
                timestamp = ctx.current_timestamp = timestamps_in[index]
            if set_key is not None:
                set_key(key_of(value))
            results = method(value, ctx)
            if results is None:
                continue
            for out in results:
                if type(out) is tuple and len(out) == 2 and type(out[0]) is tag_type:
                    ctx.output(out[0], out[1])
                else:
                    append(out)
                    if timestamps_out is not None:
                        timestamps_out.append(timestamp)
    emit(operator, values_out, timestamps_out, ctx)


def process_cause(exc: Exception, results: Any) -> Exception:
    """What a process function's failure ``exc`` is reported as: a result it could not iterate
    (``results``) named as the mistake it is, else ``exc``."""
    if isinstance(exc, TypeError) and results is not None and not hasattr(results, "__iter__"):
        return TypeError("a process function must yield its outputs (or return an iterable or "
                         f"None), got {results!r}")
    return exc


def fire_timer(operator: StreamOperator, on_timer: Callable[[int, Any], Any], timer: InternalTimer,
               ctx: ProcessContext, domain: TimeDomain, guard: UserCode) -> None:
    """Call ``on_timer`` for a due timer (its key is current) and emit what it yields; ``guard``
    names the timer if it fails."""
    ctx.current_time_domain = domain
    ctx.current_timestamp = timer.timestamp if domain is TimeDomain.EVENT_TIME else None
    values: list[Any] = []
    with guard:
        results = on_timer(timer.timestamp, ctx)
        for out in results or ():
            if type(out) is tuple and len(out) == 2 and isinstance(out[0], OutputTag):
                ctx.output(out[0], out[1])
            else:
                values.append(out)
    ctx.current_time_domain = TimeDomain.EVENT_TIME
    timestamps = [ctx.current_timestamp] * len(values) if ctx.current_timestamp is not None else None
    emit(operator, values, timestamps, ctx)


class OnTimerOperator(StreamOperator):
    """Base of operators whose function has ``on_timer`` (keyed process, keyed co-process).

    A subclass sets ``function``, ``context`` and ``timers`` (None when it has no keyed
    timers) in ``setup``; here the watermark advances the timers, due timers call
    ``function.on_timer`` through :func:`fire_timer`, and the timers are the operator's state.
    What the timers one watermark fires emit goes downstream as one batch (per output), before
    the watermark: a batch per timer cost more than most ``on_timer`` calls.
    """

    function: Any
    context: ProcessContext
    timers: InternalTimerService | None
    _firing: InternalTimer  # the timer being fired, which its guard names
    _fired_outputs: tuple[list[Any], list[Any]] | None = None
    """While a watermark fires event-time timers: their main outputs and timestamps, sent on as one batch."""

    def keyed_timers(self) -> InternalTimerService:
        """This operator's keyed timers; in BATCH mode its processing-time timers wait for the end of the
        input rather than the clock (:meth:`finish`), as Flink's batch execution fires them."""
        return InternalTimerService(self.keyed_backend(), self.ctx.processing_time_service, self._on_event_time,
                                    self._on_processing_time, processing_at_end=self.ctx.batch_mode)

    def on_watermark(self, watermark: Any) -> None:
        if self.timers is not None:
            fired = self._fired_outputs = ([], [])
            # BATCH mode's final watermark fires every timer, registrations then ignored (as in Flink)
            self.timers.quiesced = self.ctx.batch_mode and watermark.timestamp == MAX_TIMESTAMP
            try:
                self.timers.advance_watermark(watermark.timestamp)
            finally:
                self._fired_outputs = None
                self.timers.quiesced = False
            emit(self, fired[0], fired[1], self.context)
        self.output.emit_watermark(watermark)

    def _on_event_time(self, timer: InternalTimer) -> None:
        fired = self._fired_outputs
        if fired is None:
            self._firing = timer
            fire_timer(self, self.function.on_timer, timer, self.context, TimeDomain.EVENT_TIME, self._timer_guard)
        else:
            self.fire_event_timer_into(timer, fired[0], fired[1])

    def fire_event_timer_into(self, timer: InternalTimer, values: list[Any], stamps: list[Any]) -> None:
        """``on_timer`` for an event-time timer whose key is current, its outputs appended to ``values``
        and their timestamps (the timer's) to ``stamps``, its side outputs left in ``context.side``: the
        caller sends them on with those of the other timers fired together. The per-timer path of a
        watermark and of a sorted backlog, so it guards with ``try`` (free until it fails)."""
        self._firing = timer
        context = self.context
        context.current_timestamp = timestamp = timer.timestamp
        try:
            results = self.function.on_timer(timestamp, context)
            if results is not None:
                for out in results:
                    if type(out) is tuple and len(out) == 2 and isinstance(out[0], OutputTag):
                        context.output(out[0], out[1])
                    else:
                        values.append(out)
                        stamps.append(timestamp)
        except Exception as exc:
            raise_user_error(self, exc, self._describe_firing, "on_timer")

    def finish(self) -> None:
        """In BATCH mode the processing-time timers still waiting fire once the input has ended (after
        a sorted backlog's replay, which fires each key's at the end of its run), as in Flink."""
        super().finish()
        if self.ctx.batch_mode and self.timers is not None:
            self.timers.fire_processing_timers_at_end()

    def _on_processing_time(self, timer: InternalTimer) -> None:
        self._firing = timer
        fire_timer(self, self.function.on_timer, timer, self.context, TimeDomain.PROCESSING_TIME, self._timer_guard)

    @functools.cached_property
    def _timer_guard(self) -> UserCode:
        """One guard for every timer this operator fires (building one per timer costs more than a call)."""
        return user_code(self, self._describe_firing, what="on_timer")

    def _describe_firing(self) -> str:
        """The timer being fired, as a failure in its ``on_timer`` names it."""
        return f"timer @{self._firing.timestamp} for key {self._firing.key!r}"

    def snapshot_state(self) -> Any:
        return None if self.timers is None else {"timers": self.timers.freeze()}

    def initialize_state(self, state: Any) -> None:
        if state and self.timers is not None:
            self.timers.restore(state["timers"])

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        timers = [state["timers"] for state in states if state]
        self.initialize_state({"timers": merge_timer_snapshots(timers, owns_key)} if timers else None)


class ProcessOperator(StreamOperator):
    """Runs a ``ProcessFunction`` on an unkeyed stream (or a keyed one, with state but no timers)."""

    transformation_type = ProcessTransformation
    emits_declared_type = True
    backlog = streamed("a ProcessFunction is called once per record either way, with no key to sort by")

    def __init__(self, transformation: ProcessTransformation) -> None:
        super().__init__(transformation)
        self.function: ProcessFunction[Any, Any] = transformation.function

    def user_functions(self) -> list[Function]:
        return [self.function]

    def open(self) -> None:
        self.context = ProcessContext(self, UnkeyedTimerService(self))
        self.key_selector = self.transformation.key_selectors[0] if self.transformation.is_keyed else None
        super().open()

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        run_process_function(self, self.function.process_element, batch, self.context, self.key_selector)


class KeyedProcessOperator(OnTimerOperator, BacklogSortingOperator):
    """Runs a ``KeyedProcessFunction``: keyed state, event- and processing-time timers.

    During backlog: buffered, then replayed at the switch (:mod:`slipstream.operators.backlog`).
    """

    transformation_type = KeyedProcessTransformation
    emits_declared_type = True
    replays_by_key = True

    @classmethod
    def backlog_differences(cls, transformation: Transformation) -> list[str]:
        if uses_processing_time(cast(KeyedProcessTransformation, transformation).function):  # the registry's pair
            return ["its function uses processing time (timers or the clock): during the backlog that is the "
                    "clock at the switch, so results that depend on it differ from streaming the backlog"]
        return []

    @classmethod
    def backlog_work(cls, transformation: Transformation, batch_engine: str) -> str | None:
        if isinstance(cast(KeyedProcessTransformation, transformation).function, KeyedStateBootstrapFunction):
            return ("buffers its backlog as it arrives and gives it to process_backlog(frame) as one polars "
                    "DataFrame at the switch (a KeyedStateBootstrapFunction: not sorted nor passed to "
                    "process_element), installs the key states it returns")
        return None

    @classmethod
    def backlog_path(cls, transformation: Transformation) -> BacklogDeclaration:
        """A bootstrap function gets its backlog as one frame (``process_backlog``); any other
        KeyedProcessFunction streams it in STREAMING mode, as sorting only adds its cost."""
        if isinstance(cast(KeyedProcessTransformation, transformation).function, KeyedStateBootstrapFunction):
            return VECTORISED  # the registry pairs the two
        return sorted_unless_streaming("a KeyedProcessFunction is called once per record either way, so sorting "
                                       "only adds its own cost (benchmarks/backlog.py)")

    def __init__(self, transformation: KeyedProcessTransformation) -> None:
        super().__init__(transformation)
        self.function: KeyedProcessFunction[Any, Any, Any] = transformation.function

    def user_functions(self) -> list[Function]:
        return [self.function]

    def setup(self, ctx: OperatorContext) -> None:
        super().setup(ctx)
        self.timers = self.keyed_timers()
        self.context = ProcessContext(self, KeyedTimerService(self.timers))
        self.key_selector = self.transformation.key_selectors[0]
        self._bootstrap: BootstrapBacklog | None = None
        self._replay_outputs: IntervalOutputs  # while the sorted backlog replays: where its timers' outputs go

    def begin_backlog(self) -> None:
        """A ``KeyedStateBootstrapFunction`` gets the backlog as one frame rather than record by record."""
        if isinstance(self.function, KeyedStateBootstrapFunction):
            self._bootstrap = BootstrapBacklog(self, self.key_selector)

    def snapshot_own_buffers(self) -> Any:
        return None if self._bootstrap is None else self._bootstrap.snapshot()

    def restore_own_buffers(self, state: Any) -> None:
        if self._bootstrap is not None:
            self._bootstrap.restore(state)

    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        if self._bootstrap is not None:
            self._bootstrap.add(batch)
            return
        super().buffer_backlog(batch, input_index)

    def run_backlog(self, buffers: list[Any]) -> None:
        bootstrap, self._bootstrap = self._bootstrap, None
        if bootstrap is None:
            super().run_backlog(buffers)
            return
        bootstrap.run(self.function.process_backlog)  # type: ignore[attr-defined]

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if self._buffering:
            self.buffer_backlog(batch)
            return
        run_process_function(self, self.function.process_element, batch, self.context, self.key_selector)

    def process_backlog(self, buffer: SortBuffer) -> None:
        """Each key's backlog through ``process_element`` in a tight loop, the key set once and its
        timers fired within its run (:mod:`slipstream.operators.key_replay`)."""
        replay = self.key_replay(buffer, self._fire_replayed_timer)
        self._replay_outputs = replay.outputs
        method = self.function.process_element
        context = self.context
        tag_type = OutputTag
        value = results = None
        with user_code(self, lambda: value, explain=lambda exc: process_cause(exc, results)):
            for _key, intervals, stamps, values in replay.runs():
                level = -1
                for interval, timestamp, value in zip(intervals, stamps, values):
                    if interval != level:
                        self._send_side(context, replay)
                        level = interval
                        out_values, out_stamps = replay.outputs_at(level)
                        append, stamp = out_values.append, out_stamps.append
                    context.current_timestamp = timestamp
                    results = method(value, context)
                    if results is None:
                        continue
                    for out in results:
                        if type(out) is tuple and len(out) == 2 and type(out[0]) is tag_type:
                            context.output(out[0], out[1])
                        else:
                            append(out)
                            stamp(timestamp)
                self._send_side(context, replay)
        replay.emit()

    def _fire_replayed_timer(self, timer: InternalTimer) -> None:
        """An event-time timer of the key being replayed: ``on_timer`` with its outputs put straight
        into the replay's lists for the interval it fires in (the key is current already)."""
        values, stamps = self._replay_outputs.timestamped_lists()
        self.fire_event_timer_into(timer, values, stamps)
        if self.context.side:
            emit(self, [], None, self.context)

    @staticmethod
    def _send_side(context: ProcessContext, replay: KeyReplay) -> None:
        if context.side:
            emit(replay.operator, [], None, context)

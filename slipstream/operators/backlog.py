"""``BacklogSortingOperator``: the FLIP-327 switch, shared by every keyed sorting operator (co-group too).

An operator that derives from this class declares ``has_internal_sorter`` and, when the
runtime gave it a batch engine (``OperatorContext.batch_engine``; ``env.configure(
backlog_sorting=False)`` gives none), behaves like this:

1. **Backlog begins** (``RecordAttributes(is_backlog=True)`` on any input): records are
   no longer processed but put into a :class:`~slipstream.operators.sort_buffer.SortBuffer`
   (spilling to disk past ``sort_memory_budget`` records). Nothing is emitted.
   Watermarks are *held*: the operator does not advance its event time and forwards no
   watermark, but remembers each watermark its input passes, and files every buffered
   batch under the *interval* it arrived in (how many of those watermarks came before it).
2. **Backlog ends** (every input says ``is_backlog=False``; for a bounded input this
   arrives right after its final watermark and before ``end_input``): the switch.
   :meth:`BacklogSortingOperator.run_backlog` runs the buffer as batch work, the held
   watermarks are applied, and only then is ``is_backlog=False`` forwarded, so what the
   switch emitted still counts as backlog downstream.
3. **Afterwards** the operator processes record by record.

**The contract.** In STREAMING mode ``backlog_sorting`` is a speed knob: event-time
results do not depend on it. The switch replays the backlog interval by interval, each
interval's records key by key, each key's in arrival order, through the operator's own
``process_batch``, and applies the held watermarks one by one between the intervals,
where the input had them. Keyed state and timers are per key, so every key sees what
streaming the backlog shows it: its records in arrival order, each at the watermark it
arrived at; its event-time timers and windows firing at the same watermarks, in the same
order; the same records late — dropped and counted in ``num_late_records_dropped``, or
sent to the late-data side output. Each watermark goes downstream after the output that
precedes it in streaming, so the operators after this one see their input at the same
watermarks too. What still differs:

* order within one watermark interval: outputs of different keys come key by key, not in
  arrival order (each key's in its own order). Only results that depend on the order of
  different keys' records can differ — as they can between two streaming runs at
  parallelism above 1 — e.g. a window downstream keyed otherwise whose function depends
  on the order of its elements;
* processing time: processing-time timers (and processing-time windows) follow the clock
  during the switch, not when the records arrived. The timers registered while the
  backlog is replayed are counted in ``backlog_processing_time_timers`` and logged as a
  warning, and ``explain()`` names the operators whose function, trigger or windows use
  processing time (see :meth:`~slipstream.operators.base.StreamOperator.backlog_differences`);
* when output appears: everything the backlog causes appears at the switch (FLIP-327).

Key by key instead (:attr:`BacklogSortingOperator.replays_by_key`): a key replayed alone,
each record at its interval's watermark and its timers caught up between them, sees the
same; its outputs are filed by interval and sent on interval by interval with the held
watermarks between them (:mod:`slipstream.operators.key_replay`), so downstream sees them
between the same watermarks too. That lets an operator run a key's backlog in a tight loop
with the key set once (keyed process functions, Python reduces, time windows:
:mod:`slipstream.operators.window_replay`), at the price of holding the backlog's output
until the switch ends.

Whether sorting pays is the kind's to say (its :meth:`~slipstream.operators.base.StreamOperator.backlog_path`):
in STREAMING mode the planner streams the backlog of a kind that sorts slower than it streams,
and ``explain()`` gives the reason (``backlog_sorting="always"`` sorts it anyway).

An operator whose results cannot depend on the watermark before its input ends
(EndOfStreamWindows) may read its backlog key by key in arrival order instead
(:meth:`BacklogSortingOperator.backlog_order`); it applies every held watermark but the
last before the replay, and the last after it.

BATCH mode is another mode, not this knob: Flink's BATCH semantics. Each key's records
come in timestamp order (then arrival order) and only the final watermark is applied, so
no record is late and event-time timers fire at the end; a rolling reduce emits one final
value per key. (``backlog_sorting=False`` in BATCH mode processes records one by one with
STREAMING's semantics over BLOCKING edges.)

Without a batch engine the operator processes backlog record by record like any other.

The switch runs with the cyclic garbage collector paused (:func:`gc_paused`): it turns the
backlog into millions of rows, outputs and state entries that live on past it, and each young
collection would walk them again — in a job of 10^6 windows that cost a fifth of the switch.

**Checkpoints while buffering** (unlike FLIP-327, which refuses them): a checkpoint taken while
records are buffered holds the buffers (:meth:`BacklogSortingOperator.snapshot_backlog`): the
spilled runs as shared files — immutable, so each is stored once however many checkpoints of
the backlog refer to it — the in-memory tail as Arrow IPC segments (each checkpoint writes only
the records that arrived since the previous one), the key dictionary and the held watermarks;
a buffering operator that keeps buffers of its own (columns of a built-in aggregation, a
co-group's Arrow inputs, a bootstrap's frames) adds them
(:meth:`BacklogSortingOperator.snapshot_own_buffers`).
With the sources' positions at the same barrier, a restore goes on buffering where the
checkpoint was, and the switch then gives what it would have given without the failure.
Such a checkpoint is restored at the same parallelism only (the buffers hold each subtask's
records by key in its arrival order, not by key group): a rescale is refused, naming the operator.

Metrics (in ``ctx.metrics``): ``backlog_records`` and ``spilled_bytes`` (kept up to date
while buffering, summed over subtasks), ``backlog_seconds`` (backlog start to the end of
the switch) and ``switch_time`` (seconds the batch work at the switch took) — the
longest over subtasks, summed over backlog phases — ``batch_engine`` (the engine's
name), ``switched_at`` (the ``time.perf_counter()`` reading when the last switch ended),
``backlog_processing_time_timers`` and ``backlog_records_vectorised`` (records a built-in
aggregation ran as one polars query instead of replaying them: see
:mod:`slipstream.operators.vectorised_reduce` and :mod:`slipstream.operators.vectorised_windows`).
"""

from __future__ import annotations

import contextlib
import gc
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from slipstream.attributes import OperatorAttributes, RecordAttributes
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import Transformation
from slipstream.errors import SlipstreamError, user_code
from slipstream.operators.base import OperatorContext, StreamOperator, count_and_warn
from slipstream.operators.elements import RecordBatch
from slipstream.operators.key_replay import KeyReplay
from slipstream.operators.memory import sort_buffer_records
from slipstream.operators.sort_buffer import BufferOrder, KeyDictionary, SortBuffer, interval_batches
from slipstream.operators.timers import InternalTimer, InternalTimerService

PROCESSING_TIME_TIMERS_METRIC = "backlog_processing_time_timers"
VECTORISED_METRIC = "backlog_records_vectorised"
BACKLOG_PHASES = ("buffering", "batch work", "streaming")
"""The ``backlog_phase`` metric's values (FLIP-327), in the order an operator goes through them."""
"""Backlog records run as one polars query, never replayed as Python calls (summed over subtasks)."""


class BacklogSortingOperator(StreamOperator):
    """Base of keyed operators that buffer and sort their backlog (see the module docstring).

    A subclass calls :meth:`buffer_backlog` at the top of its ``process_batch`` while
    :attr:`is_buffering_backlog`; may override :meth:`backlog_field`, :meth:`backlog_order`
    and :meth:`process_backlog`; sets :attr:`timers` when it has keyed timers; and must call
    ``super()`` from ``setup``, ``end_input`` and ``close`` when it overrides them.

    Operators of several inputs (co-group, join) get one buffer per input, all sharing
    one :class:`~slipstream.operators.sort_buffer.KeyDictionary` (and one count of arrivals)
    so that :func:`~slipstream.operators.sort_buffer.co_grouped` and
    :func:`~slipstream.operators.sort_buffer.interval_batches` can walk them together; they
    override :meth:`backlog_key_selector` when their keys are not
    ``transformation.key_selectors[input_index]``, and :meth:`run_backlog`. One that keeps
    buffers of its own besides (the co-group's columnar ones) opens them in
    :meth:`begin_backlog`, fills them from its :meth:`buffer_backlog` and closes them in
    its :meth:`run_backlog` and ``close``: the switch, the held watermarks and the metrics
    stay here.
    """

    backlog_batch_size: ClassVar[int] = 1024
    """Records per batch when the backlog is replayed through ``process_batch``."""

    timers: InternalTimerService | None = None
    """The operator's keyed timers, if it has any (the switch counts the processing-time ones)."""

    replays_by_key: ClassVar[bool] = False
    """Whether :meth:`process_backlog` runs the backlog key by key (:meth:`key_replay`), so that in
    STREAMING mode the buffer is read key by key in arrival order rather than interval by interval."""

    _buffering: bool = False
    _streaming_backlog: bool = False  # this backlog streams: see stream_the_rest_of_backlog
    _restored_backlog: dict[str, Any] | None = None

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        declared = super().attributes_for(transformation)
        return OperatorAttributes(declared.is_output_on_eof(), declared.is_output_on_checkpoint(), True)

    def setup(self, ctx: OperatorContext) -> None:
        super().setup(ctx)
        self._buffering = False
        self._backlog_buffers: list[SortBuffer] = []
        self._ended_inputs: set[int] = set()
        self._held: list[int] = []
        self._applied = 0
        self._arrivals = 0
        self._backlog_started = 0.0
        self._backlog_seconds = 0.0
        self._switch_seconds = 0.0

    @property
    def is_buffering_backlog(self) -> bool:
        """Whether records are being buffered rather than processed."""
        return self._buffering

    # -- hooks for subclasses ---------------------------------------------------------------------
    def backlog_field(self) -> Callable[[Any], Any] | None:
        """A ``value -> number`` the sort buffer keeps as a column for vectorised work; None: none."""
        return None

    def backlog_key_selector(self, input_index: int) -> Callable[[Any], Any]:
        """The key of a record of input ``input_index``, as the buffers group by it."""
        selector = self.transformation.key_selectors[input_index]
        if selector is None:
            raise SlipstreamError(f"operator '{self.ctx.name}': input {input_index + 1} is not keyed, so its "
                                  "backlog cannot be sorted by key")
        return selector

    def backlog_order(self) -> BufferOrder:
        """The order the switch reads the backlog in: by key and timestamp in BATCH mode, by
        watermark interval in STREAMING mode. An operator whose results cannot depend on the
        watermark before its input ends may read it key by key in arrival order."""
        if self.ctx.batch_mode:
            return BufferOrder.TIME
        return BufferOrder.ARRIVAL if self.replays_by_key else BufferOrder.INTERVAL

    def begin_backlog(self) -> None:
        """Called when buffering begins, once the sort buffers exist; nothing by default."""

    def snapshot_own_buffers(self) -> Any:
        """The buffers this operator keeps besides its sort buffers, for a checkpoint taken while it
        buffers (see :meth:`snapshot_backlog`); None: none."""
        return None

    def restore_own_buffers(self, state: Any) -> None:
        """Restore what :meth:`snapshot_own_buffers` returned, after :meth:`begin_backlog` of a restored
        backlog made the buffers anew."""

    def run_backlog(self, buffers: list[SortBuffer]) -> None:
        """Run the buffered backlog, one buffer per input (any may be empty), at every switch.

        One-input operators override :meth:`process_backlog` instead.
        """
        if len(buffers[0]):
            self.process_backlog(buffers[0])

    def process_backlog(self, buffer: SortBuffer) -> None:
        """Run the buffered backlog (at the switch, before the last held watermark is applied).

        By default: :meth:`replay_backlog`.
        """
        self.replay_backlog([buffer])

    def replay_backlog(self, buffers: list[SortBuffer]) -> None:
        """Feed the buffered records through ``process_batch`` in the buffers' order. In interval
        order the held watermarks are applied between the intervals, as streaming applied them;
        otherwise every held watermark but the last is applied first."""
        size = self.backlog_batch_size
        if buffers[0].order is BufferOrder.INTERVAL:
            for interval, input_index, batch in interval_batches(buffers, size):
                self.apply_held_watermarks(interval)
                self.process_batch(batch, input_index)
            return
        self.apply_held_watermarks_but_the_last()
        for input_index, buffer in enumerate(buffers):
            for batch in buffer.batches(size):
                self.process_batch(batch, input_index)

    def key_replay(self, buffer: SortBuffer, fire: Callable[[InternalTimer], None] | None = None) -> KeyReplay:
        """A key-by-key replay of ``buffer`` at the watermarks held while it was buffered (``fire``:
        see :class:`~slipstream.operators.key_replay.KeyReplay`)."""
        return KeyReplay(self, buffer, self._held, fire)

    # -- held watermarks ---------------------------------------------------------------------------
    def apply_held_watermarks(self, count: int) -> None:
        """Apply, one by one, the watermarks held during the backlog up to the ``count``-th (each
        fires what is due and goes downstream, as it did not while it was held)."""
        held = self._held
        while self._applied < count:
            self._applied += 1
            watermark = held[self._applied]
            if watermark > self.current_watermark:
                self.current_watermark = watermark
                self.on_watermark(Watermark(watermark))

    def apply_held_watermarks_but_the_last(self) -> None:
        """Apply every held watermark but the last (which the switch applies after the batch work)."""
        self.apply_held_watermarks(len(self._held) - 2)

    def _hold_watermark(self) -> None:
        """While buffering: remember the input's new watermark (in BATCH mode only the latest)."""
        combined = self._combined_input_watermark()
        held = self._held
        if combined is None or combined <= held[-1]:
            return
        if self.ctx.batch_mode and len(held) > 1:
            held[-1] = combined
        else:
            held.append(combined)

    # -- buffering ---------------------------------------------------------------------------------
    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        """Put ``batch`` into its input's sort buffer (called by ``process_batch`` while buffering)."""
        selector = self.backlog_key_selector(input_index)
        values = batch.values
        keys: list[Any] = []
        append = keys.append
        value: Any = None
        what = "record" if self.num_inputs < 2 else f"record of input {input_index + 1}"
        with user_code(self, lambda: value, what=what):
            for value in values:
                append(selector(value))
            self._backlog_buffers[input_index].add(keys, values, batch.timestamps, interval=self.backlog_interval(),
                                                   arrival=self.next_arrival())

    @property
    def held_watermarks(self) -> list[int]:
        """The watermark before the backlog, then each one held during it (an interval's index is its
        watermark's)."""
        return self._held

    def count_vectorised(self, records: int) -> None:
        """Count ``records`` of the backlog as run by one query (``backlog_records_vectorised``)."""
        metrics = self.ctx.metrics
        metrics[VECTORISED_METRIC] = metrics.get(VECTORISED_METRIC, 0) + records

    def backlog_interval(self) -> int:
        """The watermark interval records buffered now belong to (how many held watermarks came first)."""
        return len(self._held) - 1

    def next_arrival(self) -> int:
        """The arrival number of the next batch buffered, counted over every input."""
        self._arrivals += 1
        return self._arrivals

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        self._input_backlog[input_index] = attributes.is_backlog()
        backlog = any(self._input_backlog)
        if backlog and not self._buffering and not self._streaming_backlog and self.ctx.batch_engine is not None:
            self._start_backlog()
        elif not backlog and self._buffering:
            self._switch_to_streaming()
        if not backlog:
            self._streaming_backlog = False  # a later backlog is buffered again
        super().process_record_attributes(attributes, input_index)

    def _advance_combined_watermark(self) -> None:
        if self._buffering:
            self._hold_watermark()  # applied at the switch
            return
        super()._advance_combined_watermark()

    def _start_backlog(self) -> None:
        ctx = self.ctx
        engine = ctx.batch_engine
        keys = KeyDictionary()
        order = self.backlog_order()
        self._backlog_buffers = [
            SortBuffer(engine, memory_budget=sort_buffer_records(ctx), spill_dir=ctx.spill_dir, key_dictionary=keys,
                       metrics=ctx.metrics, field=self.backlog_field(), name=ctx.name, order=order)
            for _ in range(max(1, self.num_inputs))]
        self._held = [self.current_watermark]
        self._applied = 0
        self.begin_backlog()
        self._buffering = True
        self._backlog_started = time.perf_counter()
        ctx.metrics["backlog_phase"] = "buffering"
        ctx.metrics["batch_engine"] = getattr(engine, "name", type(engine).__name__)

    def holds_backlog(self) -> bool:
        """Whether any record of the backlog is buffered."""
        return any(len(buffer) for buffer in self._backlog_buffers)

    def stream_the_rest_of_backlog(self) -> None:
        """Stop buffering before anything was buffered: the rest of this backlog is processed as it
        arrives, for a kind that finds at the first batch that sorting it would not pay."""
        buffers, self._backlog_buffers = self._backlog_buffers, []
        for buffer in buffers:
            buffer.close()
        self._buffering = False
        self._streaming_backlog = True
        self.apply_held_watermarks(len(self._held) - 1)
        self.ctx.metrics["backlog_phase"] = "streaming"

    def _switch_to_streaming(self) -> None:
        """The switch: run the buffered backlog as batch work, apply the held watermarks."""
        buffers, self._backlog_buffers = self._backlog_buffers, []
        self._buffering = False
        started = time.perf_counter()
        self.ctx.metrics["backlog_phase"] = "batch work"
        registered = self.timers.processing_time_registrations if self.timers is not None else 0
        try:
            with gc_paused():
                self.run_backlog(buffers)
        finally:
            for buffer in buffers:
                buffer.close()
        self.apply_held_watermarks(len(self._held) - 1)
        if self.timers is not None:
            self._count_processing_time_timers(self.timers.processing_time_registrations - registered)
        ended = time.perf_counter()
        self._switch_seconds += ended - started
        self._backlog_seconds += ended - self._backlog_started
        metrics = self.ctx.metrics
        metrics["switch_time"] = max(metrics.get("switch_time", 0.0), self._switch_seconds)
        metrics["backlog_seconds"] = max(metrics.get("backlog_seconds", 0.0), self._backlog_seconds)
        metrics["switched_at"] = ended
        metrics["backlog_phase"] = "streaming"

    def _count_processing_time_timers(self, count: int) -> None:
        if self.ctx.batch_mode or not count:
            return
        count_and_warn(self.ctx, PROCESSING_TIME_TIMERS_METRIC, count, lambda: (
            f"operator '{self.ctx.name}' registered {count} processing-time timer(s) while it replayed its "
            "sorted backlog: they follow the clock at the switch, not at the records' arrival, so results "
            "that depend on them differ from streaming the backlog (env.configure(backlog_sorting=False) "
            "streams it)"))

    # -- life cycle --------------------------------------------------------------------------------
    def end_input(self, input_index: int = 0) -> None:
        # The runtime ends backlog before end_input; this only guards against losing records.
        self._ended_inputs.add(input_index)
        if self._buffering and len(self._ended_inputs) >= self.num_inputs:
            self._switch_to_streaming()
        super().end_input(input_index)

    def finish(self) -> None:
        if self._buffering:
            self._switch_to_streaming()
        super().finish()

    def is_checkpoint_blocked(self) -> str | None:
        return None  # buffered backlog is checkpointed (snapshot_backlog)

    # -- checkpoints while buffering --------------------------------------------------------------
    def snapshot_backlog(self) -> dict[str, Any] | None:
        """The buffered backlog (None when not buffering): the sort buffers (runs as shared files, the
        in-memory tail as Arrow IPC segments), their key dictionary, the held watermarks, the count
        of arrivals and :meth:`snapshot_own_buffers`."""
        if not self._buffering:
            return None
        buffers = self._backlog_buffers
        keys = buffers[0].key_dictionary.checkpoint_files(buffers[0].spill_directory)
        return {"held": list(self._held), "arrivals": self._arrivals, "watermark": self.current_watermark,
                "keys": keys, "buffers": [buffer.snapshot() for buffer in buffers], "own": self.snapshot_own_buffers()}

    def restore_backlog(self, state: dict[str, Any]) -> None:
        """Keep a checkpoint's buffered backlog until :meth:`open` puts it back into new buffers."""
        self._restored_backlog = state

    def open(self) -> None:
        super().open()
        state, self._restored_backlog = self._restored_backlog, None
        if state is not None:
            self._resume_backlog(state)

    def _resume_backlog(self, state: dict[str, Any]) -> None:
        """Go on buffering the backlog a checkpoint held, as the run that took it would have."""
        if self.ctx.batch_engine is None:
            raise SlipstreamError(
                f"{self.where()} was checkpointed while it sorted its backlog, but now runs without backlog "
                "sorting (env.configure(backlog_sorting=...)): restore it with backlog sorting as it was")
        self.current_watermark = max(self.current_watermark, state["watermark"])
        self._start_backlog()
        buffers = self._backlog_buffers
        buffers[0].key_dictionary.restore(state["keys"], buffers[0].spill_directory)
        for buffer, buffer_state in zip(buffers, state["buffers"], strict=True):
            buffer.restore(buffer_state)
        self._held = list(state["held"])
        self._arrivals = state["arrivals"]
        self.restore_own_buffers(state["own"])

    def close(self) -> None:
        for buffer in self._backlog_buffers:
            buffer.close()
        self._backlog_buffers = []
        super().close()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: batch work creates millions of rows, and the collections they
    would trigger (each walking every object made since the last) cost more than the work. Reference
    counting still frees them; a cycle made meanwhile is collected afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


PROCESSING_TIME_CALLS = frozenset({"register_processing_time_timer", "get_current_processing_time",
                                   "current_processing_time"})


def uses_processing_time(obj: Any) -> bool:
    """Whether the code of ``obj`` (a function, or the methods of its class and their nested
    functions) reads the processing-time clock or registers processing-time timers: a hint for
    ``explain()``, read from the code."""
    if isinstance(obj, types.FunctionType):
        codes = [obj.__code__]
    else:
        codes = [member.__code__ for klass in type(obj).__mro__
                 for member in vars(klass).values() if isinstance(member, types.FunctionType)]
    while codes:
        code = codes.pop()
        if not PROCESSING_TIME_CALLS.isdisjoint(code.co_names):
            return True
        codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return False

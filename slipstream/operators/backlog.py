"""``BacklogSortingOperator``: the FLIP-327 switch, shared by every keyed sorting operator (co-group too).

An operator that derives from this class declares ``has_internal_sorter`` and, when the
runtime gave it a batch engine (``OperatorContext.batch_engine``; ``env.configure(
backlog_sorting=False)`` gives none), behaves like this:

1. **Backlog begins** (``RecordAttributes(is_backlog=True)`` on any input): records are
   no longer processed but put into a :class:`~slipstream.operators.sort_buffer.SortBuffer`
   (spilling to disk past ``sort_memory_budget`` records). Nothing is emitted.
   Watermarks are *held*: the operator remembers them but does not advance its event
   time, so no event-time timer fires and no watermark is forwarded.
2. **Backlog ends** (every input says ``is_backlog=False``; for a bounded input this
   arrives right after its final watermark and before ``end_input``): the switch.
   :meth:`BacklogSortingOperator.process_backlog` runs the buffer as sorted batch work —
   by default it replays the records key by key, each key's records in timestamp
   order (then arrival order), through the operator's own ``process_batch``, so the
   keyed state the streaming path would build is built; subclasses may replace it by
   vectorised work that installs the same state. Then the held watermark is applied
   (timers due by it fire now), and only then is ``is_backlog=False`` forwarded, so what
   the switch emitted still counts as backlog downstream.
3. **Afterwards** the operator processes record by record from the installed state.

What differs from processing the same records in pure streaming:

* order: all of a key's backlog records are processed before any later key's, and in
  timestamp order rather than arrival order (so order-sensitive functions see sorted input);
* time: event-time timers and windows of the backlog fire after the whole backlog was
  replayed, at the held watermark, not interleaved with the records; a backlog record is
  never late (its watermark was held), where streaming might have dropped it;
* output: outputs caused during the backlog all appear at the switch.

Without a batch engine the operator processes backlog record by record like any other.
Checkpoints are refused while records are buffered (``is_checkpoint_blocked``).

Metrics (in ``ctx.metrics``): ``backlog_records`` and ``spilled_bytes`` (kept up to date
while buffering, summed over subtasks), ``backlog_seconds`` (backlog start to the end of
the switch) and ``switch_time`` (seconds the batch work at the switch took) — the
longest over subtasks, summed over backlog phases — ``batch_engine`` (the engine's
name) and ``switched_at`` (the ``time.perf_counter()`` reading when the last switch ended).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from slipstream.attributes import OperatorAttributes, RecordAttributes
from slipstream.datastream.transformations import Transformation
from slipstream.errors import SlipstreamError
from slipstream.operators.base import OperatorContext, StreamOperator
from slipstream.operators.elements import RecordBatch
from slipstream.operators.sort_buffer import KeyDictionary, SortBuffer


class BacklogSortingOperator(StreamOperator):
    """Base of keyed operators that buffer and sort their backlog (see the module docstring).

    A subclass calls :meth:`buffer_backlog` at the top of its ``process_batch`` while
    :attr:`is_buffering_backlog`; may override :meth:`backlog_field` and
    :meth:`process_backlog`; and must call ``super()`` from ``setup``, ``end_input`` and
    ``close`` when it overrides them.

    Operators of several inputs (co-group, join) get one buffer per input, all sharing
    one :class:`~slipstream.operators.sort_buffer.KeyDictionary` so that
    :func:`~slipstream.operators.sort_buffer.co_grouped` can walk them key by key; they
    override :meth:`backlog_key_selector` when their keys are not
    ``transformation.key_selectors[input_index]``, and :meth:`run_backlog`. One that keeps
    buffers of its own besides (the co-group's columnar ones) opens them in
    :meth:`begin_backlog`, fills them from its :meth:`buffer_backlog` and closes them in
    its :meth:`run_backlog` and ``close``: the switch, the held watermark and the metrics
    stay here.
    """

    backlog_batch_size: ClassVar[int] = 1024
    """Records per batch when the backlog is replayed through ``process_batch``."""

    _buffering: bool = False

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        declared = super().attributes_for(transformation)
        return OperatorAttributes(declared.is_output_on_eof(), declared.is_output_on_checkpoint(), True)

    def setup(self, ctx: OperatorContext) -> None:
        super().setup(ctx)
        self._buffering = False
        self._backlog_buffers = []
        self._ended_inputs: set[int] = set()
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
        return self.transformation.key_selectors[input_index]

    def begin_backlog(self) -> None:
        """Called when buffering begins, once the sort buffers exist; nothing by default."""

    def run_backlog(self, buffers: list[SortBuffer]) -> None:
        """Run the buffered backlog, one buffer per input (any may be empty), at every switch.

        One-input operators override :meth:`process_backlog` instead.
        """
        if len(buffers[0]):
            self.process_backlog(buffers[0])

    def process_backlog(self, buffer: SortBuffer) -> None:
        """Run the buffered backlog (at the switch, before the held watermark is applied).

        By default: replay every record, key by key in timestamp order, through
        ``process_batch``, exactly as if it had arrived in that order while streaming.
        """
        for batch in buffer.batches(self.backlog_batch_size):
            self.process_batch(batch)

    # -- buffering ---------------------------------------------------------------------------------
    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        """Put ``batch`` into its input's sort buffer (called by ``process_batch`` while buffering)."""
        selector = self.backlog_key_selector(input_index)
        values = batch.values
        keys: list[Any] = []
        append = keys.append
        value: Any = None
        try:
            for value in values:
                append(selector(value))
            self._backlog_buffers[input_index].add(keys, values, batch.timestamps)
        except SlipstreamError:
            raise
        except Exception as exc:
            what = "record" if self.num_inputs < 2 else f"record of input {input_index + 1}"
            raise self.user_error(value, exc, what=what) from exc

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        self._input_backlog[input_index] = attributes.is_backlog()
        backlog = any(self._input_backlog)
        if backlog and not self._buffering and self.ctx.batch_engine is not None:
            self._start_backlog()
        elif not backlog and self._buffering:
            self._switch_to_streaming()
        super().process_record_attributes(attributes, input_index)

    def _advance_combined_watermark(self) -> None:
        if self._buffering:
            return  # held: applied right after the switch
        super()._advance_combined_watermark()

    def _start_backlog(self) -> None:
        ctx = self.ctx
        engine = ctx.batch_engine
        keys = KeyDictionary()
        self._backlog_buffers = [
            SortBuffer(engine, memory_budget=ctx.sort_memory_budget, spill_dir=ctx.spill_dir, key_dictionary=keys,
                       metrics=ctx.metrics, field=self.backlog_field(), name=ctx.name)
            for _ in range(max(1, self.num_inputs))]
        self.begin_backlog()
        self._buffering = True
        self._backlog_started = time.perf_counter()
        ctx.metrics["backlog_phase"] = "buffering"
        ctx.metrics["batch_engine"] = getattr(engine, "name", type(engine).__name__)

    def _switch_to_streaming(self) -> None:
        """The switch: run the buffered backlog as batch work, apply the held watermark."""
        buffers, self._backlog_buffers = self._backlog_buffers, []
        self._buffering = False
        started = time.perf_counter()
        self.ctx.metrics["backlog_phase"] = "batch work"
        try:
            self.run_backlog(buffers)
        finally:
            for buffer in buffers:
                buffer.close()
        self._advance_combined_watermark()
        ended = time.perf_counter()
        self._switch_seconds += ended - started
        self._backlog_seconds += ended - self._backlog_started
        metrics = self.ctx.metrics
        metrics["switch_time"] = max(metrics.get("switch_time", 0.0), self._switch_seconds)
        metrics["backlog_seconds"] = max(metrics.get("backlog_seconds", 0.0), self._backlog_seconds)
        metrics["switched_at"] = ended
        metrics["backlog_phase"] = "streaming"

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
        if self._buffering:
            return f"operator '{self.ctx.name}' is sorting backlog input"
        return None

    def close(self) -> None:
        for buffer in self._backlog_buffers:
            buffer.close()
        self._backlog_buffers = []
        super().close()

"""The operator behind ``assign_timestamps_and_watermarks``: event timestamps and watermarks.

It gives each record the timestamp its strategy's assigner extracts, feeds the
watermark generator, and emits the records with their new timestamps followed
by the watermarks the generator produced. Upstream watermarks and watermark
statuses are ignored, as in Flink, except the final ``MAX_WATERMARK`` at end of
input, which is forwarded so downstream event time can finish.

Periodic watermarks: Flink asks the generator for its periodic watermark every
``auto_watermark_interval`` (200 ms) of processing time. Here the operator asks
after every input batch instead, which is deterministic for a given input and
never later than Flink's timer when batches are small. With
``with_idleness`` a processing-time timer also asks when no batch came, so an
input that falls silent is marked idle.

No batch path: during backlog it still runs record by record, since every
later sort or window needs the timestamps it assigns — except for Arrow batches whose
timestamps are a field (``with_timestamp_assigner(FieldTimestampAssigner("ts"))``) and a built-in periodic
generator, which take the column and stay columnar.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from slipstream.datastream.fields import as_item_getter
from slipstream.datastream.time import MAX_TIMESTAMP, MAX_WATERMARK, MIN_TIMESTAMP, Watermark
from slipstream.datastream.transformations import TimestampsAndWatermarksTransformation
from slipstream.datastream.watermark_strategy import (
    AscendingTimestampsWatermarks,
    BoundedOutOfOrdernessWatermarks,
    FieldTimestampAssigner,
    NoWatermarksGenerator,
    TimestampAssigner,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStrategy,
)
from slipstream.errors import InvalidProgramError, user_code
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch, WatermarkStatus

PERIODIC_GENERATORS = (BoundedOutOfOrdernessWatermarks, AscendingTimestampsWatermarks, NoWatermarksGenerator)
"""Generators that keep only the largest timestamp and emit on the periodic call: seeing a batch's
largest timestamp once is the same to them as seeing every record's."""

_INT_ONLY = frozenset({int})


def timestamp_item_getter(assigner: TimestampAssigner) -> Callable[[Any], Any] | None:
    """``operator.itemgetter(c)`` when ``assigner`` wraps ``lambda r, _: r[c]`` (the usual assigner), else None."""
    function = getattr(assigner, "callable_", None)
    if function is None:
        return None
    getter = as_item_getter(function, arguments=2)
    return None if getter is function else getter


def _checked_timestamp(timestamp: Any) -> int:
    """Accept integer-like timestamps (``int``, numpy integers); refuse floats, bools and the rest."""
    if isinstance(timestamp, bool) or not hasattr(timestamp, "__index__"):
        raise TypeError(f"the timestamp assigner returned {timestamp!r} "
                        f"({type(timestamp).__name__}); expected integer milliseconds since the epoch")
    return operator.index(timestamp)


class _OperatorWatermarkOutput(WatermarkOutput):
    """The :class:`WatermarkOutput` the generator writes to: forwards only rising watermarks.

    Before a watermark or an idle status goes out, the records of the current
    batch seen so far are emitted, so a watermark the generator emits from
    ``on_event`` follows the record that caused it, as in Flink.
    """

    def __init__(self, op: TimestampsAndWatermarksOperator) -> None:
        self._op = op

    def emit_watermark(self, watermark: Watermark) -> None:
        op = self._op
        if watermark.timestamp <= op.current_watermark:
            return
        op.flush_pending()
        self.mark_active()
        op.current_watermark = watermark.timestamp
        op.output.emit_watermark(Watermark(watermark.timestamp))

    def mark_idle(self) -> None:
        op = self._op
        if not op.idle:
            op.flush_pending()
            op.idle = True
            op.output.emit_watermark_status(WatermarkStatus(idle=True))

    def mark_active(self) -> None:
        op = self._op
        if op.idle:
            op.idle = False
            op.output.emit_watermark_status(WatermarkStatus(idle=False))


class TimestampsAndWatermarksOperator(StreamOperator):
    """Assigns event timestamps and generates watermarks by a :class:`WatermarkStrategy`."""

    transformation_type = TimestampsAndWatermarksTransformation
    backlog = streamed("it stamps each record as it passes and has no key to sort by")

    def __init__(self, transformation: TimestampsAndWatermarksTransformation) -> None:
        super().__init__(transformation)
        strategy = transformation.watermark_strategy
        if not isinstance(strategy, WatermarkStrategy):
            raise InvalidProgramError(f"'{transformation.name}' needs a WatermarkStrategy, "
                                      f"got {strategy!r}")
        self.strategy = strategy
        self.idle = False
        self._assigner: TimestampAssigner
        self._generator: WatermarkGenerator
        self._keeps_largest = False  # the generator keeps only the largest timestamp: one call a batch
        self._item_getter: Callable[[Any], Any] | None = None
        self._wm_output = _OperatorWatermarkOutput(self)
        self._pending_values: list[Any] = []
        self._pending_timestamps: list[Any] = []
        self._flushed = 0
        self._idle_timeout = strategy.get_idle_timeout()
        self._last_activity = 0
        self._timer_armed = False

    def open(self) -> None:
        super().open()
        clock = self.ctx.processing_time_service.get_current_processing_time
        self._assigner = self.strategy.create_timestamp_assigner()
        with user_code(self, lambda: self.strategy.generator_supplier, what="watermark generator supplier"):
            self._generator = self.strategy.create_watermark_generator(clock)
        self._keeps_largest = type(self._generator) in PERIODIC_GENERATORS
        self._item_getter = timestamp_item_getter(self._assigner)
        if self._idle_timeout is not None:
            self._last_activity = clock()
            self._arm_idle_timer()

    # -- records --------------------------------------------------------------------------------
    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if self._columnar_timestamps(batch):
            return
        values = batch.values
        if not values:
            return
        self._wm_output.mark_active()  # records make an idle output active again
        if self._keeps_largest:
            stamps = self._extract_at_once(values, batch.timestamps)
            self._pending_values, self._pending_timestamps, self._flushed = values, stamps, 0
            self._generator.on_event(None, max(stamps), self._wm_output)
        else:
            self._extract_each(values, batch.timestamps, self._generator.on_event)
        self.flush_pending()
        self._after_batch()

    def _extract_at_once(self, values: list[Any], carried: list[Any] | None) -> list[int]:
        """Every record's timestamp, for a generator that sees only the batch's largest: in C where the
        assigner is ``lambda r, _: r[c]``, else in one comprehension; should one fail, again one record at
        a time, so that the error names the record (assigners are pure functions of their record)."""
        try:
            if self._item_getter is not None:
                stamps = list(map(self._item_getter, values))
            else:
                extract = self._assigner.extract_timestamp
                stamps = [extract(value, MIN_TIMESTAMP) for value in values] if carried is None else \
                    [extract(value, MIN_TIMESTAMP if previous is None else previous)
                     for value, previous in zip(values, carried, strict=True)]
        except Exception:  # noqa: BLE001 - found again and named below
            return self._extract_each(values, carried, None)
        if not _INT_ONLY.issuperset(map(type, stamps)):
            value = None
            with user_code(self, lambda: value):
                for index, value in enumerate(values):  # noqa: B007 - the record the error names
                    stamps[index] = _checked_timestamp(stamps[index])
        return stamps

    def _extract_each(self, values: list[Any], carried: list[Any] | None,
                      on_event: Callable[[Any, int, WatermarkOutput], None] | None) -> list[int]:
        """Every record's timestamp, one record at a time, each seen by ``on_event`` (a punctuated
        generator, which may emit a watermark between two records: the records before it are sent first)."""
        extract = self._assigner.extract_timestamp
        wm_output = self._wm_output
        stamps: list[int] = []
        self._pending_values, self._pending_timestamps, self._flushed = values, stamps, 0
        value = None
        with user_code(self, lambda: value):
            for index, value in enumerate(values):
                previous = carried[index] if carried is not None else None
                timestamp = extract(value, MIN_TIMESTAMP if previous is None else previous)
                if type(timestamp) is not int:
                    timestamp = _checked_timestamp(timestamp)
                stamps.append(timestamp)
                if on_event is not None:
                    on_event(value, timestamp, wm_output)
        return stamps

    def _after_batch(self) -> None:
        self._periodic_emit()
        if self._idle_timeout is not None:
            self._last_activity = self.ctx.processing_time_service.get_current_processing_time()
            self._arm_idle_timer()

    def _columnar_timestamps(self, batch: RecordBatch) -> bool:
        """An Arrow batch whose timestamps are a field (a :class:`FieldTimestampAssigner`) keeps its
        columns: the timestamps are read from the column, and a periodic generator (which only keeps
        the largest timestamp) sees that largest one. False (nothing done) otherwise."""
        arrow = batch.arrow
        assigner = self._assigner
        if arrow is None or not isinstance(assigner, FieldTimestampAssigner) or \
                type(self._generator) not in PERIODIC_GENERATORS or not arrow.num_rows:
            return False
        field = assigner.field
        names = arrow.schema.names
        name = field if isinstance(field, str) else names[field] if 0 <= field < len(names) else None
        if name not in names:
            return False
        column = arrow.column(name)
        if not pa.types.is_integer(column.type) or column.null_count or column.type == pa.uint64():
            return False  # (a uint64 may not fit a timestamp: the records' path checks each)
        stamps = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        stamps = stamps.cast(pa.int64())
        self._wm_output.mark_active()
        self._generator.on_event(None, pc.max(stamps).as_py(), self._wm_output)
        self.output.collect_batch(RecordBatch(None, stamps, arrow=arrow))
        self._after_batch()
        return True

    def flush_pending(self) -> None:
        """Emit the current batch's records not yet emitted (all of them, unless a watermark cut in)."""
        end = len(self._pending_timestamps)
        if end > self._flushed:
            if self._flushed == 0 and end == len(self._pending_values):
                self.output.collect_batch(RecordBatch(self._pending_values, self._pending_timestamps))
            else:
                self.output.collect_batch(RecordBatch(self._pending_values[self._flushed:end],
                                                      self._pending_timestamps[self._flushed:end]))
            self._flushed = end

    def _periodic_emit(self) -> None:
        with user_code(self, lambda: self._generator, what="on_periodic_emit() of"):
            self._generator.on_periodic_emit(self._wm_output)

    # -- watermarks and idleness ----------------------------------------------------------------
    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        """Ignore upstream watermarks, except the end-of-input ``MAX_WATERMARK``, which is forwarded."""
        if watermark.timestamp == MAX_TIMESTAMP:
            self._wm_output.emit_watermark(MAX_WATERMARK)

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        """Ignore upstream idleness: this operator decides its own output's status."""

    def _arm_idle_timer(self) -> None:
        # One timer at a time; while idle none is needed, since the next batch re-arms it.
        if self._timer_armed or self.idle or self._idle_timeout is None:
            return
        self._timer_armed = True
        self.ctx.processing_time_service.register_timer(self._last_activity + self._idle_timeout,
                                                        self._on_idle_timer)

    def _on_idle_timer(self, timestamp: int) -> None:
        self._timer_armed = False
        if self.current_watermark == MAX_TIMESTAMP:
            return  # input ended: nothing left to be idle about
        self._periodic_emit()
        self._arm_idle_timer()

    def finish(self) -> None:
        """Ask the generator once more, as Flink's operator does when its input ends."""
        self._periodic_emit()

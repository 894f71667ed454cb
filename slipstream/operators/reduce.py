"""``KeyedReduceOperator``: a rolling reduce per key (``reduce``, ``sum``, ``min``, ``max``, ``*_by``).

Emits the key's combined value after every record, as Flink does in streaming.

During backlog (FLIP-327, see :mod:`slipstream.operators.backlog`) it buffers the
backlog and emits nothing until the switch. In BATCH mode it then reduces each key's
records in timestamp order (then arrival order) and emits **one final value per key** —
Flink's documented BATCH semantics — carrying the timestamp of the key's latest record,
stored as the key's accumulator, so streaming continues from it. In STREAMING mode it
folds each key's records in arrival order with the accumulator in a local variable and
emits every rolling update, each in the watermark interval its record arrived in, as
streaming does (:mod:`slipstream.operators.key_replay`); for a Python reduce function the
planner streams the backlog instead unless told to sort every kind. The built-in
aggregations (``sum``/``min``/``max``/``min_by``/``max_by``) are vectorised on the batch
engine when the aggregated field of every backlog record is a plain ``int`` (a sum
that fits int64) or a plain ``float`` (not NaN or -0.0; not for ``sum``, whose float
rounding depends on the order of additions); otherwise, and for user reduce functions,
each key's records are folded in Python. Both give what the rolling reduce would end
with had the records arrived in that order.

A built-in aggregation keyed by a field whose backlog arrives as Arrow batches (given an
in-process engine) keeps it as columns and, in both modes, computes the switch's output with
one polars query (:mod:`slipstream.operators.vectorised_reduce`), emitted as Arrow batches:
the same records, timestamps, watermarks and installed accumulators as the paths above
(counted in ``backlog_records_vectorised``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.fields import get_field, replace_field
from slipstream.datastream.functions import Function, ReduceFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.transformations import ReduceTransformation, Transformation
from slipstream.errors import SlipstreamError, key_cause, user_code
from slipstream.operators.backlog_path import VECTORISED, BacklogDeclaration, sorted_unless_streaming
from slipstream.operators.batch_engine import Aggregation
from slipstream.operators.columnar_backlog import (
    ColumnarBacklog,
    IntervalColumns,
    arrow_batches,
    interval_parts,
    records_of,
)
from slipstream.operators.elements import RecordBatch
from slipstream.operators.sort_buffer import SortBuffer

REDUCE_STATE = ValueStateDescriptor("_reduce_accumulator")


class KeyedReduceOperator(ColumnarBacklog):
    transformation: ReduceTransformation
    transformation_type = ReduceTransformation
    emits_declared_type = True
    replays_by_key = True

    def __init__(self, transformation: ReduceTransformation) -> None:
        super().__init__(transformation)
        self.function: ReduceFunction[Any] = transformation.function
        key_selector = transformation.key_selectors[0]
        if key_selector is None:
            raise SlipstreamError(f"reduce '{transformation.name}' needs a keyed stream (key_by before reduce)")
        self.key_selector = key_selector
        self._pending: tuple[Any, str] | None = None
        """A BATCH switch's final values on columns (frame, key column), installed as the keys'
        accumulators only when something needs them: a record after the switch or a snapshot. The
        switch comes at the end of the input, so in a job nothing but a checkpoint (the job's final
        one) can; with checkpointing on they are installed at once, as a checkpoint freezes the
        keyed state before it asks the operator for its own."""

    def user_functions(self) -> list[Function]:
        return [self.function]

    @classmethod
    def backlog_path(cls, transformation: Transformation) -> BacklogDeclaration:
        """Built-in aggregations run their backlog as one query; a Python reduce streams it in
        STREAMING mode, as sorting only adds its cost."""
        if cast(ReduceTransformation, transformation).aggregation is not None:  # the registry pairs the two
            return VECTORISED
        return sorted_unless_streaming("a rolling reduce with a Python function is called and emits once per "
                                       "record either way, so sorting only adds its own cost (benchmarks/backlog.py)")

    @classmethod
    def plan_notes(cls, transformation: Transformation) -> list[str]:
        """Which built-in aggregation this is."""
        aggregation = cast(ReduceTransformation, transformation).aggregation
        if aggregation is None:
            return []
        kind, field = aggregation
        return [f"built-in {kind} of field {field!r}"]

    @classmethod
    def backlog_work(cls, transformation: Transformation, batch_engine: str) -> str | None:
        """A built-in aggregation's backlog is one query when it comes as Arrow batches, which is known
        only when it comes; a Python reduce's is sorted batch work."""
        if cast(ReduceTransformation, transformation).aggregation is None:
            return None
        return (f"sorts its backlog and runs it as batch work on {batch_engine} (vectorised): one query over "
                "Arrow batches (a columnar source), while in STREAMING mode a backlog of Python rows streams record "
                'by record instead (folded key by key it costs more; backlog_sorting="always" folds it)')

    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        """In STREAMING mode a backlog whose first batch is Python rows is not buffered: replayed key by
        key, a rolling reduce emitting every value costs more than streaming it (benchmarks/backlog.py:
        4.9 s against 3.2 s for a sum over 10^6 tuples), while Arrow batches run as one query."""
        ctx = self.ctx
        if batch.arrow is None and not ctx.batch_mode and not ctx.sort_every_backlog and not self.holds_backlog():
            self.stream_the_rest_of_backlog()
            self.process_batch(batch, input_index)
            return
        super().buffer_backlog(batch, input_index)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if self._buffering:
            self.buffer_backlog(batch)
            return
        if self._pending is not None:
            self._install_pending()
        reduce = self.function.reduce
        key_selector = self.key_selector
        set_key = self.keyed_backend().set_current_key
        get, put = self.keyed_backend().value_accessors(REDUCE_STATE)
        out: list[Any] = []
        append = out.append
        value: Any = None
        key: Any = None
        with user_code(self, lambda: value, explain=lambda exc: key_cause(exc, key)):
            for value in batch.values:
                key = key_selector(value)
                current = get(key)
                if current is not None:
                    set_key(key)  # keyed state the function opened is the key's
                    current = reduce(current, value)
                    if current is None:  # stored, None would silently restart the key's fold
                        raise TypeError("the reduce function returned None; it must return the "
                                        "combined value")
                else:
                    current = value
                put(key, current)
                append(current)
        self.output.collect_batch(RecordBatch(out, batch.timestamps))

    # -- batch path (FLIP-327) ----------------------------------------------------------------------
    def columnar_aggregation(self) -> tuple[str, int | str] | None:
        return self.transformation.aggregation

    def combines_backlog(self) -> bool:
        """BATCH mode emits each key's final value only."""
        return self.ctx.batch_mode

    def run_columns(self, columns: IntervalColumns, frames: list[Any]) -> bool:
        """A columnar backlog runs as one polars query when its field allows."""
        return self._aggregate_columns(columns, frames, in_arrival_order=len(frames) == 1)

    def _aggregate_columns(self, columns: IntervalColumns, frames: list[Any], *, in_arrival_order: bool) -> bool:
        """The switch on columns: emit what the rolling reduce would have and install each key's
        accumulator. False (nothing done) when the field is not vectorisable or a key has state."""
        import polars as pl

        from slipstream.operators.vectorised_reduce import (
            final_values,
            last_per_key,
            rolling_updates,
            vectorisable_field,
        )
        frame = pl.concat(frames, rechunk=False)
        key, field, kind = columns.key_name(), columns.field, columns.kind
        assert field is not None  # named by the first batch the columns took
        if not vectorisable_field(frame[field], kind) or self._has_accumulators(frame[key]):
            return False
        self.count_vectorised(len(columns))  # the records taken, some combined into others (BATCH)
        if self.ctx.batch_mode:
            finals = final_values(frame, key, field, kind, in_arrival_order=in_arrival_order)
            if self.ctx.checkpointing:
                self._install_rows(finals, key)
            else:
                self._pending = (finals, key)
            self._emit_columns(finals)
            return True
        updates = rolling_updates(frame, key, field, kind, in_arrival_order=in_arrival_order)
        self._install_rows(last_per_key(updates, key), key)
        for interval, part in interval_parts(updates):
            self.apply_held_watermarks(interval)
            self._emit_columns(part)
        return True

    def _has_accumulators(self, keys: Any) -> bool:
        """Whether a key of ``keys`` (a polars Series) already has an accumulator (restored state):
        one look-up per key only when the state holds any."""
        backend = self.keyed_backend()
        if next(iter(backend.keys(REDUCE_STATE.name)), None) is None:
            return False
        get, _ = backend.value_accessors(REDUCE_STATE)
        return any(get(key) is not None for key in keys.unique().to_list())

    def _install_rows(self, frame: Any, key: str) -> None:
        """Each key's rolling value (a row of ``frame``) becomes its accumulator, loaded at once."""
        self.keyed_backend().bulk_load(REDUCE_STATE, frame[key].to_list(), rows_from_arrow(records_of(frame)))

    def _install_pending(self) -> None:
        """Install the accumulators a BATCH switch left pending (see :attr:`_pending`)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._install_rows(*pending)

    def snapshot_state(self) -> Any:
        self._install_pending()
        return super().snapshot_state()

    def close(self) -> None:
        self._pending = None
        super().close()

    def _emit_columns(self, frame: Any) -> None:
        for batch, stamps in arrow_batches(frame):
            self.output.collect_batch(RecordBatch(None, stamps, arrow=batch))

    def backlog_field(self) -> Callable[[Any], Any] | None:
        aggregation = self.transformation.aggregation
        if aggregation is None:
            return None
        field = aggregation[1]
        return lambda value: get_field(value, field)

    def process_backlog(self, buffer: SortBuffer) -> None:
        """Reduce each key's backlog and store it as the key's accumulator.

        In BATCH mode emit one final value per key (Flink's documented BATCH semantics; the
        built-in aggregations run vectorised on the engine). In STREAMING mode replay it through
        the rolling reduce, which emits every update, so a job's output does not depend on
        whether its input was sorted backlog.
        """
        if not self.ctx.batch_mode:
            self._replay_per_key(buffer)
            return
        results = self._aggregate_vectorised(buffer)
        if results is None:
            results = self._reduce_per_key(buffer)
        with_timestamps = buffer.has_timestamps
        values: list[Any] = []
        stamps: list[Any] = []
        for value, timestamp in results:
            values.append(value)
            stamps.append(timestamp)
            if len(values) >= self.backlog_batch_size:
                self.output.collect_batch(RecordBatch(values, stamps if with_timestamps else None))
                values, stamps = [], []
        if values:
            self.output.collect_batch(RecordBatch(values, stamps if with_timestamps else None))

    def _replay_per_key(self, buffer: SortBuffer) -> None:
        """STREAMING mode: fold each key's records in arrival order with the accumulator in a
        local variable, emitting every rolling value in the interval its record arrived in."""
        replay = self.key_replay(buffer)  # no timers: outputs go straight to their interval's list
        get, put = self.keyed_backend().value_accessors(REDUCE_STATE)
        out_values, out_stamps = replay.outputs.values, replay.outputs.stamps
        for key, intervals, stamps, values in replay.runs():
            current = get(key)
            for index, current in enumerate(self._rolling(current, values)):  # noqa: B020  (the last rolled value stays)
                interval = intervals[index]
                out_values[interval].append(current)
                out_stamps[interval].append(stamps[index])
            put(key, current)
        replay.emit()

    def _rolling(self, current: Any, values: list[Any]) -> Iterator[Any]:
        """Each value of folding ``values`` one by one into ``current`` (None: nothing yet)."""
        reduce = self.function.reduce
        value: Any = None
        with user_code(self, lambda: value):
            for value in values:
                if current is None:
                    current = value
                else:
                    current = reduce(current, value)
                    if current is None:
                        raise TypeError("the reduce function returned None; it must return the combined value")
                yield current

    def _install(self, key: Any, partial: Any) -> Any:
        """Fold ``partial`` (the reduce of the key's backlog) into the key's accumulator."""
        get, put = self.keyed_backend().value_accessors(REDUCE_STATE)
        current = get(key)
        if current is not None:
            self.keyed_backend().set_current_key(key)
            with user_code(self, lambda: partial):
                partial = self.function.reduce(current, partial)
            if partial is None:
                raise self.user_error(current, TypeError("the reduce function returned None; it must "
                                                         "return the combined value"))
        put(key, partial)
        return partial

    def _reduce_per_key(self, buffer: SortBuffer) -> Iterator[tuple[Any, int | None]]:
        """The Python path: fold each key's records in order with the reduce function, yielding
        the key's final value."""
        get, put = self.keyed_backend().value_accessors(REDUCE_STATE)
        set_key = self.keyed_backend().set_current_key
        for key, stamps, values in buffer.groups():
            set_key(key)
            current = get(key)
            for current in self._rolling(current, values):  # noqa: B007, B020  (runs the fold; the last value stays)
                pass
            put(key, current)
            yield current, stamps[-1]

    def _aggregate_vectorised(self, buffer: SortBuffer) -> Iterator[tuple[Any, int | None]] | None:
        """The built-in aggregations on the engine; None when the backlog does not allow it.

        ``sum``/``min``/``max`` keep the other fields of the key's first record (in
        timestamp, then arrival order), ``min_by``/``max_by`` return the first record holding
        the extreme value, as the rolling reduce does.
        """
        aggregation = self.transformation.aggregation
        if aggregation is None:
            return None
        kind, field = aggregation
        table = buffer.field_table()
        if table is None or (kind == "sum" and table.schema.field("field").type != "int64"):
            return None
        engine = self.ctx.batch_engine
        latest = Aggregation("max", "ts", "ts")
        if kind in ("sum", "min", "max"):
            result = engine.group_aggregate(
                table, ["key"], [Aggregation(kind, "field", "value"), Aggregation("first", "seq", "pick"), latest],
                order_by=["ts", "seq"])
            combined = result.column("value").to_pylist()
        elif kind in ("min_by", "max_by"):
            result = engine.group_aggregate(
                table, ["key"], [Aggregation("first", "seq", "pick"), latest],
                order_by=["field", "ts", "seq"], descending=[kind == "max_by", False, False])
            combined = None
        else:
            return None
        picks = result.column("pick").to_pylist()
        records = buffer.values_at(picks)
        key_ids = result.column("key").to_pylist()
        stamps = result.column("ts").to_pylist()

        def results() -> Iterator[tuple[Any, int | None]]:
            for index, key_id in enumerate(key_ids):
                record = records[picks[index]]
                partial = record if combined is None else replace_field(record, field, combined[index])
                yield self._install(buffer.key_of(key_id), partial), stamps[index]

        return results()

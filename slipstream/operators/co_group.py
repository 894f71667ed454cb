"""``CoGroupOperator``: two keyed inputs windowed together, for ``co_group`` and ``join``.

Streaming path: Flink lowers a co-group to tag → union → key_by → window → a window
function that splits by tag. This operator does the same inside one two-input
operator: each record is tagged with its input (0 or 1), keyed with that input's key
selector, and handed to the window machinery of :class:`WindowOperator` (assigners,
triggers — which see the tagged elements of both inputs, as in Flink —, evictors,
allowed lateness, merging windows). The window contents are one keyed ``ListState`` of
tagged records per key and window; when a window fires, the contents are split by tag
and the function gets ``co_group(first, second)``. A join is a co_group whose function
is the nested loop over the two sides (:class:`~slipstream.datastream.co_group.JoinCoGroupFunction`).
Results carry the window's ``max_timestamp()``.

A :class:`~slipstream.datastream.co_group.VectorizedCoGroupFunction` is called once per
window per flush with the DataFrames of every key whose window fired in that step
(one record batch, one watermark), not once per key.

Backlog (FLIP-327), the batch path: while any input is backlog and the operator was given
a batch engine, records of both inputs only go into two
:class:`~slipstream.operators.sort_buffer.SortBuffer` (one per input, sharing their key
ids and their count of arrivals; spilling to disk past ``sort_memory_budget``) and the
watermarks are held; nothing is emitted. When the backlog ends on both inputs (for
bounded inputs: just after their final, maximum watermark and just before ``end_input``),
the buffers run as batch work:

* EndOfStreamWindows (with their own trigger), whose results cannot depend on any
  watermark before the last, are read key by key (keys in first-seen order, each key's
  records in arrival order in STREAMING mode, in timestamp order in BATCH mode). When the
  final watermark has already arrived (the bounded case) every window is complete, so the
  function runs directly over each key's two groups — or, vectorised, once over
  DataFrames of all keys — with no window state, timer or trigger; otherwise (a backlog
  that ends before the input does, as with a hybrid source) the records are replayed
  through the streaming path, which installs them as window state;
* other windows are replayed through the streaming path as
  :mod:`slipstream.operators.backlog` describes (in STREAMING mode interval by interval,
  both inputs' records of a key in their arrival order, the held watermarks applied
  between the intervals), so windows fire and records are late as when the backlog streams.

How the direct evaluation runs — on the row buffers key by key or vectorised, on the columns
partition by partition, or on an out-of-process engine — is the batch work's
(:mod:`slipstream.operators.co_group_batch`), which sees this operator only through
:class:`~slipstream.operators.co_group_batch.CoGroupHost`.

Then ``is_backlog=False`` is forwarded, after the output of the switch, and records are
processed one by one (streaming). Without a batch engine (``env.configure(
backlog_sorting=False)``) backlog is processed record by record too. Metrics as
:mod:`slipstream.operators.backlog` describes, plus ``backlog_keys_evaluated``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from slipstream.attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.datastream.co_group import VectorizedCoGroupFunction
from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.fields import FieldKey
from slipstream.datastream.transformations import (
    CoGroupTransformation,
    Transformation,
    WindowTransformation,
)
from slipstream.datastream.window import GlobalWindow, Window, is_end_of_stream_window
from slipstream.errors import SlipstreamError, UserCode, user_code
from slipstream.operators.backlog_path import SORTED, VECTORISED, BacklogDeclaration
from slipstream.operators.base import split_outputs
from slipstream.operators.co_group_batch import (
    BATCH_KEYS_METRIC,
    CoGroupBatchWork,
    column_batch_work,
    columns_ready,
    key_guard,
    row_batch_work,
)
from slipstream.operators.co_group_columns import COLUMNAR_CHUNK
from slipstream.operators.co_group_frames import frame_rows, records_to_frame
from slipstream.operators.columnar_buffer import (
    SPILL_PARTITIONS,
    TS_COLUMN,
    ColumnarBuffer,
    restore_columnar_buffers,
)
from slipstream.operators.elements import RecordBatch
from slipstream.operators.memory import columnar_buffer_bytes
from slipstream.operators.sort_buffer import BufferOrder, SortBuffer
from slipstream.operators.window import WindowOperator


def _input_keys(transformation: CoGroupTransformation) -> list[Callable[[Any], Any]]:
    """The key selectors of both inputs (a co_group joins keyed inputs)."""
    selectors = [selector for selector in transformation.key_selectors if selector is not None]
    if len(selectors) != 2:
        raise SlipstreamError(f"co_group '{transformation.name}' needs both inputs keyed (where/equal_to)")
    return selectors


def _tagged_key(selectors: list[Callable[[Any], Any]]) -> Callable[[tuple[int, Any]], Any]:
    first, second = selectors

    def key_of(tagged: tuple[int, Any]) -> Any:
        return first(tagged[1]) if tagged[0] == 0 else second(tagged[1])

    return key_of


class CoGroupOperator(WindowOperator):
    """Keyed two-input windows evaluated by a co-group function (joins included)."""

    transformation_type = CoGroupTransformation
    num_inputs = 2

    def __init__(self, transformation: CoGroupTransformation) -> None:
        view = WindowTransformation(
            id=transformation.id, name=transformation.name, inputs=transformation.inputs,
            parallelism=transformation.parallelism, uid=transformation.uid,
            key_selectors=[_tagged_key(_input_keys(transformation))], scope=transformation.scope,
            assigner=transformation.assigner, trigger=transformation.trigger,
            evictor=transformation.evictor, allowed_lateness=transformation.allowed_lateness,
            function_kind="apply", function=transformation.function)
        super().__init__(view)
        self.transformation = transformation
        self.vectorized = bool(transformation.vectorized)
        self._input_selectors = _input_keys(transformation)
        self._input_types = list(transformation.input_types) + [None] * (2 - len(transformation.input_types))
        self._end_of_stream = is_end_of_stream_window(self.assigner, self.trigger)
        self._pending: list[tuple[Window, Any, list[Any], list[Any]]] = []  # vectorised evaluations of this step
        self._frame_columns: list[Any] = [None, None]  # last columns seen per input, for empty sides
        self._columnar: list[ColumnarBuffer | None] = [None, None]  # per input, while it arrives as Arrow
        self._streamed = False  # whether any record went through the streaming path
        self._calling: tuple[Window, Any] = (GlobalWindow.get(), None)  # the window and key being evaluated

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        """Sorts its backlog; with EndOfStreamWindows it also emits only at end of input."""
        co_group = cast(CoGroupTransformation, transformation)  # the registry pairs the two
        assigner = co_group.assigner
        trigger = co_group.trigger or (assigner.get_default_trigger() if assigner else None)
        return (OperatorAttributesBuilder().set_has_internal_sorter(True)
                .set_is_output_on_eof(is_end_of_stream_window(assigner, trigger)).build())

    @classmethod
    def backlog_path(cls, transformation: Transformation) -> BacklogDeclaration:
        """A vectorised function runs over DataFrames of many keys; a per-key one once per key and window."""
        return VECTORISED if cast(CoGroupTransformation, transformation).vectorized else SORTED

    # -- elements -------------------------------------------------------------------------------
    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        timestamps = batch.timestamps
        if self._buffering:
            self.buffer_backlog(batch, input_index)
            return
        self._streamed = True
        value = None
        with user_code(self, lambda: value, what=f"record of input {input_index + 1}"):
            for i, value in enumerate(batch.values):
                self._process_element((input_index, value), None if timestamps is None else timestamps[i])
        self._flush()

    # -- evaluation -------------------------------------------------------------------------------
    def _evaluate(self, window: Window, inputs: list[Any]) -> None:
        first = [value for tag, value in inputs if tag == 0]
        second = [value for tag, value in inputs if tag == 1]
        key = self.backend.get_current_key()
        if self.vectorized:
            self._pending.append((window, key, first, second))
            return
        self.call(window, key, first, second)

    def call(self, window: Window, key: Any, first: list[Any], second: list[Any]) -> None:
        """Run the co-group function for one key and window, naming both if it fails."""
        self._calling = (window, key)
        with self._key_guard:
            self.collect(window, first, second)

    @functools.cached_property
    def _key_guard(self) -> UserCode:
        """One guard for every call of :meth:`call` (building one per key costs more than entering it)."""
        return key_guard(self, lambda: self._calling[0], lambda: self._calling[1])

    def collect(self, window: Window, first: list[Any], second: list[Any]) -> None:
        """Run the co-group function over one key's groups (its key current) and collect its outputs."""
        split_outputs(self.function.co_group(first, second), window.max_timestamp(), self._values,
                      self._timestamps, self._side)

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            by_window: dict[Window, tuple[list[Any], list[Any], list[Any]]] = {}
            for window, key, first, second in pending:
                keys, firsts, seconds = by_window.setdefault(window, ([], [], []))
                keys.append(key)
                firsts.extend(first)
                seconds.extend(second)
            for window, (keys, firsts, seconds) in by_window.items():
                self.call_vectorized(window, keys, firsts, seconds)
        super()._flush()

    def call_vectorized(self, window: Window, keys: list[Any], first: list[Any], second: list[Any]) -> None:
        """Run the vectorised function over DataFrames of ``first`` and ``second`` (many keys)."""
        frames: list[Any] = []
        shown = keys if len(keys) <= 5 else [*keys[:5], "…"]
        with user_code(self, lambda: window, what=f"{len(keys)} key(s) {shown}, window",
                       explain=lambda exc: _blind_frame_cause(exc, frames)):
            frames = [self.frame(first, 0), self.frame(second, 1)]
            result = self.function.co_group(*frames)
            rows = frame_rows(result, first[0] if first else second[0])
        timestamp = window.max_timestamp()
        self._values.extend(rows)
        self._timestamps.extend([timestamp] * len(rows))

    def frame(self, records: list[Any], input_index: int) -> Any:
        """The DataFrame of ``records`` of input ``input_index``, typed by the input's declared type;
        an empty one has the columns the input's last records had."""
        frame = records_to_frame(records, self._input_types[input_index], self._frame_columns[input_index])
        if records:
            self._frame_columns[input_index] = frame.clear()
        return frame

    # -- what the batch work sees (CoGroupHost) ------------------------------------------------------
    def set_current_key(self, key: Any) -> None:
        self.backend.set_current_key(key)

    def outputs(self) -> tuple[list[Any], list[Any], dict[Any, Any]]:
        return self._values, self._timestamps, self._side

    def flush(self) -> None:
        self._flush()

    def emit_arrow(self, batch: Any, timestamp: int) -> None:
        self._flush()  # rows collected before stay before
        self.output.collect_batch(RecordBatch(None, [timestamp] * batch.num_rows, arrow=batch))

    # -- backlog (the switch, the held watermarks and the metrics: BacklogSortingOperator) ---------
    def backlog_order(self) -> BufferOrder:
        """EndOfStreamWindows cannot fire before the last watermark: their backlog is read key by key."""
        if self._end_of_stream and not self.ctx.batch_mode:
            return BufferOrder.ARRIVAL
        return super().backlog_order()

    def begin_backlog(self) -> None:
        """Inputs keyed by a field are buffered as Arrow while they arrive as Arrow (given an
        in-process engine: the columnar path runs here, and a backlog read by key, not by
        watermark interval); the first row batch moves them to their SortBuffer."""
        ctx = self.ctx
        columnar = getattr(ctx.batch_engine, "in_process", True) and \
            self._backlog_buffers[0].order is not BufferOrder.INTERVAL
        self._columnar = [ColumnarBuffer(selector.field, memory_budget=columnar_buffer_bytes(ctx),
                                         spill_dir=ctx.spill_dir, metrics=ctx.metrics, name=ctx.name)
                          if columnar and isinstance(selector, FieldKey) else None
                          for selector in self._input_selectors]

    def snapshot_own_buffers(self) -> Any:
        return [None if buffer is None else buffer.snapshot() for buffer in self._columnar]

    def restore_own_buffers(self, state: Any) -> None:
        self._columnar = restore_columnar_buffers(self._columnar, state)

    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        columnar = self._columnar[input_index]
        if columnar is not None:
            if batch.arrow is not None and columnar.add(batch.arrow, batch.timestamp_column()):
                return
            self._columnar[input_index] = None  # rows (or Arrow it cannot hold) from now on
            self._move_to_rows(columnar, self._backlog_buffers[input_index], input_index)
        super().buffer_backlog(batch, input_index)

    def run_backlog(self, buffers: list[SortBuffer]) -> None:
        """At the switch: evaluate EndOfStreamWindows directly as batch work (on the columns when
        every input was buffered as Arrow), else replay the backlog through the streaming path."""
        columnar, self._columnar = self._columnar, [None, None]
        try:
            if any(len(buffer) for buffer in buffers) or any(c is not None and len(c) for c in columnar):
                held = self._combined_input_watermark()
                direct = (self._end_of_stream and self.evictor is None and not self._streamed
                          and held is not None and held >= GlobalWindow.get().max_timestamp())
                if direct:
                    self.apply_held_watermarks_but_the_last()
                if direct and columns_ready(buffers, columnar):
                    self._run_batch_work(column_batch_work(self, columnar))
                else:
                    for index, column_buffer in enumerate(columnar):
                        if column_buffer is not None:
                            self._move_to_rows(column_buffer, buffers[index], index)
                    if direct:
                        self._run_batch_work(row_batch_work(self, buffers))
                    else:
                        self.replay_backlog(buffers)
        finally:
            for column_buffer in columnar:
                if column_buffer is not None:
                    column_buffer.close()

    def _run_batch_work(self, work: CoGroupBatchWork) -> None:
        """EndOfStreamWindows after the final watermark: every key's window is complete, so the
        function runs over the key-grouped backlog with no window state, timers or triggers."""
        count = work.run(self, GlobalWindow.get())
        if count is not None:
            metrics = self.ctx.metrics
            metrics[BATCH_KEYS_METRIC] = metrics.get(BATCH_KEYS_METRIC, 0) + count

    def _move_to_rows(self, columnar: ColumnarBuffer, rows: SortBuffer, input_index: int) -> None:
        """Hand what a columnar buffer holds to the input's row buffer, as rows, and close it.

        Each key's records keep their arrival order (all of a key is in one partition)."""
        try:
            if not len(columnar):
                return
            selector = self._input_selectors[input_index]
            count = SPILL_PARTITIONS if columnar.spilled else 1
            guard = user_code(self, lambda: value, what=f"record of input {input_index + 1}")
            value: Any = None
            for table in columnar.partition_tables(count):
                for batch in table.to_batches(max_chunksize=COLUMNAR_CHUNK):
                    stamps = batch.column(TS_COLUMN).to_pylist() if columnar.has_timestamps else None
                    values = rows_from_arrow(batch.drop_columns([TS_COLUMN]) if columnar.has_timestamps else batch)
                    keys: list[Any] = []
                    with guard:
                        for value in values:
                            keys.append(selector(value))
                    rows.add(keys, values, stamps)
        finally:
            columnar.close()

    # -- life cycle -------------------------------------------------------------------------------
    def close(self) -> None:
        for column_buffer in self._columnar:
            if column_buffer is not None:
                column_buffer.close()
        self._columnar = [None, None]
        super().close()


def _blind_frame_cause(exc: Exception, frames: list[Any]) -> Exception:
    """A vectorised function's failure, explained when an input's DataFrame had no columns to use."""
    blind = [i + 1 for i, frame in enumerate(frames) if not frame.columns]
    if not blind:
        return exc
    return TypeError(f"{type(exc).__name__}: {exc} — input {blind[0]} had no records here and "
                     "declares no row or tuple type, so its DataFrame has no columns; declare "
                     "the input's type, e.g. from_collection(..., type_info=Types.TUPLE([...])) "
                     "or map(..., output_type=Types.ROW_NAMED(...))")


__all__ = ["CoGroupOperator", "VectorizedCoGroupFunction", "frame_rows", "records_to_frame"]

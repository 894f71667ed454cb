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

Then ``is_backlog=False`` is forwarded, after the output of the switch, and records are
processed one by one (streaming). Without a batch engine (``env.configure(
backlog_sorting=False)``) backlog is processed record by record too. Metrics as
:mod:`slipstream.operators.backlog` describes, plus ``backlog_keys_evaluated``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from typing import Any, cast

from slipstream.attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.datastream.co_group import VectorizedCoGroupFunction
from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.fields import FieldKey
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.transformations import (
    CoGroupTransformation,
    Transformation,
    WindowTransformation,
)
from slipstream.datastream.typeinfo import Row, RowTypeInfo, TupleTypeInfo
from slipstream.datastream.window import GlobalWindow, Window, is_end_of_stream_window
from slipstream.errors import SlipstreamError
from slipstream.operators.base import split_outputs
from slipstream.operators.co_group_engine import evaluate_on_engine
from slipstream.operators.columnar_buffer import (
    SPILL_PARTITIONS,
    TS_COLUMN,
    ColumnarBuffer,
    canonical_keys,
    without_stamps,
)
from slipstream.operators.elements import RecordBatch
from slipstream.operators.memory import columnar_buffer_bytes
from slipstream.operators.sort_buffer import BufferOrder, SortBuffer, co_grouped
from slipstream.operators.window import WindowOperator

BATCH_KEYS_METRIC = "backlog_keys_evaluated"
FLUSH_EVERY = 4096
"""Outputs collected during batch work before they are sent on."""
COLUMNAR_CHUNK = 65_536
"""Records of a columnar backlog turned into rows at a time by the per-key path."""
ARROW_OUTPUT_ROWS = 65_536
"""Rows per Arrow batch a vectorised function's result is emitted in."""


@contextlib.contextmanager
def gc_paused() -> Any:
    """Pause the cyclic garbage collector: batch work creates millions of short-lived rows, and
    the collections they would trigger (each walking every live object) cost more than the work.
    Reference counting still frees them; a cycle made meanwhile is collected afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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


def _co_group_cause(exc: Exception) -> Exception:
    """What a co-group function's failure is reported as: ``exc``, or for a result it cannot
    iterate, a TypeError that says what the function must return."""
    if isinstance(exc, TypeError) and "not iterable" in str(exc):
        return TypeError(f"a co-group function must yield its outputs (or return an iterable or None): {exc}")
    return exc


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
        self._pending: list[tuple[Window, Any, list, list]] = []  # vectorised evaluations of this step
        self._frame_columns: list[Any] = [None, None]  # last columns seen per input, for empty sides
        self._columnar: list[ColumnarBuffer | None] = [None, None]  # per input, while it arrives as Arrow
        self._streamed = False  # whether any record went through the streaming path

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        """Sorts its backlog; with EndOfStreamWindows it also emits only at end of input."""
        co_group = cast(CoGroupTransformation, transformation)  # the registry pairs the two
        assigner = co_group.assigner
        trigger = co_group.trigger or (assigner.get_default_trigger() if assigner else None)
        return (OperatorAttributesBuilder().set_has_internal_sorter(True)
                .set_is_output_on_eof(is_end_of_stream_window(assigner, trigger)).build())

    # -- elements -------------------------------------------------------------------------------
    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        timestamps = batch.timestamps
        if self._buffering:
            self.buffer_backlog(batch, input_index)
            return
        self._streamed = True
        for i, value in enumerate(batch.values):
            timestamp = None if timestamps is None else timestamps[i]
            try:
                self._process_element((input_index, value), timestamp)
            except SlipstreamError:
                raise
            except Exception as exc:
                raise self.user_error(value, exc, what=f"record of input {input_index + 1}") from exc
        self._flush()

    # -- evaluation -------------------------------------------------------------------------------
    def _evaluate(self, window: Window, inputs: list) -> None:
        first = [value for tag, value in inputs if tag == 0]
        second = [value for tag, value in inputs if tag == 1]
        key = self.backend.get_current_key()
        if self.vectorized:
            self._pending.append((window, key, first, second))
            return
        self._call(window, key, first, second)

    def _call(self, window: Window, key: Any, first: list, second: list) -> None:
        """Run the co-group function for one key and window, naming both if it fails."""
        try:
            results = self.function.co_group(first, second)
            split_outputs(results, window.max_timestamp(), self._values, self._timestamps, self._side)
        except SlipstreamError:
            raise
        except Exception as exc:
            cause = _co_group_cause(exc)
            raise self.user_error(window, cause, what=f"key {key!r}, window") from cause

    def _flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            by_window: dict[Window, tuple[list, list, list]] = {}
            for window, key, first, second in pending:
                keys, firsts, seconds = by_window.setdefault(window, ([], [], []))
                keys.append(key)
                firsts.extend(first)
                seconds.extend(second)
            for window, (keys, firsts, seconds) in by_window.items():
                self._call_vectorized(window, keys, firsts, seconds)
        super()._flush()

    def _call_vectorized(self, window: Window, keys: list, first: list, second: list) -> None:
        """Run the vectorised function over DataFrames of ``first`` and ``second`` (many keys)."""
        frames: list = []
        try:
            frames = [self._frame(first, 0), self._frame(second, 1)]
            result = self.function.co_group(*frames)
            rows = frame_rows(result, first[0] if first else second[0])
        except SlipstreamError:
            raise
        except Exception as exc:
            shown = keys if len(keys) <= 5 else [*keys[:5], "…"]
            cause = exc
            blind = [i + 1 for i, frame in enumerate(frames) if not frame.columns]
            if blind:
                cause = TypeError(f"{type(exc).__name__}: {exc} — input {blind[0]} had no records here and "
                                  "declares no row or tuple type, so its DataFrame has no columns; declare "
                                  "the input's type, e.g. from_collection(..., type_info=Types.TUPLE([...])) "
                                  "or map(..., output_type=Types.ROW_NAMED(...))")
            raise self.user_error(window, cause, what=f"{len(keys)} key(s) {shown}, window") from exc
        timestamp = window.max_timestamp()
        self._values.extend(rows)
        self._timestamps.extend([timestamp] * len(rows))

    def _frame(self, records: list, input_index: int) -> Any:
        frame = records_to_frame(records, self._input_types[input_index], self._frame_columns[input_index])
        if records:
            self._frame_columns[input_index] = frame.clear()
        return frame

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

    def buffer_backlog(self, batch: RecordBatch, input_index: int = 0) -> None:
        columnar = self._columnar[input_index]
        if columnar is not None:
            if batch.arrow is not None and columnar.add(batch.arrow, batch.timestamps):
                return
            self._columnar[input_index] = None  # rows (or Arrow it cannot hold) from now on
            self._move_to_rows(columnar, self._backlog_buffers[input_index], input_index)
        super().buffer_backlog(batch, input_index)

    def run_backlog(self, buffers: list[SortBuffer]) -> None:
        """At the switch: evaluate EndOfStreamWindows directly (on the columns when every input
        was buffered as Arrow), else replay the backlog through the streaming path."""
        columnar, self._columnar = self._columnar, [None, None]
        try:
            if any(len(buffer) for buffer in buffers) or any(c is not None and len(c) for c in columnar):
                held = self._combined_input_watermark()
                direct = (self._end_of_stream and self.evictor is None and not self._streamed
                          and held is not None and held >= GlobalWindow.get().max_timestamp())
                if direct:
                    self.apply_held_watermarks_but_the_last()
                if direct and self._columnar_ready(buffers, columnar):
                    self._evaluate_columnar(columnar)  # type: ignore[arg-type]
                else:
                    for index, column_buffer in enumerate(columnar):
                        if column_buffer is not None:
                            self._move_to_rows(column_buffer, buffers[index], index)
                    if direct:
                        self._evaluate_directly(buffers)
                    else:
                        self.replay_backlog(buffers)
        finally:
            for column_buffer in columnar:
                if column_buffer is not None:
                    column_buffer.close()

    def _evaluate_directly(self, buffers: list[SortBuffer]) -> None:
        """EndOfStreamWindows after the final watermark: every key's window is complete, so the
        function runs over the key-grouped backlog with no window state, timers or triggers."""
        window = GlobalWindow.get()
        metrics = self.ctx.metrics
        if not getattr(self.ctx.batch_engine, "in_process", True):  # Spark: the function runs in its workers
            count = evaluate_on_engine(self, buffers, window)
            metrics[BATCH_KEYS_METRIC] = metrics.get(BATCH_KEYS_METRIC, 0) + count
            return
        if self.vectorized:
            first = [value for _, _, value in buffers[0].records()]
            second = [value for _, _, value in buffers[1].records()]
            keys = list(buffers[0].key_dictionary.keys)
            metrics[BATCH_KEYS_METRIC] = metrics.get(BATCH_KEYS_METRIC, 0) + len(keys)
            self._call_vectorized(window, keys, first, second)
        else:
            count = 0
            set_key = self.backend.set_current_key
            for key, ((_, first), (_, second)) in co_grouped(*buffers):
                set_key(key)
                self._call(window, key, first, second)
                count += 1
                if len(self._values) >= FLUSH_EVERY:
                    super()._flush()
            metrics[BATCH_KEYS_METRIC] = metrics.get(BATCH_KEYS_METRIC, 0) + count
        self._flush()

    # -- columnar backlog (Arrow input keyed by a field) -------------------------------------------
    @staticmethod
    def _columnar_ready(buffers: list[SortBuffer], columnar: list[ColumnarBuffer | None]) -> bool:
        """Whether the backlog can run on its columns: every input buffered as Arrow (or empty),
        with keys of one family on both sides (integers never equal strings, so no fallback needed
        for correctness, but the partitions must hash alike)."""
        if any(buffer is None for buffer in columnar) or any(len(buffer) for buffer in buffers):
            return False
        kinds = {buffer.kind for buffer in columnar if buffer is not None and len(buffer)}
        return len(kinds) <= 1

    def _move_to_rows(self, columnar: ColumnarBuffer, rows: SortBuffer, input_index: int) -> None:
        """Hand what a columnar buffer holds to the input's row buffer, as rows, and close it.

        Each key's records keep their arrival order (all of a key is in one partition)."""
        try:
            if not len(columnar):
                return
            selector = self._input_selectors[input_index]
            count = SPILL_PARTITIONS if columnar.spilled else 1
            value: Any = None
            for table in columnar.partition_tables(count):
                for batch in table.to_batches(max_chunksize=COLUMNAR_CHUNK):
                    stamps = batch.column(TS_COLUMN).to_pylist() if columnar.has_timestamps else None
                    values = rows_from_arrow(batch.drop_columns([TS_COLUMN]) if columnar.has_timestamps else batch)
                    try:
                        keys = [selector(value) for value in values]
                    except Exception as exc:
                        raise self.user_error(value, exc, what=f"record of input {input_index + 1}") from exc
                    rows.add(keys, values, stamps)
        finally:
            columnar.close()

    def _evaluate_columnar(self, columnar: list[ColumnarBuffer]) -> None:
        """EndOfStreamWindows over a columnar backlog: partition by partition (one partition when
        nothing spilled), each key's records in arrival order (in BATCH mode sorted by timestamp,
        stably, so arrival order next);
        the vectorised function gets each partition's columns as DataFrames and its result is
        emitted as Arrow; a per-key function gets each key's rows, built a chunk at a time.

        Keys come in ascending order within a partition (partitions in hash order), not in the
        first-seen order of the row path; the batch path promises no key order."""
        window = GlobalWindow.get()
        count = SPILL_PARTITIONS if any(buffer.spilled for buffer in columnar) else 1
        readers = [buffer.partition_tables(count) if buffer.schema is not None else None for buffer in columnar]
        keys = 0
        with gc_paused():
            for number in range(count):
                tables = [None if reader is None else next(reader) for reader in readers]
                if self.vectorized:
                    self._vectorized_partition(window, tables, number, count)
                else:
                    keys += self._per_key_partition(window, tables, columnar)
                    super()._flush()
        if not self.vectorized:
            metrics = self.ctx.metrics
            metrics[BATCH_KEYS_METRIC] = metrics.get(BATCH_KEYS_METRIC, 0) + keys

    def _vectorized_partition(self, window: Window, tables: list, number: int, count: int) -> None:
        import polars as pl
        frames: list = []
        try:
            # one chunk per column: the buffered batches' chunks would slow the function's polars work
            frames = [self._frame([], index) if table is None else
                      pl.from_arrow(without_stamps(table), rechunk=False).rechunk()
                      for index, table in enumerate(tables)]
            tables[:] = [None] * len(tables)  # the frames are copies: let the buffered batches go
            result = self.function.co_group(*frames)
            if result is not None and not isinstance(result, pl.DataFrame):
                raise TypeError(f"a vectorised co-group function must return a polars DataFrame (or None), "
                                f"got {type(result).__name__}: {result!r}"[:300])
        except SlipstreamError:
            raise
        except Exception as exc:
            what = "the keys of the backlog, window" if count == 1 else \
                f"the keys of backlog partition {number + 1} of {count}, window"
            raise self.user_error(window, exc, what=what) from exc
        if result is None or not result.height:
            return
        super()._flush()  # rows emitted before stay before
        timestamp = window.max_timestamp()
        # Unsigned counts (polars' len() is UInt32) become Int64, the type the same values get as
        # Python ints on the row path: sinks that have no unsigned types (Spark) see what they would.
        unsigned = [pl.col(name).cast(pl.Int64) for name, dtype in result.schema.items()
                    if dtype in (pl.UInt8, pl.UInt16, pl.UInt32)]
        if unsigned:
            result = result.with_columns(unsigned)
        for batch in result.to_arrow().to_batches(max_chunksize=ARROW_OUTPUT_ROWS):
            self.output.collect_batch(RecordBatch(None, [timestamp] * batch.num_rows, arrow=batch))

    def _per_key_partition(self, window: Window, tables: list, columnar: list[ColumnarBuffer]) -> int:
        """Run the per-key function over every key of one partition; returns the number of keys."""
        import numpy as np
        import polars as pl
        sides: list[Any] = []
        runs: list[Any] = []
        for table, buffer in zip(tables, columnar):
            if table is None or not table.num_rows:
                sides.append(None)
                runs.append(None)
                continue
            key_name, kind = buffer.partitioning()
            keys = canonical_keys(table.column(key_name), kind)
            by_time = buffer.has_timestamps and self.ctx.batch_mode
            if not by_time and keys.is_sorted():
                ordered = without_stamps(table)  # arrived in key order (as backlogs often do)
            else:
                frame = pl.DataFrame({"k": keys, "t": pl.Series(table.column(TS_COLUMN))}) \
                    if by_time else pl.DataFrame({"k": keys})
                order = frame.select(pl.arg_sort_by(frame.columns, nulls_last=False, maintain_order=True)) \
                    .to_series()
                ordered = without_stamps(table.take(order.to_arrow()))
                keys = keys.gather(order)
            sides.append(ordered)
            run = keys.rle().struct.unnest()  # value, len: the keys in order
            runs.append(run)
        present = [run for run in runs if run is not None]
        if not present:
            return 0
        if len(present) == 2:
            joined = runs[0].join(runs[1], on="value", how="full", coalesce=True, suffix="_2") \
                .sort("value").fill_null(0)
            counts = [joined.get_column("len").to_numpy(), joined.get_column("len_2").to_numpy()]
        else:
            joined = present[0]
            zeros = np.zeros(joined.height, dtype=np.int64)
            counts = [joined.get_column("len").to_numpy() if run is not None else zeros for run in runs]
        key_series = joined.get_column("value")
        key_count = key_series.len()
        ends = [np.cumsum(c) for c in counts]
        total = ends[0] + ends[1]
        co_group = self.function.co_group
        set_key = self.backend.set_current_key
        timestamp = window.max_timestamp()
        start = 0
        while start < key_count:
            base = int(total[start - 1]) if start else 0
            stop = min(key_count, max(start + 1, int(np.searchsorted(total, base + COLUMNAR_CHUNK, "right"))))
            rows = []
            for side, end in zip(sides, ends):
                low = int(end[start - 1]) if start else 0
                high = int(end[stop - 1])
                rows.append(rows_from_arrow(side.slice(low, high - low)) if side is not None and high > low else [])
            first_rows, second_rows = rows
            first_counts = counts[0][start:stop].tolist()
            second_counts = counts[1][start:stop].tolist()
            values, timestamps, side_outputs = self._values, self._timestamps, self._side
            append, append_ts = values.append, timestamps.append
            a = b = 0
            for key, na, nb in zip(key_series.slice(start, stop - start).to_list(), first_counts, second_counts):
                first = first_rows[a:a + na]
                second = second_rows[b:b + nb]
                a += na
                b += nb
                try:
                    set_key(key)
                    results = co_group(first, second)
                    if results is not None:
                        for out in results:
                            if type(out) is tuple and len(out) == 2 and isinstance(out[0], OutputTag):
                                split_outputs((out,), timestamp, values, timestamps, side_outputs)
                            else:
                                append(out)
                                append_ts(timestamp)
                except SlipstreamError:
                    raise
                except Exception as exc:
                    cause = _co_group_cause(exc)
                    raise self.user_error(window, cause, what=f"key {key!r}, window") from cause
            super()._flush()
            start = stop
        return key_count

    # -- life cycle -------------------------------------------------------------------------------
    def close(self) -> None:
        for column_buffer in self._columnar:
            if column_buffer is not None:
                column_buffer.close()
        self._columnar = [None, None]
        super().close()


def records_to_frame(records: list, type_info: Any, empty_like: Any) -> Any:
    """A polars DataFrame of ``records``: typed by ``type_info`` (a row or tuple type) when
    given, else inferred — tuples and unnamed Rows as ``f0``, ``f1``, …, dicts and named
    Rows by field name, scalars as ``f0``. An empty list gives ``empty_like`` (or no columns).

    Records are transposed into columns first, which is much faster than converting them
    one by one.
    """
    import polars as pl
    import pyarrow as pa
    if isinstance(type_info, (RowTypeInfo, TupleTypeInfo)):
        names = type_info.get_field_names() if isinstance(type_info, RowTypeInfo) else \
            [f"f{i}" for i in range(len(type_info.get_field_types()))]
        types = [t.to_arrow_type() for t in type_info.get_field_types()]
        try:
            columns = _columns(records, names)
            if columns is not None:
                return pl.from_arrow(pa.table({name: pa.array(column, type=arrow_type)
                                               for name, column, arrow_type in zip(names, columns, types)}))
        except (pa.ArrowException, TypeError, ValueError, KeyError, IndexError):
            pass  # a value arrow cannot take as it is: convert record by record, which names it
        return pl.from_arrow(pa.Table.from_struct_array(type_info.to_arrow_array(records)))
    if not records:
        return empty_like if empty_like is not None else pl.DataFrame()
    sample = records[0]
    fields = sample._fields if isinstance(sample, Row) else None
    if isinstance(sample, dict):
        names = list(sample)
    elif fields is not None:
        names = list(fields)
    elif isinstance(sample, (tuple, list, Row)):
        names = [f"f{i}" for i in range(len(sample))]
    else:
        return pl.DataFrame({"f0": records})
    columns = _columns(records, names)
    if columns is None:
        if isinstance(sample, dict) or (isinstance(sample, Row) and sample._fields is not None):
            # dicts or named rows with different fields: polars lines them up by name
            rows = [record.as_dict() if isinstance(record, Row) else record for record in records]
            return pl.DataFrame(rows, infer_schema_length=None)
        odd = next(record for record in records if len(record) != len(names))
        raise TypeError(f"records of one input must have the same number of fields to become a "
                        f"DataFrame: {sample!r} has {len(names)}, {odd!r} has {len(odd)}")
    return pl.DataFrame({name: list(column) for name, column in zip(names, columns)})


def _columns(records: list, names: list[str]) -> list | None:
    """The records' fields as columns, or None when the records do not all have ``names``."""
    if not records:
        return [[] for _ in names]
    sample = records[0]
    if isinstance(sample, dict) or (isinstance(sample, Row) and sample._fields is not None):
        width = len(names)
        if any(len(record) != width for record in records):
            return None
        try:
            return [[record[name] for record in records] for name in names]
        except (KeyError, TypeError, IndexError):
            return None
    columns = list(zip(*records))
    if len(columns) != len(names) or any(len(record) != len(names) for record in records):
        return None
    return columns


def frame_rows(frame: Any, like: Any) -> list:
    """The rows of the DataFrame a vectorised function returned, shaped like the record ``like``:
    named Rows for Rows, dicts for dicts, tuples otherwise. None means no rows."""
    import polars as pl
    if frame is None:
        return []
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"a vectorised co-group function must return a polars DataFrame (or None), "
                        f"got {type(frame).__name__}: {frame!r}"[:300])
    if isinstance(like, dict):
        return frame.to_dicts()
    if isinstance(like, Row):
        columns = frame.columns
        rows = []
        for values in frame.iter_rows():
            row = Row(*values)
            row.set_field_names(columns)
            rows.append(row)
        return rows
    return frame.rows()


__all__ = ["CoGroupOperator", "VectorizedCoGroupFunction", "frame_rows", "records_to_frame"]

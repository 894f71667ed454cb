"""Spark DataFrames in and out: ``env.from_spark(dataframe)`` and ``stream.to_spark()``.

``SparkSource`` is a bounded (backlog) source over a Spark DataFrame. Its rows reach the
job as Arrow record batches, never as Spark ``Row`` objects, and Python rows are built only
if an operator runs a per-record function. The DataFrame stays in Spark and is read **in
pieces**: each subtask reads a contiguous range of the DataFrame's rows (in the DataFrame's
order, partition by partition), one Spark job per piece of at most half the reader's buffer
(``buffer_bytes``, within its share of managed memory), fetched a piece ahead in a thread of
its own, so the driver never holds more than a reader's buffer per subtask, whatever the size
of the DataFrame or of its partitions. Readers report the rows they still have to read (the
progress display's read-of-total). Reading a piece again after a restore assumes the
DataFrame is deterministic, as Spark's own retries do. (A Spark Connect DataFrame, which has
no partitions to address, is read whole with ``toArrow()``.)

The planner runs some subgraphs after ``from_spark`` as one Spark query
(:mod:`slipstream.runtime.batch.spark_planning`): in BATCH mode, on either batch engine, a
built-in keyed aggregation (``key_by(field).sum/min/max/min_by/max_by(field)``), and with
the Spark batch engine a vectorised ``co_group`` with EndOfStreamWindows of two
DataFrames. The data stays in Spark and only the result comes back.

Parquet datasets: read them with Spark (``env.from_spark(spark.read.parquet(path))``); a
``FileSink.for_bulk_format(path, ParquetBulkWriters.for_schema(...))`` writes a directory
of part files that ``spark.read.parquet(path)`` reads (in-progress parts are hidden files,
which Spark skips).

``to_spark`` runs the job and hands its result back as a Spark DataFrame — the terminal a
Spark ETL user expects, like ``execute_and_collect`` for Python lists::

    result = (env.from_spark(orders)
                 .co_group(env.from_spark(customers)).where("id").equal_to("id")
                 .window(EndOfStreamWindows.get()).apply(totals, vectorized=True)
                 .to_spark())
    result.write.parquet("s3://…/totals")

pyspark is imported only when these are used.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from slipstream.attributes import Boundedness
from slipstream.datastream.columnar import unfit_field
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    NOTHING_AVAILABLE,
    RecordWriteError,
    Sink,
    SinkWriter,
    Source,
    SourceReader,
    SourceReaderContext,
    _Signal,
)
from slipstream.datastream.connectors.columnar import ArrowSourceBatch
from slipstream.datastream.connectors.errors import SinkFormatError, SourceRestoreError
from slipstream.datastream.connectors.number_seq import slice_bounds
from slipstream.datastream.typeinfo import Row, RowTypeInfo, TupleTypeInfo
from slipstream.errors import InvalidProgramError, SlipstreamError

if TYPE_CHECKING:
    from slipstream.datastream.data_stream import DataStream


def is_spark_dataframe(value: Any) -> bool:
    """Whether ``value`` is a pyspark DataFrame (classic or Connect), without importing pyspark."""
    return any(cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.")
               for cls in type(value).__mro__)


class TableSource(Source):
    """A bounded source whose Arrow table is made on first read (by :meth:`load`), shared by its
    subtasks, each reading a contiguous slice in batches of ``batch_size`` rows."""

    timestamp: int | None = None
    """A timestamp given to every record (None: records have none)."""

    def __init__(self, batch_size: int = 65_536) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidProgramError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self._table: pa.Table | None = None

    def load(self) -> pa.Table:
        raise NotImplementedError

    def table(self) -> pa.Table:
        if self._table is None:
            self._table = self.load()
        return self._table

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        return _TableReader(self, subtask_index, parallelism)

    def __getstate__(self) -> dict[str, Any]:  # a source is never pickled with its data
        state = dict(self.__dict__)
        state["_table"] = None
        return state


DEFAULT_BUFFER_BYTES = 64 * 2**20
ROW_COLUMN = "__slipstream_row"
"""The row number a read adds to the DataFrame (``monotonically_increasing_id``: the partition
in the upper bits, the row within it in the lower ``_ROW_BITS``)."""
_ROW_BITS = 33


class SparkSource(TableSource):
    """The rows of a Spark DataFrame, as a bounded backlog source (see the module docstring).

    Args:
        dataframe: a pyspark DataFrame.
        batch_size: rows per batch the readers emit.
        buffer_bytes: the most a reader holds of the DataFrame (the piece it emits and the one
            it fetches), within its share of managed memory when the job sets one.
    """

    buffers_reads = True

    def __init__(self, dataframe: Any, batch_size: int = 65_536, buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        if not is_spark_dataframe(dataframe):
            raise InvalidProgramError(f"from_spark expects a pyspark DataFrame, got {type(dataframe).__name__}")
        if not isinstance(buffer_bytes, int) or buffer_bytes < 2:
            raise InvalidProgramError(f"buffer_bytes must be an integer of at least 2, got {buffer_bytes!r}")
        super().__init__(batch_size)
        self.dataframe = dataframe
        self.buffer_bytes = buffer_bytes
        self._pieces: _SparkPieces | None = None
        self._readers = 0
        self._locks()

    def _locks(self) -> None:
        """One lock held while the DataFrame is planned (its readers fetch in threads of their
        own), one while its open readers are counted (briefly: open never waits for a plan)."""
        self._planning, self._counting = threading.Lock(), threading.Lock()

    def default_name(self) -> str:
        return "Spark Source"

    def load(self) -> pa.Table:
        """The whole DataFrame (only where it cannot be read in pieces: Spark Connect)."""
        return self.finish(self.dataframe.toArrow())

    def finish(self, table: pa.Table) -> pa.Table:
        """What the job sees of ``table``, a part of the DataFrame read; the table itself."""
        return table

    def pieces(self) -> _SparkPieces:
        """The DataFrame planned for reading in pieces (once, for all of its readers)."""
        with self._planning:
            if self._pieces is None:
                self._pieces = _SparkPieces(self.dataframe)
            return self._pieces

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        if hasattr(self.dataframe, "_jdf"):  # classic pyspark: in pieces
            return _PieceReader(self, subtask_index, parallelism)
        return super().create_reader(subtask_index, parallelism)

    def acquire(self) -> None:
        """A reader opened: the planned DataFrame stays cached in Spark until the last one closes."""
        with self._counting:
            self._readers += 1

    def release(self) -> None:
        """A reader closed; the last one frees the DataFrame cached in Spark (no reader is open,
        so none is planning it)."""
        with self._counting:
            self._readers -= 1
            if self._readers > 0 or self._pieces is None:
                return
            pieces, self._pieces = self._pieces, None
        pieces.release()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_pieces"], state["_readers"] = None, 0
        del state["_planning"], state["_counting"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._locks()


class _SparkPieces:
    """A classic DataFrame read in pieces: ranges of its rows, one Spark job each.

    Planning numbers the rows (:data:`ROW_COLUMN`), caches the numbered DataFrame in Spark
    (executors' memory and disk, not the driver's) and counts each partition's rows in one job.
    A piece is a filter of the cached DataFrame on a range of row numbers, which skips the
    cached batches outside the range by their statistics, run as one job over the partitions
    it spans only; its batches are the JVM's Arrow batches (``Dataset.toArrowBatchRdd``, what
    ``toArrow`` collects), read with the schema ``toArrow`` gives. So a shuffle in the
    DataFrame's plan runs once, a piece costs about its own rows, and the driver (JVM and
    Python) holds what one piece holds.
    """

    def __init__(self, dataframe: Any) -> None:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema
        session = dataframe.sparkSession
        large = session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
        self.schema = to_arrow_schema(dataframe.schema, error_on_duplicated_field_names_in_struct=True,
                                      timezone="UTC", prefers_large_types=large)
        self._context = session.sparkContext
        self._numbered = dataframe.withColumn(ROW_COLUMN, F.monotonically_increasing_id()).persist()
        partition = F.shiftright(self._numbered[ROW_COLUMN], _ROW_BITS).alias("partition")
        counts = sorted((int(row[0]), int(row[1])) for row in self._numbered.groupBy(partition).count().collect())
        self.partitions = [index for index, _ in counts]
        self.starts = list(itertools.accumulate((rows for _, rows in counts), initial=0))
        """The DataFrame row (0-based, in the DataFrame's order) each partition starts at; the
        last entry is the number of rows."""
        self.row_bytes = sum(_field_bytes(field.type) for field in self.schema)
        """Arrow bytes of a row by the schema (sizes a reader's first piece; later ones go by the pieces read)."""

    @property
    def total(self) -> int:
        return self.starts[-1]

    def read(self, start: int, rows: int) -> pa.Table:
        """``rows`` rows from DataFrame row ``start`` on (as many as there are), in one Spark job
        over the partitions they are in: row numbers grow in the DataFrame's order, so the rows
        are one range of them."""
        from pyspark.serializers import NoOpSerializer
        from pyspark.util import _load_from_socket
        stop = min(start + rows, self.total)
        wanted = stop - start
        first, last = (bisect.bisect_right(self.starts, row) - 1 for row in (start, stop - 1))
        low = (self.partitions[first] << _ROW_BITS) + start - self.starts[first]
        high = (self.partitions[last] << _ROW_BITS) + stop - self.starts[last]
        column = self._numbered[ROW_COLUMN]
        piece = self._numbered.where((column >= low) & (column < high)).drop(ROW_COLUMN)
        context = self._context
        served = context._jvm.PythonRDD.runJob(context._jsc.sc(), piece._jdf.toArrowBatchRdd().toJavaRDD(),
                                               self.partitions[first:last + 1])
        with _load_from_socket(served, NoOpSerializer()) as stream:
            batches = [pa.ipc.read_record_batch(pa.py_buffer(blob), self.schema) for blob in stream]
        table = pa.Table.from_batches(batches, self.schema)
        if table.num_rows != wanted:
            raise SlipstreamError(f"from_spark: rows {start}..{start + wanted - 1} of the DataFrame gave "
                                  f"{table.num_rows} rows read again, {wanted} when counted; from_spark needs a "
                                  "deterministic DataFrame (cache or checkpoint a non-deterministic one first)")
        return table

    def release(self) -> None:
        """Free the cached DataFrame in Spark."""
        self._numbered.unpersist(blocking=False)


def _field_bytes(kind: pa.DataType) -> float:
    """Arrow bytes of one value of ``kind``: its width and validity bit; 32 for a value of no fixed width."""
    try:
        return cast("float", kind.bit_width / 8 + 1 / 8)
    except ValueError:
        return 32.0


class _TableReader(SourceReader):
    def __init__(self, source: TableSource, subtask_index: int, parallelism: int) -> None:
        self._source = source
        self._subtask = subtask_index
        self._parallelism = parallelism
        self._position: int | None = None
        self._end = 0

    def open(self, context: SourceReaderContext) -> None:
        """Nothing yet: the table is made on the first poll."""

    def poll(self, max_records: int) -> ArrowSourceBatch | _Signal:
        table = self._source.table()
        start, self._end = slice_bounds(table.num_rows, self._subtask, self._parallelism)
        if self._position is None:
            self._position = start
        if self._position >= self._end:
            return END_OF_INPUT
        length = min(self._source.batch_size, self._end - self._position)
        chunk = table.slice(self._position, length).combine_chunks()
        self._position += length
        batches = chunk.to_batches()
        data = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches)
        stamp = self._source.timestamp
        return ArrowSourceBatch(data, None if stamp is None else [stamp] * length)

    def records_remaining(self) -> int | None:
        """The rows of this subtask's slice not yet read; None until the table is made (first poll)."""
        if self._position is None:
            return None
        return max(0, self._end - self._position)

    def snapshot_position(self) -> int | None:
        return self._position

    def restore_position(self, position: Any) -> None:
        self._position = None if position is None else int(position)


_Piece = tuple[int, int, "pa.Table | None"]
"""A fetched piece: the DataFrame row it starts at, the end of the reader's range, its rows
(None: the range was read)."""


class _PieceReader(SourceReader):
    """One subtask's contiguous range of a DataFrame's rows, fetched a piece ahead in a thread.

    The range is the subtask's slice of the DataFrame's rows in order (partition by
    partition), so the subtasks' ranges in order are the DataFrame's order. The reader holds
    the piece it emits and the one being fetched, each at most half its buffer (the source's
    ``buffer_bytes``, within the reader's share of managed memory): a piece's rows are that
    half over the most bytes per row a piece had (the schema's estimate for the first). A
    poll never waits for Spark: while a piece is fetched it finds nothing, and the fetch's
    end wakes the task. The position is the DataFrame row of the next record to emit.
    """

    def __init__(self, source: SparkSource, subtask_index: int, parallelism: int) -> None:
        self._source = source
        self._subtask = subtask_index
        self._parallelism = parallelism
        self._position: int | None = None
        self._end: int | None = None
        self._table: pa.Table | None = None
        self._table_start = 0  # the DataFrame row of the piece's first row
        self._offset = 0
        self._row_bytes: float | None = None
        self._half = source.buffer_bytes // 2
        self._pending: Future[_Piece] | None = None
        self._fetcher: ThreadPoolExecutor | None = None
        self._notify: Callable[[], None] = lambda: None
        self._report: Callable[[int], None] = lambda used: None

    def open(self, context: SourceReaderContext) -> None:
        """Start planning the DataFrame and fetching the first piece."""
        self._notify, self._report = context.notify_available, context.report_memory
        if context.read_buffer_bytes is not None:
            self._half = max(1, min(self._source.buffer_bytes, context.read_buffer_bytes) // 2)
        self._source.acquire()
        self._fetcher = ThreadPoolExecutor(1, thread_name_prefix="Spark Source reader")
        self._fetch(self._position)

    def _fetch(self, start: int | None) -> None:
        """Fetch the piece at DataFrame row ``start`` (None: the range's first) in the thread."""
        assert self._fetcher is not None  # made in open
        pending = self._fetcher.submit(self._piece, start, self._row_bytes)
        pending.add_done_callback(lambda _: self._notify())
        self._pending = pending

    def _piece(self, start: int | None, row_bytes: float | None) -> _Piece:
        """In the fetching thread: ``(start, end of the range, the piece or None past the end)``."""
        pieces = self._source.pieces()
        begin, end = slice_bounds(pieces.total, self._subtask, self._parallelism)
        start = begin if start is None else start
        if start >= end:
            return start, end, None
        rows = max(1, int(self._half // max(1.0, row_bytes or pieces.row_bytes)))
        return start, end, self._source.finish(pieces.read(start, min(rows, end - start)))

    def poll(self, max_records: int) -> ArrowSourceBatch | _Signal:
        while self._table is None or self._offset >= self._table.num_rows:
            if self._position is not None and self._end is not None and self._position >= self._end:
                return END_OF_INPUT
            if self._pending is None or not self._pending.done():
                return NOTHING_AVAILABLE
            self._take(*self._pending.result())  # raises what the fetch raised
        length = min(self._source.batch_size, self._table.num_rows - self._offset)
        chunk = self._table.slice(self._offset, length).combine_chunks()
        self._offset += length
        self._position = self._offset + self._table_start
        batches = chunk.to_batches()
        data = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches)
        stamp = self._source.timestamp
        return ArrowSourceBatch(data, None if stamp is None else [stamp] * length)

    def _take(self, start: int, end: int, table: pa.Table | None) -> None:
        """Emit from the fetched piece from now on, and fetch the next one."""
        self._position, self._end, self._pending = start, end, None
        self._table, self._offset, self._table_start = table, 0, start
        self._report(0 if table is None else table.nbytes)
        if table is None:
            return
        if table.num_rows:
            self._row_bytes = max(self._row_bytes or 0.0, table.nbytes / table.num_rows)
        if start + table.num_rows < end:
            self._fetch(start + table.num_rows)

    def records_remaining(self) -> int | None:
        """The rows of this subtask's range not yet emitted; None until the DataFrame is planned."""
        position, end = self._position, self._end
        return None if position is None or end is None else max(0, end - position)

    def snapshot_position(self) -> int | None:
        return self._position

    def restore_position(self, position: Any) -> None:
        if position is not None and (isinstance(position, bool) or not isinstance(position, int)):
            raise SourceRestoreError(f"Spark Source: a position is the DataFrame row to read next, got {position!r}")
        self._position, self._table, self._end = position, None, None

    def close(self) -> None:
        """Stop fetching (waiting for a Spark job under way) and free the DataFrame cached in Spark."""
        if self._fetcher is None:
            return
        self._fetcher.shutdown(wait=True, cancel_futures=True)
        self._fetcher, self._pending, self._table = None, None, None
        self._report(0)
        self._source.release()


# -- out -----------------------------------------------------------------------------------------
class ArrowCollectSink(Sink):
    """Keeps everything written to it as Arrow tables (for ``to_spark``): columnar batches as they
    arrive, rows converted by ``type_info`` (or by their fields) when the input ends, so a record
    that does not convert fails in this sink, named with its field."""

    def __init__(self, type_info: Any = None) -> None:
        self.parts: list[pa.Table] = []
        self.type_info = type_info

    def default_name(self) -> str:
        return "Collect (Arrow)"

    def create_writer(self) -> SinkWriter:
        return _ArrowCollectWriter(self.parts, self.type_info)

    def table(self) -> pa.Table:
        """Everything collected as one Arrow table."""
        tables = [part for part in self.parts if len(part)]
        if not tables:
            return records_to_arrow([], self.type_info)
        return pa.concat_tables(tables, promote_options="permissive")


class _ArrowCollectWriter(SinkWriter):
    def __init__(self, parts: list[pa.Table], type_info: Any) -> None:
        self._parts = parts
        self._type_info = type_info
        self._rows: list[Any] = []

    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        self._rows.extend(values)

    def write_arrow(self, batch: pa.RecordBatch | pa.Table, timestamps: list[Any] | None) -> None:
        self._convert_rows()
        self._parts.append(batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch]))

    def flush(self) -> None:
        self._convert_rows()

    def _convert_rows(self) -> None:
        if not self._rows:
            return
        try:
            table = records_to_arrow(self._rows, self._type_info)
        except (pa.ArrowException, TypeError, ValueError) as error:
            raise _record_at_fault(self._rows, self._type_info, error) from None
        self._parts.append(table)
        self._rows = []


def _record_at_fault(records: list[Any], type_info: Any, error: Exception) -> Exception:
    """The :class:`RecordWriteError` naming the first of ``records`` that cannot become a row of
    the table (by ``type_info``, or by the fields of the first record); ``error`` if none is found."""
    if type_info is not None:
        for record in records:
            try:
                type_info.from_python(record)
            except TypeError as mismatch:
                return RecordWriteError(record, SinkFormatError(f"to_spark: {mismatch}"))
    else:
        schema = records_to_arrow(records[:1]).schema
        for record in records:
            problem = unfit_field(schema, _as_mapping(record, schema.names))
            if problem is not None:
                return RecordWriteError(record, SinkFormatError(
                    f"to_spark: {problem} (the first record gave the schema {schema})"))
    return SinkFormatError(f"to_spark: the records do not form one table: {error}")


def _as_mapping(record: Any, names: list[str]) -> dict[Any, Any]:
    """``record`` by the field names ``records_to_arrow`` gives its kind of record."""
    if isinstance(record, dict):
        return record
    if isinstance(record, Row) and record._fields is not None:
        return record.as_dict()
    if isinstance(record, (tuple, list, Row)):
        return dict(zip(names, record)) if len(record) == len(names) else {}
    return {names[0]: record}


def records_to_arrow(records: list[Any], type_info: Any = None) -> pa.Table:
    """Records as an Arrow table: by ``type_info`` (a row or tuple type) when given; else named
    Rows and dicts by field name, tuples and unnamed Rows as ``f0``, ``f1``, …, scalars as ``f0``."""
    if isinstance(type_info, (RowTypeInfo, TupleTypeInfo)):
        return pa.Table.from_struct_array(type_info.to_arrow_array(records))
    if not records:
        return pa.table({})
    sample = records[0]
    if isinstance(sample, dict):
        return pa.Table.from_pylist(records)
    if isinstance(sample, Row) and sample._fields is not None:
        return pa.Table.from_pylist([record.as_dict() for record in records])
    if isinstance(sample, (tuple, list, Row)):
        width = len(sample)
        if any(len(record) != width for record in records):
            raise TypeError(f"records must have the same number of fields to become a table: {sample!r}")
        return pa.table({f"f{i}": list(column) for i, column in enumerate(zip(*records))})
    return pa.table({"f0": records})


def stream_to_spark(stream: DataStream[Any], session: Any = None, job_name: str | None = None) -> Any:
    """Run the job of ``stream`` and return what it produced as a Spark DataFrame (see
    :meth:`DataStream.to_spark`)."""
    sink = ArrowCollectSink(stream.get_type())
    env = stream.get_execution_environment()
    stream.sink_to(sink).name("To Spark")
    env.execute(job_name or "slipstream job")
    table = sink.table()
    if session is None:
        session = env.runtime_options.engine_options.get("session")
    if session is None:
        from pyspark.sql import SparkSession
        session = SparkSession.getActiveSession()
    if session is None:
        raise InvalidProgramError("to_spark needs a SparkSession: pass session=..., start one, or "
                                  "env.set_batch_engine('spark', session=...)")
    from slipstream.datastream.connectors.arrow import as_arrow_table
    return session.createDataFrame(spark_compatible(as_arrow_table(table)))


_UNSIGNED = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(), pa.uint64(): pa.int64()}


def spark_compatible(table: pa.Table) -> pa.Table:
    """``table`` with types Spark reads: large strings/binaries as strings/binaries, unsigned
    integers as the next wider signed ones (Spark has none; a uint64 above 2**63 fails to cast)."""
    fields = []
    for field in table.schema:
        kind = field.type
        if pa.types.is_large_string(kind):
            kind = pa.string()
        elif pa.types.is_large_binary(kind):
            kind = pa.binary()
        else:
            kind = _UNSIGNED.get(kind, kind)
        fields.append(field.with_type(kind))
    schema = pa.schema(fields)
    return table if schema.equals(table.schema) else table.cast(schema)


__all__ = ["ArrowCollectSink", "SparkSource", "TableSource", "is_spark_dataframe", "records_to_arrow",
           "spark_compatible", "stream_to_spark"]

"""Spark DataFrames in and out: ``env.from_spark(dataframe)`` and ``stream.to_spark()``.

``SparkSource`` is a bounded (backlog) source over a Spark DataFrame. Its rows reach the
job as Arrow record batches, never as Spark ``Row`` objects, and Python rows are built only
if an operator runs a per-record function. The DataFrame is read **partition by
partition**: each subtask takes a contiguous range of the DataFrame's partitions and runs
one Spark job per partition (the JVM's own Arrow batches, as ``toArrow`` makes them, served
for that partition alone), so the driver holds one partition at a time, never the whole
DataFrame; the subtasks' ranges in order are the DataFrame's order. (A Spark Connect
DataFrame, which has no partitions to address, is read whole with ``toArrow()``.) Reading a
partition again after a restore assumes the DataFrame is deterministic, as Spark's own
retries do.

When the batch engine is Spark, the planner runs some subgraphs after ``from_spark`` as
one Spark query (:mod:`slipstream.runtime.batch.spark_planning`): a vectorised
``co_group`` with EndOfStreamWindows of two DataFrames, and, in BATCH mode, a built-in
keyed aggregation (``key_by(field).sum/min/max/min_by/max_by(field)``). The data stays in
Spark and only the result comes back.

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

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from slipstream.attributes import Boundedness
from slipstream.datastream.columnar import unfit_field
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    RecordWriteError,
    Sink,
    SinkWriter,
    Source,
    SourceReader,
    SourceReaderContext,
    _Signal,
)
from slipstream.datastream.connectors.columnar import ArrowSourceBatch
from slipstream.datastream.connectors.errors import SinkFormatError
from slipstream.datastream.connectors.number_seq import slice_bounds
from slipstream.datastream.typeinfo import Row, RowTypeInfo, TupleTypeInfo
from slipstream.errors import InvalidProgramError

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


class SparkSource(TableSource):
    """The rows of a Spark DataFrame, as a bounded backlog source (see the module docstring)."""

    def __init__(self, dataframe: Any, batch_size: int = 65_536) -> None:
        if not is_spark_dataframe(dataframe):
            raise InvalidProgramError(f"from_spark expects a pyspark DataFrame, got {type(dataframe).__name__}")
        super().__init__(batch_size)
        self.dataframe = dataframe
        self._partitions: _SparkPartitions | None = None

    def default_name(self) -> str:
        return "Spark Source"

    def load(self) -> pa.Table:
        """The whole DataFrame (only where it cannot be read partition by partition)."""
        return self.finish(self.dataframe.toArrow())

    def finish(self, table: pa.Table) -> pa.Table:
        """What the job sees of ``table``, a part of the DataFrame read; the table itself."""
        return table

    def partitions(self) -> _SparkPartitions | None:
        """The DataFrame's partitions, read one at a time; None for a Spark Connect DataFrame."""
        if self._partitions is None and hasattr(self.dataframe, "_jdf"):
            self._partitions = _SparkPartitions(self.dataframe)
        return self._partitions

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        if hasattr(self.dataframe, "_jdf"):  # classic pyspark: partition by partition
            return _PartitionReader(self, subtask_index, parallelism)
        return super().create_reader(subtask_index, parallelism)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_partitions"] = None
        return state


class _SparkPartitions:
    """A classic DataFrame's partitions as Arrow: one Spark job per partition read.

    The batches are the JVM's (``Dataset.toArrowBatchRdd``, what ``toArrow`` collects),
    served for the asked partition alone (``PythonRDD.runJob``) and read with the schema
    ``toArrow`` gives. The RDD is made once, so a shuffle in the DataFrame's plan runs once
    and every partition's job reuses its output.
    """

    def __init__(self, dataframe: Any) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema
        session = dataframe.sparkSession
        large = session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
        self.schema = to_arrow_schema(dataframe.schema, error_on_duplicated_field_names_in_struct=True,
                                      timezone="UTC", prefers_large_types=large)
        self._context = session.sparkContext
        self._batches = dataframe._jdf.toArrowBatchRdd().toJavaRDD()
        self.count = int(self._batches.getNumPartitions())

    def read(self, partition: int) -> pa.Table:
        """Partition ``partition`` of the DataFrame (a Spark job over that partition only)."""
        from pyspark.serializers import NoOpSerializer
        from pyspark.util import _load_from_socket
        context = self._context
        served = context._jvm.PythonRDD.runJob(context._jsc.sc(), self._batches, [partition])
        with _load_from_socket(served, NoOpSerializer()) as stream:
            batches = [pa.ipc.read_record_batch(pa.py_buffer(blob), self.schema) for blob in stream]
        return pa.Table.from_batches(batches, self.schema)


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


class _PartitionReader(SourceReader):
    """One subtask's contiguous range of a DataFrame's partitions, read one partition at a time.

    Its position is ``(partition, rows of it already emitted)``.
    """

    def __init__(self, source: SparkSource, subtask_index: int, parallelism: int) -> None:
        self._source = source
        self._subtask = subtask_index
        self._parallelism = parallelism
        self._partition: int | None = None
        self._offset = 0
        self._end = 0
        self._table: pa.Table | None = None

    def open(self, context: SourceReaderContext) -> None:
        """Nothing yet: the first poll plans the DataFrame."""

    def poll(self, max_records: int) -> ArrowSourceBatch | _Signal:
        partitions = self._source.partitions()
        assert partitions is not None  # this reader is made only for classic pyspark (create_reader)
        start, self._end = slice_bounds(partitions.count, self._subtask, self._parallelism)
        if self._partition is None:
            self._partition, self._offset = start, 0
        while True:
            if self._partition >= self._end:
                return END_OF_INPUT
            if self._table is None:
                self._table = self._source.finish(partitions.read(self._partition))
            if self._offset < self._table.num_rows:
                break
            self._partition, self._offset, self._table = self._partition + 1, 0, None
        length = min(self._source.batch_size, self._table.num_rows - self._offset)
        chunk = self._table.slice(self._offset, length).combine_chunks()
        self._offset += length
        batches = chunk.to_batches()
        data = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches)
        stamp = self._source.timestamp
        return ArrowSourceBatch(data, None if stamp is None else [stamp] * length)

    def snapshot_position(self) -> tuple[int, int] | None:
        return None if self._partition is None else (self._partition, self._offset)

    def restore_position(self, position: Any) -> None:
        self._table = None
        if position is None:
            self._partition, self._offset = None, 0
        else:
            self._partition, self._offset = int(position[0]), int(position[1])


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
        self._rows: list = []

    def write(self, values: list, timestamps: list | None) -> None:
        self._rows.extend(values)

    def write_arrow(self, batch: pa.RecordBatch | pa.Table, timestamps: list | None) -> None:
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


def _record_at_fault(records: list, type_info: Any, error: Exception) -> Exception:
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


def _as_mapping(record: Any, names: list[str]) -> dict:
    """``record`` by the field names ``records_to_arrow`` gives its kind of record."""
    if isinstance(record, dict):
        return record
    if isinstance(record, Row) and record._fields is not None:
        return record.as_dict()
    if isinstance(record, (tuple, list, Row)):
        return dict(zip(names, record)) if len(record) == len(names) else {}
    return {names[0]: record}


def records_to_arrow(records: list, type_info: Any = None) -> pa.Table:
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


def stream_to_spark(stream: DataStream, session: Any = None, job_name: str | None = None) -> Any:
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

"""The Spark DataFrames of a :class:`SparkPlan`: streaming for the stream, batch for a backlog.

Each plan node becomes DataFrame operations (see :mod:`.plan` for what maps to what). A node
under a keyed operator's initial state is built as a batch DataFrame: the same functions on
``session.read`` instead of ``session.readStream``, so a backlog runs as Spark batch work and
its result reaches the stream's stateful operator as Spark's initial state, never the driver.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import pyarrow as pa

from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.errors import SlipstreamError, UserFunctionError
from slipstream.operators.batch_engine import KEY_COLUMN, run_co_group_vectorized
from slipstream.spark_runner.feed import FeedReading
from slipstream.spark_runner.plan import (
    READ_PRESENT,
    SKIP_PRESENT,
    ChainNode,
    CoGroupBatchNode,
    DataFrameNode,
    FeedNode,
    FileStreamNode,
    FrameSourceNode,
    HybridNode,
    KeyedNode,
    SideOutputNode,
    SparkPlan,
    UnionNode,
)
from slipstream.spark_runner.records import (
    EVENT_TIME_COLUMN,
    KEY,
    KEYED_DDL,
    ORDER,
    RECORD_DDL,
    RECORD_SCHEMA,
    TAG,
    TIMESTAMP,
    VALUE,
    Chain,
    FileReading,
    Rows,
    SparkRuntimeContext,
    detached,
    dumps,
    end_of_input,
    file_order,
    loads,
)

BUCKET = "__slipstream_bucket"
BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"
INPUT = "input"


def end_of_input_directory(checkpoint_location: str) -> str:
    """Where a bounded event-time job's end-of-input marker file lies: beside the query's checkpoint."""
    return os.path.join(checkpoint_location, "end-of-input")


def write_end_of_input(checkpoint_location: str) -> None:
    """The end-of-input marker file (once: a restarted query has read it, or reads it now)."""
    directory = end_of_input_directory(checkpoint_location)
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, "end")
    if not os.path.exists(marker):
        hidden = os.path.join(directory, ".end.tmp")  # Spark lists no hidden file
        with open(hidden, "w") as file:
            file.write("end of input\n")
        os.replace(hidden, marker)


def feed_directory(checkpoint_location: str, node: FeedNode) -> str:
    """Where the driver writes an unbounded IteratorSource's records for Spark to read."""
    return os.path.join(checkpoint_location, "feeds", str(node.transformation.id))


def frame_directory(checkpoint_location: str, node: DataFrameNode) -> str:
    """Where a ``from_spark`` DataFrame is written as Parquet for the query's file stream source."""
    return os.path.join(checkpoint_location, "frames", str(node.transformation.id))


def write_frame(checkpoint_location: str, node: DataFrameNode) -> None:
    """Write ``node``'s DataFrame once: a restarted query finds it complete (Spark's ``_SUCCESS``
    marker) and reads the same files; a write a kill cut short is done again."""
    directory = frame_directory(checkpoint_location, node)
    if not os.path.exists(os.path.join(directory, "_SUCCESS")):
        node.transformation.source.dataframe.write.mode("overwrite").parquet(directory)


def present_files(checkpoint_location: str, node: FileStreamNode) -> list[str]:
    """The files ``node``'s directory held when its query first started (a bootstrap's backlog),
    listed once and kept beside the query's checkpoint, so that a restarted query reads and skips
    the same ones. Hidden files (a name starting with ``.`` or ``_``) are left out, as Spark does."""
    directory = os.path.abspath(node.directory)
    record = os.path.join(checkpoint_location, "backlog-files",
                          hashlib.sha256(directory.encode()).hexdigest()[:16] + ".json")
    if os.path.exists(record):
        with open(record) as file:
            listed: list[str] = json.load(file)
        return listed
    listed = sorted(os.path.join(root, name) for root, folders, names in os.walk(directory)
                    for name in names if not name.startswith((".", "_"))
                    and not any(part.startswith((".", "_")) for part in os.path.relpath(root, directory).split(os.sep)
                                if part != "."))
    os.makedirs(os.path.dirname(record), exist_ok=True)
    hidden = record + ".tmp"
    with open(hidden, "w") as file:
        json.dump(listed, file)
    os.replace(hidden, record)
    return listed


def union_all(frames: list[Any]) -> Any:
    """The union of DataFrames of one schema."""
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.union(other)
    return frame


class Then:
    """Two ``mapInArrow`` functions as one: ``then`` (if any) over what ``first`` yields."""

    def __init__(self, first: Any, then: Any = None) -> None:
        self.first = first
        self.then = then

    def __call__(self, batches: Any) -> Any:
        out = self.first(batches)
        return out if self.then is None else self.then(out)


class FrameRecords:
    """A columnar DataFrame's rows as records (named rows, as the embedded readers make them)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, batches: Any) -> Any:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        index = 0
        for batch in batches:
            rows = Rows()
            for row in rows_from_arrow(batch):
                rows.add(row, None, file_order(self.name, partition, index))
                index += 1
            yield rows.batch()


class CoGroupBucket:
    """One bucket of keys of a backlog co-group in a Spark worker: the vectorised function over
    both inputs' rows, its result as records stamped with the window's end (``MAX_TIMESTAMP``)."""

    def __init__(self, node: CoGroupBatchNode) -> None:
        self.function = node.transformation.function.co_group
        self.name = node.transformation.name

    def __call__(self, left: pa.Table, right: pa.Table) -> pa.Table:
        bucket = (left if left.num_rows else right).column(BUCKET)[0].as_py()
        tables = [table.drop_columns([BUCKET]).append_column(
            KEY_COLUMN, pa.repeat(pa.scalar(bucket, pa.int64()), table.num_rows)) for table in (left, right)]
        result, error = run_co_group_vectorized(tables[0], tables[1], self.function, KEY_COLUMN)
        if error is not None:
            raise UserFunctionError(self.name, 0, 1, f"key bucket {bucket}", error.cause,
                                    what="the Spark query's") from error.cause
        if result is None:
            return RECORD_SCHEMA.empty_table()
        rows = Rows()
        for index, row in enumerate(rows_from_arrow(result)):
            rows.add(row, MAX_TIMESTAMP, file_order(self.name, bucket, index))
        return pa.Table.from_batches([rows.batch()])


BOOTSTRAP_DDL = "key binary, state binary"
ARRIVAL = ("__slipstream_part", "__slipstream_file", "__slipstream_row")  # a columnar backlog's arrival order


class NoKeyState:
    """A state a bootstrap function's ``open`` asked for, in a worker running ``process_backlog``:
    there is no current key there, so using it fails, naming the operator and the state."""

    def __init__(self, operator: str, descriptor: Any) -> None:
        self._where = f"operator '{operator}': state '{getattr(descriptor, 'name', descriptor)}'"

    def __getattr__(self, name: str) -> Any:
        raise SlipstreamError(f"{self._where} has no current key in process_backlog: it returns each key's "
                              "state as a column of its result instead")


class BacklogContext(SparkRuntimeContext):
    """The runtime context of a bootstrap function opened to run ``process_backlog``."""

    def _no_key(self, state_descriptor: Any) -> NoKeyState:
        return NoKeyState(self._name, state_descriptor)

    get_state = get_list_state = get_map_state = get_reducing_state = get_aggregating_state = _no_key


class BootstrapKeys:
    """One partition of keys of a bootstrap function's backlog in a Spark worker: its records as
    one polars frame through ``process_backlog``; a row per key it returns, the key and its value
    states (a pickled dict by name, nulls left out: they leave a state unset). ``columnar``: the
    batches are the backlog's own columns (Parquet read by Spark), not pickled records."""

    def __init__(self, transformation: Any, field: str | int, parallelism: int, job_parameters: dict[str, str],
                 columnar: bool = False) -> None:
        self.transformation = transformation
        self.field = field
        self.parallelism = parallelism
        self.job_parameters = job_parameters
        self.columnar = columnar

    def __call__(self, batches: Any) -> Any:
        import polars as pl

        from slipstream.operators.backlog_bootstrap import checked_state, frame_of, key_column
        from slipstream.operators.elements import RecordBatch
        if self.columnar:
            tables = [batch for batch in batches if batch.num_rows]
            if not tables:
                return
            frame = pl.concat([frame_of(RecordBatch(arrow=table)) for table in tables], how="vertical_relaxed")
        else:
            values = [loads(data) for batch in batches for data in batch.column(VALUE).to_pylist()]
            if not values:
                return
            frame = frame_of(RecordBatch(values))
        name = self.transformation.name
        key = key_column(frame, self.field)
        function = self.transformation.function
        function.open(BacklogContext(name, self.parallelism, self.job_parameters))
        try:
            state = function.process_backlog(frame)
        except Exception as exc:
            raise UserFunctionError(name, 0, 1, f"a frame of {frame.height} backlog records", exc,
                                    uid=self.transformation.uid, what="process_backlog()'s") from exc
        finally:
            function.close()
        keys, columns = checked_state(state, key, frame[key].to_list(), name)
        states = [{column: values[row] for column, values in columns.items() if values[row] is not None}
                  for row in range(len(keys))]
        yield pa.RecordBatch.from_arrays([pa.array([dumps(k) for k in keys], pa.binary()),
                                          pa.array([dumps(s) for s in states], pa.binary())], names=[KEY, "state"])


class FrameBuilder:
    """Builds the DataFrame of each plan node on ``session`` (see the module docstring)."""

    def __init__(self, session: Any, plan: SparkPlan, checkpoint_location: str,
                 max_files_per_trigger: int | None = None) -> None:
        self.session = session
        self.max_files_per_trigger = max_files_per_trigger
        self.plan = plan
        self.checkpoint_location = checkpoint_location

    def records(self, node: Any, batch: bool = False) -> Any:
        """The DataFrame of ``node``'s records (the record schema, keyed after a key selector)."""
        if isinstance(node, (FileStreamNode, HybridNode, DataFrameNode)):
            return self.file_records(node, batch)
        if isinstance(node, FeedNode):
            return self.feed(node, batch).mapInArrow(FeedReading(node.order_prefix), RECORD_DDL)
        if isinstance(node, FrameSourceNode):
            return self.columns(node).mapInArrow(FrameRecords(node.transformation.name), RECORD_DDL)
        if isinstance(node, CoGroupBatchNode):
            return self.co_group(node)
        if isinstance(node, ChainNode):
            return self.chain(node, batch)
        if isinstance(node, SideOutputNode):
            from pyspark.sql import functions as F
            return self.records(node.input, batch).filter(F.col(TAG) == node.tag) \
                .withColumn(TAG, F.lit(None).cast("string"))
        if isinstance(node, KeyedNode):
            return self.keyed(node)
        if isinstance(node, UnionNode):
            return union_all([self.records(stream, batch) for stream in node.streams])
        raise SlipstreamError(f"no Spark translation for plan node {node!r}")  # the planner makes only these

    def file_records(self, node: FileStreamNode | HybridNode | DataFrameNode, batch: bool, chain: Chain | None = None,
                     schema: str = RECORD_DDL) -> Any:
        """The records of a file source's files (a HybridSource's parts' in union), then through
        ``chain`` in the same ``mapInArrow`` (a Python stage less); a bounded event-time job's
        end-of-input row joins them. Only a live part reads at most ``max_files_per_trigger``
        files per micro-batch: the first one reads every file of the parts before it."""
        parts = node.parts if isinstance(node, HybridNode) else [node]
        frames = [self.feed(part, batch).mapInArrow(Then(FeedReading(part.order_prefix), chain), schema)
                  if isinstance(part, FeedNode) else
                  self.part_files(part, batch, limited=part is parts[-1]).mapInArrow(
                      Then(self.file_reading(part), chain), schema) for part in parts]
        if self.plan.end_of_input and not batch:
            marker = self.files(end_of_input_directory(self.checkpoint_location), batch)
            frames.append(marker.mapInArrow(Then(end_of_input, chain), schema))
        return union_all(frames)

    def feed(self, node: FeedNode, batch: bool) -> Any:
        """The paths of the files the driver writes an unbounded IteratorSource's records into."""
        return self.files(feed_directory(self.checkpoint_location, node), batch, limited=True)

    def part_files(self, part: FileStreamNode | DataFrameNode, batch: bool, limited: bool) -> Any:
        """The paths a file source's part reads: for a bootstrap's backlog (batch), the files its
        directory held at start, else what Spark's file (stream) source finds (for a DataFrame, in
        the directory it was written to)."""
        if isinstance(part, DataFrameNode):
            return self.files(frame_directory(self.checkpoint_location, part), batch)
        if part.present_files == READ_PRESENT:
            listed = present_files(self.checkpoint_location, part)
            return self.session.createDataFrame([(path,) for path in listed], "path string")
        return self.files(part.directory, batch, limited)

    def file_reading(self, part: FileStreamNode | DataFrameNode) -> FileReading:
        """How a part's files are read in the workers; the stream after a bootstrap skips its backlog's."""
        if isinstance(part, DataFrameNode):
            from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
            return FileReading(ParquetColumnarRowInputFormat(), part.transformation.name)
        skip = frozenset(present_files(self.checkpoint_location, part)) if part.present_files == SKIP_PRESENT \
            else frozenset()
        return FileReading(part.reader_format, part.transformation.name, part.order_prefix, skip=skip)

    def files(self, directory: str, batch: bool, limited: bool = False) -> Any:
        """The paths of the files in ``directory``: Spark's file (stream) source, recursive;
        ``limited``: at most ``max_files_per_trigger`` of them per micro-batch."""
        reader = self.session.read if batch else self.session.readStream
        reader = reader.format("binaryFile").option("recursiveFileLookup", "true").schema(BINARY_FILE_SCHEMA)
        if self.max_files_per_trigger is not None and limited and not batch:
            reader = reader.option("maxFilesPerTrigger", self.max_files_per_trigger)
        return reader.load(directory).select("path")

    def columns(self, node: FrameSourceNode) -> Any:
        """A columnar bounded source as a batch DataFrame of its own columns."""
        from slipstream.datastream.connectors.arrow import ArrowSource
        from slipstream.datastream.connectors.file_system import FileSource
        from slipstream.datastream.connectors.spark import SparkSource, spark_compatible
        source = node.transformation.source
        if isinstance(source, SparkSource):
            return source.dataframe
        if isinstance(source, ArrowSource):
            return self.session.createDataFrame(spark_compatible(source.table))
        assert isinstance(source, FileSource)
        return self.session.read.parquet(*source.paths)

    def co_group(self, node: CoGroupBatchNode) -> Any:
        from pyspark.sql import functions as F
        buckets = self.plan.parallelism
        first, second = (self.columns(side).withColumn(BUCKET, F.pmod(F.hash(F.col(key)), F.lit(buckets)))
                         for side, key in zip((node.first, node.second), node.keys))
        bucket = CoGroupBucket(node)

        def run(left: pa.Table, right: pa.Table) -> pa.Table:  # a function: Spark counts its arguments
            return bucket(left, right)
        return first.groupBy(BUCKET).cogroup(second.groupBy(BUCKET)).applyInArrow(run, RECORD_DDL)

    def chain(self, node: ChainNode, batch: bool) -> Any:
        from pyspark.sql import functions as F
        plan = self.plan
        chain = None
        if node.steps or node.key_selector is not None:
            chain = Chain([detached(step) for step in node.steps], node.key_selector, node.key_operator,
                          plan.parallelism, plan.job_parameters)
        schema = KEYED_DDL if node.key_selector is not None else RECORD_DDL
        if isinstance(node.input, (FileStreamNode, HybridNode, DataFrameNode)):  # read and chained in one stage
            frame = self.file_records(node.input, batch, chain, schema)
        else:
            frame = self.records(node.input, batch)
            if chain is not None:
                frame = frame.mapInArrow(chain, schema)
        if node.watermark_delay_ms is not None and not batch:
            frame = frame.withColumn(EVENT_TIME_COLUMN, F.timestamp_millis(F.col(TIMESTAMP))) \
                .withWatermark(EVENT_TIME_COLUMN, f"{node.watermark_delay_ms} milliseconds")
        return frame

    def keyed(self, node: KeyedNode, encoder: Any = None) -> Any:
        """``node``'s transformWithState; with a row-format sink's ``encoder``, its main output as
        the sink's lines (``value string``) instead of records."""
        from pyspark.sql import functions as F

        from slipstream.spark_runner.keyed import KeyedFunctionProcessor
        frames = [self.records(chain).filter(F.col(TAG).isNull())
                  .select(VALUE, TIMESTAMP, ORDER, KEY, F.lit(index).alias(INPUT)) for index, chain in node.streams]
        frame = union_all(frames)
        initial = None
        if node.initial is not None:
            index, chain = node.initial
            records = F.struct(F.col(VALUE).alias(VALUE), F.col(TIMESTAMP).alias(TIMESTAMP), F.col(ORDER).alias(ORDER))
            initial = self.records(chain, batch=True).filter(F.col(TAG).isNull()).groupBy(KEY) \
                .agg(F.collect_list(records).alias("records")).withColumn(INPUT, F.lit(index)).groupBy(KEY)
        if node.bootstrap is not None:
            initial = self.bootstrap(node).groupBy(KEY)
        processor = KeyedFunctionProcessor(detached(node.transformation), node.time_mode, self.plan.parallelism,
                                           self.plan.job_parameters, encoder, bootstrap=node.bootstrap is not None)
        return frame.groupBy(KEY).transformWithState(processor, RECORD_DDL if encoder is None else "value string",
                                                     "Append", node.time_mode, initialState=initial)

    def bootstrap(self, node: KeyedNode) -> Any:
        """A bootstrap function's backlog as a batch DataFrame of each key's state (``key``, ``state``):
        its records partitioned by key, in arrival order, through ``process_backlog`` per partition.
        Parquet files straight into the function (no step before it) stay columns all the way."""
        from pyspark.sql import functions as F
        assert node.bootstrap is not None
        columns = self.parquet_backlog(node.bootstrap.history) if node.bootstrap.columnar else None
        backlog = BootstrapKeys(detached(node.transformation), node.bootstrap.field, self.plan.parallelism,
                                self.plan.job_parameters, columnar=columns is not None)
        if columns is not None:
            field = node.bootstrap.field
            key = F.col(field) if isinstance(field, str) else F.col(columns.columns[field])
            return columns.repartition(self.plan.parallelism, key).sortWithinPartitions(*ARRIVAL) \
                .drop(*ARRIVAL).mapInArrow(backlog, BOOTSTRAP_DDL)
        records = self.records(node.bootstrap.history, batch=True).filter(F.col(TAG).isNull()) \
            .select(VALUE, ORDER, KEY)
        return records.repartition(self.plan.parallelism, KEY).sortWithinPartitions(ORDER) \
            .mapInArrow(backlog, BOOTSTRAP_DDL)

    def parquet_backlog(self, history: ChainNode) -> Any:
        """A columnar backlog's Parquet files read by Spark, with the arrival order's columns (part,
        file, row); None when there is no file."""
        from pyspark.sql import functions as F
        parts = history.input.parts if isinstance(history.input, HybridNode) else [history.input]
        frames = []
        for number, part in enumerate(parts):
            paths = present_files(self.checkpoint_location, part) if part.present_files == READ_PRESENT \
                else [part.directory]
            if paths:
                frames.append(self.session.read.option("recursiveFileLookup", "true").parquet(*paths).select(
                    "*", F.lit(number).alias(ARRIVAL[0]), F.col("_metadata.file_path").alias(ARRIVAL[1]),
                    F.col("_metadata.row_index").alias(ARRIVAL[2])))
        return union_all(frames) if frames else None

"""Planning pass: a backlog subgraph that Spark can run whole becomes one Spark query.

With the Spark batch engine, a vectorised ``co_group`` with EndOfStreamWindows whose two
inputs are ``from_spark`` sources (nothing between them but the key partitioning, keys
given as field names, no watermark strategy) needs no record in Python: the pass replaces
the three operators by one bounded source, :class:`SparkCoGroupSource`, that runs the
co-group on the two DataFrames inside Spark (grouped co-group over buckets of key hashes,
the polars function applied per bucket in Spark's workers) and emits only its result, as
Arrow batches. The result is what the operator would have emitted (same rows, each with the
window's timestamp ``MAX_TIMESTAMP``), in an order of its own, as a vectorised co-group's
result order is engine-chosen anyway.

In BATCH mode, a built-in keyed aggregation (``key_by(field).sum/min/max/min_by/max_by(field)``,
key and field given as names or positions of the DataFrame's columns) directly after a
``from_spark`` source is folded the same way into :class:`SparkAggregateSource`, **on either
batch engine**: the data is in Spark already, and the polars engine would pull every row
through the driver to keep one per key, so the planner runs this operator on Spark and
``explain()`` says so and why. Spark groups the DataFrame by the key and only one record
per key comes back — what the operator emits in BATCH mode (Flink's BATCH semantics: one final value per key). "The
key's first record", whose other fields ``sum``/``min``/``max`` keep and which
``min_by``/``max_by`` return on ties, is defined by **the DataFrame's order**
(``monotonically_increasing_id``: partition by partition, row by row), the order in which
an unfolded job at parallelism 1 reads the rows; records come back in the order of their
key's first record. The result equals the operator's on the same rows, so folding is
limited to what Spark computes exactly as Python does: keys and ``min``/``max`` fields of
integer, boolean, decimal, date or (binary-collated) string type, ``sum`` of integer fields
(summed exactly as decimals; the sum keeps the field's type, or becomes int64 when it does
not fit; above int64 the job fails). A key with several records of which one has a null
field fails the job, as the operator fails comparing or adding None. In STREAMING mode
nothing is folded: the rolling aggregation emits an update per record, so every record
must reach it; ``explain()`` says so on the operator.

``explain()`` shows a replaced operator as "runs on spark as one query".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from slipstream.datastream.connectors.spark import SparkSource, TableSource
from slipstream.datastream.fields import FieldKey
from slipstream.datastream.job_spec import RuntimeExecutionMode
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.transformations import (
    CoGroupTransformation,
    Partitioning,
    ReduceTransformation,
    SourceTransformation,
)
from slipstream.datastream.window import is_end_of_stream_window
from slipstream.errors import SlipstreamError, UserFunctionError

if TYPE_CHECKING:
    from slipstream.datastream.job_spec import JobSpec
    from slipstream.runtime.job_graph import StreamNode
    from slipstream.runtime.planner import StreamGraph

SEQ_COLUMN = "__slipstream_seq"
FIRST_COLUMN = "__slipstream_first"
VALUE_COLUMN = "__slipstream_value"
ERROR_COLUMN = "__slipstream_null_field"


class SparkCoGroupSource(TableSource):
    """The result of a vectorised co-group of two Spark DataFrames, computed in Spark on first read."""

    timestamp = MAX_TIMESTAMP

    def __init__(self, first: Any, second: Any, keys: tuple[str, str], function: Any, name: str,
                 engine_options: dict[str, Any]) -> None:
        super().__init__()
        self.first = first
        self.second = second
        self.keys = keys
        self.function = function
        self.name = name
        self.engine_options = engine_options
        self.spark_plan = f"from_spark x2 -> co_group on {keys[0]!r} = {keys[1]!r} (vectorised, per key bucket)"

    def default_name(self) -> str:
        return self.name

    def load(self) -> pa.Table:
        from slipstream.operators.batch_engine import CoGroupFunctionError
        from slipstream.runtime.batch.spark_engine import SparkBatchEngine
        options = dict(self.engine_options)
        options.setdefault("session", self.first.sparkSession)
        engine = SparkBatchEngine(**options)
        try:
            result = engine.co_group_frames(self.first, self.second, self.function.co_group,
                                            first_key=self.keys[0], second_key=self.keys[1])
        except CoGroupFunctionError as exc:
            raise UserFunctionError(self.name, 0, 1, f"key bucket {exc.key_ids}", exc.cause,
                                    what="the Spark query's") from exc.cause
        return result if result is not None else pa.table({})


class SparkAggregateSource(SparkSource):
    """A built-in keyed aggregation of a Spark DataFrame in BATCH mode: one record per key,
    computed in Spark and read in pieces (see the module docstring)."""

    def __init__(self, result: Any, name: str, kind: str, key: str, field: str, field_type: pa.DataType,
                 columns: list[str], engine: str = "spark") -> None:
        super().__init__(result)
        self.name = name
        self.kind = kind
        self.key = key
        self.field = field
        self.field_type = field_type
        self.columns = columns
        rule = ("one final record per key, its other fields from the key's first record"
                if kind in ("sum", "min", "max") else "one record per key, the first on ties")
        self.spark_plan = (f"from_spark -> key_by({key!r}).{kind}({field!r}) (BATCH: {rule}, "
                           "in the DataFrame's order)")
        if engine != "spark":
            self.spark_plan += (f"; on Spark, not the {engine} batch engine: the rows stay in Spark and one "
                                "record per key comes back, instead of every row through the driver")

    def default_name(self) -> str:
        return self.name

    def finish(self, table: pa.Table) -> pa.Table:
        """Fail on a key whose null field the operator could not combine; the sum in the
        field's type (int64 when it does not fit); only the DataFrame's columns."""
        import pyarrow.compute as pc
        flags = table.column(ERROR_COLUMN)
        if table.num_rows and pc.any(flags).as_py():
            index = pc.index(flags, True).as_py()
            key = table.column(self.key)[index].as_py()
            cause = TypeError(f"field {self.field!r} is None in one of the key's records: {self.kind} cannot "
                              "combine None with another value")
            raise UserFunctionError(self.name, 0, 1, key, cause, what="the Spark query's key")
        table = table.select(self.columns)
        if self.kind == "sum":
            index = self.columns.index(self.field)
            column = table.column(index)
            for kind in (self.field_type, pa.int64()):
                try:
                    return table.set_column(index, self.field, column.cast(kind))
                except pa.ArrowInvalid:
                    continue
            raise SlipstreamError(f"operator '{self.name}': a key's sum of field {self.field!r} does not fit "
                                  "int64; aggregate it without folding (the polars batch engine)")
        return table


def _column(frame: Any, field: Any) -> str | None:
    """The DataFrame column a record field (name or position) reads, or None."""
    names = list(frame.columns)
    if len(set(names)) != len(names):
        return None
    if isinstance(field, bool):
        return None
    if isinstance(field, int):
        return names[field] if -len(names) <= field < len(names) else None
    return field if isinstance(field, str) and field in names else None


def _exact_type(data_type: Any, integral_only: bool = False) -> bool:
    """Whether Spark orders and compares values of ``data_type`` exactly as Python does."""
    from pyspark.sql import types as T
    if isinstance(data_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return True
    if integral_only:
        return False
    if isinstance(data_type, T.StringType):
        return getattr(data_type, "collation", "UTF8_BINARY") == "UTF8_BINARY"
    return isinstance(data_type, (T.BooleanType, T.DateType, T.DecimalType))


def _aggregate_query(frame: Any, kind: str, key: str, field: str) -> Any:
    """One row per key: the record the operator ends with for the key, plus the error flag."""
    from slipstream.runtime.batch.spark_engine import pyspark_modules
    _, F, _ = pyspark_modules()
    columns = list(frame.columns)
    numbered = frame.withColumn(SEQ_COLUMN, F.monotonically_increasing_id())
    seq, value = numbered[SEQ_COLUMN], numbered[field]
    record = F.struct(*[numbered[name] for name in columns])
    rows = F.count(F.lit(1))
    aggregates = [F.min(seq).alias(SEQ_COLUMN), ((rows > 1) & (F.count(value) < rows)).alias(ERROR_COLUMN)]
    if kind in ("sum", "min", "max"):
        combined = F.sum(value.cast("decimal(38,0)")) if kind == "sum" else getattr(F, kind)(value)
        aggregates += [F.min_by(record, seq).alias(FIRST_COLUMN), combined.alias(VALUE_COLUMN)]
    elif kind == "min_by":
        aggregates.append(F.min_by(record, F.struct(value, seq)).alias(FIRST_COLUMN))
    else:  # max_by: the largest field, then the smallest sequence number (the first record)
        aggregates.append(F.max_by(record, F.struct(value, -seq)).alias(FIRST_COLUMN))
    grouped = numbered.groupBy(numbered[key]).agg(*aggregates).orderBy(SEQ_COLUMN)
    first = F.col(FIRST_COLUMN)
    selected = [F.col(VALUE_COLUMN).alias(name) if name == field and kind in ("sum", "min", "max")
                else first[name].alias(name) for name in columns]
    return grouped.select(*selected, F.col(ERROR_COLUMN))


def _fold_aggregation(node: StreamNode, mode: RuntimeExecutionMode | None,
                      engine: str) -> SparkAggregateSource | None:
    """The folded source for a built-in keyed aggregation straight after from_spark, or None
    (with a note for ``explain()`` when only the types or the mode prevent it)."""
    transformation = node.transformation
    if not isinstance(transformation, ReduceTransformation) or transformation.aggregation is None:
        return None
    kind, field = transformation.aggregation
    if kind not in ("sum", "min", "max", "min_by", "max_by") or len(node.in_edges) != 1:
        return None
    edge = node.in_edges[0]
    frame = _spark_input(edge.source)
    selector = transformation.key_selectors[0]
    if frame is None or edge.partitioning is not Partitioning.HASH or edge.side_tag is not None or \
            not isinstance(selector, FieldKey):
        return None
    key, column = _column(frame, selector.field), _column(frame, field)
    if key is None or column is None:
        return None
    types = {item.name: item.dataType for item in frame.schema.fields}
    if not _exact_type(types[key]) or not _exact_type(types[column], integral_only=kind == "sum"):
        wanted = "an integer" if kind == "sum" else "an integer, boolean, decimal, date or string"
        node.notes.append(f"not folded into a Spark query: the key must be, and the {kind} field {wanted} "
                          f"column (key {types[key].simpleString()}, field {types[column].simpleString()})")
        return None
    if mode is not RuntimeExecutionMode.BATCH:
        node.notes.append(f"not folded into a Spark query: in STREAMING mode the rolling {kind} emits an update "
                          "per record, so every record reaches it (BATCH mode runs it in Spark)")
        return None
    from pyspark.sql.pandas.types import to_arrow_type
    return SparkAggregateSource(_aggregate_query(frame, kind, key, column), transformation.name, kind, key,
                                column, to_arrow_type(types[column]), list(frame.columns), engine)


def _spark_input(node: Any) -> Any:
    """The DataFrame of ``node`` when it is a plain from_spark source feeding only this edge."""
    transformation = node.transformation
    if not isinstance(transformation, SourceTransformation) or type(transformation.source) is not SparkSource:
        return None
    if transformation.watermark_strategy is not None or node.in_edges or len(node.out_edges) != 1:
        return None
    return transformation.source.dataframe


def plan_spark_queries(graph: StreamGraph, spec: JobSpec) -> StreamGraph:
    """Pass: fold (the graph's mode BATCH, on either engine) ``from_spark`` -> built-in keyed
    aggregation, and (the Spark engine) ``from_spark`` x2 -> vectorised EndOfStreamWindows
    co_group, into one Spark query each."""
    options = spec.runtime_options
    mode = graph.mode
    if not options.backlog_sorting or not isinstance(options.batch_engine, str):
        return graph
    graph = graph.copy()
    removed: set[int] = set()
    for node in list(graph.nodes):
        folded = _fold_aggregation(node, mode, options.batch_engine)
        if folded is None:
            continue
        transformation = node.transformation
        removed.add(id(node.in_edges[0].source))
        node.transformation = SourceTransformation(
            id=transformation.id, name=transformation.name, inputs=[], parallelism=node.parallelism,
            uid=node.uid, output_type=transformation.output_type, scope=transformation.scope,
            source=folded, watermark_strategy=None)
        node.in_edges = []
    for node in list(graph.nodes):
        if id(node) in removed or options.batch_engine != "spark":
            continue
        transformation = node.transformation
        if not isinstance(transformation, CoGroupTransformation) or not transformation.vectorized:
            continue
        if transformation.evictor is not None or transformation.allowed_lateness or \
                not is_end_of_stream_window(transformation.assigner, transformation.trigger):
            continue
        edges = sorted(node.in_edges, key=lambda edge: edge.input_index)
        if len(edges) != 2 or [edge.input_index for edge in edges] != [0, 1]:
            continue
        frames = [_spark_input(edge.source) for edge in edges]
        selectors = transformation.key_selectors
        fields = [selector.field for selector in selectors
                  if isinstance(selector, FieldKey) and isinstance(selector.field, str)]
        if any(frame is None for frame in frames) or len(fields) != len(selectors):
            continue
        source = SparkCoGroupSource(frames[0], frames[1], (fields[0], fields[1]),
                                    transformation.function, transformation.name, dict(options.engine_options))
        node.transformation = SourceTransformation(
            id=transformation.id, name=transformation.name, inputs=[], parallelism=node.parallelism,
            uid=node.uid, output_type=transformation.output_type, scope=transformation.scope,
            source=source, watermark_strategy=None)
        for edge in edges:
            removed.add(id(edge.source))
        node.in_edges = []
    if removed:
        graph.nodes = [node for node in graph.nodes if id(node) not in removed]
    return graph

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

``explain()`` shows the replaced operator as "runs on spark as one query".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from slipstream.datastream.connectors.spark import SparkSource, TableSource
from slipstream.datastream.fields import FieldKey
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.transformations import CoGroupTransformation, SourceTransformation
from slipstream.datastream.window import is_end_of_stream_window
from slipstream.errors import UserFunctionError

if TYPE_CHECKING:
    from slipstream.datastream.environment import StreamExecutionEnvironment
    from slipstream.runtime.planner import StreamGraph


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


def _spark_input(node: Any) -> Any:
    """The DataFrame of ``node`` when it is a plain from_spark source feeding only this edge."""
    transformation = node.transformation
    if not isinstance(transformation, SourceTransformation) or not isinstance(transformation.source, SparkSource):
        return None
    if transformation.watermark_strategy is not None or node.in_edges or len(node.out_edges) != 1:
        return None
    return transformation.source.dataframe


def plan_spark_queries(graph: StreamGraph, env: StreamExecutionEnvironment) -> StreamGraph:
    """Pass: fold ``from_spark`` x2 -> vectorised EndOfStreamWindows co_group into one Spark query."""
    options = env.runtime_options
    if options.batch_engine != "spark" or not options.backlog_sorting:
        return graph
    removed: set[int] = set()
    for node in list(graph.nodes):
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
        if any(frame is None for frame in frames) or \
                not all(isinstance(selector, FieldKey) and isinstance(selector.field, str) for selector in selectors):
            continue
        source = SparkCoGroupSource(frames[0], frames[1], (selectors[0].field, selectors[1].field),
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

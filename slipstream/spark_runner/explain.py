"""``explain()`` on the Spark runner: which operator runs where, the query, the state schema, the trigger."""

from __future__ import annotations

from typing import Any

from slipstream.spark_runner.frames import BOOTSTRAP_DDL
from slipstream.spark_runner.plan import (
    READ_PRESENT,
    SHARED_VALUES,
    SKIP_PRESENT,
    BootstrapNode,
    ChainNode,
    CoGroupBatchNode,
    DataFrameNode,
    FeedNode,
    FileStreamNode,
    FrameSourceNode,
    HybridNode,
    KeyedNode,
    RollingReduce,
    SideOutputNode,
    SinkNode,
    SparkPlan,
    UnionNode,
    state_descriptors,
)
from slipstream.spark_runner.records import KEYED_DDL, RECORD_DDL
from slipstream.spark_runner.windows import EventTimeWindows

STATE_SCHEMAS = {
    "value": "value state",
    "list": "list state, elements value binary (pickled)",
    "map": "map state, key binary -> value binary (pickled)",
    "reducing": "value state holding the reduced value",
    "aggregating": "value state holding the accumulator",
}
NOT_SPARK_AGGREGATION = {
    True: "groupBy(window).agg may still count a record later than the watermark, and drops by record time "
          "where Flink drops a record only once its window fired: results would differ",
    False: "a streaming aggregation's update mode emits a key once per micro-batch, where a rolling "
           "reduce emits every record's update",
}
"""Why a keyed window or rolling reduce runs in transformWithState, not as Spark's aggregation."""
SHARED = ("value", "reducing", "aggregating")  # kinds kept in one Spark value state unless they have a TTL


def describe_state(descriptor: Any) -> str:
    """One state descriptor as the Spark state it becomes."""
    kind = getattr(descriptor, "kind", "")
    ttl = getattr(descriptor, "ttl_config", None)
    line = f"'{descriptor.name}': {STATE_SCHEMAS.get(kind, type(descriptor).__name__)}"
    if kind in SHARED:
        line += (", its own Spark value state, value binary (pickled)" if ttl else
                 f", an entry of Spark value state '{SHARED_VALUES}' (value binary: a pickled dict by name)")
    return line + (f", TTL {ttl.ttl_millis} ms" if ttl else "")


def state_schema(node: KeyedNode) -> list[str]:
    """The Spark state variables of a keyed node, one line each, found by opening a copy of its
    function on a recording context (a function whose ``open`` does more says so instead)."""
    try:
        descriptors = state_descriptors(node.transformation)
    except Exception as exc:  # the plan is still shown: only its state names are unknown
        return [f"(named when the function opens: opening a copy failed with {type(exc).__name__}: {exc})"]
    return [describe_state(d) for d in descriptors] or ["(no keyed state)"]


def describe(node: Any) -> list[str]:
    """The lines of one plan node."""
    if isinstance(node, FileStreamNode):
        if node.present_files == READ_PRESENT:
            return [f"batch source '{node.transformation.name}': the files {node.directory} holds when the query "
                    f"first starts (listed once, beside the checkpoint), read by {type(node.reader_format).__name__} "
                    f"in the Python workers -> {RECORD_DDL}"]
        bounded = "bounded: the files present at start" if node.bounded else "watched for new files"
        skipped = "; the files there when the query first started are skipped (a bootstrap's backlog)" \
            if node.present_files == SKIP_PRESENT else ""
        return [f"source '{node.transformation.name}': Spark file stream source (binaryFile, recursive) over "
                f"{node.directory}, {bounded}{skipped}; each file read by {type(node.reader_format).__name__} in "
                f"the Python workers (mapInArrow) -> {RECORD_DDL}"]
    if isinstance(node, BootstrapNode):
        read = "its Parquet files read by Spark as columns (never records)" if node.columnar else "the backlog above"
        return [f"batch: {read}, repartitioned by key, in arrival order, through process_backlog of the "
                f"KeyedStateBootstrapFunction per partition of keys (mapInArrow) -> {BOOTSTRAP_DDL}"]
    if isinstance(node, HybridNode):
        parts = "sources above (the last an IteratorSource fed through files)" if isinstance(node.parts[-1], FeedNode) \
            else "file stream sources above"
        return [f"source '{node.transformation.name}': HybridSource as the union of the {len(node.parts)} {parts}"
                ": the first micro-batch reads every file of the bounded parts, a key's records go through its "
                "operator part by part (history before the live part)"]
    if isinstance(node, FeedNode):
        return [f"source '{node.transformation.name}': read by a thread of the driver into Arrow files beside the "
                "checkpoint, which a Spark file stream source watches; a restart resumes the iteration after the "
                "records written"]
    if isinstance(node, DataFrameNode):
        return [f"source '{node.transformation.name}': the DataFrame written once as Parquet beside the checkpoint "
                f"when the query first starts, read by Spark's file stream source (bounded) and "
                f"ParquetColumnarRowInputFormat in the Python workers -> {RECORD_DDL}"]
    if isinstance(node, FrameSourceNode):
        return [f"batch source '{node.transformation.name}': {node.transformation.source.default_name()} as a Spark "
                "DataFrame"]
    if isinstance(node, CoGroupBatchNode):
        return [f"batch: '{node.transformation.name}' as one Spark query: groupBy(bucket).cogroup(...)"
                f".applyInArrow on {node.keys[0]!r} = {node.keys[1]!r}, the vectorised function per bucket of keys"]
    if isinstance(node, ChainNode):
        lines = []
        if node.steps or node.key_selector is not None:
            names = [f"'{t.name}'" for t in node.steps]
            if node.key_selector is not None:
                names.append(f"key of '{node.key_operator}'")
            schema = KEYED_DDL if node.key_selector is not None else RECORD_DDL
            where = "the same mapInArrow" if isinstance(node.input, (FileStreamNode, HybridNode, DataFrameNode)) \
                else "mapInArrow"
            lines.append(f"{where}: {' -> '.join(names)} -> {schema}")
        if node.watermark_delay_ms is not None:
            lines.append(f"withWatermark(et, {node.watermark_delay_ms} ms) after '{node.watermark_operator}': "
                         f"Spark's watermark (newest - delay) is Flink's (newest - bound - 1)")
        return lines
    if isinstance(node, KeyedNode):
        t = node.transformation
        uid = f" (uid '{t.uid}')" if t.uid else ""
        inputs = " + ".join(f"input {index + 1}" for index, _ in node.streams)
        union = f" over the union of {inputs} (an input column tells them apart)" if len(node.streams) > 1 else ""
        lines = [f"groupBy(key).transformWithState: '{t.name}'{uid}{union}, timeMode {node.time_mode}, "
                 f"outputMode Append -> {RECORD_DDL}"]
        function = getattr(t, "function", None)
        if isinstance(function, (EventTimeWindows, RollingReduce)):
            why = NOT_SPARK_AGGREGATION[type(function) is EventTimeWindows]
            lines.append(f"    not Spark's own aggregation: {why}")
        if node.initial is not None:
            lines.append(f"    initial state: input {node.initial[0] + 1} (bounded), run as Spark batch above, its "
                         "records per key through the function before the stream")
        if node.bootstrap is not None:
            lines.append("    initial state: each key's value states from process_backlog above (Spark batch), "
                         "installed before the stream's first record")
        return [*lines, *(f"    state {line}" for line in state_schema(node))]
    if isinstance(node, UnionNode):
        return [f"union: '{node.transformation.name}' of the {len(node.streams)} streams above"]
    if isinstance(node, SideOutputNode):
        return [f"filter: side output '{node.tag}' ('{node.transformation.name}'), the rows tagged so"]
    if isinstance(node, SinkNode):
        sink = node.transformation.sink
        if node.file_format is None:
            how = "foreachBatch calling the sink's writer on the driver (at-least-once across restarts)"
        else:
            how = f"Spark's file sink ({node.file_format}) at {sink.base_path}, exactly-once (its log commits " \
                  "each micro-batch)" + ("; its lines encoded in the keyed operator's Python stage"
                                         if node.encoded_by_keyed else "")
        if node.schema is not None:
            how += f", schema {', '.join(f'{f.name} {f.type}' for f in node.schema)}"
        return [f"sink '{node.transformation.name}': {how}"]
    return [repr(node)]


def explain_plan(plan: SparkPlan) -> str:
    """The plan as text (see the module docstring)."""
    if plan.bounded:
        trigger = "availableNow (the input present at start, then the query stops)"
    elif plan.trigger_ms is not None:
        trigger = f"processingTime {plan.trigger_ms} ms (the checkpoint interval)"
    else:
        trigger = "default (a micro-batch as soon as the last one ends; no checkpoint interval set)"
    if plan.end_of_input:
        trigger += "; then once more over an end-of-input marker alone, whose watermark fires the timers left"
    location = plan.checkpoint_location or "a temporary directory (a restart starts afresh)"
    lines = [f"Spark plan of '{plan.job_name}' (runner: spark)",
             "  query 1: Spark Structured Streaming",
             f"    trigger: {trigger}",
             f"    checkpointLocation: {location}",
             f"    shuffle partitions (keyed parallelism): {plan.parallelism}"]
    for node in plan.nodes():
        lines.extend(f"    {line}" for line in describe(node))
    return "\n".join(lines)

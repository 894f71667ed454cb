"""The Spark runner's planning pass: a :class:`JobSpec` as one Spark Structured Streaming query.

The pass walks the job from its sink back to its sources and turns each transformation into a
node of the Spark plan:

* a ``HybridSource`` of ``FileSource`` directories → the union of their file stream sources,
  the bounded parts read whole in the first micro-batch, a key's records part by part;
* a ``FileSource`` over a directory → Spark's file stream source (``binaryFile``, recursive; it
  lists new files, and its checkpoint says which it has read), each file read in the Python
  workers with the source's own format (so records are exactly the embedded reader's);
* consecutive ``map`` / ``flat_map`` / ``filter`` / unkeyed ``process`` and a timestamp assigner
  → one ``mapInArrow``; the key selector of a ``key_by`` runs last in the chain before it;
* a bounded-out-of-orderness (or monotonous) watermark strategy → ``withWatermark`` right after
  its assigner, with Spark's delay one more than Flink's bound (Flink's watermark is the
  newest timestamp - bound - 1, Spark's the newest - delay);
* ``key_by`` + ``KeyedProcessFunction`` (or a rolling ``reduce``) →
  ``groupBy(key).transformWithState`` (see :mod:`.keyed`); a ``KeyedStateBootstrapFunction``'s
  backlog (what the embedded runtime reads as backlog) → a Spark batch query through its
  ``process_backlog``, whose rows are the operator's initial state (:class:`BootstrapNode`);
* ``union`` of streams without a watermark → the union of their DataFrames;
* the sink → Spark's file sink for a row-format ``FileSink`` (text) or a Parquet one with a
  schema (exactly-once: Spark's sink log commits each micro-batch's files with its
  checkpoint), else ``foreachBatch`` calling the
  sink's writer on the driver (at-least-once across restarts, as Spark's foreachBatch is).

Anything else is refused here, naming the operator and why (:class:`SparkPlanningError`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from slipstream.attributes import Boundedness
from slipstream.datastream.bootstrap import KeyedStateBootstrapFunction
from slipstream.datastream.connectors.base import Sink
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.job_spec import JobSpec
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.transformations import (
    BroadcastProcessTransformation,
    CoGroupTransformation,
    CoProcessTransformation,
    FeedbackTailTransformation,
    FilterTransformation,
    FlatMapTransformation,
    IterationHeadTransformation,
    KeyedProcessTransformation,
    LoopExitTransformation,
    LoopHeadTransformation,
    MapTransformation,
    PartitionTransformation,
    ProcessTransformation,
    ReduceTransformation,
    SideOutputTransformation,
    SinkTransformation,
    SourceTransformation,
    TimestampsAndWatermarksTransformation,
    Transformation,
    UnionTransformation,
    WindowTransformation,
)
from slipstream.datastream.watermark_strategy import AscendingTimestampsWatermarks, BoundedOutOfOrdernessWatermarks
from slipstream.errors import InvalidProgramError
from slipstream.spark_runner.windows import EventTimeWindows, unsupported

EVENT_TIME, PROCESSING_TIME, NO_TIME = "EventTime", "ProcessingTime", "None"  # transformWithState's time modes
READ_PRESENT, SKIP_PRESENT = "read", "skip"  # a directory's files at start: a bootstrap's backlog, not the stream's
SHARED_VALUES = "slipstream.values"  # the Spark value state holding a keyed function's value states without a TTL
STATELESS = (MapTransformation, FlatMapTransformation, FilterTransformation, ProcessTransformation,
             TimestampsAndWatermarksTransformation)

REFUSED: dict[type[Transformation], str] = {
    LoopHeadTransformation: "a FLIP-15 loop or FLIP-176 iteration feeds records back into the stream, and a Spark "
                            "Structured Streaming query is acyclic",
    FeedbackTailTransformation: "a loop's feedback edge closes a cycle, and a Spark Structured Streaming query is "
                                "acyclic",
    LoopExitTransformation: "it leaves a FLIP-15 loop, and a Spark Structured Streaming query is acyclic",
    CoGroupTransformation: "a windowed co_group or join in the stream runs on the embedded runtime (in a backlog "
                           "it runs on the Spark batch engine)",
    BroadcastProcessTransformation: "Spark has no broadcast input to a streaming stateful operator",
}


TRANSLATED = (SourceTransformation, SinkTransformation, PartitionTransformation, SideOutputTransformation,
              UnionTransformation, *STATELESS, KeyedProcessTransformation, ReduceTransformation,
              CoProcessTransformation, WindowTransformation)
"""The kinds the planner translates (some only in some forms, refused otherwise, naming why);
every other kind is in :data:`REFUSED`."""


T = TypeVar("T")


class SparkPlanningError(InvalidProgramError):
    """The Spark runner cannot run this job: the message names the operator and the reason."""


def refuse(transformation: Transformation, reason: str) -> SparkPlanningError:
    return SparkPlanningError(f"the Spark runner cannot run operator '{transformation.name}'"
                              + (f" (uid '{transformation.uid}')" if transformation.uid else "")
                              + f": {reason}")


@dataclass
class FileStreamNode:
    """A ``FileSource`` as Spark's file stream source over its directory."""

    transformation: SourceTransformation
    directory: str
    reader_format: Any
    bounded: bool
    order_prefix: bytes = b""  # a HybridSource's part: its records sort before the next part's
    present_files: str | None = None  # READ_PRESENT: only the files there at start; SKIP_PRESENT: all but those


@dataclass
class DataFrameNode:
    """A DataFrame (``from_spark``) as a stream's bounded source: written once as Parquet beside the
    query's checkpoint when the query first starts (a streaming query cannot read a batch DataFrame),
    then read by Spark's file stream source like a ``FileSource`` of Parquet, in the DataFrame's order."""

    transformation: SourceTransformation


@dataclass
class HybridNode:
    """A ``HybridSource`` of ``FileSource`` directories (history, then the watched one, or an
    unbounded ``IteratorSource`` last) as the union of their file stream sources: the query's
    first micro-batch reads every file of the bounded parts, and each part's records carry its
    number first in their order, so a key's history goes through its operator before its live
    records, as the embedded runtime reads them."""

    transformation: SourceTransformation
    parts: list[Any]  # FileStreamNode, the last one maybe a FeedNode

    def inputs(self) -> list[Any]:
        return list(self.parts)


@dataclass
class FeedNode:
    """An unbounded ``IteratorSource``: a thread of the driver reads it into Arrow files in a
    directory beside the query's checkpoint, which Spark's file stream source watches."""

    transformation: SourceTransformation
    source: Any
    order_prefix: bytes = b""  # a HybridSource's last part: its records sort after the earlier parts'


@dataclass
class FrameSourceNode:
    """A bounded columnar source read as a Spark batch DataFrame: a ``FileSource`` of Parquet,
    an ``ArrowSource`` or a ``from_spark`` DataFrame (an input of a backlog co-group)."""

    transformation: SourceTransformation


@dataclass
class CoGroupBatchNode:
    """A vectorised co-group over ``EndOfStreamWindows`` of two columnar bounded inputs, run as
    one Spark batch query (grouped co-group per bucket of key hashes, the function in the workers)."""

    transformation: CoGroupTransformation
    first: FrameSourceNode
    second: FrameSourceNode
    keys: tuple[str, str]

    def inputs(self) -> list[Any]:
        return [self.first, self.second]


@dataclass
class ChainNode:
    """Stateless steps in one ``mapInArrow``; ``key_selector`` set when a keyed stage follows;
    ``watermark_delay_ms`` set when the chain ends with a timestamp assigner whose watermark
    Spark keeps (``withWatermark`` after the chain)."""

    input: Any
    steps: list[Transformation] = field(default_factory=list)
    key_selector: Any = None
    key_operator: str | None = None
    watermark_delay_ms: int | None = None
    watermark_operator: str | None = None

    def inputs(self) -> list[Any]:
        return [self.input]


@dataclass
class KeyedNode:
    """``groupBy(key).transformWithState`` of a keyed process function, or of a keyed
    co-process function over the union of its two inputs (an ``input`` column tells them
    apart); ``initial`` is the input (index, its batch plan) whose records become Spark's
    initial state: a bounded input beside an unbounded one, run as batch before the stream."""

    streams: list[tuple[int, ChainNode]]
    transformation: Transformation
    time_mode: str
    initial: tuple[int, ChainNode] | None = None
    bootstrap: BootstrapNode | None = None

    def inputs(self) -> list[Any]:
        return [node for _, node in self.streams] + ([self.initial[1]] if self.initial else []) \
            + ([self.bootstrap] if self.bootstrap else [])


@dataclass
class BootstrapNode:
    """The backlog of a ``KeyedStateBootstrapFunction`` as one Spark batch query, whose rows (a key,
    its value states) are the stream's initial state. Its backlog is what the embedded runtime
    reads as backlog: every file of a HybridSource's earlier parts, and the files the last
    directory holds when the query first starts (the stream skips those). ``history`` reads them
    through the steps before the operator; per partition of keys, ``process_backlog`` gets them
    as one polars frame, in arrival order."""

    history: ChainNode
    field: str | int

    def inputs(self) -> list[Any]:
        return [self.history]

    @property
    def columnar(self) -> bool:
        """Parquet files straight into the function (no step before it): Spark reads them as
        columns, which reach ``process_backlog`` without becoming records."""
        from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
        history = self.history
        parts = history.input.parts if isinstance(history.input, HybridNode) else [history.input]
        return not history.steps and all(isinstance(part, FileStreamNode) and isinstance(
            part.reader_format, ParquetColumnarRowInputFormat) for part in parts)


@dataclass
class UnionNode:
    """``union`` of streams without a watermark: the union of their DataFrames."""

    streams: list[Any]
    transformation: UnionTransformation

    def inputs(self) -> list[Any]:
        return list(self.streams)


@dataclass
class SideOutputNode:
    """The records an operator sent to the side output ``tag``: the rows of the upstream frame
    with that tag, tag cleared (every other consumer takes the untagged rows)."""

    input: Any
    transformation: SideOutputTransformation
    tag: str

    def inputs(self) -> list[Any]:
        return [self.input]


@dataclass
class SinkNode:
    """Where the query's (untagged) rows go: Spark's file sink in ``file_format`` ("text" for a
    row-format ``FileSink``, "parquet" for a Parquet one, written with ``schema``), else
    ``foreachBatch`` (``file_format`` None)."""

    input: Any
    transformation: SinkTransformation
    file_format: str | None
    schema: Any = None

    @property
    def encoded_by_keyed(self) -> bool:
        """A text file sink right after a keyed operator: its lines are encoded by the operator,
        in the same Python stage (one stage less per micro-batch)."""
        return self.file_format == "text" and isinstance(self.input, KeyedNode)

    def inputs(self) -> list[Any]:
        return [self.input]


@dataclass
class SparkPlan:
    """One job as one Spark Structured Streaming query (see the module docstring)."""

    job_name: str
    sink: SinkNode
    bounded: bool
    trigger_ms: int | None  # the processing-time trigger, None: a micro-batch as soon as the last one ends
    checkpoint_location: str | None  # None: a temporary one, so no restart resumes
    parallelism: int
    job_parameters: dict[str, str]
    end_of_input: bool = False  # bounded and event time: a last row takes the watermark past every timer

    def nodes(self) -> list[Any]:
        """Every node, each after its inputs, the sink last."""
        return walk(self.sink)


def walk(node: Any) -> list[Any]:
    """``node`` and everything before it, each node after its inputs."""
    found: list[Any] = []
    for upstream in node.inputs() if hasattr(node, "inputs") else ():
        found.extend(n for n in walk(upstream) if not any(n is seen for seen in found))
    found.append(node)
    return found


def split_backlog(node: Any, transformation: Transformation) -> tuple[Any, Any]:
    """Copies of the path from a keyed operator down to its file source: one reading the files that
    are backlog (batch), one the rest (the stream); see :class:`BootstrapNode`."""
    if isinstance(node, ChainNode):
        history, live = split_backlog(node.input, transformation)
        return dataclasses.replace(node, input=history), dataclasses.replace(node, input=live)
    if isinstance(node, HybridNode):
        *earlier, last = node.parts
        if isinstance(last, FeedNode):  # an unbounded IteratorSource: none of its records are backlog
            return HybridNode(node.transformation, earlier), last
        return HybridNode(node.transformation, [*earlier, dataclasses.replace(last, present_files=READ_PRESENT)]), \
            dataclasses.replace(last, present_files=SKIP_PRESENT)
    if isinstance(node, FileStreamNode):
        return dataclasses.replace(node, present_files=READ_PRESENT), \
            dataclasses.replace(node, present_files=SKIP_PRESENT)
    raise refuse(transformation, "a KeyedStateBootstrapFunction on Spark reads its backlog from FileSource "
                                 "directories (or a HybridSource of them) through stateless steps; its input "
                                 f"comes from {type(node).__name__}")


class RollingReduce(KeyedProcessFunction[Any, Any, Any]):
    """A keyed rolling ``reduce`` as a keyed process function: the key's reduced value in value
    state, emitted after every record (what the embedded reduce operator does)."""

    def __init__(self, reduce_function: Any) -> None:
        self.reduce_function = reduce_function

    def open(self, runtime_context: Any) -> None:
        self.reduce_function.open(runtime_context)
        self.current = runtime_context.get_state(ValueStateDescriptor("reduce"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        current = self.current.value()
        reduced = value if current is None else self.reduce_function.reduce(current, value)
        self.current.update(reduced)
        yield reduced

    def close(self) -> None:
        self.reduce_function.close()


class _Recorder:
    """A runtime context that only notes the state descriptors a function asks for in ``open``."""

    def __init__(self) -> None:
        self.descriptors: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("get_") and name.endswith("state"):
            return self._record
        if name.startswith("get_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def _record(self, descriptor: Any) -> None:
        self.descriptors.append(descriptor)




def state_descriptors(transformation: Transformation) -> list[Any]:
    """The state descriptors a keyed function asks for in ``open``, found by opening a copy of it
    on a context that only notes them (what explain() shows, and whether a state has a TTL)."""
    function: Any = copy.deepcopy(getattr(transformation, "function", None))
    recorder = _Recorder()
    function.open(recorder)
    return recorder.descriptors


def needs_processing_time(transformation: Transformation) -> bool:
    """Whether a keyed function without a watermark before it needs a processing-time operator:
    its class overrides ``on_timer`` (it may set processing-time timers), or a state of it has a
    TTL (Spark expires state by processing time). Else it runs in Spark's time mode None, whose
    query makes no micro-batch without new data."""
    from slipstream.datastream.functions import KeyedCoProcessFunction
    function = getattr(transformation, "function", None)
    if getattr(type(function), "on_timer", None) not in (KeyedProcessFunction.on_timer,
                                                         KeyedCoProcessFunction.on_timer):
        return True
    try:
        return any(getattr(d, "ttl_config", None) is not None for d in state_descriptors(transformation))
    except Exception:  # noqa: BLE001 - an open() that needs more than state: the safe mode
        return True


def watermark_delay(transformation: Transformation, strategy: Any) -> int:
    """Spark's ``withWatermark`` delay (ms) that gives Flink's watermark for ``strategy``."""
    supplier = strategy.generator_supplier
    if supplier is AscendingTimestampsWatermarks:
        return 1
    if isinstance(supplier, functools.partial) and supplier.func is BoundedOutOfOrdernessWatermarks:
        return int(supplier.args[0]) + 1
    raise refuse(transformation, f"its watermark generator {supplier!r} is not one Spark can compute: Spark's "
                                 "watermark is the newest event time minus a fixed delay, as "
                                 "for_bounded_out_of_orderness and for_monotonous_timestamps make it")


class Planner:
    """Turns a JobSpec into a :class:`SparkPlan`, refusing what Spark cannot run."""

    def __init__(self, spec: JobSpec, checkpoint_location: str | None, parallelism: int,
                 available_now: bool) -> None:
        self.spec = spec
        self.checkpoint_location = checkpoint_location
        self.parallelism = parallelism
        self.available_now = available_now
        self.watermarked = False  # a watermark reaches the next stateful operator
        self.watermarks: list[Transformation] = []  # the watermark transformation of each visit (a diamond: twice)

    def plan(self) -> SparkPlan:
        transformations = self.spec.transformations
        sinks = [t for t in transformations if isinstance(t, SinkTransformation)]
        if len(sinks) != 1:
            raise SparkPlanningError(f"the Spark runner runs jobs with one sink (one query, one sink); this "
                                     f"job has {len(sinks)}: {', '.join(repr(t.name) for t in sinks)}")
        sink = self.sink(sinks[0])
        used = {id(t) for t in self.upstream(sinks[0])}
        for transformation in transformations:
            if id(transformation) not in used:
                raise refuse(transformation, "its output does not reach the job's sink: the Spark runner runs "
                                             "one path from the source to the sink")
        nodes = walk(sink)
        self.check_one_watermarked_operator(nodes)
        bounded = all(node.bounded for node in nodes if isinstance(node, FileStreamNode)) \
            and not any(isinstance(node, FeedNode) for node in nodes)
        interval = self.spec.checkpoint_config.get_checkpoint_interval()
        event_time = any(isinstance(node, KeyedNode) and node.time_mode == EVENT_TIME for node in nodes)
        return SparkPlan(job_name=self.spec.job_name, sink=sink, bounded=bounded or self.available_now,
                         trigger_ms=interval if interval > 0 else None,
                         checkpoint_location=self.location(), parallelism=self.parallelism,
                         job_parameters=dict(self.spec.job_parameters), end_of_input=bounded and event_time)

    def check_one_watermarked_operator(self, nodes: list[Any]) -> None:
        """Several watermark strategies in one query are Spark's one watermark, the smallest of theirs:
        Flink's only where they all reach the one event-time operator (its inputs' smallest)."""
        strategies = {t.id: t for t in self.watermarks}
        if len(strategies) < 2:
            return
        operators = [node.transformation for node in nodes if isinstance(node, KeyedNode)
                     and node.time_mode == EVENT_TIME]
        upstream = {t.id for t in self.upstream(operators[0])} if len(operators) == 1 else set()
        for strategy in strategies.values():
            if strategy.id not in upstream:
                raise refuse(strategy, f"its watermark and another strategy's reach different operators ("
                                       f"{', '.join(repr(t.name) for t in operators) or 'none'} event-time): Spark "
                                       "keeps one watermark per query, the smallest of them, where Flink keeps one "
                                       "per operator")

    @staticmethod
    def upstream(transformation: Transformation) -> list[Transformation]:
        found, todo = [], [transformation]
        while todo:
            current = todo.pop()
            found.append(current)
            todo.extend(current.inputs)
        return found

    def location(self) -> str | None:
        if self.checkpoint_location is not None:
            return self.checkpoint_location
        directory = self.spec.checkpoint_config.get_checkpoint_storage_dir()
        if directory is None:
            return None
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", self.spec.job_name).strip("-") or "job"
        return os.path.join(directory, f"spark-{name}")

    # -- the sink --------------------------------------------------------------------------------
    def sink(self, transformation: SinkTransformation) -> SinkNode:
        sink = transformation.sink
        if not isinstance(sink, Sink):
            raise refuse(transformation, f"{sink!r} is not a Sink")
        if not isinstance(sink, FileSink):
            return SinkNode(self.node(transformation.inputs[0]), transformation, None)
        if sink.encoder is not None:
            return SinkNode(self.node(transformation.inputs[0]), transformation, "text")
        from slipstream.datastream.formats.parquet import ParquetBulkWriterFactory
        factory = sink.writer_factory
        if not isinstance(factory, ParquetBulkWriterFactory) or factory.schema is None:
            raise refuse(transformation, f"its bulk format ({type(factory).__name__}) is not one Spark's file sink "
                                         "writes: it writes Parquet with one schema for every micro-batch, so give "
                                         "the FileSink ParquetBulkWriters.for_schema(schema), or a row format")
        return SinkNode(self.node(transformation.inputs[0]), transformation, "parquet", factory.schema)

    # -- everything upstream of it -------------------------------------------------------------
    def node(self, transformation: Transformation, batch: bool = False) -> Any:
        """The plan node of ``transformation``; ``batch``: it is part of a backlog run as batch."""
        if isinstance(transformation, SourceTransformation):
            return self.source(transformation, batch)
        if isinstance(transformation, CoGroupTransformation) and batch:
            return self.co_group(transformation)
        if isinstance(transformation, (LoopHeadTransformation, FeedbackTailTransformation, LoopExitTransformation)):
            self.refuse_iteration(transformation)
        for kind, reason in REFUSED.items():
            if isinstance(transformation, kind):
                raise refuse(transformation, reason)
        if isinstance(transformation, SideOutputTransformation):
            return SideOutputNode(self.node(transformation.inputs[0], batch), transformation,
                                  transformation.tag.tag_id)
        if isinstance(transformation, PartitionTransformation):
            return self.node(transformation.inputs[0], batch)
        if isinstance(transformation, UnionTransformation):
            return self.union(transformation, batch)  # Spark places records itself; see keyed()
        if isinstance(transformation, STATELESS):
            return self.stateless(transformation, batch)
        if isinstance(transformation, WindowTransformation):
            why = unsupported(transformation)
            if why is not None:
                raise refuse(transformation, why)
        if isinstance(transformation, (KeyedProcessTransformation, ReduceTransformation, WindowTransformation)) or \
                (isinstance(transformation, CoProcessTransformation) and transformation.kind == "keyed_process"):
            if batch:
                raise refuse(transformation, "a keyed operator in a backlog that becomes another operator's "
                                             "initial state is not mapped yet")
            return self.keyed(transformation)
        if isinstance(transformation, CoProcessTransformation):
            raise refuse(transformation, f"a connected stream's {transformation.kind} function on unkeyed inputs is "
                                         "not mapped yet: key both inputs (ConnectedStreams.key_by)")
        raise refuse(transformation, f"the Spark runner has no translation for {type(transformation).__name__}")

    def refuse_iteration(self, transformation: Transformation) -> None:
        """Refuse a part of a FLIP-176 iteration as such, naming the iteration (else it is a loop's)."""
        heads = [t for t in self.upstream(transformation) if isinstance(t, IterationHeadTransformation)]
        if heads:
            raise refuse(transformation, f"it is part of the FLIP-176 iteration whose head is '{heads[-1].name}': "
                                         "a Spark Structured Streaming query is acyclic, and a bounded iteration is "
                                         "not run as driver-side rounds of Spark batch queries either (they would "
                                         "not keep the embedded runtime's record-by-record feedback order); run "
                                         "the job on the embedded runtime")

    def source(self, transformation: SourceTransformation, batch: bool) -> Any:
        from slipstream.datastream.connectors.hybrid_source import HybridSource
        from slipstream.datastream.connectors.iterator import IteratorSource
        from slipstream.datastream.connectors.spark import SparkSource
        source = transformation.source
        if batch and not isinstance(source, FileSource):
            return self.frame_source(transformation)
        if isinstance(source, HybridSource):
            node: Any = self.hybrid(transformation, source)
        elif isinstance(source, IteratorSource) and not batch:
            if source.get_boundedness() is Boundedness.BOUNDED:
                raise refuse(transformation, "a bounded IteratorSource is read by the embedded runtime; on Spark, "
                                             "put its records in files (FileSource) or a DataFrame (from_spark)")
            node = FeedNode(transformation, source)
        elif isinstance(source, SparkSource):
            node = DataFrameNode(transformation)
        elif not isinstance(source, FileSource):
            raise refuse(transformation, f"{source.default_name()} is not a source the Spark runner reads: it "
                                         "reads a FileSource's directory with Spark's file stream source, an "
                                         "unbounded IteratorSource through files the driver writes, a DataFrame "
                                         "through Parquet files it writes once, and (as a co-group's backlog) "
                                         "Parquet files and Arrow tables")
        else:
            node = self.file_source(transformation, source)
        if transformation.watermark_strategy is not None:
            node = self.watermark(ChainNode(node), transformation, transformation.watermark_strategy)
        return node

    def file_source(self, transformation: SourceTransformation, source: FileSource,
                    order_prefix: bytes = b"") -> FileStreamNode:
        if source.get_bad_record_output() is not None:
            raise refuse(transformation, "routing bad records to a side output is not mapped yet")
        paths = source.paths
        if len(paths) != 1 or not os.path.isdir(paths[0]):
            raise refuse(transformation, f"Spark's file stream source watches one directory, got {paths}")
        return FileStreamNode(transformation, paths[0], source.reader_format,
                              source.get_boundedness() is Boundedness.BOUNDED, order_prefix)

    def hybrid(self, transformation: SourceTransformation, source: Any) -> HybridNode:
        from slipstream.datastream.connectors.iterator import IteratorSource
        parts: list[Any] = []
        for number, part in enumerate(source.sources):
            last = number == len(source.sources) - 1
            if last and isinstance(part, IteratorSource) and part.get_boundedness() is not Boundedness.BOUNDED:
                parts.append(FeedNode(transformation, part, bytes([number])))
            elif isinstance(part, FileSource):
                parts.append(self.file_source(transformation, part, bytes([number])))
            else:
                raise refuse(transformation, f"part {number} of its HybridSource is {part.default_name()}: on Spark a "
                                             "HybridSource maps to batch-then-stream over FileSource directories, "
                                             "the last part maybe an unbounded IteratorSource")
        return HybridNode(transformation, parts)

    def co_group(self, transformation: CoGroupTransformation) -> CoGroupBatchNode:
        from slipstream.datastream.fields import FieldKey
        from slipstream.datastream.window import is_end_of_stream_window
        if not (transformation.vectorized and is_end_of_stream_window(transformation.assigner, transformation.trigger)):
            raise refuse(transformation, "only a vectorised co_group over EndOfStreamWindows runs as Spark batch")
        keys = [selector.field if isinstance(selector, FieldKey) and isinstance(selector.field, str) else None
                for selector in transformation.key_selectors]
        if None in keys:
            raise refuse(transformation, "a backlog co_group on Spark needs both keys given as field names")
        first, second = (self.frame_source(t) for t in transformation.inputs)
        return CoGroupBatchNode(transformation, first, second, (str(keys[0]), str(keys[1])))

    def frame_source(self, transformation: Transformation) -> FrameSourceNode:
        from slipstream.datastream.connectors.arrow import ArrowSource
        from slipstream.datastream.connectors.spark import SparkSource
        from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
        while isinstance(transformation, PartitionTransformation):
            transformation = transformation.inputs[0]
        source = getattr(transformation, "source", None)
        columnar = isinstance(source, (ArrowSource, SparkSource)) or (isinstance(source, FileSource) and \
            isinstance(source.reader_format, ParquetColumnarRowInputFormat))
        if not isinstance(transformation, SourceTransformation) or not columnar:
            raise refuse(transformation, "a backlog co_group on Spark reads its inputs straight from Parquet "
                                         "files, Arrow tables or DataFrames")
        if transformation.watermark_strategy is not None:
            raise refuse(transformation, "a watermark strategy on a backlog co_group's input is not mapped")
        return FrameSourceNode(transformation)

    def union(self, transformation: UnionTransformation, batch: bool) -> UnionNode:
        translated = [self.with_watermarks(functools.partial(self.node, upstream, batch))
                      for upstream in transformation.inputs]
        self.check_input_watermarks(transformation, [ids for _, ids in translated])
        return UnionNode([node for node, _ in translated], transformation)

    def with_watermarks(self, translate: Callable[[], T]) -> tuple[T, set[int]]:
        """What ``translate`` makes, and the watermark strategies (ids) on its way."""
        visited = len(self.watermarks)
        node = translate()
        return node, {t.id for t in self.watermarks[visited:]}

    @staticmethod
    def check_input_watermarks(transformation: Transformation, seen: list[set[int]]) -> None:
        """Inputs of one operator: Flink's watermark there is the smallest of its inputs' (one without a
        watermark holds it back for ever), Spark's, with several watermarks in a query, the smallest of
        them all (``multipleWatermarkPolicy`` min). The same when every input has a watermark, or when
        they share theirs (a diamond); not when only some have one."""
        if all(ids == seen[0] for ids in seen) or all(seen):
            return
        raise refuse(transformation, "its inputs are streams with a watermark and without one: Flink's watermark "
                                     "after it is the smallest of its inputs' (an input without one holds it back), "
                                     "Spark's the smallest of the watermarks the query has; assign timestamps and "
                                     "watermarks to every input, or after the union")

    def stateless(self, transformation: Transformation, batch: bool) -> ChainNode:
        chain = self.open_chain(self.node(transformation.inputs[0], batch))
        chain.steps.append(transformation)
        if isinstance(transformation, TimestampsAndWatermarksTransformation):
            return self.watermark(chain, transformation, transformation.watermark_strategy)
        return chain

    @staticmethod
    def open_chain(below: Any) -> ChainNode:
        """``below`` if it is a chain steps can still be added to, else a new chain after it."""
        if isinstance(below, ChainNode) and below.key_selector is None and below.watermark_delay_ms is None:
            return below
        return ChainNode(below)

    def watermark(self, chain: ChainNode, transformation: Transformation, strategy: Any) -> ChainNode:
        self.watermarks.append(transformation)
        if isinstance(transformation, SourceTransformation):
            chain.steps.append(TimestampsAndWatermarksTransformation(
                id=transformation.id, name=f"{transformation.name} (timestamps)", watermark_strategy=strategy))
        chain.watermark_delay_ms = watermark_delay(transformation, strategy)
        chain.watermark_operator = transformation.name
        self.watermarked = True
        return chain

    def keyed_input(self, transformation: Transformation, index: int, batch: bool) -> ChainNode:
        """Input ``index`` of a keyed operator, its key selector run last in the chain before it."""
        selector = transformation.key_selectors[index] if len(transformation.key_selectors) > index else None
        if selector is None:
            raise refuse(transformation, "it needs a keyed input (key_by before it)")
        upstream = transformation.inputs[index]
        chain = self.open_chain(self.node(upstream, batch))
        chain.key_selector = selector
        chain.key_operator = upstream.name
        return chain

    def keyed(self, transformation: Transformation) -> KeyedNode:
        window = isinstance(transformation, WindowTransformation)
        if isinstance(transformation, (ReduceTransformation, WindowTransformation)):
            transformation = KeyedProcessTransformation(
                id=transformation.id, name=transformation.name, inputs=transformation.inputs,
                uid=transformation.uid, key_selectors=transformation.key_selectors,
                function=EventTimeWindows(transformation) if isinstance(transformation, WindowTransformation)
                else RollingReduce(transformation.function))
        bounded = [self.all_bounded(upstream) for upstream in transformation.inputs]
        initial = None
        if len(bounded) == 2 and bounded[0] != bounded[1]:
            index = bounded.index(True)  # the backlog beside the stream: Spark's initial state
            initial = (index, self.keyed_input(transformation, index, batch=True))
        translated = [(index, self.with_watermarks(functools.partial(self.keyed_input, transformation, index,
                                                                     batch=False)))
                      for index in range(len(transformation.inputs)) if initial is None or index != initial[0]]
        self.check_input_watermarks(transformation, [ids for _, (_, ids) in translated])
        streams = [(index, chain) for index, (chain, _) in translated]
        if window and not self.watermarked:
            raise refuse(transformation, "its event-time windows need timestamps and watermarks assigned on the "
                                         "way to it (assign_timestamps_and_watermarks or the source's strategy)")
        bootstrap = None
        if isinstance(getattr(transformation, "function", None), KeyedStateBootstrapFunction) \
                and self.spec.runtime_options.backlog_sorting:
            bootstrap, streams = self.bootstrap(transformation, streams)
        mode = EVENT_TIME if self.watermarked else PROCESSING_TIME if needs_processing_time(transformation) \
            else NO_TIME
        self.watermarked = False  # Spark's watermark reaches the first stateful operator after it
        return KeyedNode(streams, transformation, mode, initial, bootstrap)

    def bootstrap(self, transformation: Transformation, streams: list[tuple[int, ChainNode]]) -> tuple[
            BootstrapNode, list[tuple[int, ChainNode]]]:
        """A bootstrap function's backlog as a batch query, and its stream without that backlog."""
        if self.watermarked:
            raise refuse(transformation, "a KeyedStateBootstrapFunction after a watermark strategy is not mapped: "
                                         "its backlog's event time would not reach the stream's watermark on Spark; "
                                         "run it on the embedded runtime, or with backlog_sorting=False")
        from slipstream.datastream.fields import FieldKey
        (index, chain), = streams
        selector = transformation.key_selectors[0]
        assert isinstance(selector, FieldKey)  # KeyedStream.process checks it for a bootstrap function
        history, live = split_backlog(chain, transformation)
        return BootstrapNode(history, selector.field), [(index, live)]

    def all_bounded(self, transformation: Transformation) -> bool:
        """Whether every source ``transformation`` reads from is bounded."""
        return all(t.source.get_boundedness() is Boundedness.BOUNDED for t in self.upstream(transformation)
                   if isinstance(t, SourceTransformation))


def plan_spark_job(spec: JobSpec, checkpoint_location: str | None = None, parallelism: int = 1,
                   available_now: bool = False) -> SparkPlan:
    """The Spark plan of ``spec``, or :class:`SparkPlanningError` naming what Spark cannot run."""
    return Planner(spec, checkpoint_location, parallelism, available_now).plan()

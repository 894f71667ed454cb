"""The physical plan: operators (stream nodes) joined by edges, grouped into chained job vertices.

Built by :mod:`slipstream.runtime.planner` from the logical graph; read by the
executor, which turns every job vertex into ``parallelism`` tasks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.transformations import (
    Partitioning,
    SinkTransformation,
    SourceTransformation,
    Transformation,
)
from slipstream.operators.backlog_path import BacklogPath
from slipstream.operators.base import StreamOperator


class EdgeKind(Enum):
    """PIPELINED edges stream; BLOCKING edges hand over all data once the producer finished;
    FEEDBACK edges close a loop."""

    PIPELINED = "PIPELINED"
    BLOCKING = "BLOCKING"
    FEEDBACK = "FEEDBACK"


@dataclass(eq=False)
class StreamNode:
    """One physical operator of the plan."""

    id: int
    transformation: Transformation
    parallelism: int
    max_parallelism: int
    uid: str
    in_edges: list[StreamEdge] = field(default_factory=list)
    out_edges: list[StreamEdge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What a planning pass wants ``explain()`` to say of this node."""
    backlog_path: BacklogPath | None = None
    """The path this operator's backlog takes, chosen from its kind's declaration (None: not planned yet)."""
    backlog_streamed: str | None = None
    """Why this operator streams its backlog (None: it sorts it)."""

    @property
    def name(self) -> str:
        return self.transformation.name

    def __repr__(self) -> str:
        return f"StreamNode({self.id}, {self.name!r}, p={self.parallelism})"


@dataclass(eq=False)
class StreamEdge:
    """Records of ``source`` (its side output ``side_tag``, or its main output) feed input
    ``input_index`` of ``target``, distributed by ``partitioning``."""

    source: StreamNode
    target: StreamNode
    input_index: int
    partitioning: Partitioning
    key_selector: Callable[[Any], Any] | None = None
    partitioner: Any = None
    side_tag: OutputTag | None = None
    kind: EdgeKind = EdgeKind.PIPELINED

    def describe(self) -> str:
        side = f" side output '{self.side_tag.tag_id}'" if self.side_tag else ""
        return f"{self.partitioning.value} {self.kind.value}{side}"


@dataclass(eq=False)
class JobVertex:
    """A chain of stream nodes that run in one task per subtask, joined by direct calls."""

    id: int
    nodes: list[StreamNode]

    @property
    def head(self) -> StreamNode:
        return self.nodes[0]

    @property
    def tail(self) -> StreamNode:
        return self.nodes[-1]

    @property
    def parallelism(self) -> int:
        return self.head.parallelism

    @property
    def name(self) -> str:
        return " -> ".join(node.name for node in self.nodes)

    @property
    def in_edges(self) -> list[StreamEdge]:
        return self.head.in_edges

    @property
    def out_edges(self) -> list[StreamEdge]:
        return [edge for node in self.nodes for edge in node.out_edges
                if edge.target not in self.nodes]


@dataclass
class JobGraph:
    """Job vertices in topological order, and the mapping from nodes to their vertex."""

    vertices: list[JobVertex]
    vertex_of: dict[StreamNode, JobVertex]
    mode: Any = None  # the RuntimeExecutionMode the plan was made for (BATCH or STREAMING)
    batch_engine: str = "polars"  # the engine backlog batch work runs on (shown by explain)
    backlog_sorting: bool | str = True  # configure(backlog_sorting=...): True, False or "always"

    def explain(self) -> str:
        """The plan as text: each task (its chained operators and parallelism), what runs as
        batch work during backlog, and the edges between tasks."""
        mode = getattr(self.mode, "name", "STREAMING")
        lines = [f"== Job graph ({mode}) =="]
        for vertex in self.vertices:
            lines.append(f"[{vertex.id}] {vertex.name}  (parallelism {vertex.parallelism})")
            for node in vertex.nodes:
                notes = node_notes(node, self.batch_engine, self.backlog_sorting, mode != "BATCH")
                if notes:
                    lines.append(f"      {node.name}: {'; '.join(notes)}")
            for edge in vertex.in_edges:
                upstream = self.vertex_of[edge.source]
                lines.append(f"      <- [{upstream.id}] input {edge.input_index}: {edge.describe()}")
        return "\n".join(lines)


def execution_plan_json(graph: JobGraph) -> str:
    """The plan as Flink's JSON execution plan (what ``getStreamingPlanAsJSON`` gives), which
    Flink's plan visualiser reads: one node per operator, chained or not, sinks last, each with
    ``id``, ``type`` (sources' names prefixed ``Source:``), ``pact`` (``Data Source``,
    ``Operator`` or ``Data Sink``), ``contents``, ``parallelism`` and ``predecessors`` (``id``,
    ``ship_strategy`` such as ``FORWARD`` or ``HASH``, and ``side``, which Flink always writes
    as ``second``). A loop's feedback edge is a predecessor of its head like any other edge."""
    nodes = sorted((node for vertex in graph.vertices for node in vertex.nodes),
                   key=lambda node: (isinstance(node.transformation, SinkTransformation), node.id))
    return json.dumps({"nodes": [_plan_node(node) for node in nodes]}, indent=2)


def _plan_node(node: StreamNode) -> dict[str, Any]:
    if isinstance(node.transformation, SourceTransformation):
        pact, name = "Data Source", node.name if node.name.startswith("Source") else f"Source: {node.name}"
    elif isinstance(node.transformation, SinkTransformation):
        pact, name = "Data Sink", node.name
    else:
        pact, name = "Operator", node.name
    entry: dict[str, Any] = {"id": node.id, "type": name, "pact": pact, "contents": name,
                             "parallelism": node.parallelism}
    if node.in_edges:
        entry["predecessors"] = [{"id": edge.source.id, "ship_strategy": edge.partitioning.value, "side": "second"}
                                 for edge in node.in_edges]
    if node.transformation.description is not None:
        entry["description"] = node.transformation.description
    group = getattr(node.transformation, "slot_sharing_group", None)
    if group is not None:
        entry["slot_sharing_group"] = group
    return entry


def node_notes(node: StreamNode, batch_engine: str = "polars", backlog_sorting: bool | str = True,
               streaming: bool = True) -> list[str]:
    """What the planner knows about an operator beyond its name (FLIP-327 attributes, its
    backlog path and the engine its backlog batch work runs on, and in STREAMING mode what of its results a sorted
    backlog cannot give as streaming the backlog does)."""
    attributes = node.transformation.get_operator_attributes()
    operator_cls = StreamOperator.registry.get(type(node.transformation))
    notes = [] if operator_cls is None else operator_cls.plan_notes(node.transformation)
    if node.transformation.description:
        notes.insert(0, node.transformation.description)
    scope = node.transformation.scope
    if scope.get_level():
        notes.append(f"in loop scope {scope} (level {scope.get_level()})")
    path = node.backlog_path
    if path is BacklogPath.STREAMED and attributes.has_internal_sorter() and not backlog_sorting:
        notes.append("processes its backlog record by record (backlog_sorting=False)" if streaming else
                     "processes its input record by record with STREAMING's semantics, every rolling update "
                     "and each watermark as it comes (backlog_sorting=False in BATCH mode)")
    elif path is not None and path is not BacklogPath.STREAMED:
        how = " (vectorised)" if path is BacklogPath.VECTORISED else ""
        work = None if operator_cls is None else operator_cls.backlog_work(node.transformation, batch_engine)
        work = work or f"sorts its backlog and runs it as batch work on {batch_engine}{how}"
        notes.append(f"{work}, then switches to streaming; "
                     "checkpoints during the backlog hold its buffer (spilled runs as shared files, stored once, "
                     "and the records in memory)")
        if streaming and operator_cls is not None:
            notes.extend(f"differs from streaming its backlog: {text}"
                         for text in operator_cls.backlog_differences(node.transformation))
    if attributes.is_output_on_eof():
        notes.append("emits only at end of input (its output edges block)")
    if attributes.is_output_on_checkpoint():
        notes.append("emits when a checkpoint is taken")
    spark_plan = getattr(getattr(node.transformation, "source", None), "spark_plan", None)
    if spark_plan:  # a Spark source whose operators were folded into its query: it reads the query's result
        notes.append(f"runs on spark as one query: {spark_plan}")
    elif path is BacklogPath.STREAMED and (backlog_sorting or not attributes.has_internal_sorter()):
        notes.append(f"streams its backlog record by record: {node.backlog_streamed}")  # after what it emits
    notes.extend(node.notes)
    return notes

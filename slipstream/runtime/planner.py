"""Planning: the logical graph becomes a job graph through an ordered list of pure passes.

1. ``build_stream_graph``: one stream node per non-virtual transformation; partitioning,
   union and side outputs resolved into edges; parallelism and uids fixed; a watermark
   strategy on a source lowered into a chained timestamps operator.
   A loop's feedback edge (tail -> head, kind FEEDBACK) closes a cycle: it is added after
   every node exists, so the other passes still see nodes in topological order.
2. ``validate_loops``: feedback edges keep their head's parallelism; no operator that
   emits only at end of input feeds a loop.
3. ``mark_blocking_edges`` (FLIP-327), never on a feedback edge nor inside a loop.
   (Before them, ``plan_spark_queries`` folds a vectorisable from_spark backlog subgraph into
   one Spark query when the batch engine is Spark: :mod:`slipstream.runtime.batch.spark_planning`.)
4. ``chain``: forward edges between nodes of equal parallelism and scope become direct
   calls inside one task (a feedback edge never is one).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import slipstream.operators  # noqa: F401  (registers operator kinds and their attributes)
from slipstream.attributes import Boundedness
from slipstream.datastream.environment import RuntimeExecutionMode
from slipstream.datastream.scope import ROOT_SCOPE
from slipstream.datastream.transformations import (
    LoopHeadTransformation,
    Partitioning,
    PartitionTransformation,
    SideOutputTransformation,
    SourceTransformation,
    TimestampsAndWatermarksTransformation,
    Transformation,
    UnionTransformation,
)
from slipstream.errors import InvalidProgramError
from slipstream.operators.base import StreamOperator
from slipstream.runtime.batch.spark_planning import plan_spark_queries
from slipstream.runtime.job_graph import EdgeKind, JobGraph, JobVertex, StreamEdge, StreamNode
from slipstream.runtime.key_groups import DEFAULT_MAX_PARALLELISM

if TYPE_CHECKING:
    from slipstream.datastream.environment import StreamExecutionEnvironment



@dataclass
class StreamGraph:
    """Stream nodes in topological order (inputs before consumers)."""

    nodes: list[StreamNode]


@dataclass
class _Route:
    """How one physical upstream reaches a consumer: through which partitioning and side output."""

    source: Transformation
    partition: PartitionTransformation | None
    side_tag: Any


def _routes(transformation: Transformation, partition: PartitionTransformation | None = None,
            side_tag: Any = None) -> list[_Route]:
    """Walk up through virtual transformations to the physical ones that feed this input."""
    if isinstance(transformation, PartitionTransformation):
        return _routes(transformation.inputs[0], partition or transformation, side_tag)
    if isinstance(transformation, SideOutputTransformation):
        return _routes(transformation.inputs[0], partition, transformation.tag)
    if isinstance(transformation, UnionTransformation):
        return [route for upstream in transformation.inputs for route in _routes(upstream, partition, side_tag)]
    return [_Route(transformation, partition, side_tag)]


def default_max_parallelism(parallelism: int) -> int:
    """Flink's rule: 1.5 × parallelism rounded up to a power of two, within [128, 32768]."""
    wanted = parallelism + parallelism // 2
    power = 1 << max(wanted - 1, 0).bit_length()
    return min(max(power, DEFAULT_MAX_PARALLELISM), 32768)


def _parallelism(transformation: Transformation, env: StreamExecutionEnvironment) -> int:
    parallelism = transformation.parallelism or env.get_parallelism()
    if isinstance(transformation, SourceTransformation) and not transformation.parallelism_fixed:
        limit = transformation.source.max_parallelism()
        if limit is not None:
            parallelism = min(parallelism, limit)
    return parallelism


def build_stream_graph(env: StreamExecutionEnvironment, transformations: list[Transformation]) -> StreamGraph:
    """Pass 1: physical nodes and the edges between them."""
    ids = itertools.count(1)
    nodes: list[StreamNode] = []
    node_of: dict[Transformation, StreamNode] = {}
    env_max = env.get_max_parallelism()

    def add_node(transformation: Transformation, parallelism: int) -> StreamNode:
        max_parallelism = transformation.max_parallelism or (env_max if env_max > 0 else
                                                             default_max_parallelism(parallelism))
        if parallelism > max_parallelism:
            raise InvalidProgramError(f"operator '{transformation.name}' has parallelism {parallelism} "
                                      f"above its max parallelism {max_parallelism}")
        kind = type(transformation).__name__.removesuffix("Transformation").lower()
        node = StreamNode(next(ids), transformation, parallelism, max_parallelism,
                          transformation.uid or f"{kind}-{transformation.id}")
        nodes.append(node)
        return node

    def connect(source: StreamNode, target: StreamNode, input_index: int, route: _Route | None) -> None:
        partition = route.partition if route else None
        if partition is None:
            partitioning = Partitioning.FORWARD if source.parallelism == target.parallelism \
                else Partitioning.REBALANCE
        else:
            partitioning = partition.partitioning
            if partitioning is Partitioning.FORWARD and source.parallelism != target.parallelism:
                raise InvalidProgramError(
                    f"forward partitioning from '{source.name}' (parallelism {source.parallelism}) to "
                    f"'{target.name}' (parallelism {target.parallelism}) would change parallelism; "
                    "use rebalance() or rescale()")
        edge = StreamEdge(source, target, input_index, partitioning,
                          key_selector=partition.key_selector if partition else None,
                          partitioner=partition.partitioner if partition else None,
                          side_tag=route.side_tag if route else None)
        source.out_edges.append(edge)
        target.in_edges.append(edge)

    own_node: dict[Transformation, StreamNode] = {}  # a source's own node, before its lowered watermarks
    for transformation in transformations:
        if transformation.is_virtual:
            continue
        node = add_node(transformation, _parallelism(transformation, env))
        node_of[transformation] = node
        for input_index, upstream in enumerate(transformation.inputs):
            for route in _routes(upstream):
                # A side output comes from the operator itself: a source's (bad records), not
                # from the watermark operator planned after it.
                upstream_node = own_node.get(route.source) if route.side_tag is not None else None
                connect(upstream_node or node_of[route.source], node, input_index, route)
        if isinstance(transformation, SourceTransformation) and transformation.watermark_strategy is not None:
            lowered = TimestampsAndWatermarksTransformation(
                id=transformation.id, name="Timestamps/Watermarks", inputs=[transformation],
                parallelism=node.parallelism, uid=f"{node.uid}-watermarks",
                scope=transformation.scope, watermark_strategy=transformation.watermark_strategy)
            watermarks = add_node(lowered, node.parallelism)
            connect(node, watermarks, 0, None)
            node_of[transformation] = watermarks
            own_node[transformation] = node
    # Each loop's feedback edge closes a cycle, so it comes last: from the tail to the head's input 1.
    for head in transformations:
        if isinstance(head, LoopHeadTransformation) and head.expects_feedback:
            if head.feedback is None or head.feedback not in node_of:
                raise InvalidProgramError(f"loop '{head.name}' was never closed: its loop function did not "
                                          "return (feedback_stream, output_stream)")
            connect(node_of[head.feedback], node_of[head], 1, None)
            node_of[head].in_edges[-1].kind = EdgeKind.FEEDBACK
    return StreamGraph(nodes)


def _chainable(edge: StreamEdge) -> bool:
    """Whether ``edge`` can be a direct call: forward, main output, one-to-one, same scope."""
    upstream, downstream = edge.source, edge.target
    return (edge.partitioning is Partitioning.FORWARD
            and edge.kind is EdgeKind.PIPELINED
            and edge.side_tag is None
            and len(upstream.out_edges) == 1
            and len(downstream.in_edges) == 1
            and upstream.parallelism == downstream.parallelism
            and upstream.transformation.scope == downstream.transformation.scope
            and upstream.transformation.chaining != "never"
            and downstream.transformation.chaining == "always")


def chain(graph: StreamGraph, enabled: bool = True) -> JobGraph:
    """Pass 2: group nodes joined by chainable edges into job vertices (each node its own vertex
    when chaining is disabled: ``env.disable_operator_chaining()``)."""
    vertices: list[JobVertex] = []
    vertex_of: dict[StreamNode, JobVertex] = {}
    for node in graph.nodes:
        upstream = vertex_of.get(node.in_edges[0].source) if enabled and len(node.in_edges) == 1 else None
        # a feedback tail whose whole loop would chain into one task keeps a task of its own: the
        # feedback edge must stay a channel between tasks
        if upstream is not None and _chainable(node.in_edges[0]) and \
                not any(edge.target in upstream.nodes for edge in node.out_edges):
            vertex = upstream
            vertex.nodes.append(node)
        else:
            vertex = JobVertex(len(vertices) + 1, [node])
            vertices.append(vertex)
        vertex_of[node] = vertex
    return JobGraph(vertices, vertex_of)


def effective_mode(env: StreamExecutionEnvironment, graph: StreamGraph) -> RuntimeExecutionMode:
    """BATCH or STREAMING: AUTOMATIC means BATCH exactly when every source is bounded.

    BATCH with an unbounded source is refused, as Flink does.
    """
    mode = env.get_runtime_mode()
    unbounded = [node.name for node in graph.nodes
                 if isinstance(node.transformation, SourceTransformation)
                 and node.transformation.source.get_boundedness() is not Boundedness.BOUNDED]
    if mode is RuntimeExecutionMode.AUTOMATIC:
        return RuntimeExecutionMode.STREAMING if unbounded else RuntimeExecutionMode.BATCH
    if mode is RuntimeExecutionMode.BATCH and unbounded:
        raise InvalidProgramError(f"runtime mode BATCH needs bounded sources; {', '.join(unbounded)} "
                                  "is unbounded (use STREAMING or AUTOMATIC)")
    return mode


def mark_blocking_edges(graph: StreamGraph, mode: RuntimeExecutionMode) -> StreamGraph:
    """Pass: edges leaving an ``is_output_on_eof`` operator block (FLIP-327); in BATCH mode every
    edge that is not chained does. A blocking edge is never chained."""
    for node in graph.nodes:
        output_on_eof = node.transformation.get_is_output_on_eof()
        for edge in node.out_edges:
            if edge.kind is EdgeKind.FEEDBACK:
                continue
            # inside a loop every edge streams: a loop's tasks cannot wait for one another to finish
            in_loop = edge.source.transformation.scope != ROOT_SCOPE or \
                edge.target.transformation.scope != ROOT_SCOPE
            if output_on_eof or (mode is RuntimeExecutionMode.BATCH and not in_loop and not _chainable(edge)):
                edge.kind = EdgeKind.BLOCKING
    return graph


def validate_loops(graph: StreamGraph, env: StreamExecutionEnvironment) -> StreamGraph:
    """Pass: what a loop needs of the graph around it (FLIP-15), checked before anything runs."""
    feedback_edges = [edge for node in graph.nodes for edge in node.in_edges if edge.kind is EdgeKind.FEEDBACK]
    if not feedback_edges:
        return graph
    for edge in feedback_edges:
        if edge.source.parallelism != edge.target.parallelism:
            raise InvalidProgramError(
                f"the feedback of loop '{edge.target.name}' has parallelism {edge.source.parallelism}, its "
                f"head {edge.target.parallelism}: a loop's feedback keeps its head's parallelism")
    for node in graph.nodes:
        scope = node.transformation.scope
        if scope == ROOT_SCOPE or node.transformation.per_round or not node.transformation.get_is_output_on_eof():
            continue
        tail = _reachable_feedback_tail(node)
        if tail is not None:
            raise InvalidProgramError(
                f"operator '{node.name}' emits only at the end of its input, but its output goes round "
                f"loop '{tail.target.name}' (scope {tail.target.transformation.scope}): a loop ends only "
                "once nothing goes round, so it would wait for that operator forever")
    return graph


def _reachable_feedback_tail(start: StreamNode) -> StreamEdge | None:
    """A feedback edge that ``start``'s output reaches without leaving ``start``'s loops."""
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        for edge in node.out_edges:
            if edge.kind is EdgeKind.FEEDBACK:
                if start.transformation.scope == edge.target.transformation.scope or \
                        start.transformation.scope.is_inner_of(edge.target.transformation.scope):
                    return edge
                continue
            if edge.target not in seen:
                seen.add(edge.target)
                stack.append(edge.target)
    return None


def plan_job(env: StreamExecutionEnvironment, transformations: list[Transformation]) -> JobGraph:
    """Run every planning pass in order."""
    graph = build_stream_graph(env, transformations)
    mode = effective_mode(env, graph)  # folding keeps every source bounded: the mode stays
    graph = plan_spark_queries(graph, env, mode)
    job_graph = chain(mark_blocking_edges(validate_loops(graph, env), mode), env.is_chaining_enabled())
    job_graph.mode = mode
    job_graph.batch_engine = env.get_batch_engine()
    job_graph.backlog_sorting = env.runtime_options.backlog_sorting
    return choose_backlog_paths(job_graph, env.runtime_options.backlog_sorting)


def choose_backlog_paths(job_graph: JobGraph, backlog_sorting: bool | str) -> JobGraph:
    """Give every operator the backlog path its kind declares for it (sorted, vectorised or streamed:
    :meth:`~slipstream.operators.base.StreamOperator.backlog_path`), under ``backlog_sorting``: in
    STREAMING mode a kind that sorts slower than it streams streams; ``backlog_sorting="always"`` and
    BATCH mode sort every kind that can (there sorting is the semantics, not a speed knob); False sorts none."""
    batch_mode = job_graph.mode is RuntimeExecutionMode.BATCH
    for vertex in job_graph.vertices:
        for node in vertex.nodes:
            operator_cls = StreamOperator.registry.get(type(node.transformation))
            if operator_cls is not None:
                choice = operator_cls.backlog_path(node.transformation).choose(backlog_sorting, batch_mode)
                node.backlog_path, node.backlog_streamed = choice.path, choice.reason
    return job_graph

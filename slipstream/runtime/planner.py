"""Planning: a frozen job (:class:`~slipstream.datastream.job_spec.JobSpec`) becomes a job graph.

:func:`build_stream_graph` lowers the job's transformations into a stream graph: one stream
node per non-virtual transformation; partitioning, union and side outputs resolved into
edges; parallelism and uids fixed; a watermark strategy on a source lowered into a chained
timestamps operator. A loop's feedback edge (tail -> head, kind FEEDBACK) closes a cycle: it
is added after every node exists, so the passes still see nodes in topological order.

Then the passes of :data:`PASSES` run in order, each a function ``(graph, spec) -> graph``
that can be run (and tested) alone on a hand-built graph. A pass never changes the graph it is
given: one that changes something changes a copy (:meth:`StreamGraph.copy`) and returns it, so
the graph before a pass can be compared with the one after. Each run is logged at debug level on
the ``slipstream.planner`` logger with what it changed:

1. ``resolve_mode``: AUTOMATIC becomes BATCH or STREAMING by the sources' boundedness.
2. ``plan_spark_queries``: a vectorisable ``from_spark`` backlog subgraph becomes one Spark
   query (:mod:`slipstream.runtime.batch.spark_planning`): in BATCH mode a built-in keyed
   aggregation on either batch engine, a vectorised co_group with the Spark engine.
3. ``validate_loops``: feedback edges keep their head's parallelism; no operator that
   emits only at end of input feeds a loop.
4. ``choose_backlog_paths``: which sorting operators stream their backlog instead.
5. ``mark_blocking_edges`` (FLIP-331): the edges leaving a chain that holds an operator emitting
   only at end of input, never on a feedback edge nor inside a loop; in BATCH mode every edge
   that is not chained, but not into an operator that sorts the backlog of its one producer (its
   sort buffer is the blocking exchange).

Last, :func:`chain` groups the nodes into job vertices: forward edges between nodes of equal
parallelism and scope become direct calls inside one task (a feedback edge never is one).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import slipstream.operators  # noqa: F401  (registers every operator kind)
from slipstream.datastream.execution_config import AUTO_UIDS
from slipstream.datastream.job_spec import JobSpec, RuntimeExecutionMode
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
    is_unbounded_source,
)
from slipstream.errors import InvalidProgramError
from slipstream.operators.backlog_path import BacklogPath
from slipstream.operators.base import StreamOperator
from slipstream.runtime.batch.spark_planning import plan_spark_queries
from slipstream.runtime.job_graph import EdgeKind, JobGraph, JobVertex, StreamEdge, StreamNode
from slipstream.runtime.key_groups import DEFAULT_MAX_PARALLELISM

log = logging.getLogger("slipstream.planner")


@dataclass
class StreamGraph:
    """Stream nodes in topological order (inputs before consumers), and the execution mode the
    graph is planned for (None until :func:`resolve_mode` has run)."""

    nodes: list[StreamNode]
    mode: RuntimeExecutionMode | None = None

    def copy(self) -> StreamGraph:
        """New nodes and edges with the same fields and links, for a pass to change; the
        transformations (with the user's functions and sources) are shared, never copied."""
        twins = {node: replace(node, in_edges=[], out_edges=[], notes=list(node.notes))
                 for node in self.nodes}
        edges: dict[StreamEdge, StreamEdge] = {}

        def twin(edge: StreamEdge) -> StreamEdge:
            if edge not in edges:
                edges[edge] = replace(edge, source=twins.get(edge.source, edge.source),
                                                  target=twins.get(edge.target, edge.target))
            return edges[edge]
        for node, copy in twins.items():
            copy.in_edges = [twin(edge) for edge in node.in_edges]
            copy.out_edges = [twin(edge) for edge in node.out_edges]
        return StreamGraph(list(twins.values()), self.mode)


Pass = Callable[[StreamGraph, JobSpec], StreamGraph]
"""A planning pass: reads the graph and the job's settings, returns the graph it made (a changed
copy, or the graph itself when it changes nothing)."""


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


def _parallelism(transformation: Transformation, spec: JobSpec) -> int:
    parallelism = transformation.parallelism or spec.parallelism
    if isinstance(transformation, SourceTransformation) and not transformation.parallelism_fixed:
        limit = transformation.source.max_parallelism()
        if limit is not None:
            parallelism = min(parallelism, limit)
    return parallelism


def build_stream_graph(spec: JobSpec) -> StreamGraph:
    """The lowering before the passes: physical nodes of ``spec``'s transformations and the edges
    between them."""
    ids = itertools.count(1)
    nodes: list[StreamNode] = []
    node_of: dict[Transformation, StreamNode] = {}
    transformations = spec.transformations

    def add_node(transformation: Transformation, parallelism: int) -> StreamNode:
        max_parallelism = transformation.max_parallelism or spec.max_parallelism or \
            default_max_parallelism(parallelism)
        if parallelism > max_parallelism:
            raise InvalidProgramError(f"operator '{transformation.name}' has parallelism {parallelism} "
                                      f"above its max parallelism {max_parallelism}")
        kind = type(transformation).__name__.removesuffix("Transformation").lower()
        node = StreamNode(next(ids), transformation, parallelism, max_parallelism,
                          transformation.uid or transformation.uid_hash or f"{kind}-{transformation.id}")
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
    uids_required = spec.configuration.get_string(AUTO_UIDS, "true") == "false"
    for transformation in transformations:
        if transformation.is_virtual:
            continue
        if uids_required and not (transformation.uid or transformation.uid_hash):
            raise InvalidProgramError(f"auto-generated uids are disabled (disable_auto_generated_uids) but operator "
                                      f"'{transformation.name}' has no uid or uid hash: give it .uid(...)")
        node = add_node(transformation, _parallelism(transformation, spec))
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


def resolve_mode(graph: StreamGraph, spec: JobSpec) -> StreamGraph:
    """Pass: the mode the job runs in, BATCH or STREAMING: AUTOMATIC means BATCH exactly when
    every source is bounded. BATCH with an unbounded source is refused, as Flink does."""
    mode = spec.runtime_mode
    unbounded = [node.name for node in graph.nodes if is_unbounded_source(node.transformation)]
    if mode is RuntimeExecutionMode.AUTOMATIC:
        mode = RuntimeExecutionMode.STREAMING if unbounded else RuntimeExecutionMode.BATCH
    elif mode is RuntimeExecutionMode.BATCH and unbounded:
        raise InvalidProgramError(f"runtime mode BATCH needs bounded sources; {', '.join(unbounded)} "
                                  "is unbounded (use STREAMING or AUTOMATIC)")
    graph = graph.copy()
    graph.mode = mode
    return graph


def validate_loops(graph: StreamGraph, spec: JobSpec) -> StreamGraph:
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


def mark_blocking_edges(graph: StreamGraph, spec: JobSpec) -> StreamGraph:
    """Pass: the edges leaving a chain that holds an ``is_output_on_eof`` operator block (FLIP-331, as
    Flink's job graph generator marks them): the operator still chains with its forward successors,
    which emit only at end of input too, so a blocking exchange between them would only hold (and
    spill) every output once more. In BATCH mode every edge that is not chained blocks
    (:func:`_sorts_its_only_producer` names the exception). A blocking edge is never chained."""
    batch = graph.mode is RuntimeExecutionMode.BATCH
    graph = graph.copy()
    output_blocking: set[StreamNode] = set()
    for node in graph.nodes:
        if node.transformation.get_is_output_on_eof():
            output_blocking.add(node)
        for edge in node.out_edges:
            if edge.kind is EdgeKind.FEEDBACK:
                continue
            # inside a loop every edge streams: a loop's tasks cannot wait for one another to finish
            in_loop = edge.source.transformation.scope != ROOT_SCOPE or \
                edge.target.transformation.scope != ROOT_SCOPE
            chained = spec.chaining_enabled and not in_loop and _chainable(edge) and not _closes_a_loop(edge.target)
            if node in output_blocking and chained:
                output_blocking.add(edge.target)  # emits only at end of input too, in the same task
            elif node in output_blocking or (batch and not in_loop and not _sorts_its_only_producer(edge)
                                             and not _chainable(edge)):
                edge.kind = EdgeKind.BLOCKING
    return graph


def _closes_a_loop(node: StreamNode) -> bool:
    """Whether ``node`` is a loop's feedback tail, which :func:`chain` keeps out of its head's task."""
    return any(edge.kind is EdgeKind.FEEDBACK for edge in node.out_edges)


def _sorts_its_only_producer(edge: StreamEdge) -> bool:
    """Whether ``edge`` is the one input of an operator that sorts its backlog, each of whose subtasks
    reads one producer subtask: such an operator buffers all its input and emits nothing before it
    ended, as a blocking exchange would make it, so a BLOCKING channel would only hold (and spill)
    what its sort buffer holds again. (Reading several producers, or inputs, as they come would make
    the order of their records' arrival — BATCH mode's tie-break after the timestamp — depend on
    the scheduler, where behind blocking edges it does not.)"""
    target = edge.target
    return (target.backlog_path in (BacklogPath.SORTED, BacklogPath.VECTORISED) and len(target.in_edges) == 1
            and (edge.source.parallelism == 1 or edge.partitioning is Partitioning.FORWARD))


def choose_backlog_paths(graph: StreamGraph, spec: JobSpec) -> StreamGraph:
    """Pass: give every operator the backlog path its kind declares for it (sorted, vectorised or
    streamed: :meth:`~slipstream.operators.base.StreamOperator.backlog_path`), under ``backlog_sorting``:
    in STREAMING mode a kind that sorts slower than it streams streams; ``backlog_sorting="always"`` and
    BATCH mode sort every kind that can (there sorting is the semantics, not a speed knob); False sorts
    none."""
    batch_mode = graph.mode is RuntimeExecutionMode.BATCH
    sorting = spec.runtime_options.backlog_sorting
    graph = graph.copy()
    for node in graph.nodes:
        operator_cls = StreamOperator.registry.get(type(node.transformation))
        if operator_cls is not None:
            choice = operator_cls.backlog_path(node.transformation).choose(sorting, batch_mode)
            node.backlog_path, node.backlog_streamed = choice.path, choice.reason
    return graph


PASSES: tuple[Pass, ...] = (resolve_mode, plan_spark_queries, validate_loops, choose_backlog_paths,
                            mark_blocking_edges)
"""The planning passes, in the order they run between lowering and chaining."""


def chain(graph: StreamGraph, spec: JobSpec) -> JobGraph:
    """After the passes: group nodes joined by chainable edges into job vertices (each node its own
    vertex when chaining is disabled: ``env.disable_operator_chaining()``)."""
    vertices: list[JobVertex] = []
    vertex_of: dict[StreamNode, JobVertex] = {}
    for node in graph.nodes:
        upstream = vertex_of.get(node.in_edges[0].source) \
            if spec.chaining_enabled and len(node.in_edges) == 1 else None
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
    options = spec.runtime_options
    return JobGraph(vertices, vertex_of, mode=graph.mode, batch_engine=options.batch_engine_name,
                    backlog_sorting=options.backlog_sorting)


def run_pass(planning_pass: Pass, graph: StreamGraph, spec: JobSpec) -> StreamGraph:
    """Run one pass on ``graph``, logging (at debug level) its name and what it changed."""
    if not log.isEnabledFor(logging.DEBUG):
        return planning_pass(graph, spec)
    before = _outline(graph)
    graph = planning_pass(graph, spec)
    changes = _changes(before, _outline(graph))
    log.debug("planning pass %s: %s", planning_pass.__name__, "; ".join(changes) or "no change")
    return graph


def plan_job(spec: JobSpec, passes: tuple[Pass, ...] = PASSES) -> JobGraph:
    """Lower ``spec``'s transformations, run every pass in order, and chain the result."""
    graph = build_stream_graph(spec)
    for planning_pass in passes:
        graph = run_pass(planning_pass, graph, spec)
    return chain(graph, spec)


# -- what a pass changed, for the log -----------------------------------------------------------------
def _outline(graph: StreamGraph) -> dict[str, str]:
    """What a pass may change, as text by item: the mode, each node's operator and backlog path,
    each edge's kind."""
    outline = {"mode": getattr(graph.mode, "name", "unresolved")}
    for node in graph.nodes:
        outline[f"node '{node.name}' (#{node.id})"] = type(node.transformation).__name__ + \
            (f", streams its backlog: {node.backlog_streamed}" if node.backlog_streamed else "") + \
            "".join(f", {note}" for note in node.notes)
        for edge in node.out_edges:
            side = f" side output '{edge.side_tag.tag_id}'" if edge.side_tag is not None else ""
            outline[f"edge #{node.id}->#{edge.target.id} input {edge.input_index}{side}"] = edge.kind.value
    return outline


def _changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each item of two outlines that was added, removed or changed."""
    changes = [f"{item} removed" for item in before if item not in after]
    for item, text in after.items():
        if item not in before:
            changes.append(f"{item} added: {text}")
        elif before[item] != text:
            changes.append(f"{item}: {before[item]} -> {text}")
    return changes

"""Each planning pass run alone on a small hand-built stream graph, with a hand-built JobSpec:
what it changes, what it leaves, what it refuses, and what it logs."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from slipstream.attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.datastream.connectors.sinks import CollectSink
from slipstream.datastream.functions import FlatMapFunction, KeyedProcessFunction
from slipstream.datastream.job_spec import JobSpec, RuntimeExecutionMode, RuntimeOptions
from slipstream.datastream.scope import ROOT_SCOPE
from slipstream.datastream.transformations import (
    FlatMapTransformation,
    KeyedProcessTransformation,
    Partitioning,
    SinkTransformation,
    SourceTransformation,
    Transformation,
)
from slipstream.errors import InvalidProgramError
from slipstream.operators.backlog_path import BacklogPath
from slipstream.runtime.job_graph import EdgeKind, StreamEdge, StreamNode
from slipstream.runtime.planner import (
    PASSES,
    StreamGraph,
    chain,
    choose_backlog_paths,
    mark_blocking_edges,
    plan_job,
    plan_spark_queries,
    resolve_mode,
    run_pass,
    validate_loops,
)


class EmitsAtEnd(FlatMapFunction):
    """Declares that it emits only at end of input (the declaration is what the passes read)."""

    def flat_map(self, value: Any) -> Iterator[Any]:
        yield value

    def get_operator_attributes(self) -> OperatorAttributes:
        return OperatorAttributesBuilder().set_is_output_on_eof(True).build()


class PassThrough(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        yield value


_ids = itertools.count(1)


def source(bounded: bool = True) -> SourceTransformation:
    return SourceTransformation(id=next(_ids), name="source", source=IteratorSource([1, 2], bounded=bounded))


def spec(*, mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING, **options: Any) -> JobSpec:
    return JobSpec(job_name="hand-built", transformations=(), runtime_mode=mode,
                   runtime_options=RuntimeOptions(**options))


def node(transformation: Transformation, parallelism: int = 1) -> StreamNode:
    return StreamNode(transformation.id, transformation, parallelism, 128, f"uid-{transformation.id}")


def connect(upstream: StreamNode, downstream: StreamNode, input_index: int = 0,
            partitioning: Partitioning = Partitioning.FORWARD, kind: EdgeKind = EdgeKind.PIPELINED) -> StreamEdge:
    edge = StreamEdge(upstream, downstream, input_index, partitioning, kind=kind)
    upstream.out_edges.append(edge)
    downstream.in_edges.append(edge)
    return edge


def line(*transformations: Transformation, partitioning: Partitioning = Partitioning.FORWARD) -> StreamGraph:
    """The nodes of ``transformations`` joined one after the other."""
    nodes = [node(t) for t in transformations]
    for upstream, downstream in itertools.pairwise(nodes):
        connect(upstream, downstream, partitioning=partitioning)
    return StreamGraph(nodes)


def kinds(graph: StreamGraph) -> list[EdgeKind]:
    return [edge.kind for n in graph.nodes for edge in n.out_edges]


def sink() -> SinkTransformation:
    return SinkTransformation(id=next(_ids), name="sink", sink=CollectSink())


def flat_map(function: Any = None) -> FlatMapTransformation:
    return FlatMapTransformation(id=next(_ids), name="flat_map", function=function or (lambda x: [x]))


# -- resolve_mode --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "bounded", "expected"), [
    (RuntimeExecutionMode.AUTOMATIC, True, RuntimeExecutionMode.BATCH),
    (RuntimeExecutionMode.AUTOMATIC, False, RuntimeExecutionMode.STREAMING),
    (RuntimeExecutionMode.STREAMING, True, RuntimeExecutionMode.STREAMING),
    (RuntimeExecutionMode.BATCH, True, RuntimeExecutionMode.BATCH),
])
def test_resolve_mode_sets_the_graphs_mode_from_the_specs_and_the_sources(
        mode: RuntimeExecutionMode, bounded: bool, expected: RuntimeExecutionMode) -> None:
    graph = line(source(bounded), sink())
    assert resolve_mode(graph, spec(mode=mode)).mode is expected
    assert kinds(graph) == [EdgeKind.PIPELINED]


def test_resolve_mode_refuses_batch_with_an_unbounded_source_naming_it() -> None:
    graph = line(source(bounded=False), sink())
    with pytest.raises(InvalidProgramError, match="BATCH needs bounded sources; source is unbounded"):
        resolve_mode(graph, spec(mode=RuntimeExecutionMode.BATCH))


# -- mark_blocking_edges ---------------------------------------------------------------------------------
def test_mark_blocking_edges_blocks_only_the_edges_leaving_the_chain_of_an_operator_that_emits_at_end() -> None:
    """As Flink's job graph generator: the operator chains with its forward successors, which emit only
    at end of input too, and the first edge that is not chained blocks; with chaining disabled, the
    operator's own output edge does."""
    nodes = [node(t) for t in (source(), flat_map(), flat_map(EmitsAtEnd()), flat_map(), sink())]
    for (upstream, downstream), partitioning in zip(itertools.pairwise(nodes), [
            Partitioning.FORWARD, Partitioning.FORWARD, Partitioning.FORWARD, Partitioning.REBALANCE]):
        connect(upstream, downstream, partitioning=partitioning)
    graph = StreamGraph(nodes, RuntimeExecutionMode.STREAMING)
    planned = mark_blocking_edges(graph, spec())
    assert kinds(planned) == [EdgeKind.PIPELINED, EdgeKind.PIPELINED, EdgeKind.PIPELINED, EdgeKind.BLOCKING]
    assert [vertex.name for vertex in chain(planned, spec()).vertices] == ["source -> flat_map -> flat_map -> flat_map",
                                                                           "sink"]
    unchained = JobSpec(job_name="unchained", transformations=(), runtime_mode=RuntimeExecutionMode.STREAMING,
                        runtime_options=RuntimeOptions(), chaining_enabled=False)
    assert kinds(mark_blocking_edges(graph, unchained)) == [EdgeKind.PIPELINED, EdgeKind.PIPELINED,
                                                            EdgeKind.BLOCKING, EdgeKind.PIPELINED]


def test_mark_blocking_edges_in_batch_mode_blocks_unchainable_edges_but_not_inside_a_loop() -> None:
    graph = line(source(), flat_map(), sink(), partitioning=Partitioning.REBALANCE)
    graph.nodes[2].transformation.scope = ROOT_SCOPE.nest()  # the sink's input edge is in a loop
    graph.mode = RuntimeExecutionMode.BATCH
    graph = mark_blocking_edges(graph, spec())
    assert kinds(graph) == [EdgeKind.BLOCKING, EdgeKind.PIPELINED]


@pytest.mark.parametrize(("producers", "sorting", "into_the_sorting_operator"), [
    (1, True, EdgeKind.PIPELINED), (2, True, EdgeKind.BLOCKING), (1, False, EdgeKind.BLOCKING)])
def test_mark_blocking_edges_in_batch_mode_lets_an_operator_that_sorts_its_one_producer_take_it_as_it_comes(
        producers: int, sorting: bool, into_the_sorting_operator: EdgeKind) -> None:
    """Its sort buffer holds all its input before it emits anything, as a blocking exchange makes
    it: the channel would hold (and spill) the same records once more. Reading two producers as
    they come, their records' arrival order (BATCH's tie-break) would be the scheduler's: it reads
    them behind a blocking edge, as does one that streams its backlog (``backlog_sorting=False``)."""
    job = spec(mode=RuntimeExecutionMode.BATCH, backlog_sorting=sorting)
    graph = line(source(), keyed_process(), flat_map(), sink(), partitioning=Partitioning.HASH)
    graph.mode = RuntimeExecutionMode.BATCH
    graph.nodes[0].parallelism = producers
    planned = mark_blocking_edges(choose_backlog_paths(graph, job), job)
    assert kinds(planned) == [into_the_sorting_operator, EdgeKind.BLOCKING, EdgeKind.BLOCKING]


def test_mark_blocking_edges_leaves_a_feedback_edge_alone() -> None:
    head, tail = node(flat_map(EmitsAtEnd())), node(flat_map())
    connect(head, tail)
    connect(tail, head, input_index=1, kind=EdgeKind.FEEDBACK)
    planned = mark_blocking_edges(StreamGraph([head, tail], RuntimeExecutionMode.BATCH), spec())
    assert kinds(planned) == [EdgeKind.BLOCKING, EdgeKind.FEEDBACK]


# -- validate_loops --------------------------------------------------------------------------------------
def test_validate_loops_refuses_a_feedback_edge_that_changes_parallelism() -> None:
    head, tail = node(flat_map(), parallelism=2), node(flat_map(), parallelism=1)
    connect(head, tail, partitioning=Partitioning.REBALANCE)
    connect(tail, head, input_index=1, partitioning=Partitioning.REBALANCE, kind=EdgeKind.FEEDBACK)
    with pytest.raises(InvalidProgramError, match="has parallelism 1, its head 2"):
        validate_loops(StreamGraph([head, tail]), spec())


def test_validate_loops_refuses_an_operator_emitting_at_end_inside_its_loop() -> None:
    inner = ROOT_SCOPE.nest()
    head, body = node(flat_map()), node(flat_map(EmitsAtEnd()))
    head.transformation.scope = body.transformation.scope = inner
    connect(head, body)
    connect(body, head, input_index=1, kind=EdgeKind.FEEDBACK)
    with pytest.raises(InvalidProgramError, match="emits only at the end of its input"):
        validate_loops(StreamGraph([head, body]), spec())


def test_validate_loops_passes_a_graph_without_loops_unchanged() -> None:
    graph = line(source(), flat_map(EmitsAtEnd()), sink())
    assert validate_loops(graph, spec()) is graph and kinds(graph) == [EdgeKind.PIPELINED] * 2


# -- choose_backlog_paths --------------------------------------------------------------------------------
def keyed_process() -> KeyedProcessTransformation:
    return KeyedProcessTransformation(id=next(_ids), name="process", function=PassThrough(),
                                      key_selectors=[lambda x: x])


@pytest.mark.parametrize(("mode", "sorting", "streamed"), [
    (RuntimeExecutionMode.STREAMING, True, True),
    (RuntimeExecutionMode.STREAMING, "always", False),
    (RuntimeExecutionMode.BATCH, True, False),
])
def test_choose_backlog_paths_streams_a_keyed_process_functions_backlog_only_in_streaming_mode(
        mode: RuntimeExecutionMode, sorting: bool | str, streamed: bool) -> None:
    graph = line(source(), keyed_process(), sink(), partitioning=Partitioning.HASH)
    graph.mode = mode
    graph = choose_backlog_paths(graph, spec(backlog_sorting=sorting))
    process = graph.nodes[1]
    assert bool(process.backlog_streamed) is streamed
    assert graph.nodes[0].backlog_path is BacklogPath.STREAMED and graph.nodes[2].backlog_path is BacklogPath.STREAMED
    if streamed:
        assert "called once per record either way" in str(process.backlog_streamed)


# -- plan_spark_queries ----------------------------------------------------------------------------------
def test_plan_spark_queries_changes_nothing_without_a_spark_source() -> None:
    graph = line(source(), flat_map(), sink())
    graph.mode = RuntimeExecutionMode.BATCH
    planned = plan_spark_queries(graph, spec(batch_engine="polars"))
    assert [(n.transformation, [e.target.transformation for e in n.out_edges]) for n in planned.nodes] == \
        [(n.transformation, [e.target.transformation for e in n.out_edges]) for n in graph.nodes]


# -- chaining, the order, the log -----------------------------------------------------------------------
def test_chain_follows_the_specs_chaining_setting() -> None:
    def graph() -> StreamGraph:
        return line(source(), flat_map(), sink())

    chained = chain(graph(), spec())
    assert [len(v.nodes) for v in chained.vertices] == [3]
    unchained = chain(graph(), JobSpec(job_name="no chaining", transformations=(), chaining_enabled=False))
    assert [len(v.nodes) for v in unchained.vertices] == [1, 1, 1]


def test_the_passes_run_in_their_documented_order() -> None:
    assert [p.__name__ for p in PASSES] == ["resolve_mode", "plan_spark_queries", "validate_loops",
                                           "choose_backlog_paths", "mark_blocking_edges"]


def test_plan_job_runs_the_passes_it_is_given_in_order() -> None:
    seen: list[str] = []

    def first(graph: StreamGraph, job: JobSpec) -> StreamGraph:
        seen.append("first")
        return resolve_mode(graph, job)

    def second(graph: StreamGraph, job: JobSpec) -> StreamGraph:
        seen.append(f"second sees {graph.mode.name}")
        return graph

    src = SourceTransformation(id=1, name="numbers", source=CollectionSource([1, 2]))
    out = SinkTransformation(id=2, name="sink", inputs=[src], sink=CollectSink())
    job = plan_job(JobSpec(job_name="two passes", transformations=(src, out),
                           runtime_mode=RuntimeExecutionMode.AUTOMATIC), passes=(first, second))
    assert seen == ["first", "second sees BATCH"] and job.mode is RuntimeExecutionMode.BATCH


def test_each_pass_logs_its_name_and_what_it_changed(caplog: pytest.LogCaptureFixture) -> None:
    graph = line(source(), flat_map(EmitsAtEnd()), sink())
    graph.nodes[1].out_edges[0].partitioning = Partitioning.REBALANCE  # not chained: it blocks
    with caplog.at_level(logging.DEBUG, logger="slipstream.planner"):
        graph = run_pass(resolve_mode, graph, spec(mode=RuntimeExecutionMode.AUTOMATIC))
        graph = run_pass(mark_blocking_edges, graph, spec())
        graph = run_pass(validate_loops, graph, spec())
    messages = [record.getMessage() for record in caplog.records]
    second, third = (f"#{n.id}" for n in graph.nodes[1:])
    assert messages == [
        "planning pass resolve_mode: mode: unresolved -> BATCH",
        f"planning pass mark_blocking_edges: edge {second}->{third} input 0: PIPELINED -> BLOCKING",
        "planning pass validate_loops: no change",
    ]


def snapshot(graph: StreamGraph) -> list[Any]:
    """Everything a pass may change, with the identity of each node and edge object."""
    return [graph.mode, [(id(n), n.transformation, n.parallelism, n.backlog_path, n.backlog_streamed, list(n.notes),
                          [(id(e), id(e.source), id(e.target), e.kind, e.partitioning) for e in n.in_edges],
                          [(id(e), id(e.source), id(e.target), e.kind, e.partitioning) for e in n.out_edges])
                         for n in graph.nodes]]


@pytest.mark.parametrize("planning_pass", PASSES, ids=[p.__name__ for p in PASSES])
def test_a_pass_returns_its_changes_and_leaves_the_graph_it_was_given_unchanged(planning_pass: Any) -> None:
    graph = line(source(), keyed_process(), flat_map(EmitsAtEnd()), sink(), partitioning=Partitioning.HASH)
    graph.mode = RuntimeExecutionMode.BATCH if planning_pass is not resolve_mode else None
    before = snapshot(graph)
    planned = planning_pass(graph, spec(mode=RuntimeExecutionMode.AUTOMATIC))
    assert snapshot(graph) == before
    # the graph it returns is planned as the pass says, linked within itself
    assert [n.transformation for n in planned.nodes] == [n.transformation for n in graph.nodes]
    assert all(e.source in planned.nodes and e.target in planned.nodes for n in planned.nodes for e in n.out_edges)


def test_each_pass_that_changes_the_graph_returns_the_change() -> None:
    graph = line(source(), keyed_process(), flat_map(EmitsAtEnd()), sink(), partitioning=Partitioning.HASH)
    job = spec(mode=RuntimeExecutionMode.AUTOMATIC)
    resolved = resolve_mode(graph, job)
    chosen = choose_backlog_paths(resolved, job)
    blocked = mark_blocking_edges(chosen, job)
    assert (graph.mode, resolved.mode) == (None, RuntimeExecutionMode.BATCH)
    assert [n.backlog_path for n in resolved.nodes] == [None] * 4
    assert chosen.nodes[1].backlog_path is not None and chosen.nodes[1].backlog_path is not BacklogPath.STREAMED
    assert kinds(chosen) == [EdgeKind.PIPELINED] * 3
    assert kinds(blocked) == [EdgeKind.PIPELINED, EdgeKind.BLOCKING, EdgeKind.BLOCKING]

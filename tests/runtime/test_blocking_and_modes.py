"""FLIP-327 scheduling: blocking edges after output-on-EOF operators, runtime modes, and backlog
reported by sources (bounded sources and the bounded part of a HybridSource)."""

from __future__ import annotations

import pytest

from slipstream.attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.datastream import (
    FlatMapFunction,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.errors import InvalidProgramError
from slipstream.runtime.job_graph import EdgeKind
from slipstream.runtime.planner import plan_job


class Tokens(FlatMapFunction):
    """A flat_map that declares it emits only at end of input (the declaration is what is tested)."""

    def flat_map(self, value: str):
        yield from value.split()

    def get_operator_attributes(self) -> OperatorAttributes:
        return OperatorAttributesBuilder().set_is_output_on_eof(True).build()


class BacklogFlags(ProcessFunction):
    """Emits (value, whether it was processed as backlog)."""

    def process_element(self, value, ctx):
        yield value, ctx.is_backlog()


def edge_kinds(env: StreamExecutionEnvironment) -> list[EdgeKind]:
    graph = plan_job(env._job_spec(list(env._transformations)))
    return [edge.kind for vertex in graph.vertices for edge in vertex.in_edges]


def test_output_on_eof_operator_chains_its_forward_successors_and_the_edge_leaving_the_chain_blocks() -> None:
    """As Flink's job graph generator plans FLIP-331: a blocking exchange between the operator and a
    successor in its chain would only hold every output once more."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection(["a b"]).flat_map(Tokens()).map(str.upper).rebalance().map(str.lower).print()
    graph = plan_job(env._job_spec(list(env._transformations)))
    assert [v.name for v in graph.vertices] == ["Collection Source -> FlatMap -> Map", "Map -> Sink: Print to Std. Out"]
    assert graph.vertices[1].in_edges[0].kind is EdgeKind.BLOCKING
    assert "emits only at end of input" in graph.explain()

    env.disable_operator_chaining()
    graph = plan_job(env._job_spec(list(env._transformations)))
    assert [edge.kind for vertex in graph.vertices for edge in vertex.in_edges] == [
        EdgeKind.PIPELINED, EdgeKind.BLOCKING, EdgeKind.PIPELINED, EdgeKind.PIPELINED]


@pytest.mark.parametrize("parallelism,workers", [(1, 1), (2, 1), (2, 2)])
def test_downstream_of_blocking_edge_starts_after_its_producer_finished(parallelism: int, workers: int) -> None:
    """On workers too: their deployed_ms and finished_ms count from the driver's start (each worker
    counted from its own, so the consumer looked deployed 2.5 ms before its producer finished)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(workers=workers)
    lines = [f"w{i} x{i}" for i in range(200)]
    # rebalance: every consumer subtask reads every producer subtask, so each waits for all of
    # them (over a forward edge a consumer subtask waits only for its own producer subtask)
    result_stream = env.from_collection(lines).flat_map(Tokens()).name("tokens") \
        .rebalance().map(str.upper).name("upper")
    collected = []
    result_stream.add_sink(collected.append).name("sink")
    result = env.execute("blocking")
    metrics = result.get_all_accumulator_results()
    assert sorted(collected) == sorted(w.upper() for line in lines for w in line.split())
    assert metrics["upper"]["deployed_ms"] >= metrics["tokens"]["finished_ms"]


def test_records_behind_a_blocking_edge_are_backlog() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    flags = list(env.from_source(IteratorSource(["a b", "c"], bounded=False), None, "live lines")
                 .flat_map(Tokens()).rebalance().process(BacklogFlags()).execute_and_collect())
    assert flags == [("a", True), ("b", True), ("c", True)]


@pytest.mark.parametrize("parallelism, sorting, into_the_reduce", [
    (1, True, EdgeKind.PIPELINED), (2, True, EdgeKind.BLOCKING), (1, False, EdgeKind.BLOCKING)])
def test_batch_mode_blocks_every_unchained_edge_but_into_a_sorting_operator_and_refuses_unbounded_sources(
        parallelism: int, sorting: bool, into_the_reduce: EdgeKind) -> None:
    """A reduce that sorts the backlog of its one producer buffers all of it before it emits: the
    edge into it need not block (the channel would hold what its sort buffer holds). One reading
    two producers reads behind a blocking edge (as they come, their records' arrival order would be
    the scheduler's), and so does one that streams its backlog."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH).configure(backlog_sorting=sorting)
    env.from_collection([1, 2, 3]).set_parallelism(parallelism).map(lambda x: x).key_by(lambda x: x % 2) \
        .reduce(lambda a, b: a + b).rebalance().map(lambda x: x).print()
    assert edge_kinds(env) == [into_the_reduce, EdgeKind.BLOCKING]
    assert "(BATCH)" in env.explain()

    unbounded = StreamExecutionEnvironment.get_execution_environment()
    unbounded.set_runtime_mode(RuntimeExecutionMode.BATCH)
    unbounded.from_source(IteratorSource(iter([1]), bounded=False), None, "live").print()
    with pytest.raises(InvalidProgramError, match="BATCH needs bounded sources"):
        unbounded.explain()


@pytest.mark.parametrize("bounded, expected", [(True, EdgeKind.BLOCKING), (False, EdgeKind.PIPELINED)])
def test_automatic_mode_is_batch_exactly_when_all_sources_are_bounded(bounded: bool, expected: EdgeKind) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    env.from_source(IteratorSource([1, 2], bounded=bounded), None, "numbers") \
        .rebalance().map(lambda x: x).print()
    assert edge_kinds(env) == [expected]


@pytest.mark.parametrize("mode", list(RuntimeExecutionMode))
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_keyed_job_gives_the_same_result_in_every_mode(mode: RuntimeExecutionMode, parallelism: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(mode).configure(batch_size=7, channel_capacity=2)
    records = [(i % 11, i) for i in range(500)]
    updates = list(env.from_collection(records).key_by(lambda r: r[0])
                   .reduce(lambda a, b: (a[0], a[1] + b[1])).execute_and_collect())
    final = {}
    for key, total in updates:
        final[key] = total
    oracle = {}
    for key, value in records:
        oracle[key] = oracle.get(key, 0) + value
    assert final == oracle


def test_bounded_source_is_backlog_until_it_ends() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    flags = list(env.from_collection([1, 2, 3]).process(BacklogFlags()).execute_and_collect())
    assert flags == [(1, True), (2, True), (3, True)]


def test_unbounded_source_is_not_backlog() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    flags = list(env.from_source(IteratorSource([1, 2], bounded=False), None, "live")
                 .process(BacklogFlags()).execute_and_collect())
    assert flags == [(1, False), (2, False)]


def test_hybrid_source_switches_from_backlog_to_live() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    source = HybridSource.builder(CollectionSource(["h1", "h2"])) \
        .add_source(CollectionSource(["h3"])) \
        .add_source(IteratorSource(["live1", "live2"], bounded=False)).build()
    flags = list(env.from_source(source, None, "hybrid").process(BacklogFlags()).execute_and_collect())
    assert flags == [("h1", True), ("h2", True), ("h3", True), ("live1", False), ("live2", False)]


def test_hybrid_source_refuses_an_unbounded_part_before_the_last() -> None:
    with pytest.raises(InvalidProgramError, match="only the last source"):
        HybridSource.builder(IteratorSource([1], bounded=False)).add_source(CollectionSource([2])).build()


def test_a_source_can_be_told_explicitly_whether_it_is_backlog() -> None:
    from slipstream.datastream.connectors.backlog import BacklogSource
    env = StreamExecutionEnvironment.get_execution_environment()
    live_replay = BacklogSource(IteratorSource([1, 2], bounded=False), is_backlog=True)
    lookup = BacklogSource(CollectionSource([3]), is_backlog=False)
    replayed, looked_up = [], []
    env.from_source(live_replay, None, "replay").process(BacklogFlags()).add_sink(replayed.append)
    env.from_source(lookup, None, "lookup").process(BacklogFlags()).add_sink(looked_up.append)
    env.execute("explicit backlog")
    assert replayed == [(1, True), (2, True)] and looked_up == [(3, False)]

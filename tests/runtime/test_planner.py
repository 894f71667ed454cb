"""Planning passes on small graphs built through the public API: stream graph, then chaining."""

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.sinks import CollectSink
from slipstream.datastream.functions import ProcessFunction
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.transformations import Partitioning
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.errors import InvalidProgramError
from slipstream.runtime.job_graph import JobGraph
from slipstream.runtime.planner import (
    StreamGraph,
    build_stream_graph,
    chain,
    default_max_parallelism,
)


def env_with(parallelism: int = 1) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)


def plan(env: StreamExecutionEnvironment) -> tuple[StreamGraph, JobGraph]:
    spec = env._job_spec(list(env._transformations))
    graph = build_stream_graph(spec)
    return graph, chain(graph, spec)


def node(graph: StreamGraph, name: str):  # noqa: ANN201 - a StreamNode
    matches = [n for n in graph.nodes if n.name == name]
    assert len(matches) == 1, f"expected one node named {name!r}, got {matches}"
    return matches[0]


def chains(job: JobGraph) -> list[list[str]]:
    return [[n.name for n in vertex.nodes] for vertex in job.vertices]


class Split(ProcessFunction):
    def __init__(self, tag: OutputTag) -> None:
        self.tag = tag

    def process_element(self, value, ctx):  # noqa: ANN001, ANN201
        yield value
        yield self.tag, value


# -- chaining ---------------------------------------------------------------------------------------
def test_forward_edges_at_equal_parallelism_chain_into_one_vertex() -> None:
    env = env_with(2)
    env.from_collection([1, 2]).set_parallelism(2).map(lambda x: x).name("m").filter(bool).name("f") \
        .sink_to(CollectSink()).name("sink")
    graph, job = plan(env)
    assert chains(job) == [["Collection Source", "m", "f", "sink"]]
    assert job.vertices[0].parallelism == 2
    assert all(edge.partitioning is Partitioning.FORWARD for n in graph.nodes for edge in n.in_edges)


def test_key_by_breaks_the_chain_with_a_hash_edge() -> None:
    env = env_with(2)
    env.from_collection([1, 2]).key_by(lambda x: x).reduce(lambda a, b: a + b).name("r") \
        .sink_to(CollectSink()).name("sink")
    graph, job = plan(env)
    assert chains(job) == [["Collection Source"], ["r", "sink"]]
    edge = node(graph, "r").in_edges[0]
    assert edge.partitioning is Partitioning.HASH
    assert edge.key_selector is not None and edge.key_selector(7) == 7


def test_rebalance_breaks_the_chain_even_at_equal_parallelism() -> None:
    env = env_with(2)
    env.from_collection([1]).rebalance().map(lambda x: x).name("m").sink_to(CollectSink()).name("sink")
    graph, job = plan(env)
    assert chains(job) == [["Collection Source"], ["m", "sink"]]
    assert node(graph, "m").in_edges[0].partitioning is Partitioning.REBALANCE


def test_parallelism_change_breaks_the_chain_and_defaults_to_rebalance() -> None:
    env = env_with(2)
    env.from_collection([1]).set_parallelism(2).map(lambda x: x).name("m").set_parallelism(3) \
        .map(lambda x: x).name("n").sink_to(CollectSink()).name("sink")
    graph, job = plan(env)
    assert chains(job) == [["Collection Source"], ["m"], ["n", "sink"]]
    assert node(graph, "m").in_edges[0].partitioning is Partitioning.REBALANCE
    assert node(graph, "n").in_edges[0].partitioning is Partitioning.REBALANCE
    assert [v.parallelism for v in job.vertices] == [2, 3, 2]


def test_default_partitioning_is_forward_at_equal_parallelism() -> None:
    env = env_with(3)
    env.from_collection([1]).set_parallelism(3).map(lambda x: x).name("m").sink_to(CollectSink()).name("sink")
    graph, _ = plan(env)
    assert node(graph, "m").in_edges[0].partitioning is Partitioning.FORWARD
    assert node(graph, "sink").in_edges[0].partitioning is Partitioning.FORWARD


def test_disable_chaining_isolates_the_operator() -> None:
    env = env_with(1)
    env.from_collection([1]).map(lambda x: x).name("a").map(lambda x: x).name("b").disable_chaining() \
        .map(lambda x: x).name("c").sink_to(CollectSink()).name("sink")
    _, job = plan(env)
    assert chains(job) == [["Collection Source", "a"], ["b"], ["c", "sink"]]


def test_start_new_chain_begins_a_chain_that_later_operators_join() -> None:
    env = env_with(1)
    env.from_collection([1]).map(lambda x: x).name("a").map(lambda x: x).name("b").start_new_chain() \
        .map(lambda x: x).name("c").sink_to(CollectSink()).name("sink")
    _, job = plan(env)
    assert chains(job) == [["Collection Source", "a"], ["b", "c", "sink"]]


def test_side_output_edges_do_not_chain_and_carry_their_tag() -> None:
    env = env_with(1)
    tag = OutputTag("late")
    main = env.from_collection([1]).process(Split(tag)).name("split")
    main.sink_to(CollectSink()).name("main sink")
    main.get_side_output(tag).sink_to(CollectSink()).name("side sink")
    graph, job = plan(env)
    split = node(graph, "split")
    by_target = {edge.target.name: edge for edge in split.out_edges}
    assert set(by_target) == {"main sink", "side sink"}
    assert by_target["main sink"].side_tag is None
    assert by_target["side sink"].side_tag is tag
    assert by_target["side sink"].partitioning is Partitioning.FORWARD
    assert ["side sink"] in chains(job)
    # split has two outputs, so nothing is chained after it
    assert ["main sink"] in chains(job)


def test_side_output_alone_is_not_chained() -> None:
    env = env_with(1)
    tag = OutputTag("odd")
    env.from_collection([1]).process(Split(tag)).name("split") \
        .get_side_output(tag).sink_to(CollectSink()).name("side sink")
    _, job = plan(env)
    assert chains(job) == [["Collection Source", "split"], ["side sink"]]


# -- virtual transformations resolved into edges ----------------------------------------------------
def test_union_becomes_one_edge_per_input_into_the_same_input_index() -> None:
    env = env_with(1)
    a = env.from_collection([1]).name("a")
    b = env.from_collection([2]).name("b")
    c = env.from_collection([3]).name("c")
    a.union(b, c).map(lambda x: x).name("m").sink_to(CollectSink()).name("sink")
    graph, job = plan(env)
    assert not any(n.transformation.is_virtual for n in graph.nodes)
    m = node(graph, "m")
    assert sorted(edge.source.name for edge in m.in_edges) == ["a", "b", "c"]
    assert {edge.input_index for edge in m.in_edges} == {0}
    assert ["m", "sink"] in chains(job)  # more than one input: m heads its own chain


def test_partitioning_inside_a_union_applies_to_its_own_branch_only() -> None:
    env = env_with(2)
    a = env.from_collection([1]).name("a").set_parallelism(2)
    b = env.from_collection([2]).name("b")
    a.union(b.key_by(lambda x: x)).map(lambda x: x).name("m").sink_to(CollectSink())
    graph, _ = plan(env)
    kinds = {edge.source.name: edge.partitioning for edge in node(graph, "m").in_edges}
    assert kinds == {"a": Partitioning.FORWARD, "b": Partitioning.HASH}


def test_partitioning_closest_to_the_consumer_wins() -> None:
    env = env_with(2)
    env.from_collection([1]).rebalance().shuffle().broadcast().map(lambda x: x).name("m") \
        .sink_to(CollectSink())
    graph, _ = plan(env)
    (edge,) = node(graph, "m").in_edges
    assert edge.partitioning is Partitioning.BROADCAST
    assert edge.source.name == "Collection Source"


def test_partitioning_applied_to_a_union_reaches_every_branch() -> None:
    env = env_with(2)
    a = env.from_collection([1]).name("a")
    b = env.from_collection([2]).name("b")
    a.union(b).rebalance().map(lambda x: x).name("m").sink_to(CollectSink())
    graph, _ = plan(env)
    assert [edge.partitioning for edge in node(graph, "m").in_edges] == [Partitioning.REBALANCE] * 2


def test_explicit_forward_between_different_parallelisms_is_refused() -> None:
    env = env_with(2)
    env.from_collection([1]).forward().map(lambda x: x).name("m").set_parallelism(3) \
        .sink_to(CollectSink())
    with pytest.raises(InvalidProgramError, match="forward partitioning from 'Collection Source'"):
        build_stream_graph(env._job_spec(list(env._transformations)))


def test_explicit_forward_at_equal_parallelism_chains() -> None:
    env = env_with(2)
    env.from_collection([1]).set_parallelism(2).forward().map(lambda x: x).name("m") \
        .sink_to(CollectSink()).name("sink")
    _, job = plan(env)
    assert chains(job) == [["Collection Source", "m", "sink"]]


# -- parallelism and max parallelism ----------------------------------------------------------------
def test_source_max_parallelism_clamps_the_source_not_its_consumers() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    stream = env.from_source(IteratorSource([1, 2, 3]), None, "it")
    env.set_parallelism(4)  # set after the source was built: the planner still clamps it
    stream.map(lambda x: x).name("m").sink_to(CollectSink())
    graph, job = plan(env)
    assert node(graph, "it").parallelism == 1
    assert node(graph, "m").parallelism == 4
    assert node(graph, "m").in_edges[0].partitioning is Partitioning.REBALANCE
    assert chains(job)[0] == ["it"]


def test_source_max_parallelism_clamps_when_env_parallelism_is_set_first() -> None:
    env = env_with(3)
    env.from_source(IteratorSource([1]), None, "it").sink_to(CollectSink())
    graph, _ = plan(env)
    assert node(graph, "it").parallelism == 1


@pytest.mark.parametrize(("parallelism", "expected"), [
    (1, 128), (2, 128), (85, 128), (86, 256), (100, 256), (171, 256), (172, 512),
    (20000, 32768), (32768, 32768),
])
def test_default_max_parallelism_follows_flinks_rule(parallelism: int, expected: int) -> None:
    assert default_max_parallelism(parallelism) == expected


def test_max_parallelism_defaults_per_operator_unless_set_on_env_or_operator() -> None:
    env = env_with(100)
    stream = env.from_collection([1]).map(lambda x: x).name("m")
    stream.map(lambda x: x).name("n").set_max_parallelism(300).sink_to(CollectSink())
    graph, _ = plan(env)
    assert node(graph, "m").max_parallelism == 256
    assert node(graph, "n").max_parallelism == 300
    env2 = env_with(4).set_max_parallelism(16)
    env2.from_collection([1]).map(lambda x: x).name("m").sink_to(CollectSink())
    graph2, _ = plan(env2)
    assert {n.max_parallelism for n in graph2.nodes} == {16}


def test_parallelism_above_max_parallelism_is_refused() -> None:
    env = env_with(8).set_max_parallelism(4)
    env.from_collection([1]).sink_to(CollectSink())
    with pytest.raises(InvalidProgramError, match="above its max parallelism 4"):
        build_stream_graph(env._job_spec(list(env._transformations)))


# -- explain and uids -------------------------------------------------------------------------------
def test_explain_lists_vertices_parallelism_and_hash_edges() -> None:
    env = env_with(2)
    env.from_collection([("a", 1)]).set_parallelism(2).map(lambda x: x).name("to pairs") \
        .key_by(lambda x: x[0]).reduce(lambda a, b: a).name("running").set_parallelism(3) \
        .sink_to(CollectSink()).name("out")
    text = env.explain()
    lines = text.splitlines()
    assert lines[0] == "== Job graph (STREAMING) =="
    assert "[1] Collection Source -> to pairs  (parallelism 2)" in lines
    assert "[2] running  (parallelism 3)" in lines
    assert "      <- [1] input 0: HASH PIPELINED" in lines
    assert "[3] out  (parallelism 2)" in lines
    assert "      <- [2] input 0: REBALANCE PIPELINED" in lines
    # explain does not consume the graph
    assert len(env._transformations) == 5


def build_sample(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).map(lambda x: x).key_by(lambda x: x).reduce(lambda a, b: a) \
        .sink_to(CollectSink())


def test_default_uids_are_deterministic_and_unique() -> None:
    uids = []
    for _ in range(2):
        env = env_with(2)
        build_sample(env)
        graph, _ = plan(env)
        uids.append([n.uid for n in graph.nodes])
    assert uids[0] == uids[1]
    assert len(set(uids[0])) == len(uids[0])
    assert uids[0][0].startswith("source-")


def test_explicit_uid_is_kept() -> None:
    env = env_with(1)
    env.from_collection([1]).map(lambda x: x).name("m").uid("my-map").sink_to(CollectSink())
    graph, _ = plan(env)
    assert node(graph, "m").uid == "my-map"


def test_watermark_strategy_on_a_source_is_lowered_into_a_chained_operator() -> None:
    env = env_with(2)
    env.from_source(IteratorSource([1]), WatermarkStrategy.for_monotonous_timestamps(), "it") \
        .set_parallelism(1).map(lambda x: x).name("m").set_parallelism(1).sink_to(CollectSink()).name("s") \
        .set_parallelism(1)
    graph, job = plan(env)
    assert chains(job) == [["it", "Timestamps/Watermarks", "m", "s"]]
    assert node(graph, "Timestamps/Watermarks").uid == node(graph, "it").uid + "-watermarks"

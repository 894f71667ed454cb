"""``get_execution_plan()`` returns Flink's JSON plan: nodes with ``id``, ``type``, ``pact``, ``contents``,
``parallelism`` and ``predecessors`` (``id``, ``ship_strategy``, ``side``), sinks last.

The checks follow Flink's PyFlink tests that read the plan (``test_data_stream.py``); written anew.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

pytestmark = pytest.mark.modes(RuntimeExecutionMode.STREAMING)  # a plan, not a run: one mode is enough

PLAN_KEYS = {"id", "type", "pact", "contents", "parallelism"}


def plan(env: StreamExecutionEnvironment) -> list[dict[str, Any]]:
    text = env.get_execution_plan()
    nodes = json.loads(text)["nodes"]
    assert eval(text)["nodes"] == nodes  # Flink's tests eval() the plan: it must be a Python literal too
    for node in nodes:
        assert PLAN_KEYS <= node.keys()
        for predecessor in node.get("predecessors", []):
            assert predecessor.keys() == {"id", "ship_strategy", "side"}
    return nodes


@pytest.mark.parallelisms(2)
def test_each_operator_is_a_node_and_edges_name_their_ship_strategy(env: StreamExecutionEnvironment) -> None:
    env.from_collection([("a", 0), ("b", 1)]).name("From Collection") \
        .key_by(lambda r: r[1]).map(lambda r: r).name("Plus Two Map").set_parallelism(3) \
        .map(lambda r: r).name("Add From File Map").add_sink(lambda r: None).name("Test Sink").set_parallelism(4)
    nodes = plan(env)
    assert [(n["id"], n["type"], n["pact"], n["parallelism"]) for n in nodes] == [
        (1, "Source: From Collection", "Data Source", 1),
        (2, "Plus Two Map", "Operator", 3),
        (3, "Add From File Map", "Operator", 2),
        (4, "Test Sink", "Data Sink", 4)]
    assert [n["predecessors"] for n in nodes[1:]] == [
        [{"id": 1, "ship_strategy": "HASH", "side": "second"}],
        [{"id": 2, "ship_strategy": "REBALANCE", "side": "second"}],
        [{"id": 3, "ship_strategy": "REBALANCE", "side": "second"}]]
    assert "predecessors" not in nodes[0]


@pytest.mark.parametrize("partition,strategy", [("broadcast", "BROADCAST"), ("rebalance", "REBALANCE"),
                                                ("rescale", "RESCALE"), ("shuffle", "SHUFFLE"), ("global_", "GLOBAL")])
@pytest.mark.parallelisms(2)
def test_a_partitioning_is_the_ship_strategy_of_the_next_operator(partition: str, strategy: str,
                                                                  env: StreamExecutionEnvironment) -> None:
    getattr(env.from_collection([1, 2, 3]), partition)().map(lambda x: x + 1).set_parallelism(3).print()
    assert plan(env)[1]["predecessors"][0]["ship_strategy"] == strategy


@pytest.mark.parallelisms(8)
def test_set_parallelism_and_force_non_parallel_show_in_the_plan(env: StreamExecutionEnvironment) -> None:
    env.from_collection([(1, "Hi")]).map(lambda x: x).set_parallelism(4).print()
    assert plan(env)[1]["parallelism"] == 4
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(8)
    env.from_collection([(1, "Hi")]).set_parallelism(3).force_non_parallel().print()
    assert plan(env)[0]["parallelism"] == 1


@pytest.mark.parallelisms(2)
def test_a_union_is_no_node_its_inputs_are_the_predecessors(env: StreamExecutionEnvironment) -> None:
    one, two, three = (env.from_collection(values) for values in ([1, 2, 3], [4, 5, 6], [7, 8, 9]))
    three.union(one, two).map(lambda x: x + 1).print()
    nodes = plan(env)
    sources = sorted(n["id"] for n in nodes if n["pact"] == "Data Source")
    (operator,) = [n for n in nodes if n["pact"] == "Operator"]
    assert sorted(p["id"] for p in operator["predecessors"]) == sources


@pytest.mark.parallelisms(2)
def test_the_print_sink_is_the_last_node(env: StreamExecutionEnvironment) -> None:
    env.from_collection([("ab", 1)]).print()
    nodes = plan(env)
    assert nodes[-1]["type"] == "Sink: Print to Std. Out" and nodes[-1]["pact"] == "Data Sink"


@pytest.mark.parallelisms(1)
def test_chained_operators_are_nodes_of_their_own(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).map(lambda x: x).name("a").filter(bool).name("b").print()
    assert [n["type"] for n in plan(env)] == ["Source: Collection Source", "a", "b", "Sink: Print to Std. Out"]


@pytest.mark.parallelisms(1)
def test_a_loops_feedback_edge_is_a_predecessor_of_its_head(env: StreamExecutionEnvironment) -> None:

    def countdown(numbers: Any) -> tuple[Any, Any]:
        step = numbers.map(lambda n: n - 1).name("step")
        return step.filter(lambda n: n > 0).name("again"), step.filter(lambda n: n <= 0).name("done")

    env.from_collection([3, 1]).iterate(countdown).print()
    nodes = plan(env)
    ids = {n["id"] for n in nodes}
    assert all(p["id"] in ids for n in nodes for p in n.get("predecessors", []))
    again = next(n["id"] for n in nodes if n["type"] == "again")
    assert any(p["id"] == again for n in nodes for p in n.get("predecessors", []))


@pytest.mark.parallelisms(1)
def test_asking_for_the_plan_does_not_consume_the_job(env: StreamExecutionEnvironment) -> None:
    out: list[int] = []
    env.from_collection([1, 2]).map(lambda x: x * 10).add_sink(out.append)
    assert len(plan(env)) == 3
    env.execute()
    assert sorted(out) == [10, 20]

"""Every operator kind declares its backlog path; the planner reads the declarations and explain() prints them.

The kinds are found by walking the subclasses of ``StreamOperator`` once every module of
``slipstream.operators`` is imported, so a new kind without a declaration fails here.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

import pytest

import slipstream.operators
from slipstream.attributes import OperatorAttributes
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.co_group import VectorizedCoGroupFunction
from slipstream.datastream.environment import RuntimeExecutionMode
from slipstream.datastream.functions import (
    BroadcastProcessFunction,
    CoProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
)
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    IterationConfig,
    Iterations,
)
from slipstream.datastream.job_spec import JobSpec, RuntimeOptions
from slipstream.datastream.state import MapStateDescriptor
from slipstream.datastream.transformations import Transformation
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import EndOfStreamWindows, TumblingEventTimeWindows
from slipstream.operators.backlog import BacklogSortingOperator
from slipstream.operators.backlog_path import (
    BacklogChoice,
    BacklogDeclaration,
    BacklogPath,
    sorted_unless_streaming,
    streamed,
)
from slipstream.operators.base import StreamOperator
from slipstream.runtime.job_graph import StreamNode
from slipstream.runtime.planner import StreamGraph, choose_backlog_paths, plan_job


def operator_kinds() -> set[type[StreamOperator]]:
    """Every StreamOperator subclass reachable from slipstream.operators that implements a transformation."""
    for module in pkgutil.iter_modules(slipstream.operators.__path__):
        importlib.import_module(f"slipstream.operators.{module.name}")
    found: set[type[StreamOperator]] = set()
    stack = [StreamOperator]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.startswith("slipstream.operators") and "transformation_type" in sub.__dict__:
                found.add(sub)
    return found


def declaring_class(kind: type[StreamOperator]) -> type | None:
    """The class whose body declares ``kind``'s backlog path (``backlog`` or ``backlog_path``)."""
    for klass in kind.__mro__:
        if klass is StreamOperator:
            return None
        if klass.__dict__.get("backlog") is not None or "backlog_path" in klass.__dict__:
            return klass
    return None


class Tick(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value


class KeyedTick(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value


class Rules(BroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        pass


class Both(CoProcessFunction):
    def process_element1(self, value: Any, ctx: Any) -> Any:
        yield value

    def process_element2(self, value: Any, ctx: Any) -> Any:
        yield value


class Frames(VectorizedCoGroupFunction):
    def co_group(self, first: Any, second: Any) -> Any:
        return first


def every_kind_job(mode: RuntimeExecutionMode = RuntimeExecutionMode.STREAMING,
                   sorting: bool | str = True) -> StreamExecutionEnvironment:
    """One job holding an operator of every kind, each named after what it is."""
    env = StreamExecutionEnvironment.get_execution_environment().set_runtime_mode(mode)
    env.configure(backlog_sorting=sorting)
    pairs = env.from_collection([(i % 3, i) for i in range(10)]).name("source") \
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps()
                                          .with_timestamp_assigner(lambda record, _: record[1])).name("stamps")
    mapped = pairs.map(lambda r: r).name("map").flat_map(lambda r: [r]).name("flat_map") \
        .filter(lambda r: True).name("filter")
    mapped.process(Tick()).name("process").print().name("sink")
    keyed = mapped.key_by(lambda r: r[0])
    keyed.process(KeyedTick()).name("keyed process").print()
    keyed.reduce(lambda a, b: a).name("python reduce").print()
    keyed.sum(1).name("sum").print()
    keyed.window(TumblingEventTimeWindows.of(5)).reduce(lambda a, b: a).name("window").print()
    keyed.window(TumblingEventTimeWindows.of(5)).sum(1).name("window sum").print()
    mapped.co_group(pairs).where(lambda r: r[0]).equal_to(lambda r: r[0]).window(EndOfStreamWindows.get()) \
        .apply(lambda first, second: [len(first)]).name("co_group").print()
    mapped.co_group(pairs).where(lambda r: r[0]).equal_to(lambda r: r[0]).window(EndOfStreamWindows.get()) \
        .apply(Frames()).name("vectorised co_group").print()
    mapped.connect(pairs).process(Both()).name("co_process").print()
    mapped.connect(pairs.broadcast(MapStateDescriptor("rules", None, None))).process(Rules()).name("broadcast").print()
    mapped.map(lambda r: r[1]).iterate(lambda s: (s.filter(lambda x: x > 10), s.filter(lambda x: x <= 10))) \
        .name("loop").print()

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        step = variables.get(0).map(lambda x: x - 1).name("step")
        return IterationBodyResult([step.filter(lambda x: x > 0)], [step.filter(lambda x: x <= 0)])

    Iterations.iterate_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection([3, 1])), DataStreamList.of(), IterationConfig.new_builder().build(),
        body).get(0).print()
    return env


def planned_nodes(env: StreamExecutionEnvironment) -> list[StreamNode]:
    graph = plan_job(env._job_spec(list(env._transformations)))
    return [node for vertex in graph.vertices for node in vertex.nodes]


def test_every_operator_kind_declares_its_own_backlog_path() -> None:
    kinds = operator_kinds()
    assert kinds == {kind for kind in StreamOperator.registry.values() if kind.__module__.startswith("slipstream.")}
    undeclared = {kind.__name__ for kind in kinds if declaring_class(kind) is None}
    assert not undeclared, f"operator kinds without a backlog path: {undeclared}"
    # declared by the kind itself or by a base that is no kind of its own (map, flat_map and filter
    # share one), never inherited from another kind or from the sorting base
    inherited = {kind.__name__: declaring_class(kind).__name__ for kind in kinds  # type: ignore[union-attr]
                 if declaring_class(kind) is not kind and "transformation_type" in declaring_class(kind).__dict__}
    assert not inherited
    assert "backlog_path" not in BacklogSortingOperator.__dict__ and BacklogSortingOperator.backlog is None


def test_the_job_of_every_kind_has_every_kind() -> None:
    kinds = {StreamOperator.registry[type(node.transformation)] for node in planned_nodes(every_kind_job())}
    assert kinds == operator_kinds()


def test_each_declaration_agrees_with_the_kind_s_internal_sorter_and_streamed_ones_say_why() -> None:
    for node in planned_nodes(every_kind_job()):
        kind = StreamOperator.registry[type(node.transformation)]
        declared = kind.backlog_path(node.transformation)
        assert isinstance(declared, BacklogDeclaration), node.name
        assert declared.sorts == kind.attributes_for(node.transformation).has_internal_sorter(), node.name
        assert (declared.path is BacklogPath.STREAMED) == bool(declared.reason), node.name


EXPECTED_STREAMING = {
    "source": BacklogPath.STREAMED, "stamps": BacklogPath.STREAMED, "map": BacklogPath.STREAMED,
    "filter": BacklogPath.STREAMED, "process": BacklogPath.STREAMED, "keyed process": BacklogPath.STREAMED,
    "python reduce": BacklogPath.STREAMED, "sum": BacklogPath.VECTORISED, "window": BacklogPath.SORTED,
    "window sum": BacklogPath.VECTORISED, "co_group": BacklogPath.SORTED,
    "vectorised co_group": BacklogPath.VECTORISED, "co_process": BacklogPath.STREAMED,
    "broadcast": BacklogPath.STREAMED, "sink": BacklogPath.STREAMED,
}


@pytest.mark.parametrize("mode, sorting", [(RuntimeExecutionMode.STREAMING, True),
                                           (RuntimeExecutionMode.STREAMING, "always"),
                                           (RuntimeExecutionMode.BATCH, True),
                                           (RuntimeExecutionMode.STREAMING, False)])
def test_the_planner_takes_each_path_from_the_declaration(mode: RuntimeExecutionMode, sorting: bool | str) -> None:
    nodes = {node.name: node for node in planned_nodes(every_kind_job(mode, sorting))}
    for name, streaming_path in EXPECTED_STREAMING.items():
        node = nodes[name]
        if not sorting:
            expected = BacklogPath.STREAMED
        elif sorting == "always" or mode is RuntimeExecutionMode.BATCH:
            expected = BacklogPath.SORTED if name in ("keyed process", "python reduce") else streaming_path
        else:
            expected = streaming_path
        assert node.backlog_path is expected, (name, sorting, mode)
        assert (node.backlog_streamed is not None) == (expected is BacklogPath.STREAMED), name


def test_explain_prints_every_operator_s_path() -> None:
    env = every_kind_job()
    text = env.explain()
    for node in planned_nodes(env):
        line = next(line for line in text.splitlines() if line.startswith(f"      {node.name}: "))
        if node.backlog_path is BacklogPath.STREAMED:
            assert f"streams its backlog record by record: {node.backlog_streamed}" in line
        else:
            assert "sorts its backlog and runs it as batch work on polars" in line
            assert ("(vectorised)" in line) == (node.backlog_path is BacklogPath.VECTORISED), line
    assert "map: streams its backlog record by record: its function is called once per record" in text


def test_explain_says_a_built_in_aggregation_is_one_query_over_arrow_batches_only() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([(1, 2), (1, 3)]).key_by(lambda r: r[0]).sum(1).print()
    (line,) = [line for line in env.explain().splitlines() if "built-in sum" in line]
    assert "built-in sum of field 1; sorts its backlog and runs it as batch work on polars (vectorised): one query " \
           "over Arrow batches" in line
    assert "in STREAMING mode a backlog of Python rows streams record by record instead" in line


# -- the planner knows no kind: a new one is planned by its declaration alone ----------------------------
@dataclass
class _SlowSortTransformation(Transformation):
    pass


@pytest.fixture()
def slow_sort_kind() -> Any:
    """A kind the planner has never heard of, registered for the test only."""

    class SlowSortOperator(StreamOperator):
        transformation_type = _SlowSortTransformation
        backlog = sorted_unless_streaming("sorting it costs more than it saves")

        @classmethod
        def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
            return OperatorAttributes(internal_sorter=True)

        def process_batch(self, batch: Any, input_index: int = 0) -> None:
            self.output.collect_batch(batch)

    yield _SlowSortTransformation
    del StreamOperator.registry[_SlowSortTransformation]


@pytest.mark.parametrize("mode, sorting, expected", [
    (RuntimeExecutionMode.STREAMING, True, BacklogChoice(BacklogPath.STREAMED, "sorting it costs more than it saves")),
    (RuntimeExecutionMode.STREAMING, "always", BacklogChoice(BacklogPath.SORTED)),
    (RuntimeExecutionMode.BATCH, True, BacklogChoice(BacklogPath.SORTED)),
    (RuntimeExecutionMode.STREAMING, False, BacklogChoice(BacklogPath.STREAMED, "backlog_sorting=False"))])
def test_a_new_kind_is_planned_from_its_declaration_alone(slow_sort_kind: Any, mode: RuntimeExecutionMode,
                                                          sorting: bool | str, expected: BacklogChoice) -> None:
    node = StreamNode(1, slow_sort_kind(id=1, name="slow"), parallelism=1, max_parallelism=128, uid="slow")
    spec = JobSpec(job_name="hand-built", transformations=(), runtime_mode=mode,
                   runtime_options=RuntimeOptions(backlog_sorting=sorting))
    graph = choose_backlog_paths(StreamGraph([node], mode), spec)
    assert BacklogChoice(graph.nodes[0].backlog_path, graph.nodes[0].backlog_streamed) == expected


def test_a_declaration_says_why_exactly_when_it_streams() -> None:
    assert streamed("no key").reason == "no key"
    with pytest.raises(ValueError, match="reason exactly when it is STREAMED"):
        BacklogDeclaration(BacklogPath.STREAMED)
    with pytest.raises(ValueError, match="reason exactly when it is STREAMED"):
        BacklogDeclaration(BacklogPath.SORTED, reason="why")

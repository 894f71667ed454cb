"""The co_group/join builders and EndOfStreamWindows: what they accept, what they refuse (at once,
naming the call), and the transformation they append. Nothing here runs a job."""

from __future__ import annotations

from typing import Any

import pytest

import slipstream.operators  # noqa: F401  (registers the operators, so transformations report attributes)
from slipstream.datastream import (
    CoGroupedStreams,
    CoGroupFunction,
    FlatJoinFunction,
    JoinedStreams,
    JoinFunction,
    MapFunction,
    StreamExecutionEnvironment,
    StreamScope,
    VectorizedCoGroupFunction,
)
from slipstream.datastream.co_group import JoinCoGroupFunction
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.transformations import (
    CoGroupTransformation,
    WindowTransformation,
)
from slipstream.datastream.typeinfo import Row
from slipstream.datastream.window import (
    CountEvictor,
    CountTrigger,
    EndOfStreamTrigger,
    EndOfStreamWindows,
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    NeverTrigger,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
)
from slipstream.errors import InvalidProgramError


def two_streams() -> tuple[StreamExecutionEnvironment, Any, Any]:
    env = StreamExecutionEnvironment.get_execution_environment()
    return env, env.from_collection([(1, "a")]), env.from_collection([(1, 2.0)])


def appended(env: StreamExecutionEnvironment) -> Any:
    return env._transformations[-1]


# -- EndOfStreamWindows -----------------------------------------------------------------------------
def test_end_of_stream_windows_put_everything_in_the_global_window_and_fire_only_at_the_end() -> None:
    assigner = EndOfStreamWindows.get()
    assert assigner.assign_windows("x", None, None) == [GlobalWindow.get()]
    assert assigner.assign_windows("y", 123, None) == [GlobalWindow.get()]
    assert GlobalWindow.get().max_timestamp() == MAX_TIMESTAMP
    assert isinstance(assigner.get_default_trigger(), EndOfStreamTrigger)
    assert assigner.is_event_time()
    assert GlobalWindows.create_with_end_of_stream_trigger() is assigner
    assert isinstance(GlobalWindows.create().get_default_trigger(), NeverTrigger)


class TimerLog(Trigger.TriggerContext):
    def __init__(self) -> None:
        self.event_timers: list[int] = []

    def get_current_processing_time(self) -> int:
        return 0

    def get_metric_group(self) -> Any:
        return {}

    def get_current_watermark(self) -> int:
        return 0

    def register_processing_time_timer(self, time: int) -> None:
        raise AssertionError("the end-of-stream trigger uses event time only")

    def register_event_time_timer(self, time: int) -> None:
        self.event_timers.append(time)

    def delete_processing_time_timer(self, time: int) -> None:
        pass

    def delete_event_time_timer(self, time: int) -> None:
        self.event_timers.remove(time)

    def get_partitioned_state(self, state_descriptor: Any) -> Any:
        raise AssertionError("the end-of-stream trigger keeps no state")


def test_the_end_of_stream_trigger_waits_for_the_maximum_watermark() -> None:
    trigger, window, ctx = EndOfStreamTrigger(), GlobalWindow.get(), TimerLog()
    assert trigger.on_element("x", 5, window, ctx) is TriggerResult.CONTINUE
    assert ctx.event_timers == [MAX_TIMESTAMP]
    assert trigger.on_event_time(10_000, window, ctx) is TriggerResult.CONTINUE
    assert trigger.on_processing_time(MAX_TIMESTAMP, window, ctx) is TriggerResult.CONTINUE
    assert trigger.on_event_time(MAX_TIMESTAMP, window, ctx) is TriggerResult.FIRE
    trigger.clear(window, ctx)
    assert ctx.event_timers == []


@pytest.mark.parametrize("assigner", [EndOfStreamWindows.get(), GlobalWindows.create_with_end_of_stream_trigger()])
def test_keyed_and_all_windows_with_end_of_stream_windows_declare_output_on_eof(assigner: Any) -> None:
    _env, a, _ = two_streams()
    keyed = a.key_by(0).window(assigner).reduce(lambda x, y: x)
    everything = a.window_all(assigner).apply(lambda window, xs: [len(list(xs))])
    for stream in (keyed, everything):
        attributes = stream.get_transformation().get_operator_attributes()
        assert attributes.is_output_on_eof() and attributes.has_internal_sorter()
    overridden = a.key_by(0).window(assigner).trigger(CountTrigger.of(2)).reduce(lambda x, y: x)
    assert not overridden.get_transformation().get_is_output_on_eof()
    tumbling = a.key_by(0).window(TumblingEventTimeWindows.of(10)).reduce(lambda x, y: x)
    assert not tumbling.get_transformation().get_is_output_on_eof()


# -- the builder chain ------------------------------------------------------------------------------
@pytest.mark.parametrize("key1,key2", [(0, 0), (lambda r: r[0], lambda r: r[0])])
def test_co_group_appends_one_co_group_transformation_over_both_keyed_inputs(key1: Any, key2: Any) -> None:
    _env, a, b = two_streams()
    grouped = a.co_group(b)
    assert isinstance(grouped, CoGroupedStreams)
    result = grouped.where(key1).equal_to(key2).window(EndOfStreamWindows.get()).apply(
        lambda first, second: [(len(first), len(second))])
    transformation = result.get_transformation()
    assert isinstance(transformation, CoGroupTransformation)
    assert transformation.kind == "co_group" and not transformation.vectorized
    assert [t.name for t in transformation.inputs] == ["KeyBy", "KeyBy"]
    assert [t.inputs[0] for t in transformation.inputs] == [a.get_transformation(), b.get_transformation()]
    assert [selector((7, "x")) for selector in transformation.key_selectors] == [7, 7]
    assert isinstance(transformation.function, CoGroupFunction)
    assert transformation.name == "CoGroup(EndOfStreamWindows(), EndOfStreamTrigger(), lambda)"
    attributes = transformation.get_operator_attributes()
    assert attributes.is_output_on_eof() and attributes.has_internal_sorter()


def test_key_selectors_may_be_field_names_of_dicts_and_rows() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    a = env.from_collection([{"id": 1}])
    b = env.from_collection([Row(id=1, name="x")])
    result = a.co_group(b).where("id").equal_to("id").window(EndOfStreamWindows.get()).apply(
        lambda f, s: ())
    first, second = result.get_transformation().key_selectors
    assert first({"id": 4}) == 4 and second(Row(id=5, name="y")) == 5


def test_join_wraps_its_function_in_the_nested_loop_and_shares_the_transformation() -> None:
    _env, a, b = two_streams()
    joined = a.join(b)
    assert isinstance(joined, JoinedStreams)
    result = joined.where(0).equal_to(0).window(TumblingEventTimeWindows.of(5)).apply(lambda x, y: (x, y))
    transformation = result.get_transformation()
    assert isinstance(transformation, CoGroupTransformation) and transformation.kind == "join"
    assert isinstance(transformation.function, JoinCoGroupFunction)
    assert isinstance(transformation.function.join_function, JoinFunction)
    assert transformation.name.startswith("Join(TumblingEventTimeWindows(5), EventTimeTrigger()")
    assert not transformation.get_is_output_on_eof()
    assert transformation.get_has_internal_sorter()
    assert list(transformation.function.co_group([1, 2], [10])) == [(1, 10), (2, 10)]
    assert list(transformation.function.co_group([1, 2], [])) == []


def test_a_generator_function_joins_as_a_flat_join() -> None:
    _env, a, b = two_streams()

    def explode(x: Any, y: Any) -> Any:
        yield x
        yield y

    result = a.join(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(explode)
    function = result.get_transformation().function
    assert isinstance(function.join_function, FlatJoinFunction)
    assert list(function.co_group(["a"], ["b", "c"])) == ["a", "b", "a", "c"]


def test_window_options_reach_the_transformation() -> None:
    _env, a, b = two_streams()
    trigger, evictor = CountTrigger.of(3), CountEvictor.of(2)
    result = (a.co_group(b).where(0).equal_to(0).window(GlobalWindows.create())
              .trigger(trigger).evictor(evictor).allowed_lateness(7).apply(lambda f, s: ()))
    transformation = result.get_transformation()
    assert transformation.trigger is trigger and transformation.evictor is evictor
    assert transformation.allowed_lateness == 7
    assert "CountEvictor(2)" in transformation.name


class Frames(VectorizedCoGroupFunction):
    def co_group(self, first: Any, second: Any) -> Any:
        return first


def test_the_vectorised_form_is_a_class_or_a_callable_with_vectorized_true() -> None:
    _env, a, b = two_streams()
    window = a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get())
    assert window.apply(Frames()).get_transformation().vectorized
    by_flag = window.apply(lambda first, second: first, vectorized=True).get_transformation()
    assert by_flag.vectorized and isinstance(by_flag.function, VectorizedCoGroupFunction)
    assert by_flag.input_types == [a.get_type(), b.get_type()]


# -- refusals ---------------------------------------------------------------------------------------
def test_cross_scope_co_group_and_join_are_refused() -> None:
    _env, a, b = two_streams()
    b.get_transformation().scope = StreamScope().nest()
    with pytest.raises(InvalidProgramError, match="cannot co_group streams of different loop scopes"):
        a.co_group(b)
    with pytest.raises(InvalidProgramError, match="cannot join streams of different loop scopes"):
        a.join(b)


def test_streams_of_another_environment_are_refused() -> None:
    _, a, _ = two_streams()
    _, _, other = two_streams()
    with pytest.raises(InvalidProgramError, match="different environments"):
        a.co_group(other)


@pytest.mark.parametrize("build,message", [
    (lambda a, b: a.co_group([1, 2]), "DataStream.co_group expects a DataStream"),
    (lambda a, b: a.join("b"), "DataStream.join expects a DataStream"),
    (lambda a, b: a.co_group(b).where(1.5), "CoGroupedStreams.where expects a KeySelector"),
    (lambda a, b: a.join(b).where(0).equal_to(None), "JoinedStreams.equal_to expects a KeySelector"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window("tumbling"), "expects a WindowAssigner"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).trigger(3),
     "CoGroupedStreams.trigger expects a Trigger"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EventTimeSessionWindows.with_gap(5))
     .trigger(CountTrigger.of(2)).trigger(_NonMerging()), "cannot merge windows"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).evictor("x"),
     "expects an Evictor"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).allowed_lateness(-1),
     "must not be negative"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(lambda x: x),
     "must accept 2 positional argument"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(_AMap()),
     "expects a CoGroupFunction or a callable, got a _AMap"),
    (lambda a, b: a.co_group(b).where(0).equal_to(0).window(EndOfStreamWindows.get())
     .apply(_ACoGroup(), vectorized=True), "vectorized=True\\) expects a VectorizedCoGroupFunction"),
    (lambda a, b: a.join(b).where(0).equal_to(0).window(EndOfStreamWindows.get())
     .apply(lambda x, y: x, vectorized=True), "JoinedStreams.apply has no vectorised form"),
    (lambda a, b: a.join(b).where(0).equal_to(0).window(EndOfStreamWindows.get()).apply(42),
     "expects a JoinFunction or a callable"),
])
def test_misuse_fails_at_once_naming_the_call(build: Any, message: str) -> None:
    env, a, b = two_streams()
    before = len(env._transformations)
    with pytest.raises(InvalidProgramError, match=message):
        build(a, b)
    assert not any(isinstance(t, (CoGroupTransformation, WindowTransformation))
                   for t in env._transformations[before:])


class _NonMerging(CountTrigger):
    def __init__(self) -> None:
        super().__init__(1)

    def can_merge(self) -> bool:
        return False


class _AMap(MapFunction):
    def map(self, value: Any) -> Any:
        return value


class _ACoGroup(CoGroupFunction):
    def co_group(self, first: Any, second: Any) -> Any:
        return ()

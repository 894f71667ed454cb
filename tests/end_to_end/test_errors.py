"""Errors end to end: a failing user function stops the job with a ``UserFunctionError``
naming operator, uid, subtask and record (``from`` the original exception); misuse while
building the graph fails at once with ``InvalidProgramError``."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from slipstream.datastream import (
    CoFlatMapFunction,
    CoMapFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from slipstream.datastream.connectors.errors import SourceFormatError
from slipstream.errors import InvalidProgramError, SlipstreamError, UserFunctionError

# The offending record sits in the second half, so with parallelism 2 it is read (and,
# through forward chains, processed) by subtask 2 of 2.
DATA = list(range(10))
BAD = 7


class Boom(Exception):
    pass


pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING),
              pytest.mark.configure(batch_size=2, channel_capacity=2)]


def fail_on_bad(value: Any) -> Any:
    if value == BAD or value == (BAD, BAD):
        raise Boom(f"cannot handle {value!r}")
    return value


def run_and_catch(stream: Any) -> UserFunctionError:
    with pytest.raises(UserFunctionError) as info:
        list(stream.execute_and_collect())
    return info.value


def assert_names(error: UserFunctionError, operator: str, subtask: str, record: Any,
                 uid: str | None = None) -> None:
    message = str(error)
    assert f"operator '{operator}'" in message
    assert subtask in message
    assert repr(record) in message
    if uid is not None:
        assert f"uid '{uid}'" in message
    assert isinstance(error.__cause__, Boom)
    assert error.record == record


class FailingProcess(ProcessFunction):
    def process_element(self, value: int, ctx: ProcessFunction.Context) -> Iterator[int]:
        yield fail_on_bad(value)


class FailingFlatMap(FlatMapFunction):
    def flat_map(self, value: int) -> Iterator[int]:
        yield value
        yield fail_on_bad(value)


BUILDERS = {
    "map": lambda s: s.map(fail_on_bad),
    "flat_map": lambda s: s.flat_map(FailingFlatMap()),
    "flat_map_callable": lambda s: s.flat_map(lambda v: [fail_on_bad(v)]),
    "filter": lambda s: s.filter(lambda v: fail_on_bad(v) is not None),
    "process": lambda s: s.process(FailingProcess()),
}


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.seeds(0, 5)
@pytest.mark.parallelisms(2)
def test_user_function_error_names_operator_uid_subtask_and_record(
        env: StreamExecutionEnvironment, kind: str) -> None:
    stream = BUILDERS[kind](env.from_collection(DATA)).name(f"my {kind}").uid(f"{kind}-uid")
    error = run_and_catch(stream)
    assert_names(error, f"my {kind}", "subtask 2/2", BAD, uid=f"{kind}-uid")
    assert error.operator_name == f"my {kind}" and error.uid == f"{kind}-uid"
    assert error.subtask_index == 1


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_default_operator_name(env: StreamExecutionEnvironment) -> None:
    error = run_and_catch(env.from_collection(DATA).map(fail_on_bad))
    assert_names(error, "Map", "subtask 1/1", BAD)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_the_cause_is_the_very_exception_raised(env: StreamExecutionEnvironment) -> None:
    raised: list[BaseException] = []

    def fail(value: int) -> int:
        if value == BAD:
            exc = Boom("the one")
            raised.append(exc)
            raise exc
        return value

    error = run_and_catch(env.from_collection(DATA).map(fail))
    assert error.__cause__ is raised[0]


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_reduce_error_names_the_incoming_record(env: StreamExecutionEnvironment) -> None:
    data = [(i % 3, i) for i in range(12)]

    def reduce(a: tuple, b: tuple) -> tuple:
        if b[1] == 10:
            raise Boom("no tens")
        return (a[0], a[1] + b[1])

    error = run_and_catch(env.from_collection(data).key_by(lambda r: r[0]).reduce(reduce)
                          .name("summing").uid("sum-uid"))
    assert_names(error, "summing", "subtask 1/1", (1, 10), uid="sum-uid")


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_reduce_returning_none_fails_instead_of_restarting_the_key(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([1, 2, 3]).key_by(lambda x: 0).reduce(lambda a, b: None)
    with pytest.raises(UserFunctionError) as info:
        list(stream.execute_and_collect())
    assert "returned None" in str(info.value) and "record 2" in str(info.value)


@pytest.mark.parallelisms(1, 2)
@pytest.mark.seeds(0)
@pytest.mark.workers(1, 2)
def test_sink_function_error_names_the_sink_and_record(env: StreamExecutionEnvironment) -> None:
    parallelism = env.get_parallelism()

    def explode(value: int) -> None:
        fail_on_bad(value)

    env.from_collection(DATA).add_sink(explode).name("my sink").uid("sink-uid")
    with pytest.raises(UserFunctionError) as info:
        env.execute()
    assert_names(info.value, "my sink", f"subtask {parallelism}/{parallelism}", BAD, uid="sink-uid")


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(0)
def test_key_selector_error_names_the_record(env: StreamExecutionEnvironment) -> None:
    data = [(i, i) for i in range(10)]
    stream = env.from_collection(data).key_by(
        lambda r: fail_on_bad(r)[0]).reduce(lambda a, b: a).name("after key")
    error = run_and_catch(stream)
    message = str(error)
    assert repr((BAD, BAD)) in message
    assert "after key" in message
    assert isinstance(error.__cause__, Boom)


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.parametrize("downstream", ["reduce", "process", "map"])
@pytest.mark.seeds(0)
def test_unhashable_key_names_the_record(env: StreamExecutionEnvironment, downstream: str) -> None:
    data = [(i, "x") for i in range(10)]
    keyed = env.from_collection(data).key_by(
        lambda r: [r[0]] if r[0] == BAD else r[0])

    class Echo(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
            yield value

    stream = {"reduce": lambda: keyed.reduce(lambda a, b: a),
              "process": lambda: keyed.process(Echo()),
              "map": lambda: keyed.map(lambda v: v)}[downstream]()
    error = run_and_catch(stream)
    assert repr((BAD, "x")) in str(error)
    assert "unhashable" in str(error) or "hashable" in str(error)
    assert isinstance(error.__cause__, TypeError)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_open_error_is_a_user_function_error(env: StreamExecutionEnvironment) -> None:
    class BadOpen(ProcessFunction):
        def open(self, runtime_context: Any) -> None:
            raise Boom("cannot open")

        def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
            yield value

    error = run_and_catch(env.from_collection(DATA).process(BadOpen()).name("opener"))
    assert "opener" in str(error) and "open()" in str(error)
    assert isinstance(error.__cause__, Boom)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_process_function_must_yield(env: StreamExecutionEnvironment) -> None:
    class ReturnsInt(ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            return 42

    error = run_and_catch(env.from_collection(DATA).process(ReturnsInt()))
    assert "yield" in str(error) and "42" in str(error)


def test_every_runtime_error_is_a_slipstream_error() -> None:
    assert issubclass(UserFunctionError, SlipstreamError)
    assert issubclass(InvalidProgramError, SlipstreamError)


# -- graph-time errors ---------------------------------------------------------------------------------
class NotAProcessFunction:
    def process_element(self, value: Any, ctx: Any) -> Any:
        return [value]


def graph_misuse() -> dict[str, Any]:
    def build(fn: Any) -> Any:
        return fn

    return {
        "map with a 2-argument lambda": lambda s, env: s.map(lambda a, b: a),
        "map with a non-callable": lambda s, env: s.map(42),
        "flat_map with a 0-argument function": lambda s, env: s.flat_map(lambda: []),
        "filter with a string": lambda s, env: s.filter("x > 1"),
        "key_by a float": lambda s, env: s.key_by(3.5),
        "key_by None": lambda s, env: s.key_by(None),
        "key_by a class": lambda s, env: s.key_by(int),
        "process with a lambda": lambda s, env: s.process(lambda v, ctx: [v]),
        "process with a look-alike": lambda s, env: s.process(NotAProcessFunction()),
        "unkeyed process with a KeyedProcessFunction": lambda s, env: s.process(
            type("K", (KeyedProcessFunction,), {"process_element": lambda self, v, c: [v]})()),
        "reduce with a 1-argument lambda": lambda s, env: s.key_by(lambda v: v).reduce(lambda a: a),
        "sum of a float field": lambda s, env: s.key_by(lambda v: v).sum(1.5),
        "union with a list": lambda s, env: s.union([1, 2]),
        "connect with a list": lambda s, env: s.connect([1, 2]),
        "co-map with a lambda": lambda s, env: s.connect(s).map(lambda v: v),
        "co-map with a CoMap on keyed/unkeyed mix": lambda s, env: type(s.connect(s))(
            s.key_by(lambda v: v), s).map(type("M", (CoMapFunction,), {
                "map1": lambda self, v: v, "map2": lambda self, v: v})()),
        "partition_custom with a 1-argument partitioner": lambda s, env: s.partition_custom(
            lambda k: 0, lambda v: v),
        "get_side_output with a string": lambda s, env: s.get_side_output("late"),
        "set_parallelism 0": lambda s, env: s.map(lambda v: v).set_parallelism(0),
        "set_parallelism on a keyed stream": lambda s, env: s.key_by(lambda v: v).set_parallelism(2),
        "empty name": lambda s, env: s.map(lambda v: v).name(""),
        "duplicate uid": lambda s, env: (s.map(lambda v: v).uid("same"), s.map(lambda v: v).uid("same")),
        "union across environments": lambda s, env: s.union(
            StreamExecutionEnvironment.get_execution_environment().from_collection([1])),
        "sink_to a non-sink": lambda s, env: s.sink_to(print),
        "add_sink with a non-callable": lambda s, env: s.add_sink(42),
        "assign_timestamps with a lambda": lambda s, env: s.assign_timestamps_and_watermarks(lambda v: 0),
        "from_collection of a string": lambda s, env: env.from_collection("abc"),
        "from_source with a list": lambda s, env: env.from_source([1, 2], None, "x"),
        "execute_and_collect with a negative limit": lambda s, env: s.execute_and_collect(limit=-1),
        "OutputTag without an id": lambda s, env: OutputTag(""),
        "env parallelism 0": lambda s, env: env.set_parallelism(0),
        "configure a zero batch size": lambda s, env: env.configure(batch_size=0),
    }


@pytest.mark.parametrize("case", sorted(graph_misuse()))
@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_graph_building_misuse_fails_at_once(env: StreamExecutionEnvironment, case: str) -> None:
    stream = env.from_collection([1, 2, 3])
    with pytest.raises((InvalidProgramError, ValueError)) as info:
        graph_misuse()[case](stream, env)
    assert isinstance(info.value, InvalidProgramError) or case == "OutputTag without an id"


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_job_without_a_sink_is_refused_on_execute(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1, 2, 3]).map(lambda v: v)
    with pytest.raises(InvalidProgramError, match="no sink"):
        env.execute()


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_an_empty_job_is_refused_on_execute(env: StreamExecutionEnvironment) -> None:
    with pytest.raises(InvalidProgramError):
        env.execute()


def test_a_user_error_crosses_a_process_boundary_with_its_cause_and_fields() -> None:
    """A worker process's failure reaches the driver pickled: the cause and the fields the message
    names come along (pickle keeps neither ``__cause__`` nor what ``__init__`` alone sets)."""
    error = UserFunctionError("my map", 1, 2, BAD, Boom(f"cannot handle {BAD}"), uid="map-uid")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.uid, copy.record) == (str(error), "map-uid", BAD)
    assert isinstance(copy.__cause__, Boom) and str(copy.__cause__) == f"cannot handle {BAD}"
    bad_line = SourceFormatError("in/people.csv", 3, 35, "a value of type Double", "high", field="'score'")
    copy_of_line = pickle.loads(pickle.dumps(bad_line))
    assert (str(copy_of_line), copy_of_line.path, copy_of_line.line_number, copy_of_line.field) == \
        (str(bad_line), "in/people.csv", 3, "'score'")


def test_a_flat_map_that_returns_none_fails_naming_the_operator_and_record(env) -> None:
    """As PyFlink's (which fails iterating it): a flat_map function without a return would lose its
    record's output silently; a connected stream's flat_map1/flat_map2 likewise."""
    def forgets_to_return(x):
        [x, x]  # noqa: B018 - the mistake under test

    env.from_collection([1, 2]).flat_map(forgets_to_return).name("twice").add_sink(lambda _: None)
    with pytest.raises(UserFunctionError, match=r"operator 'twice'.*failed on record [12]: TypeError: a flat_map "
                                                r"function must return or yield its outputs"):
        env.execute()


def test_a_co_flat_map_that_returns_none_fails_too(env) -> None:
    class Half(CoFlatMapFunction):
        def flat_map1(self, value):
            return [value]

        def flat_map2(self, value):
            return None

    first, second = env.from_collection([1]), env.from_collection(["a"])
    first.connect(second).flat_map(Half()).add_sink(lambda _: None)
    with pytest.raises(UserFunctionError, match=r"failed on record 'a': TypeError: a flat_map function must return"):
        env.execute()


def test_a_key_field_a_record_lacks_is_named_with_the_call_that_chose_it(env) -> None:
    """``key_by(42)`` on numbers: whichever operator reads the key names it, with its record."""
    env.from_collection([1, 2]).key_by(42).map(lambda x: x).add_sink(lambda _: None)
    with pytest.raises(UserFunctionError, match=r"DataStream\.key_by\(42\): a scalar record has only field 0"):
        env.execute()


def test_a_timer_on_a_stream_without_keys_fails_naming_operator_and_record(env) -> None:
    class Remind(ProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service().register_event_time_timer(10)
            yield value

    env.from_collection([7]).process(Remind()).name("remind").add_sink(lambda _: None)
    with pytest.raises(UserFunctionError, match=r"operator 'remind'.*failed on record 7: RuntimeError: timers can "
                                                r"only be used on a keyed stream"):
        env.execute()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_key_that_is_a_list_fails_saying_keys_must_be_hashable(parallelism: int) -> None:
    """PyFlink pickles keys, so a list works there; here keys are hashed, and the error says what to
    return instead, in STREAMING mode too (where a bare "unhashable type" came from a dict lookup)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.from_collection([(1, 2)]).key_by(lambda x: [x[0]]).reduce(lambda a, b: a).add_sink(lambda _: None)
    with pytest.raises(UserFunctionError, match=r"the key \[1\] is not hashable: a key selector must return a "
                                                r"hashable value \(a tuple rather than a list\)"):
        env.execute()

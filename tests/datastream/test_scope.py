"""StreamScope (FLIP-15) and the loop API's graph building: scopes of loop parts, and refusals."""

from __future__ import annotations

import itertools

import pytest

from slipstream.datastream import (
    CoLoopFunction,
    CoMapFunction,
    LoopFunction,
    StreamExecutionEnvironment,
    StreamScope,
)
from slipstream.datastream.scope import ROOT_SCOPE
from slipstream.datastream.transformations import (
    FeedbackTailTransformation,
    LoopExitTransformation,
    LoopHeadTransformation,
)
from slipstream.datastream.window import EndOfStreamWindows
from slipstream.errors import InvalidProgramError


# -- the scope type -----------------------------------------------------------------------------------
def test_every_nest_creates_a_unique_context() -> None:
    scopes = [ROOT_SCOPE.nest() for _ in range(50)]
    assert len(set(scopes)) == 50
    inner = scopes[0].nest()
    assert inner != scopes[0].nest()
    assert all(s.get_level() == 1 for s in scopes)


def test_levels_count_the_nesting_and_unnest_goes_back() -> None:
    a = ROOT_SCOPE.nest()
    b = a.nest()
    c = b.nest()
    assert [s.get_level() for s in (ROOT_SCOPE, a, b, c)] == [0, 1, 2, 3]
    assert c.unnest() == b and b.unnest() == a and a.unnest() == ROOT_SCOPE
    with pytest.raises(ValueError, match="root scope has no outer scope"):
        ROOT_SCOPE.unnest()


def test_inner_and_outer_follow_the_context_path_not_the_level() -> None:
    a = ROOT_SCOPE.nest()
    b = a.nest()
    c = b.nest()
    sibling = a.nest()
    stranger = ROOT_SCOPE.nest().nest()
    assert c.is_inner_of(b) and c.is_inner_of(a) and c.is_inner_of(ROOT_SCOPE)
    assert a.is_outer_of(c) and ROOT_SCOPE.is_outer_of(a)
    assert not b.is_inner_of(b) and not b.is_outer_of(b)          # strict
    assert not sibling.is_inner_of(b) and not b.is_inner_of(sibling)
    assert not stranger.is_inner_of(a)                              # same level, other path
    assert not a.is_inner_of(c) and not c.is_outer_of(a)


def test_context_for_level_walks_outwards() -> None:
    a = ROOT_SCOPE.nest()
    c = a.nest().nest()
    assert c.get_context_for_level(0) == ROOT_SCOPE
    assert c.get_context_for_level(1) == a
    assert c.get_context_for_level(3) == c
    with pytest.raises(ValueError, match="has no level 4"):
        c.get_context_for_level(4)
    with pytest.raises(ValueError):
        c.get_context_for_level(-1)


def test_scopes_are_equal_by_path_and_hashable() -> None:
    a = ROOT_SCOPE.nest()
    assert StreamScope(a.contexts) == a and hash(StreamScope(a.contexts)) == hash(a)
    assert StreamScope() == ROOT_SCOPE
    assert str(ROOT_SCOPE) == "root" and str(a).startswith("root/")


# -- scopes of what iterate builds ---------------------------------------------------------------------
def _env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


def _countdown(numbers):  # type: ignore[no-untyped-def]
    stepped = numbers.map(lambda n: n - 1)
    return stepped.filter(lambda n: n > 0), stepped.filter(lambda n: n <= 0)


def test_iterate_nests_a_scope_and_returns_to_the_callers() -> None:
    env = _env()
    source = env.from_collection([1, 2])
    seen = {}

    def body(numbers):  # type: ignore[no-untyped-def]
        seen["input"] = numbers.get_scope()
        return _countdown(numbers)

    result = source.iterate(body)
    inner = seen["input"]
    assert source.get_scope() == ROOT_SCOPE
    assert inner.get_level() == 1 and inner.is_inner_of(ROOT_SCOPE)
    assert result.get_scope() == ROOT_SCOPE
    kinds = {type(t): t for t in env._transformations}
    head, tail, exit_ = kinds[LoopHeadTransformation], kinds[FeedbackTailTransformation], kinds[LoopExitTransformation]
    assert head.scope == tail.scope == inner and exit_.scope == ROOT_SCOPE
    assert head.feedback is tail and tail.head is head and exit_ is result.get_transformation()


def test_nested_loops_nest_scopes_to_any_depth() -> None:
    env = _env()
    scopes = []

    def nest(depth):  # type: ignore[no-untyped-def]
        def body(numbers):  # type: ignore[no-untyped-def]
            scopes.append(numbers.get_scope())
            if depth > 1:
                numbers = numbers.iterate(nest(depth - 1))
            return _countdown(numbers)
        return body

    result = env.from_collection([3]).iterate(nest(4))
    assert [s.get_level() for s in scopes] == [1, 2, 3, 4]
    for outer, inner in itertools.pairwise(scopes):
        assert inner.is_inner_of(outer) and inner.unnest() == outer
    assert result.get_scope() == ROOT_SCOPE


def test_loops_in_sequence_get_sibling_scopes() -> None:
    env = _env()
    scopes = []

    def body(numbers):  # type: ignore[no-untyped-def]
        scopes.append(numbers.get_scope())
        return _countdown(numbers)

    env.from_collection([3]).iterate(body).map(lambda n: n + 2).iterate(body)
    first, second = scopes
    assert first != second and first.get_level() == second.get_level() == 1
    assert not first.is_inner_of(second) and not second.is_inner_of(first)


def test_loop_and_co_loop_function_classes_are_accepted() -> None:
    class Countdown(LoopFunction):
        def loop(self, input_stream):  # type: ignore[no-untyped-def]
            return _countdown(input_stream)

    class Tagged(CoMapFunction):
        def map1(self, value):  # type: ignore[no-untyped-def]
            return value

        def map2(self, value):  # type: ignore[no-untyped-def]
            return int(value)

    class CoCountdown(CoLoopFunction):
        def co_loop(self, connected_streams):  # type: ignore[no-untyped-def]
            assert connected_streams.stream1.get_scope() == connected_streams.stream2.get_scope()
            stepped = connected_streams.map(Tagged()).map(lambda n: n - 1)
            return stepped.filter(lambda n: n > 0).map(str), stepped.filter(lambda n: n <= 0)

    env = _env()
    assert env.from_collection([1]).iterate(Countdown()).get_scope() == ROOT_SCOPE
    assert env.from_collection([1]).iterate_with_feedback(CoCountdown(), feedback_type=str).get_scope() == ROOT_SCOPE


def test_no_timeout_parameter_exists() -> None:
    import inspect

    from slipstream.datastream import DataStream
    for method in (DataStream.iterate, DataStream.iterate_with_feedback):
        assert not any("timeout" in name for name in inspect.signature(method).parameters)


# -- refusals: binary operations across scopes ---------------------------------------------------------
def _inside_and_outside(operation):  # type: ignore[no-untyped-def]
    """Run ``operation(body_stream, outside_stream)`` inside a loop body."""
    env = _env()
    outside = env.from_collection([1]).name("Outside")

    def body(numbers):  # type: ignore[no-untyped-def]
        operation(numbers.map(lambda n: n).name("Inside"), outside)
        return _countdown(numbers)

    env.from_collection([2]).iterate(body)


@pytest.mark.parametrize("what,operation", [
    ("union", lambda inside, outside: inside.union(outside)),
    ("union", lambda inside, outside: outside.union(inside)),
    ("connect", lambda inside, outside: inside.connect(outside)),
    ("connect", lambda inside, outside: outside.connect(inside)),
    ("co_group", lambda inside, outside: inside.co_group(outside)),
    ("join", lambda inside, outside: outside.join(inside)),
])
def test_binary_operations_across_scopes_are_refused_naming_both_scopes(what, operation) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidProgramError, match=f"cannot {what} streams of different loop scopes") as error:
        _inside_and_outside(operation)
    message = str(error.value)
    assert "'Inside' in scope root/" in message and "'Outside' in scope root" in message


def test_a_stream_of_a_closed_loop_cannot_meet_the_stream_after_it() -> None:
    env = _env()
    kept = {}

    def body(numbers):  # type: ignore[no-untyped-def]
        kept["inner"] = numbers.map(lambda n: n).name("Inner")
        return _countdown(numbers)

    result = env.from_collection([2]).iterate(body)
    with pytest.raises(InvalidProgramError, match="different loop scopes"):
        result.union(kept["inner"])


def test_sibling_loops_cannot_meet_inside() -> None:
    env = _env()
    kept = {}

    def first(numbers):  # type: ignore[no-untyped-def]
        kept["first"] = numbers
        return _countdown(numbers)

    def second(numbers):  # type: ignore[no-untyped-def]
        numbers.connect(kept["first"])
        return _countdown(numbers)

    env.from_collection([2]).iterate(first)
    with pytest.raises(InvalidProgramError, match="cannot connect streams of different loop scopes"):
        env.from_collection([2]).iterate(second)


def test_co_group_inside_one_loop_is_allowed() -> None:
    env = _env()

    def body(numbers):  # type: ignore[no-untyped-def]
        other = numbers.map(lambda n: n)
        numbers.co_group(other).where(lambda n: n).equal_to(lambda n: n).window(EndOfStreamWindows.get())
        numbers.union(other)
        numbers.connect(other)
        return _countdown(numbers)

    env.from_collection([2]).iterate(body)


# -- refusals: what a loop function returns --------------------------------------------------------------
@pytest.mark.parametrize("returned,message", [
    (lambda numbers: numbers, "must return a tuple \\(feedback_stream, output_stream\\)"),
    (lambda numbers: (numbers,), "must return a tuple"),
    (lambda numbers: (numbers, numbers, numbers), "must return a tuple"),
    (lambda numbers: (numbers, 3), "must return a tuple"),
    (lambda numbers: None, "got None"),
])
def test_a_loop_function_must_return_two_streams(returned, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidProgramError, match=message):
        _env().from_collection([1]).iterate(returned)


def test_feedback_and_output_must_be_built_inside_the_loop() -> None:
    env = _env()
    outside = env.from_collection([1]).name("Outside")
    with pytest.raises(InvalidProgramError, match="the feedback stream 'Outside'.*scope root, but a loop's "
                                                  "feedback must be built inside the loop body"):
        env.from_collection([1]).iterate(lambda numbers: (outside, numbers))
    with pytest.raises(InvalidProgramError, match="the output stream 'Outside'"):
        env.from_collection([1]).iterate(lambda numbers: (numbers, outside))


def test_an_inner_loops_stream_is_not_the_outer_loops_feedback() -> None:
    env = _env()
    kept = {}

    def inner(numbers):  # type: ignore[no-untyped-def]
        kept["inner"] = numbers.map(lambda n: n).name("Deep")
        return _countdown(numbers)

    def outer(numbers):  # type: ignore[no-untyped-def]
        out = numbers.iterate(inner)
        return kept["inner"], out

    with pytest.raises(InvalidProgramError, match="the feedback stream 'Deep' .* is in scope root/\\d+/\\d+"):
        env.from_collection([1]).iterate(outer)


def test_feedback_from_another_environment_is_refused() -> None:
    foreign = _env().from_collection([1])
    with pytest.raises(InvalidProgramError, match="different environments"):
        _env().from_collection([1]).iterate(lambda numbers: (foreign, numbers))


@pytest.mark.parametrize("loop_fn", [3, "body", None, LoopFunction, CoMapFunction])
def test_iterate_needs_a_loop_function_or_a_callable(loop_fn) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidProgramError, match="DataStream.iterate expects a LoopFunction or a callable"):
        _env().from_collection([1]).iterate(loop_fn)


def test_iterate_with_feedback_needs_a_co_loop_function() -> None:
    class Countdown(LoopFunction):
        def loop(self, input_stream):  # type: ignore[no-untyped-def]
            return _countdown(input_stream)

    with pytest.raises(InvalidProgramError, match="expects a CoLoopFunction or a callable, got a Countdown"):
        _env().from_collection([1]).iterate_with_feedback(Countdown())


def test_feedback_at_another_parallelism_is_refused_at_planning() -> None:
    env = _env().set_parallelism(2)

    def body(numbers):  # type: ignore[no-untyped-def]
        feedback, out = _countdown(numbers)
        return feedback, out

    env.from_collection([1]).set_parallelism(2).iterate(body).print()
    tail = next(t for t in env._transformations if isinstance(t, FeedbackTailTransformation))
    tail.parallelism = 1
    with pytest.raises(InvalidProgramError, match="a loop's feedback keeps its head's parallelism"):
        env.explain()


def test_an_end_of_input_operator_feeding_a_loop_is_refused() -> None:
    env = _env()

    def body(numbers):  # type: ignore[no-untyped-def]
        totals = numbers.key_by(lambda n: n % 2).window(EndOfStreamWindows.get()).reduce(lambda a, b: a + b)
        return totals.name("Totals").filter(lambda n: n > 100), numbers.filter(lambda n: n <= 100)

    env.from_collection([1, 2]).iterate(body).print()
    with pytest.raises(InvalidProgramError, match="operator 'Totals' emits only at the end of its input, but its "
                                                  "output goes round loop"):
        env.explain()


def test_an_end_of_input_operator_that_only_leaves_the_loop_is_fine() -> None:
    env = _env()

    def body(numbers):  # type: ignore[no-untyped-def]
        feedback, out = _countdown(numbers)
        totals = out.key_by(lambda n: n % 2).window(EndOfStreamWindows.get()).reduce(lambda a, b: a + b)
        return feedback, totals

    env.from_collection([1, 2]).iterate(body).print()
    assert "FEEDBACK" in env.explain()


def test_explain_shows_scopes_and_the_feedback_edge() -> None:
    env = _env()
    env.from_collection([1, 2]).iterate(lambda numbers: numbers.iterate(_countdown) and _countdown(numbers)).print()
    plan = env.explain()
    assert "input 1: FORWARD FEEDBACK" in plan
    assert "in loop scope root/" in plan and "(level 1)" in plan

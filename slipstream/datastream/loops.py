"""Scoped loops (FLIP-15): ``DataStream.iterate`` and ``DataStream.iterate_with_feedback``.

A loop is an explicit scope. ``iterate`` nests a new :class:`StreamScope` in the
caller's, and builds three transformations around the user's body:

* a **loop head** in the new scope, whose input 0 is the stream being iterated and
  whose input 1 is the loop's feedback edge;
* a **feedback tail** in the new scope, fed by the stream the loop function returned
  as feedback; its output is the FEEDBACK edge back to the head;
* a **loop exit** in the caller's scope, fed by the stream the loop function returned
  as output. The exit's stream is what ``iterate`` returns.

Everything the body builds from the stream it received inherits the loop's scope, so
a binary operation between a body stream and an outside stream is refused, and the
planner never chains across the head or the exit. Loops nest to any depth (a body
may ``iterate`` again) and may follow one another.

There is no timeout anywhere: the loop ends when the runtime's termination protocol
(:mod:`slipstream.runtime.termination`) finds that its input has ended and no record
is left anywhere in it; only then does end of input flow out through the exit.

Example — count down every number to zero, emitting each number once it reaches zero::

    def countdown(numbers):
        stepped = numbers.map(lambda n: n - 1)
        return stepped.filter(lambda n: n > 0), stepped.filter(lambda n: n <= 0)

    env.from_collection([3, 1, 2]).iterate(countdown).print()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from slipstream.datastream.feedback_scope import FeedbackScopeBuilder
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.transformations import (
    LoopHeadTransformation,
    SideOutputTransformation,
    Transformation,
)
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.data_stream import ConnectedStreams, DataStream

__all__ = ["CoLoopFunction", "LoopFunction", "iterate", "iterate_with_feedback"]


class LoopFunction(ABC):
    """The body of ``DataStream.iterate``: builds the loop from the stream it receives.

    ``loop(input_stream)`` returns ``(feedback_stream, output_stream)``: records of the
    first go round again (they reach ``input_stream`` once more), records of the second
    leave the loop. Both must be built from ``input_stream``. A plain callable of one
    argument works as well.
    """

    @abstractmethod
    def loop(self, input_stream: DataStream[Any]) -> tuple[DataStream[Any], DataStream[Any]]: ...


class CoLoopFunction(ABC):
    """The body of ``DataStream.iterate_with_feedback``.

    ``co_loop(connected_streams)`` receives the loop's input connected with its feedback
    (``connected_streams.stream1`` is the input, ``stream2`` what came back, possibly of
    another type) and returns ``(feedback_stream, output_stream)``. A plain callable of
    one argument works as well.
    """

    @abstractmethod
    def co_loop(self, connected_streams: ConnectedStreams) -> tuple[DataStream[Any], DataStream[Any]]: ...


def _body(fn: Any, cls: type, method: str, what: str) -> Callable[[Any], Any]:
    if isinstance(fn, cls):
        return cast("Callable[[Any], Any]", getattr(fn, method))
    if isinstance(fn, (LoopFunction, CoLoopFunction)):
        raise InvalidProgramError(f"{what} expects a {cls.__name__} or a callable, got a {type(fn).__name__}")
    if not callable(fn) or isinstance(fn, type):
        raise InvalidProgramError(f"{what} expects a {cls.__name__} or a callable, got {fn!r}")
    return cast("Callable[[Any], Any]", fn)


def _declared_parallelism(transformation: Transformation) -> int | None:
    """An operator's own parallelism; None (the planner decides) for a partitioning, union or side output."""
    return None if transformation.is_virtual else transformation.parallelism


def _open_loop(stream: DataStream[Any], what: str, fn: Any) -> tuple[FeedbackScopeBuilder, LoopHeadTransformation]:
    """A new loop nested in ``stream``'s scope, and its head, fed by ``stream``."""
    upstream = stream.get_transformation()
    builder = FeedbackScopeBuilder(
        stream.get_execution_environment(), upstream.scope, what, fn, closing="close a loop with",
        returned_rule="a loop's {role} must be built inside the loop body (scope {scope}) from the stream "
                      "the loop function received")
    head = builder.add_head(LoopHeadTransformation, f"Loop Head {builder.scope}", [upstream],
                            _declared_parallelism(upstream), output_type=stream.get_type())
    return builder, head


def _returned_streams(result: Any, builder: FeedbackScopeBuilder) -> tuple[DataStream[Any], DataStream[Any]]:
    """What the loop function returned: ``(feedback, output)``, both built in the loop."""
    from slipstream.datastream.data_stream import DataStream
    if not (isinstance(result, tuple) and len(result) == 2
            and all(isinstance(s, DataStream) for s in result)):
        raise InvalidProgramError(
            f"{builder.what}: the loop function {builder.body_name!r} must return a tuple "
            f"(feedback_stream, output_stream) of DataStreams, got {result!r}")
    feedback, output = result
    builder.check_returned("feedback", feedback)
    builder.check_returned("output", output)
    return feedback, output


def _close_loop(builder: FeedbackScopeBuilder, head: LoopHeadTransformation, result: Any) -> DataStream[Any]:
    """Check what the loop function returned, add the feedback tail and the exit."""
    feedback, output = _returned_streams(result, builder)
    builder.close_feedback(head, feedback, f"Feedback Tail {builder.scope}", feedback.get_type())
    return builder.add_exit(output, f"Loop Exit {builder.scope}", _declared_parallelism(output.get_transformation()))


def iterate(stream: DataStream[Any], loop_fn: LoopFunction | Callable[[DataStream[Any]], Any]) -> DataStream[Any]:
    """Build the loop ``loop_fn`` describes around ``stream``; see :meth:`DataStream.iterate`."""
    from slipstream.datastream.data_stream import DataStream
    what = "DataStream.iterate"
    body = _body(loop_fn, LoopFunction, "loop", what)
    builder, head = _open_loop(stream, what, loop_fn)
    result = body(DataStream(builder.env, head))
    return _close_loop(builder, head, result)


def iterate_with_feedback(stream: DataStream[Any],
                          co_loop_fn: CoLoopFunction | Callable[[ConnectedStreams], Any],
                          feedback_type: Any = None) -> DataStream[Any]:
    """Build a loop whose feedback may have another type; see :meth:`DataStream.iterate_with_feedback`."""
    from slipstream.datastream.data_stream import ConnectedStreams, DataStream
    what = "DataStream.iterate_with_feedback"
    body = _body(co_loop_fn, CoLoopFunction, "co_loop", what)
    builder, head = _open_loop(stream, what, co_loop_fn)
    env = builder.env
    tag = OutputTag(f"__slipstream_loop_feedback_{head.id}", feedback_type)
    head.feedback_tag = tag
    fed_back = env._add_transformation(SideOutputTransformation, f"Feedback {builder.scope}", [head],
                                       output_type=feedback_type, tag=tag)
    result = body(ConnectedStreams(DataStream(env, head), DataStream(env, fed_back)))
    return _close_loop(builder, head, result)

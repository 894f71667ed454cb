"""One builder for feedback scopes: FLIP-15 loops (:mod:`.loops`) and FLIP-176 iterations (:mod:`.iteration`).

Both open a scope nested in the caller's, let streams in through heads, run the user's
body on what the heads give, check that what the body returned was built inside the
scope, send each feedback stream back to its head through a tail, and let streams out
through exits into the caller's scope. :class:`FeedbackScopeBuilder` does these steps;
a loop or an iteration says which heads it needs, what goes round and what leaves.

The builder adds transformations in the order its callers ask, so the ids — and with
them the default uids that checkpoints are keyed by — stay what they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from slipstream.datastream.scope import StreamScope
from slipstream.datastream.transformations import (
    FeedbackTailTransformation,
    LoopExitTransformation,
    LoopHeadTransformation,
    Transformation,
)
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.data_stream import DataStream
    from slipstream.datastream.environment import StreamExecutionEnvironment

__all__ = ["FeedbackScopeBuilder", "callable_name"]

Head = TypeVar("Head", bound=LoopHeadTransformation)


def callable_name(fn: Any) -> str:
    """How errors name a user's body: its qualified name, ``lambda``, or its class's name."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return "lambda" if name == "<lambda>" else name


def added_by(env: StreamExecutionEnvironment, build: Callable[..., Any], *arguments: Any
             ) -> tuple[Any, list[Transformation]]:
    """Run ``build(*arguments)``: what it returned and the transformations it added to ``env``."""
    start = len(env._transformations)
    result = build(*arguments)
    return result, env._transformations[start:]


class FeedbackScopeBuilder:
    """Builds one loop or iteration: a scope nested in ``parent``, around the user's ``body``.

    ``what`` names the API call in errors; ``closing`` is the verb of the environment check on
    returned streams ("close a loop with"); ``returned_rule`` says, with ``{role}`` and ``{scope}``,
    where a returned stream must have been built.
    """

    def __init__(self, env: StreamExecutionEnvironment, parent: StreamScope, what: str, body: Any, *,
                 closing: str, returned_rule: str) -> None:
        self.env = env
        self.parent = parent
        self.scope = parent.nest()
        self.what = what
        self.body = body
        self._closing = closing
        self._returned_rule = returned_rule

    @property
    def body_name(self) -> str:
        return callable_name(self.body)

    def add_head(self, cls: type[Head], name: str, inputs: list[Transformation], parallelism: int | None,
                 output_type: Any = None, **fields: Any) -> Head:
        """A head in the new scope: where ``inputs`` (none, for a criteria head) enter it."""
        head = self.env._add_transformation(cls, name, inputs, output_type=output_type, **fields)
        head.scope = self.scope
        head.parallelism = parallelism
        return head

    def build_body(self, build: Callable[..., Any], *arguments: Any) -> tuple[Any, list[Transformation]]:
        """Run the user's body on the heads' streams: what it returned and what it added."""
        return added_by(self.env, build, *arguments)

    def check_returned(self, role: str, stream: DataStream[Any]) -> None:
        """A stream the body returned as ``role`` must be of this environment and built in the scope."""
        self.env._check_same_environment(stream, self._closing)
        if stream.get_scope() != self.scope:
            rule = self._returned_rule.format(role=role, scope=self.scope)
            raise InvalidProgramError(
                f"{self.what}: the {role} stream '{stream.get_name()}' returned by {self.body_name!r} is in "
                f"scope {stream.get_scope()}, but {rule}")

    def close_feedback(self, head: LoopHeadTransformation, stream: DataStream[Any], name: str,
                       output_type: Any = None) -> FeedbackTailTransformation:
        """The tail that sends ``stream`` back to ``head``, at the head's parallelism."""
        tail = self.env._add_transformation(FeedbackTailTransformation, name, [stream.get_transformation()],
                                            output_type=output_type, head=head)
        tail.parallelism = head.parallelism
        head.feedback = tail
        return tail

    def add_exit(self, stream: DataStream[Any], name: str, parallelism: int | None) -> DataStream[Any]:
        """Where ``stream`` leaves the scope, into the enclosing one: the stream the caller gets."""
        from slipstream.datastream.data_stream import DataStream
        exit_ = self.env._add_transformation(LoopExitTransformation, name, [stream.get_transformation()],
                                             output_type=stream.get_type())
        exit_.scope = self.parent
        exit_.parallelism = parallelism
        return DataStream(self.env, exit_)

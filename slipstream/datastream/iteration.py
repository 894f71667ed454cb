"""Iterations for algorithms (FLIP-176): the Flink ML iteration library, in Python.

An iteration runs a *body* over *variable streams* (the model: what goes round) and
*data streams* (the training data: what comes in), round after round::

    def body(variable_streams, data_streams):
        model, points = variable_streams.get(0), data_streams.get(0)
        updated = model.broadcast().connect(points).process(Step())      # Step is an IterationListener
        new_model = updated.key_by(lambda _: 0).process(Merge())
        return IterationBodyResult(DataStreamList.of(new_model),          # goes round again
                                   DataStreamList.of(new_model.get_side_output(FINAL)),  # leaves
                                   new_model.get_side_output(CONTINUE))  # termination criteria

    outputs = iterate_bounded_streams_until_termination(
        DataStreamList.of(initial_model), DataStreamList.of(points), body)
    outputs.get(0).print()

Seed names first, Flink ML's shipped names as the same functions: the module functions
``iterate_unbounded_streams``, ``iterate_bounded_streams_until_termination`` and
``iterate_and_replay_bounded_streams_until_termination``; and
``Iterations.iterate_bounded_streams_until_termination(init_variable_streams,
ReplayableDataStreamList.replay(...).and_not_replay(...), IterationConfig.new_builder()
.set_operator_life_cycle(OperatorLifeCycle.PER_ROUND).build(), body)``.

Semantics (see :class:`slipstream.runtime.termination.EpochProgress` for the mechanism):

* **Epochs.** Initial variable records and data records have epoch 1 — *the seed's
  numbering; Flink ML's first epoch is 0*, so a Flink ML listener that checks
  ``epoch_watermark + 1 < max_iter`` checks ``epoch_watermark < max_iter`` here. Data of an
  unbounded iteration has the maximum epoch (it never holds back an epoch watermark). A
  record an operator emits inherits the epoch of the record it processes (or the epoch
  watermark, when a listener emits it); through the feedback edge it goes round with
  epoch + 1, and waits at the head until round epoch + 1 starts — async bodies' records
  too, so no record runs ahead of its round. A replayed data stream is sent again at the
  start of every round N ≥ 2, with epoch N, once the epoch watermark N − 1 went round the
  whole body.
* **Epoch watermarks.** Every operator of the body has one: when it reaches N, every
  record of epoch ≤ N has arrived from every input and subtask (and, data of an unbounded
  iteration aside, none of a later epoch), and the operator's user functions that are
  :class:`IterationListener` get ``on_epoch_watermark_incremented(N, context, collector)``
  — exactly once per epoch, in order. Records the listener collects have epoch N. The
  last call gets the largest epoch of any record the body took in.
* **Termination** (bounded iterations, FLIP-176's rule): once all inputs ended, the
  iteration ends after the first round N in which no record went round through the
  feedback (no record of epoch N + 1 exists) or — when the body returned a
  termination-criteria stream — no record reached that stream; either suffices, so a
  criteria stream that keeps emitting does not outlive the feedback. The last epoch
  watermark is N. Then every body operator's listeners get
  ``on_iteration_terminated(context, collector)``, and the output streams end. An unbounded iteration never ends
  while an input is open; once all its inputs ended, it ends by the same rule (as Flink ML's).
* **Sync or async** is not a flag: an algorithm is synchronous when every path into the
  feedback emits only from ``on_epoch_watermark_incremented``, asynchronous otherwise.
* **Operator lifetime.** ``OperatorLifeCycle.ALL_ROUND`` (default): one instance for the
  whole iteration. ``PER_ROUND`` (and ``IterationBody.for_each_round``): a fresh instance
  every round, whose input ends with the round — so a window over ``EndOfStreamWindows``
  or another end-of-input operator emits once per round; with replayed data, each round's
  instance sees the whole data set. Since feedback waits at the head for its round, each
  round's instance gets exactly the records of its epoch, async algorithms included.
* **Feedback.** The head reads feedback before new input (``FeedbackReading.FEEDBACK_FIRST``,
  the default); with ``IterationConfig.new_builder().set_feedback_reading(
  FeedbackReading.FEEDBACK_FIRST_WHEN_FULL)`` (FLIP-15's option) it reads its inputs in turn
  and the feedback first only while the feedback channel's in-memory buffer is at its
  budget. Either way the body sees the same: the feedback waits at the head until its
  round starts. The feedback channel, and the feedback waiting at the head, are unbounded
  in records and spill to disk past ``channel_memory_budget`` records each.

* **Loops in a body.** A FLIP-15 loop (``DataStream.iterate``) may run inside a body: an
  epoch goes past the loop only once nothing of it goes round the loop any more (see
  :mod:`slipstream.runtime.termination`), so operators after the loop, and inside it,
  still see each epoch whole. An iteration nested in a body is not supported yet.

Graph-time checks (``InvalidProgramError``): as many feedback streams as variable
streams, feedback i at the parallelism of initial variable i, bounded inputs for the
bounded entry points, no source or sink inside the body, no stream from outside the body
used in it, no iteration nested in a body (not supported yet).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

from slipstream.datastream.feedback_scope import FeedbackScopeBuilder, added_by
from slipstream.datastream.scope import ROOT_SCOPE
from slipstream.datastream.transformations import (
    HeadRole,
    IterationHeadTransformation,
    SinkTransformation,
    SourceTransformation,
    Transformation,
    is_unbounded_source,
)
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.data_stream import DataStream

__all__ = [
    "DataStreamList", "FeedbackReading", "IterationBody", "IterationBodyResult", "IterationConfig", "IterationListener",
    "Iterations", "OperatorLifeCycle", "PerRoundSubBody", "ReplayableDataStreamList",
    "iterate_and_replay_bounded_streams_until_termination", "iterate_bounded_streams_until_termination",
    "iterate_unbounded_streams",
]


# -- lists of streams -----------------------------------------------------------------------------
class DataStreamList:
    """An ordered list of streams, as Flink ML's ``DataStreamList``."""

    def __init__(self, data_streams: Iterable[DataStream[Any]]) -> None:
        from slipstream.datastream.data_stream import DataStream
        streams = list(data_streams)
        for stream in streams:
            if not isinstance(stream, DataStream):
                raise InvalidProgramError(f"DataStreamList holds DataStreams, got {stream!r}")
        self._streams = streams

    @staticmethod
    def of(*streams: DataStream[Any]) -> DataStreamList:
        return DataStreamList(streams)

    def size(self) -> int:
        return len(self._streams)

    def get(self, index: int) -> DataStream[Any]:
        if not 0 <= index < len(self._streams):
            raise InvalidProgramError(f"DataStreamList of {len(self._streams)} stream(s) has no index {index}")
        return self._streams[index]

    def get_data_streams(self) -> list[DataStream[Any]]:
        return list(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

    def __iter__(self) -> Any:
        return iter(self._streams)

    def __repr__(self) -> str:
        return f"DataStreamList({', '.join(s.get_name() for s in self._streams)})"


class ReplayableDataStreamList:
    """Data streams, each replayed every round or not (Flink ML).

    ``ReplayableDataStreamList.replay(a).and_not_replay(b)`` or ``.not_replay(b).and_replay(a)``.
    The body receives the replayed streams first, then the others, each group in order.
    """

    def __init__(self, replayed: Sequence[DataStream[Any]] = (), non_replayed: Sequence[DataStream[Any]] = ()) -> None:
        self.replayed = list(DataStreamList(replayed))
        self.non_replayed = list(DataStreamList(non_replayed))

    @staticmethod
    def replay(*streams: DataStream[Any]) -> ReplayableDataStreamList:
        return ReplayableDataStreamList(streams, ())

    @staticmethod
    def not_replay(*streams: DataStream[Any]) -> ReplayableDataStreamList:
        return ReplayableDataStreamList((), streams)

    def and_not_replay(self, *streams: DataStream[Any]) -> ReplayableDataStreamList:
        return ReplayableDataStreamList(self.replayed, self.non_replayed + list(streams))

    def and_replay(self, *streams: DataStream[Any]) -> ReplayableDataStreamList:
        return ReplayableDataStreamList(self.replayed + list(streams), self.non_replayed)

    def get_replayed_data_streams(self) -> list[DataStream[Any]]:
        return list(self.replayed)

    def get_non_replayed_data_streams(self) -> list[DataStream[Any]]:
        return list(self.non_replayed)


# -- configuration ----------------------------------------------------------------------------------
class OperatorLifeCycle(Enum):
    """Whether a body's operators live for the whole iteration or are created afresh each round."""

    ALL_ROUND = "ALL_ROUND"
    PER_ROUND = "PER_ROUND"


class FeedbackReading(Enum):
    """When an iteration's heads read their feedback before their other input.

    ``FEEDBACK_FIRST`` (the default): whenever feedback is waiting. ``FEEDBACK_FIRST_WHEN_FULL``
    (FLIP-15's option): the head reads its inputs in turn, and the feedback first only while
    the feedback channel's in-memory buffer is at its budget (``channel_memory_budget``
    records), so new input is taken in sooner. What the body sees does not depend on it:
    the feedback waits at the head until its round starts either way.
    """

    FEEDBACK_FIRST = "FEEDBACK_FIRST"
    FEEDBACK_FIRST_WHEN_FULL = "FEEDBACK_FIRST_WHEN_FULL"


class IterationConfig:
    """How an iteration runs (Flink ML): ``IterationConfig.new_builder().set_operator_life_cycle(...)
    .set_feedback_reading(...).build()``."""

    def __init__(self, operator_life_cycle: OperatorLifeCycle = OperatorLifeCycle.ALL_ROUND,
                 feedback_reading: FeedbackReading = FeedbackReading.FEEDBACK_FIRST) -> None:
        if not isinstance(operator_life_cycle, OperatorLifeCycle):
            raise InvalidProgramError(f"operator life cycle must be an OperatorLifeCycle, got {operator_life_cycle!r}")
        if not isinstance(feedback_reading, FeedbackReading):
            raise InvalidProgramError(f"feedback reading must be a FeedbackReading, got {feedback_reading!r}")
        self._operator_life_cycle = operator_life_cycle
        self._feedback_reading = feedback_reading

    def get_operator_life_cycle(self) -> OperatorLifeCycle:
        return self._operator_life_cycle

    def get_feedback_reading(self) -> FeedbackReading:
        return self._feedback_reading

    @staticmethod
    def new_builder() -> IterationConfigBuilder:
        return IterationConfigBuilder()


class IterationConfigBuilder:
    def __init__(self) -> None:
        self._life_cycle = OperatorLifeCycle.ALL_ROUND
        self._feedback_reading = FeedbackReading.FEEDBACK_FIRST

    def set_operator_life_cycle(self, operator_life_cycle: OperatorLifeCycle) -> IterationConfigBuilder:
        if not isinstance(operator_life_cycle, OperatorLifeCycle):
            raise InvalidProgramError(
                f"set_operator_life_cycle expects an OperatorLifeCycle, got {operator_life_cycle!r}")
        self._life_cycle = operator_life_cycle
        return self

    def set_feedback_reading(self, feedback_reading: FeedbackReading) -> IterationConfigBuilder:
        """``FeedbackReading.FEEDBACK_FIRST`` (default) or ``FEEDBACK_FIRST_WHEN_FULL``."""
        if not isinstance(feedback_reading, FeedbackReading):
            raise InvalidProgramError(f"set_feedback_reading expects a FeedbackReading, got {feedback_reading!r}")
        self._feedback_reading = feedback_reading
        return self

    def build(self) -> IterationConfig:
        return IterationConfig(self._life_cycle, self._feedback_reading)


# -- the body ------------------------------------------------------------------------------------------
class IterationBodyResult:
    """What a body returns: the streams that go round (one per variable stream, same order), the
    streams that leave the iteration, and optionally the termination-criteria stream."""

    def __init__(self, feedback_variable_streams: DataStreamList | Sequence[DataStream[Any]],
                 output_streams: DataStreamList | Sequence[DataStream[Any]],
                 termination_criteria: DataStream[Any] | None = None) -> None:
        self.feedback_variable_streams = _as_list(feedback_variable_streams, "IterationBodyResult feedback")
        self.output_streams = _as_list(output_streams, "IterationBodyResult outputs")
        self.termination_criteria = termination_criteria

    def get_feedback_variable_streams(self) -> DataStreamList:
        return self.feedback_variable_streams

    def get_output_streams(self) -> DataStreamList:
        return self.output_streams

    def get_termination_criteria(self) -> DataStream[Any] | None:
        return self.termination_criteria


class PerRoundSubBody(ABC):
    """A part of a body whose operators are created afresh each round (``for_each_round``)."""

    @abstractmethod
    def process(self, inputs: DataStreamList) -> DataStreamList: ...


class IterationBody(ABC):
    """The body of an iteration: ``process(variable_streams, data_streams)`` builds it and returns
    an :class:`IterationBodyResult`. A plain callable of the same two arguments works as well."""

    @abstractmethod
    def process(self, variable_streams: DataStreamList, data_streams: DataStreamList) -> IterationBodyResult: ...

    @staticmethod
    def for_each_round(inputs: DataStreamList | Sequence[DataStream[Any]],
                       sub_body: PerRoundSubBody | Callable[[DataStreamList], Any]) -> DataStreamList:
        """Build ``sub_body`` on ``inputs`` (streams of an iteration body) with operators that are
        created afresh each round (PER_ROUND), inside an ALL_ROUND body or not."""
        streams = _as_list(inputs, "IterationBody.for_each_round")
        if not streams.size():
            raise InvalidProgramError("IterationBody.for_each_round needs at least one input stream")
        scope = streams.get(0).get_scope()
        if scope.get_level() == 0:
            raise InvalidProgramError("IterationBody.for_each_round builds part of an iteration body; its "
                                      f"inputs ({streams}) are not inside one")
        build = sub_body.process if isinstance(sub_body, PerRoundSubBody) else sub_body
        if not callable(build):
            raise InvalidProgramError(f"for_each_round expects a PerRoundSubBody or a callable, got {sub_body!r}")
        result, created = added_by(streams.get(0).get_execution_environment(), build, streams)
        _run_per_round(created)
        from slipstream.datastream.data_stream import DataStream
        return DataStreamList.of(result) if isinstance(result, DataStream) else _as_list(result, "for_each_round")


class IterationListener(ABC):  # noqa: B024  (both hooks are optional, as Flink ML's)
    """Mixed into a user function inside an iteration body to hear about epochs and the end.

    ``on_epoch_watermark_incremented(epoch_watermark, context, collector)`` is called once
    per epoch, in order, after every record of that epoch reached the operator;
    ``on_iteration_terminated(context, collector)`` once, when the iteration ended. What
    they ``collector.collect(value)`` goes to the operator's main output, and
    ``context.output(output_tag, value)`` to a side output. Both default to doing nothing.
    """

    class Context(ABC):
        @abstractmethod
        def output(self, output_tag: Any, value: Any) -> None: ...

    class Collector(ABC):
        @abstractmethod
        def collect(self, value: Any) -> None: ...

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: IterationListener.Context,
                                       collector: IterationListener.Collector) -> None:
        """Every record of epoch ``epoch_watermark`` has arrived."""

    def on_iteration_terminated(self, context: IterationListener.Context,
                                collector: IterationListener.Collector) -> None:
        """The iteration ended; nothing more will arrive."""


# -- entry points -------------------------------------------------------------------------------------
def iterate_unbounded_streams(init_variable_streams: DataStreamList | Sequence[DataStream[Any]],
                              data_streams: DataStreamList | Sequence[DataStream[Any]],
                              body: IterationBody | Callable[[DataStreamList, DataStreamList], Any],
                              config: IterationConfig | None = None) -> DataStreamList:
    """An iteration over (possibly) unbounded data: data records have the maximum epoch, and the
    iteration never ends while an input is open. Returns the body's output streams. Of
    ``config`` only the feedback reading applies (its operators live for all rounds)."""
    data = _as_list(data_streams, "iterate_unbounded_streams data")
    return _iterate(init_variable_streams, [(s, False) for s in data], body, bounded=False,
                    life_cycle=OperatorLifeCycle.ALL_ROUND, what="iterate_unbounded_streams",
                    feedback_reading=_feedback_reading(config, "iterate_unbounded_streams"))


def iterate_bounded_streams_until_termination(init_variable_streams: DataStreamList | Sequence[DataStream[Any]],
                                              data_streams: Any, body: Any, config: Any = None) -> DataStreamList:
    """An iteration over bounded inputs that ends by the termination rule (see the module).

    ``data_streams`` is a :class:`DataStreamList` (not replayed) or a
    :class:`ReplayableDataStreamList`. Flink ML's argument order
    ``(init, data, IterationConfig, body)`` is accepted too.
    """
    if isinstance(body, IterationConfig):
        body, config = config, body
    config = config if config is not None else IterationConfig()
    if not isinstance(config, IterationConfig):
        raise InvalidProgramError(
            f"iterate_bounded_streams_until_termination expects an IterationConfig, got {config!r}")
    if isinstance(data_streams, ReplayableDataStreamList):
        data = [(s, True) for s in data_streams.replayed] + [(s, False) for s in data_streams.non_replayed]
    else:
        data = [(s, False) for s in _as_list(data_streams, "iterate_bounded_streams_until_termination data")]
    return _iterate(init_variable_streams, data, body, bounded=True, life_cycle=config.get_operator_life_cycle(),
                    what="iterate_bounded_streams_until_termination", feedback_reading=config.get_feedback_reading())


def iterate_and_replay_bounded_streams_until_termination(
        init_variable_streams: DataStreamList | Sequence[DataStream[Any]],
        init_data_streams: DataStreamList | Sequence[DataStream[Any]], body: Any,
        config: IterationConfig | None = None) -> DataStreamList:
    """A bounded iteration whose data streams are all replayed every round, to operators created
    afresh each round (PER_ROUND) — Flink ML's ``ReplayableDataStreamList.replay(...)`` with
    ``OperatorLifeCycle.PER_ROUND``. Of ``config`` only the feedback reading applies."""
    what = "iterate_and_replay_bounded_streams_until_termination"
    data = _as_list(init_data_streams, f"{what} data")
    return _iterate(init_variable_streams, [(s, True) for s in data], body, bounded=True,
                    life_cycle=OperatorLifeCycle.PER_ROUND, what=what,
                    feedback_reading=_feedback_reading(config, what))


class Iterations:
    """Flink ML's entry points, under its names (the same functions as the module's)."""

    @staticmethod
    def iterate_unbounded_streams(init_variable_streams: Any, data_streams: Any, body: Any) -> DataStreamList:
        return iterate_unbounded_streams(init_variable_streams, data_streams, body)

    @staticmethod
    def iterate_bounded_streams_until_termination(init_variable_streams: Any, data_streams: Any,
                                                  config: Any, body: Any = None) -> DataStreamList:
        if body is None:  # the seed's three-argument form
            return iterate_bounded_streams_until_termination(init_variable_streams, data_streams, config)
        return iterate_bounded_streams_until_termination(init_variable_streams, data_streams, body, config)

    @staticmethod
    def iterate_and_replay_bounded_streams_until_termination(init_variable_streams: Any, init_data_streams: Any,
                                                             body: Any) -> DataStreamList:
        return iterate_and_replay_bounded_streams_until_termination(init_variable_streams, init_data_streams, body)


# -- building ---------------------------------------------------------------------------------------------
def _feedback_reading(config: Any, what: str) -> FeedbackReading:
    if config is None:
        return FeedbackReading.FEEDBACK_FIRST
    if not isinstance(config, IterationConfig):
        raise InvalidProgramError(f"{what} expects an IterationConfig, got {config!r}")
    return config.get_feedback_reading()


def _as_list(streams: Any, what: str) -> DataStreamList:
    if isinstance(streams, DataStreamList):
        return streams
    from slipstream.datastream.data_stream import DataStream
    if isinstance(streams, DataStream):
        return DataStreamList.of(streams)
    if isinstance(streams, (list, tuple)):
        return DataStreamList(streams)
    raise InvalidProgramError(f"{what}: expected a DataStreamList, got {streams!r}")


def _unbounded_sources(transformation: Transformation) -> list[str]:
    """The sources upstream of ``transformation`` that are not bounded."""
    found: list[str] = []
    seen: set[int] = set()
    stack = [transformation]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if is_unbounded_source(node):
            found.append(node.name)
        stack.extend(node.inputs)
    return found


def _body_fn(body: Any, what: str) -> Callable[[DataStreamList, DataStreamList], Any]:
    if isinstance(body, IterationBody):
        return body.process
    if callable(body) and not isinstance(body, type):
        return cast("Callable[[DataStreamList, DataStreamList], Any]", body)
    raise InvalidProgramError(f"{what} expects an IterationBody or a callable (variable_streams, data_streams), "
                              f"got {body!r}")


def _iterate(init_variable_streams: Any, data: list[tuple[DataStream[Any], bool]], body: Any, *, bounded: bool,
             life_cycle: OperatorLifeCycle, what: str,
             feedback_reading: FeedbackReading = FeedbackReading.FEEDBACK_FIRST) -> DataStreamList:
    """Build an iteration: heads for the variables and the data, the body, its feedback, criteria and outputs."""
    variables = _as_list(init_variable_streams, f"{what} variables").get_data_streams()
    build = _body_fn(body, what)
    if not variables:
        raise InvalidProgramError(f"{what}: an iteration needs at least one initial variable stream")
    _check_inputs(variables + [stream for stream, _ in data], what, bounded)
    builder = FeedbackScopeBuilder(
        variables[0].get_execution_environment(), variables[0].get_scope(), what, body,
        closing="end an iteration with",
        returned_rule="it must be built inside the iteration body (scope {scope}) from the streams the body received")
    when_full = feedback_reading is FeedbackReading.FEEDBACK_FIRST_WHEN_FULL
    variable_heads = [_add_head(builder, stream, HeadRole.VARIABLE, index, False, bounded, when_full)
                      for index, stream in enumerate(variables)]
    data_heads = [_add_head(builder, stream, HeadRole.DATA, index, replay, bounded, when_full)
                  for index, (stream, replay) in enumerate(data)]
    result, created = builder.build_body(build, _streams_of(builder, variable_heads), _streams_of(builder, data_heads))
    _check_body(created, builder)
    feedback, criteria = _returned_streams(result, variables, builder)
    if life_cycle is OperatorLifeCycle.PER_ROUND:
        _run_per_round(created)
    _close_feedback(builder, feedback, variable_heads, criteria, bounded)
    return _add_outputs(builder, result.output_streams)


def _check_inputs(inputs: list[DataStream[Any]], what: str, bounded: bool) -> None:
    """An iteration's inputs: of one environment, not inside a loop, bounded for a bounded iteration."""
    env = inputs[0].get_execution_environment()
    for stream in inputs:
        env._check_same_environment(stream, "iterate over")
        if stream.get_scope() != ROOT_SCOPE:
            raise InvalidProgramError(
                f"{what}: input '{stream.get_name()}' is inside a loop or iteration (scope {stream.get_scope()}); "
                "iterations nested in loops or iterations are not supported yet")
    if bounded:
        for stream in inputs:
            unbounded = _unbounded_sources(stream.get_transformation())
            if unbounded:
                raise InvalidProgramError(
                    f"{what} needs bounded inputs, but '{stream.get_name()}' reads the unbounded source(s) "
                    f"{', '.join(repr(n) for n in unbounded)}; use iterate_unbounded_streams for live data")


def _add_head(builder: FeedbackScopeBuilder, stream: DataStream[Any], role: HeadRole, index: int, replay: bool,
              bounded: bool, feedback_first_when_full: bool) -> IterationHeadTransformation:
    """Where a variable or a data stream enters the iteration."""
    return builder.add_head(
        IterationHeadTransformation, f"Iteration Head {builder.scope} {role.value} {index}",
        [stream.get_transformation()], stream.get_parallelism(), output_type=stream.get_type(), role=role,
        replay=replay, bounded=bounded, feedback_first_when_full=feedback_first_when_full)


def _streams_of(builder: FeedbackScopeBuilder, heads: list[IterationHeadTransformation]) -> DataStreamList:
    """What the body receives: the streams of the heads."""
    from slipstream.datastream.data_stream import DataStream
    return DataStreamList(DataStream(builder.env, head) for head in heads)


def _returned_streams(result: Any, variables: list[DataStream[Any]], builder: FeedbackScopeBuilder
                      ) -> tuple[list[DataStream[Any]], DataStream[Any] | None]:
    """What the body returned, checked: its feedback streams (one per variable) and its criteria stream."""
    from slipstream.datastream.data_stream import DataStream
    what, name = builder.what, builder.body_name
    if not isinstance(result, IterationBodyResult):
        raise InvalidProgramError(f"{what}: the body {name!r} must return an IterationBodyResult, got {result!r}")
    feedback = result.feedback_variable_streams.get_data_streams()
    if len(feedback) != len(variables):
        raise InvalidProgramError(
            f"{what}: the body {name!r} returned {len(feedback)} feedback stream(s) for "
            f"{len(variables)} variable stream(s); it must return one per variable stream, in order")
    criteria = result.termination_criteria
    if criteria is not None and not isinstance(criteria, DataStream):
        raise InvalidProgramError(f"{what}: the termination criteria must be a DataStream, got {criteria!r}")
    for stream in feedback:
        builder.check_returned("feedback", stream)
    for stream in result.output_streams:
        builder.check_returned("output", stream)
    if criteria is not None:
        builder.check_returned("termination criteria", criteria)
    _check_feedback_parallelism(feedback, variables, what)
    return feedback, criteria


def _check_feedback_parallelism(feedback: list[DataStream[Any]], variables: list[DataStream[Any]], what: str) -> None:
    """A variable goes round at its initial parallelism."""
    for index, (stream, initial) in enumerate(zip(feedback, variables)):
        if stream.get_parallelism() != initial.get_parallelism():
            raise InvalidProgramError(
                f"{what}: feedback stream {index} ('{stream.get_name()}') has parallelism {stream.get_parallelism()}, "
                f"but initial variable stream {index} ('{initial.get_name()}') has {initial.get_parallelism()}; "
                "a variable goes round at its initial parallelism (give the initial stream the same one with "
                "set_parallelism(n); from_collection is one subtask, as PyFlink's)")


def _run_per_round(transformations: list[Transformation]) -> None:
    """Operators created afresh each round (PER_ROUND)."""
    for transformation in transformations:
        if not transformation.is_virtual:
            transformation.per_round = True


def _add_outputs(builder: FeedbackScopeBuilder, streams: DataStreamList) -> DataStreamList:
    """The streams that leave the iteration: what the entry points return."""
    return DataStreamList(
        builder.add_exit(stream, f"Iteration Output {builder.scope} {index}", stream.get_parallelism())
        for index, stream in enumerate(streams))


def _close_feedback(builder: FeedbackScopeBuilder, feedback: list[DataStream[Any]],
                    variable_heads: list[IterationHeadTransformation], criteria: DataStream[Any] | None,
                    bounded: bool) -> None:
    """Each feedback stream goes back to its variable's head; the criteria stream to a head that counts it."""
    for index, (stream, head) in enumerate(zip(feedback, variable_heads)):
        builder.close_feedback(head, stream, f"Iteration Tail {builder.scope} variable {index}", stream.get_type())
    if criteria is not None:
        criteria_head = builder.add_head(IterationHeadTransformation, f"Iteration Criteria {builder.scope}", [],
                                         criteria.get_parallelism(), role=HeadRole.CRITERIA, bounded=bounded)
        builder.close_feedback(criteria_head, criteria, f"Iteration Criteria Tail {builder.scope}")


def _check_body(created: list[Transformation], builder: FeedbackScopeBuilder) -> None:
    """What a body may not build: sources, sinks, nested iterations, operators on outside streams."""
    what, name, scope = builder.what, builder.body_name, builder.scope
    for transformation in created:
        if isinstance(transformation, SourceTransformation):
            raise InvalidProgramError(f"{what}: the body {name!r} created the source "
                                      f"'{transformation.name}'; an iteration body has no sources")
        if isinstance(transformation, SinkTransformation):
            raise InvalidProgramError(f"{what}: the body {name!r} added the sink '{transformation.name}'; "
                                      "an iteration body has no sinks: return the stream as an output stream")
        if isinstance(transformation, IterationHeadTransformation):
            raise InvalidProgramError(f"{what}: the body {name!r} builds an iteration "
                                      f"('{transformation.name}'); nesting iterations is not supported yet")
        if transformation.scope != scope and not transformation.scope.is_inner_of(scope):
            outside = next((t for t in transformation.inputs if t.scope != scope), None)
            outside_name = outside.name if outside is not None else transformation.name
            raise InvalidProgramError(
                f"{what}: the body {name!r} used the stream '{outside_name}' from outside the iteration "
                f"(scope {transformation.scope}, the body is scope {scope}); pass it in as a data stream")

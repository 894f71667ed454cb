"""Iteration operators (FLIP-176): the heads of an iteration, per-round operators, and the calls
that tell body operators about epoch watermarks and the end of the iteration.

An iteration compiles onto the loop mechanism of :mod:`slipstream.operators.loops`: a
nested scope, heads and feedback tails joined by FEEDBACK edges, exits into the enclosing
scope. What is particular to iterations:

* :class:`IterationHeadOperator` — one per variable stream (its records and, through the
  feedback edge, the next round's: what comes back waits at the head until its round
  starts, in memory up to ``channel_memory_budget`` records, then spilled to disk), per
  data stream (no feedback; a replayed one keeps its records — in memory up to
  ``sort_memory_budget`` records, then spilled to disk — and sends them again at the
  start of every round after the first), and one that swallows the termination-criteria
  stream (its task only counts those records).
* :class:`PerRoundOperator` — wraps an operator of a ``PER_ROUND`` body (or of
  ``IterationBody.for_each_round``): a fresh instance each round, whose input ends with
  the round, so operators that emit at end of input (windows over ``EndOfStreamWindows``,
  ``is_output_on_eof`` functions) emit once per round.
* :func:`notify_epoch_watermark` / :func:`notify_iteration_terminated` — called by the
  runtime in chain order when a task's epoch watermark increments or its iteration ended:
  they call the ``IterationListener`` methods of the operator's user functions and emit
  what those collect (main output, or side outputs through ``context.output``).

During backlog these operators run record by record: an iteration body is never backlog
(its heads drop record attributes, as loop heads do).
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import cloudpickle

from slipstream.attributes import RecordAttributes
from slipstream.datastream.functions import RuntimeContext
from slipstream.datastream.iteration import IterationListener
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.state import State
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import HeadRole, IterationHeadTransformation, Transformation
from slipstream.errors import CheckpointError, SlipstreamError, user_code
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch
from slipstream.operators.loops import FEEDBACK, LoopHeadOperator
from slipstream.operators.replay_cache import ReplayCache
from slipstream.operators.segments import Segment, Sharing

__all__ = ["IterationHeadOperator", "PerRoundOperator", "create_operator", "notify_epoch_watermark",
           "notify_iteration_terminated", "restore_functions", "snapshot_functions"]


class IterationHeadOperator(LoopHeadOperator):
    """Lets one input of an iteration into its scope (see the module docstring)."""

    transformation_type = IterationHeadTransformation
    backlog = streamed("an iteration head forwards records into the iteration body as they come")

    def __init__(self, transformation: IterationHeadTransformation) -> None:
        super().__init__(transformation)
        self.role = transformation.role
        self.replay = transformation.replay
        self._cache: ReplayCache | None = None  # a replayed data stream's records, made in setup
        self._held: ReplayCache | None = None  # a variable's feedback, until its round starts; made in setup

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        managed = ctx.memory.managed if ctx.memory is not None else None
        if self.replay:
            owner = f"the replay cache of '{ctx.name}'"
            self._cache = ReplayCache(ctx.sort_memory_budget, owner, ctx.spill_dir,
                                      managed.budget(owner, ctx.metrics) if managed else None)
        if self.role is HeadRole.VARIABLE:
            owner = f"the feedback held at '{ctx.name}'"
            self._held = ReplayCache(ctx.channel_memory_budget, owner, ctx.spill_dir,
                                     managed.budget(owner, ctx.metrics) if managed else None)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        """Records of the input go into the body; what comes back waits for its round (see
        :meth:`on_epoch`); the criteria stream ends here (its task counted it)."""
        if self.role is HeadRole.CRITERIA:
            return
        if input_index == FEEDBACK:
            self._held.append(batch)  # type: ignore[union-attr]  # only a variable head has feedback
            return
        if self._cache is not None:
            self._keep(batch)
        self.output.collect_batch(batch)

    def _keep(self, batch: RecordBatch) -> None:
        self._cache.append(batch)  # type: ignore[union-attr]  # called for a replaying head only
        self.ctx.metrics["spilled_bytes"] = self._cache.spilled_bytes  # type: ignore[union-attr]

    def shared_segments(self) -> list[Segment]:
        return [segment for kept in (self._cache, self._held) if kept is not None for segment in kept.snapshot()]

    def snapshot_state(self) -> Any:
        """A replayed data stream's records so far (its source replays only what came after), and
        the feedback held for the next round: as segments, each written once (see
        :mod:`slipstream.operators.replay_cache`)."""
        cache = self._cache.snapshot() if self._cache else []
        held = self._held.snapshot() if self._held else []
        return {"replay_cache": cache, "held": held} if cache or held else None

    def initialize_state(self, state: Any) -> None:
        if state:
            _restore_kept(self._cache, state["replay_cache"])
            _restore_kept(self._held, state["held"])
            if self._cache is not None:
                self.ctx.metrics["spilled_bytes"] = self._cache.spilled_bytes

    def close(self) -> None:
        super().close()
        for kept in (self._cache, self._held):
            if kept is not None:
                kept.close()

    def on_epoch(self, epoch: int) -> None:
        """Round ``epoch`` ≥ 2 starts: the feedback held since the last round started (all of epoch
        ``epoch``) goes in, then a replayed data stream again, with that epoch, ahead of its baton.

        Holding the feedback keeps every record in its round, async bodies' too: a record sent
        round at once would reach the body ahead of the baton of an earlier epoch, be counted
        in an earlier round, and the iteration could end before its epoch watermark (FLIP-176:
        the last watermark is the largest epoch of any record)."""
        if epoch == 1:
            return  # round 1 is the initial records'; what came back already is epoch 2's
        if self._held is not None:
            for batch in self._held.drain():
                self.output.collect_batch(batch)
        if self._cache is not None:
            for batch in self._cache:
                self.output.collect_batch(batch)


def _restore_kept(kept: ReplayCache | None, items: list[Segment | RecordBatch]) -> None:
    """Segments (or the batches an older checkpoint listed one by one) back into ``kept``."""
    for item in items:
        if isinstance(item, Segment):
            kept.restore([item])  # type: ignore[union-attr]  # a checkpoint lists only what the head kept
        else:
            kept.append(item)  # type: ignore[union-attr]  # an older checkpoint's batch


class PerRoundOperator(StreamOperator):
    """A fresh instance of the wrapped operator for every round of an iteration (PER_ROUND).

    At the round's epoch watermark the instance's inputs end, it finishes (emitting what
    it keeps for the end of input), its functions' listeners are called, and it closes;
    the next round gets a new instance with empty keyed state.
    """

    def __init__(self, transformation: Transformation) -> None:
        self.num_inputs = max(1, len(transformation.inputs))  # type: ignore[misc]
        super().__init__(transformation)
        self._inner: StreamOperator | None = None
        self.rounds = 0

    def setup(self, ctx: Any) -> None:
        super().setup(ctx)
        self._inner = self._new_instance()

    def _new_instance(self) -> StreamOperator:
        inner = StreamOperator.for_transformation(self.transformation)
        ctx = self.ctx
        if ctx.keyed_backend is not None and self._inner is not None:
            ctx = dataclasses.replace(ctx, keyed_backend=ctx.keyed_backend.fresh())
            self.ctx = ctx
        inner.setup(ctx)
        return inner

    @property
    def inner(self) -> StreamOperator:
        assert self._inner is not None
        return self._inner

    def open(self) -> None:
        self.inner.open()

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        self.inner.process_batch(batch, input_index)

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        self.inner.process_watermark(watermark, input_index)

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        self.inner.process_watermark_status(idle, input_index)

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        self.inner.process_record_attributes(attributes, input_index)

    def end_round(self, epoch: int) -> None:
        inner = self.inner
        for index in range(self.num_inputs):
            inner.end_input(index)
        inner.finish()
        _call_listeners(inner, epoch)
        inner.close()
        self.rounds += 1
        self._inner = self._new_instance()
        self._inner.open()

    def finish(self) -> None:
        """The iteration ended: the round that would have come next never runs."""

    def close(self) -> None:
        self.inner.close()

    def user_functions(self) -> list[Any]:
        return self.inner.user_functions()

    def snapshot_state(self) -> Any:
        return self.inner.snapshot_state()

    def initialize_state(self, state: Any) -> None:
        self.inner.initialize_state(state)

    def snapshot_backlog(self) -> Any:
        return self.inner.snapshot_backlog()

    def restore_backlog(self, state: Any) -> None:
        self.inner.restore_backlog(state)

    def check_restore(self) -> None:
        self.inner.check_restore()


def create_operator(transformation: Transformation) -> StreamOperator:
    """The operator of ``transformation``: wrapped per round when its iteration asks for it."""
    if transformation.per_round:
        return PerRoundOperator(transformation)
    return StreamOperator.for_transformation(transformation)


class _ListenerContext(IterationListener.Context):
    """What a listener gets: side outputs through ``output(tag, value)``."""

    def __init__(self) -> None:
        self.side: dict[OutputTag, list[Any]] = {}

    def output(self, output_tag: OutputTag, value: Any) -> None:
        if not isinstance(output_tag, OutputTag):
            raise SlipstreamError(f"context.output expects an OutputTag, got {output_tag!r}")
        self.side.setdefault(output_tag, []).append(value)


class _ListCollector(IterationListener.Collector):
    def __init__(self) -> None:
        self.values: list[Any] = []

    def collect(self, value: Any) -> None:
        self.values.append(value)


def _listeners(operator: StreamOperator) -> list[IterationListener]:
    return [fn for fn in operator.user_functions() if isinstance(fn, IterationListener)]


def _call(operator: StreamOperator, call: Callable[[Any, Any, Any], Any], what: str) -> None:
    for listener in _listeners(operator):
        context, collector = _ListenerContext(), _ListCollector()
        with user_code(operator, lambda: None, what=what):
            call(listener, context, collector)
        if collector.values:
            operator.output.collect_batch(RecordBatch(collector.values))
        for tag, values in context.side.items():
            operator.output.collect_side(tag, RecordBatch(values))


def _call_listeners(operator: StreamOperator, epoch: int) -> None:
    _call(operator, lambda fn, ctx, out: fn.on_epoch_watermark_incremented(epoch, ctx, out),
          f"on_epoch_watermark_incremented({epoch})")


def notify_epoch_watermark(operator: StreamOperator, epoch: int) -> None:
    """``operator``'s epoch watermark reached ``epoch``: every record of that epoch has arrived."""
    if isinstance(operator, PerRoundOperator):
        operator.end_round(epoch)
    elif isinstance(operator, IterationHeadOperator):
        operator.on_epoch(epoch)
    else:
        _call_listeners(operator, epoch)


def notify_iteration_terminated(operator: StreamOperator) -> None:
    """``operator``'s iteration ended (before its ``finish``): its listeners hear it — a per-round
    operator's through the instance made for the round that will not run."""
    target = operator.inner if isinstance(operator, PerRoundOperator) else operator
    _call(target, lambda fn, ctx, out: fn.on_iteration_terminated(ctx, out), "on_iteration_terminated()")


def snapshot_functions(operator: StreamOperator, sharing: Sharing | None = None) -> list[bytes]:
    """The state of the operator's user functions, for the checkpoint of an iteration.

    In an iteration body, functions keep what they learn between records and epochs in
    their attributes (a model, partial sums, the records of a round), so their state is
    what ``__getstate__`` gives — by default the attributes — without state handles and
    the runtime context, which ``open`` gives back. A function holding a resource (a
    connection, a lock) leaves it out with its own ``__getstate__``, as for any pickling.
    What pickle cannot write, cloudpickle does, so lambdas and closures among the
    attributes are fine. Records a replay cache keeps are written as references to its
    segments through ``sharing`` (a per-round function keeping the round's blocks).
    """
    result = []
    for fn in operator.user_functions():
        state = fn.__getstate__()
        if isinstance(state, dict):
            state = {name: value for name, value in state.items() if not isinstance(value, (State, RuntimeContext))}
        try:
            result.append(_dumps(state, sharing))
        except Exception as exc:  # noqa: BLE001 - any pickling failure names the operator and function
            raise CheckpointError(
                f"operator '{operator.ctx.name}' (uid '{operator.ctx.uid}'), subtask {operator.ctx.subtask_index + 1}: "
                f"the state of its function {type(fn).__name__} (its attributes, or what its __getstate__ "
                f"returns) cannot be written to a checkpoint: {type(exc).__name__}: {exc}") from exc
    return result


def _dumps(state: Any, sharing: Sharing | None) -> bytes:
    """pickle (fast, in C; through ``sharing`` when given) when it can; cloudpickle for what it
    cannot (lambdas, local classes)."""
    try:
        return sharing.dumps(state) if sharing is not None else pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        data: bytes = cloudpickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        return data


def restore_functions(operator: StreamOperator, states: list[bytes], loads: Callable[[bytes], Any]) -> None:
    """Give the operator's (opened) functions back the state they had at the checkpoint, each
    unpickled by ``loads`` (which resolves references to the checkpoint's shared segments)."""
    for fn, data in zip(operator.user_functions(), states, strict=True):
        state = loads(data)
        if hasattr(fn, "__setstate__"):
            fn.__setstate__(state)
        elif state:
            vars(fn).update(state)

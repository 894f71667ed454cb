"""``BroadcastProcessOperator``: a (keyed) broadcast process function over a data stream (input 0)
and a broadcast stream (input 1), as Flink's ``CoBroadcastWith(Non)KeyedOperator``.

Every instance receives every broadcast element (the edge is BROADCAST) and keeps its own copy of
the broadcast state (:mod:`slipstream.operators.broadcast_state`); ``process_broadcast_element``
may change it, ``process_element`` and ``on_timer`` only read it. On a keyed data stream the data
side also has keyed state and timers, and the broadcast side may visit every key's state with
``ctx.apply_to_keyed_state``.

The broadcast side comes first while it is backlog. Flink processes the broadcast input before
the other in BATCH mode; here its channels are read first in every mode, and while the broadcast
input is backlog the data side's records wait in this operator (held with the event time: the
watermark does not pass them) and are processed, in arrival order, once the broadcast backlog is
over. A broadcast input whose sources are all bounded is backlog from its first element to its
end, so the data side waits from the start; one that becomes backlog later (a HybridSource, a
watched directory) holds the data side from the moment it says so. The held records stay in memory
up to ``channel_memory_budget`` records and spill to disk past it; they are part of the operator's
checkpointed state, and counted in its metrics (``backlog_records``, ``spilled_bytes``). This operator has no batch
path: it runs record by record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from slipstream.datastream.functions import BroadcastProcessFunction, Function, KeyedBroadcastProcessFunction
from slipstream.datastream.state import StateDescriptor
from slipstream.datastream.transformations import BroadcastProcessTransformation, Transformation
from slipstream.errors import SlipstreamError
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import OperatorContext
from slipstream.operators.broadcast_state import (
    BroadcastStateStore,
    HeapBroadcastState,
    ReadOnlyBroadcastStateView,
    copy_for_instance,
)
from slipstream.operators.elements import RecordBatch
from slipstream.operators.process import OnTimerOperator, ProcessContext, UnkeyedTimerService, run_process_function
from slipstream.operators.replay_cache import ReplayCache
from slipstream.operators.timers import InternalTimerService, KeyedTimerService, merge_timer_snapshots

BROADCAST_INPUT = BroadcastProcessTransformation.priority_input


class _BroadcastContextBase(ProcessContext):
    """The clocks of both sides' contexts (PyFlink's ``BaseBroadcastProcessFunction.BaseContext``)."""

    _operator: BroadcastProcessOperator

    def current_processing_time(self) -> int:
        return self._operator.ctx.processing_time_service.get_current_processing_time()

    def current_watermark(self) -> int:
        return self._operator.current_watermark


class ReadOnlyBroadcastContext(_BroadcastContextBase):
    """The data side's context, also passed to ``on_timer``: read-only broadcast state, and on a keyed
    stream the current key and its timers."""

    def get_broadcast_state(self, state_descriptor: Any) -> ReadOnlyBroadcastStateView:
        return self._operator.broadcast_state.read_only(state_descriptor)


def no_key_message(operator: str, call: str) -> str:
    """What reaching for a key in ``process_broadcast_element`` is told (Flink: "No key set")."""
    return (f"operator '{operator}': {call} in process_broadcast_element: a broadcast element has no key; "
            "use ctx.apply_to_keyed_state to reach keyed state")


class BroadcastContext(_BroadcastContextBase):
    """The broadcast side's context: writable broadcast state; no current key, so no timers."""

    def get_broadcast_state(self, state_descriptor: Any) -> HeapBroadcastState:
        return self._operator.broadcast_state.writable(state_descriptor)

    def _no_key(self, call: str) -> SlipstreamError:
        return SlipstreamError(no_key_message(self._operator.ctx.name, call))

    def timer_service(self) -> Any:
        raise self._no_key("timer_service()")

    def get_current_key(self) -> Any:
        raise self._no_key("get_current_key()")

    def apply_to_keyed_state(self, state_descriptor: StateDescriptor[Any], function: Any) -> None:
        """Call ``function(key, state)`` (or ``function.process(key, state)``) for every key of this
        instance that has ``state_descriptor``'s state, with that key current."""
        backend = self._operator.ctx.keyed_backend
        if backend is None:
            raise SlipstreamError(f"operator '{self._operator.ctx.name}': apply_to_keyed_state needs a keyed "
                                  "data stream (a KeyedBroadcastProcessFunction)")
        call = function.process if hasattr(function, "process") else function
        state = backend.get_state(state_descriptor)
        try:
            for key in backend.keys(state_descriptor.name):
                backend.set_current_key(key)
                call(key, state)
        finally:
            self._operator.unset_key()


BroadcastProcessFunction.ReadOnlyContext.register(ReadOnlyBroadcastContext)
KeyedBroadcastProcessFunction.OnTimerContext.register(ReadOnlyBroadcastContext)
BroadcastProcessFunction.Context.register(BroadcastContext)
KeyedBroadcastProcessFunction.Context.register(BroadcastContext)


class BroadcastProcessOperator(OnTimerOperator):
    transformation: BroadcastProcessTransformation
    transformation_type = BroadcastProcessTransformation
    backlog = streamed("its data input waits while the broadcast input is backlog, then runs record by record")
    emits_declared_type = True
    num_inputs = 2

    def __init__(self, transformation: BroadcastProcessTransformation) -> None:
        super().__init__(transformation)
        self.function: Any = transformation.function
        self.key_selector = transformation.key_selectors[0] if transformation.is_keyed else None
        self._broadcast_unfinished = transformation.broadcast_bounded  # backlog until it ends

    @classmethod
    def plan_notes(cls, transformation: Transformation) -> list[str]:
        broadcast = cast(BroadcastProcessTransformation, transformation)  # the registry pairs the two
        names = [descriptor.name for descriptor in broadcast.descriptors]
        waits = "from the start, as its sources are bounded" if broadcast.broadcast_bounded else \
            "while it is backlog"
        return [f"broadcast state {names}; input {BROADCAST_INPUT} is broadcast and read first, input 0 waits "
                f"for it {waits}"]

    def user_functions(self) -> list[Function]:
        return [self.function]

    def setup(self, ctx: OperatorContext) -> None:
        super().setup(ctx)
        self.broadcast_state = BroadcastStateStore(self.transformation.descriptors, ctx.name)
        # data-side batches waiting for the broadcast backlog to end
        self.held = ReplayCache(ctx.channel_memory_budget, f"operator '{ctx.name}' (records waiting for the "
                                "broadcast backlog)", ctx.spill_dir)
        if self.key_selector is not None:
            self.timers: InternalTimerService | None = self.keyed_timers()
            self.context: ProcessContext = ReadOnlyBroadcastContext(self, KeyedTimerService(self.timers))
        else:
            self.timers = None
            self.context = ReadOnlyBroadcastContext(self, UnkeyedTimerService(self))
        self.broadcast_context = BroadcastContext(self, UnkeyedTimerService(self))

    # -- elements -----------------------------------------------------------------------------------
    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if input_index == BROADCAST_INPUT:
            self.unset_key()
            run_process_function(self, self.function.process_broadcast_element, batch, self.broadcast_context, None)
        elif self._holding():
            self.held.append(batch)
            metrics = self.ctx.metrics
            metrics["backlog_records"] = metrics.get("backlog_records", 0) + len(batch)
        else:
            run_process_function(self, self.function.process_element, batch, self.context, self.key_selector)

    def unset_key(self) -> None:
        """A broadcast element's turn: keyed state read directly raises instead of being the state
        of the key the last data record left current."""
        if self.key_selector is not None:
            self.keyed_backend().unset_current_key(no_key_message(self.ctx.name, "keyed state read directly"))

    def _holding(self) -> bool:
        """Whether the data side waits: the broadcast input is backlog (or bounded and not ended)."""
        return self._broadcast_unfinished or self._input_backlog[BROADCAST_INPUT]

    def _release(self) -> None:
        """The broadcast backlog is over: process the held data records, then let event time on."""
        metrics = self.ctx.metrics
        metrics["spilled_bytes"] = metrics.get("spilled_bytes", 0) + self.held.spilled_bytes
        for batch in self.held.drain():
            run_process_function(self, self.function.process_element, batch, self.context, self.key_selector)
        self._advance_combined_watermark()

    def _advance_combined_watermark(self) -> None:
        if not self._holding():
            super()._advance_combined_watermark()

    def process_record_attributes(self, attributes: Any, input_index: int = 0) -> None:
        was_holding = self._holding()
        super().process_record_attributes(attributes, input_index)
        if was_holding and not self._holding():
            self._release()

    def end_input(self, input_index: int = 0) -> None:
        if input_index == BROADCAST_INPUT and self._broadcast_unfinished:
            self._broadcast_unfinished = False
            if not self._holding():
                self._release()

    # -- state --------------------------------------------------------------------------------------
    def snapshot_state(self) -> Any:
        return {"broadcast": self.broadcast_state.snapshot(),
                "held": [(batch.values, batch.timestamps) for batch in self.held],
                "broadcast_unfinished": self._broadcast_unfinished,
                "timers": None if self.timers is None else self.timers.freeze()}

    def initialize_state(self, state: Any) -> None:
        if not state:
            return
        self.broadcast_state.restore(state["broadcast"])
        for values, timestamps in state["held"]:
            self.held.append(RecordBatch(values, timestamps))
        self._broadcast_unfinished = state["broadcast_unfinished"]
        if self.timers is not None and state["timers"] is not None:
            self.timers.restore(state["timers"])

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        """A copy of the broadcast state (old instance ``i mod n``'s), the held records this instance
        now owns (by key when keyed; else old instance ``j``'s go to new instance ``j mod n``), and
        the timers of the keys it owns."""
        present = [state for state in states if state]
        if not present:
            return
        own = copy_for_instance(states, self.ctx.subtask_index)
        held = [pair for index, state in enumerate(states) if state
                for pair in self._held_owned(state["held"], index, owns_key)]
        timers = [state["timers"] for state in present if state["timers"] is not None]
        self.initialize_state({"broadcast": own["broadcast"] if own else {}, "held": held,
                               "broadcast_unfinished": any(state["broadcast_unfinished"] for state in present),
                               "timers": merge_timer_snapshots(timers, owns_key) if timers else None})

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.held.close()

    def _held_owned(self, held: list[tuple[list[Any], list[Any] | None]], old_index: int,
                    owns_key: Callable[[Any], bool]) -> list[tuple[list[Any], list[Any] | None]]:
        if self.key_selector is None:
            return held if old_index % self.ctx.parallelism == self.ctx.subtask_index else []
        owned = []
        for values, timestamps in held:
            keep = [i for i, value in enumerate(values) if owns_key(self.key_selector(value))]
            if keep:
                owned.append(([values[i] for i in keep], None if timestamps is None else [timestamps[i] for i in keep]))
        return owned


__all__ = ["BroadcastContext", "BroadcastProcessOperator", "ReadOnlyBroadcastContext"]

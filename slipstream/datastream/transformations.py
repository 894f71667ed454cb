"""The logical graph: one transformation per API call, read by the planner.

A transformation describes *what* to compute (function, key, window, partitioning);
the matching physical operator in :mod:`slipstream.operators` says *how*.
Partitioning, union and side outputs are virtual: the planner turns them into edges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from slipstream.attributes import Boundedness, OperatorAttributes
from slipstream.datastream.scope import ROOT_SCOPE, StreamScope


class Partitioning(Enum):
    """How records of an edge are distributed over the downstream subtasks."""

    FORWARD = "FORWARD"
    HASH = "HASH"
    REBALANCE = "REBALANCE"
    RESCALE = "RESCALE"
    BROADCAST = "BROADCAST"
    SHUFFLE = "SHUFFLE"
    GLOBAL = "GLOBAL"
    CUSTOM = "CUSTOM"


@dataclass(eq=False)
class Transformation:
    """A node of the logical graph.

    ``parallelism`` None means the environment's default. ``key_selectors`` is set on
    operators that run on keyed streams, one per input (None for an unkeyed input).
    """

    id: int
    name: str
    inputs: list[Transformation] = field(default_factory=list)
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    uid_hash: str | None = None  # set_uid_hash: the operator's identity for state when it has no uid
    description: str | None = None  # set_description: shown in explain() and the JSON plan
    output_type: Any = None
    key_selectors: list[Callable[[Any], Any] | None] = field(default_factory=list)
    chaining: str = "always"  # "always", "never" (disable_chaining) or "head" (start_new_chain)
    parallelism_fixed: bool = False  # set_parallelism was called, or the source forces it
    scope: StreamScope = ROOT_SCOPE
    per_round: bool = False  # inside an iteration body: a fresh operator each round (FLIP-176 PER_ROUND)
    slot_sharing_group: str | None = None  # PyFlink's slot sharing group: kept (the JSON plan shows it), places nothing

    @property
    def is_virtual(self) -> bool:
        """Virtual transformations become edges, not operators."""
        return False

    @property
    def is_keyed(self) -> bool:
        return any(k is not None for k in self.key_selectors)

    def get_operator_attributes(self) -> OperatorAttributes:
        """The attributes of the operator that implements this transformation (FLIP-327).

        Its operator kind declares them, so they are asked of it here, at call time (the one
        way back from the user API to the operators besides ``execute``): the answer never
        depends on what was imported before.
        """
        from slipstream.operators.base import operator_attributes  # importing the package registers every kind
        return operator_attributes(self)

    def get_is_output_on_eof(self) -> bool:
        return self.get_operator_attributes().is_output_on_eof()

    def get_has_internal_sorter(self) -> bool:
        return self.get_operator_attributes().has_internal_sorter()

    get_output_only_after_end_of_stream = get_is_output_on_eof
    get_internal_sorter_supported = get_has_internal_sorter

    def describe(self) -> str:
        return f"{self.name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id}, name={self.name!r})"


@dataclass(eq=False, repr=False)
class SourceTransformation(Transformation):
    source: Any = None
    watermark_strategy: Any = None


def is_unbounded_source(transformation: Transformation) -> bool:
    """Whether ``transformation`` reads a source that is not bounded (the job it is in streams)."""
    return isinstance(transformation, SourceTransformation) and \
        transformation.source.get_boundedness() is not Boundedness.BOUNDED


@dataclass(eq=False, repr=False)
class SinkTransformation(Transformation):
    sink: Any = None


@dataclass(eq=False, repr=False)
class MapTransformation(Transformation):
    function: Any = None


@dataclass(eq=False, repr=False)
class FlatMapTransformation(Transformation):
    function: Any = None


@dataclass(eq=False, repr=False)
class FilterTransformation(Transformation):
    function: Any = None


@dataclass(eq=False, repr=False)
class ProcessTransformation(Transformation):
    """A ``ProcessFunction`` on an unkeyed stream."""

    function: Any = None


@dataclass(eq=False, repr=False)
class KeyedProcessTransformation(Transformation):
    """A ``KeyedProcessFunction`` on a keyed stream."""

    function: Any = None


@dataclass(eq=False, repr=False)
class ReduceTransformation(Transformation):
    """A keyed rolling reduce; ``aggregation`` keeps (kind, field) for built-ins like ``sum(1)``."""

    function: Any = None
    aggregation: tuple[str, Any] | None = None


@dataclass(eq=False, repr=False)
class TimestampsAndWatermarksTransformation(Transformation):
    watermark_strategy: Any = None


@dataclass(eq=False, repr=False)
class CoProcessTransformation(Transformation):
    """A two-input function: ``kind`` is "map", "flat_map", "process" or "keyed_process"."""

    function: Any = None
    kind: str = "process"


@dataclass(eq=False, repr=False)
class BroadcastProcessTransformation(Transformation):
    """A ``BroadcastProcessFunction`` or, on a keyed data stream, a ``KeyedBroadcastProcessFunction``:
    input 0 is the data stream, input 1 the broadcast stream (a BROADCAST edge), ``descriptors``
    the ``MapStateDescriptor``s of the broadcast state (PyFlink's ``broadcast(desc, ...)``).

    ``broadcast_bounded`` says every source upstream of the broadcast input is bounded, so that
    input is backlog from its first element to its end: the data input waits for it from the start.
    """

    function: Any = None
    descriptors: list[Any] = field(default_factory=list)
    broadcast_bounded: bool = False
    priority_input: ClassVar[int] = 1  # the broadcast input is read first (Flink's BATCH rule)


@dataclass(eq=False, repr=False)
class WindowTransformation(Transformation):
    """A window operator; all-window streams are keyed by a constant and run at parallelism 1.

    ``function_kind`` is "reduce", "aggregate", "process" or "apply"; ``function`` the
    user's function and ``window_function`` the optional window function given with
    reduce/aggregate.
    """

    assigner: Any = None
    trigger: Any = None
    evictor: Any = None
    allowed_lateness: int = 0
    late_data_tag: Any = None
    function_kind: str = "process"
    function: Any = None
    window_function: Any = None


@dataclass(eq=False, repr=False)
class CoGroupTransformation(Transformation):
    """Two keyed inputs windowed together (``co_group`` and ``join``), one key selector per input.

    ``kind`` is "co_group" or "join" (a join's ``function`` is its nested loop as a
    co_group function); ``vectorized`` says ``function`` takes polars DataFrames of many keys.
    ``input_types`` are the inputs' declared types, for building those DataFrames.
    """

    assigner: Any = None
    trigger: Any = None
    evictor: Any = None
    allowed_lateness: int = 0
    function: Any = None
    vectorized: bool = False
    kind: str = "co_group"
    input_types: list[Any] = field(default_factory=list)


@dataclass(eq=False, repr=False)
class LoopHeadTransformation(Transformation):
    """Where a loop begins (FLIP-15): the loop's input (input 0) merged with what comes back
    through the loop's feedback edge (input 1, from ``feedback``), in the loop's own scope.

    ``feedback`` is the loop's :class:`FeedbackTailTransformation`, set once the loop function
    returned; it comes after this head in the graph, so the planner adds that edge last.
    With ``iterate_with_feedback`` the fed-back records leave on the side output ``feedback_tag``
    so the body can tell them from the input (they may be of another type).
    """

    feedback: Transformation | None = None
    feedback_tag: Any = None

    @property
    def expects_feedback(self) -> bool:
        """Whether a feedback tail must close this head (the planner refuses an unclosed one)."""
        return True


@dataclass(eq=False, repr=False)
class FeedbackTailTransformation(Transformation):
    """The end of a loop body: what it receives goes round again, to ``head`` (a FEEDBACK edge)."""

    head: Transformation | None = None


@dataclass(eq=False, repr=False)
class LoopExitTransformation(Transformation):
    """Records leaving a loop: its input is in the loop's scope, it is in the enclosing one."""


class HeadRole(Enum):
    """Which input of a FLIP-176 iteration a head lets in; the value names the head."""

    VARIABLE = "variable"  # an initial variable stream, closed by the feedback of the same index
    DATA = "data"  # a data stream: no feedback
    CRITERIA = "criteria"  # no input: counts the termination-criteria stream, which reaches it as feedback


@dataclass(eq=False, repr=False)
class IterationHeadTransformation(LoopHeadTransformation):
    """Where one input of a FLIP-176 iteration enters the iteration's scope, in a :class:`HeadRole`.

    A data head's ``replay`` sends its stream again every round; ``bounded`` False gives its
    records the maximum epoch.
    """

    role: HeadRole = HeadRole.VARIABLE
    replay: bool = False
    bounded: bool = True
    feedback_first_when_full: bool = False  # FeedbackReading.FEEDBACK_FIRST_WHEN_FULL: see IterationConfig

    @property
    def expects_feedback(self) -> bool:
        return self.role is not HeadRole.DATA


@dataclass(eq=False, repr=False)
class PartitionTransformation(Transformation):
    partitioning: Partitioning = Partitioning.FORWARD
    key_selector: Callable[[Any], Any] | None = None
    partitioner: Any = None  # a Partitioner for CUSTOM

    @property
    def is_virtual(self) -> bool:
        return True


@dataclass(eq=False, repr=False)
class UnionTransformation(Transformation):
    @property
    def is_virtual(self) -> bool:
        return True


@dataclass(eq=False, repr=False)
class SideOutputTransformation(Transformation):
    tag: Any = None

    @property
    def is_virtual(self) -> bool:
        return True

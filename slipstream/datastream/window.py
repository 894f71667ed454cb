"""Windowing: windows, window assigners, triggers, evictors and window functions.

Mirrors ``pyflink.datastream.window`` (and the window functions of
``pyflink.datastream.functions``): a *window assigner* puts each record into
zero or more windows, a *trigger* decides when a window's contents are handed to
the window function, and an optional *evictor* removes contents before or after
that. Time windows are half-open ``[start, end)`` in milliseconds;
``max_timestamp()`` is ``end - 1`` and is the timestamp of what the window emits.

Examples:
    >>> from slipstream.datastream.time import Time
    >>> TumblingEventTimeWindows.of(Time.seconds(5)).assign_windows("a", 7_300, None)
    [TimeWindow(start=5000, end=10000)]
    >>> [w.start for w in SlidingEventTimeWindows.of(10, 5).assign_windows("a", 12, None)]
    [10, 5]
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import IO, Any, Generic, NamedTuple, TypeVar

from slipstream.datastream.functions import Function, RuntimeContext
from slipstream.datastream.serialization import TypeSerializer
from slipstream.datastream.state import (
    ReducingState,
    ReducingStateDescriptor,
    S,
    StateDescriptor,
    ValueStateDescriptor,
)
from slipstream.datastream.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Time, to_millis
from slipstream.errors import InvalidProgramError

T = TypeVar("T")
W = TypeVar("W", bound="Window")
NW = TypeVar("NW", bound="Window")  # the window type of a class nested in a class generic in W
IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")

Size = Duration | Time | int


# -- windows ----------------------------------------------------------------------------------------
class Window(ABC):
    """A finite bucket of records; once event time passes ``max_timestamp()`` it is complete."""

    @abstractmethod
    def max_timestamp(self) -> int:
        """The largest timestamp that still belongs to this window."""


class _TimeWindowFields(NamedTuple):
    start: int
    end: int


class TimeWindow(_TimeWindowFields, Window):
    """The time interval ``[start, end)`` in milliseconds; ordered by start, then end. A tuple
    underneath, so hashing and comparing it (once per record and state access of a window
    operator) run in C rather than in a dataclass's generated Python methods."""

    __slots__ = ()

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """Whether the two windows overlap or touch (touching session windows merge, as in Flink)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window containing both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """Start of the window of length ``window_size`` (aligned to ``offset``) containing ``timestamp``."""
        return timestamp - (timestamp - offset) % window_size

    @staticmethod
    def merge_windows(windows: Iterable[TimeWindow], callback: MergingWindowAssigner.MergeCallback[Any]) -> None:
        """Report every group of two or more overlapping windows to ``callback`` with their cover."""
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for candidate in sorted(windows):
            if groups and groups[-1][0].intersects(candidate):
                cover, members = groups[-1]
                groups[-1] = (cover.cover(candidate), [*members, candidate])
            else:
                groups.append((candidate, [candidate]))
        for cover, members in groups:
            if len(members) > 1:
                callback.merge(members, cover)


class _CountWindowFields(NamedTuple):
    id: int


class CountWindow(_CountWindowFields, Window):
    """A window of a count-window assigner, named by its sequence number per key (a tuple
    underneath, as :class:`TimeWindow`)."""

    __slots__ = ()

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP


@dataclass(frozen=True, slots=True)
class GlobalWindow(Window):
    """The single window :class:`GlobalWindows` puts every record into; it never ends."""

    @staticmethod
    def get() -> GlobalWindow:
        return _GLOBAL_WINDOW

    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    def __repr__(self) -> str:
        return "GlobalWindow"


_GLOBAL_WINDOW = GlobalWindow()

MAX_LONG_VALUE = MAX_TIMESTAMP
MIN_LONG_VALUE = MIN_TIMESTAMP
_LONG = struct.Struct(">q")
_TWO_LONGS = struct.Struct(">qq")


# -- window serializers (PyFlink's names: a custom assigner's get_window_serializer returns one) -----
class TimeWindowSerializer(TypeSerializer[TimeWindow]):
    """A :class:`TimeWindow` as Flink writes it: its start and end, 8 bytes each, big-endian.
    Windows stay Python objects inside slipstream; this is for code of one's own that stores them."""

    def serialize(self, element: TimeWindow, stream: IO[bytes]) -> None:
        stream.write(_TWO_LONGS.pack(element.start, element.end))

    def deserialize(self, stream: IO[bytes]) -> TimeWindow:
        return TimeWindow(*_TWO_LONGS.unpack(stream.read(_TWO_LONGS.size)))


class CountWindowSerializer(TypeSerializer[CountWindow]):
    """A :class:`CountWindow` as Flink writes it: its id, 8 bytes big-endian."""

    def serialize(self, element: CountWindow, stream: IO[bytes]) -> None:
        stream.write(_LONG.pack(element.id))

    def deserialize(self, stream: IO[bytes]) -> CountWindow:
        return CountWindow(_LONG.unpack(stream.read(8))[0])


class GlobalWindowSerializer(TypeSerializer[GlobalWindow]):
    """The :class:`GlobalWindow` as Flink writes it: one zero byte."""

    def serialize(self, element: GlobalWindow, stream: IO[bytes]) -> None:
        stream.write(b"\x00")

    def deserialize(self, stream: IO[bytes]) -> GlobalWindow:
        stream.read(1)
        return _GLOBAL_WINDOW


@dataclass(frozen=True, slots=True)
class TimestampedValue(Generic[T]):
    """A window element with its timestamp (None when the record has none), as evictors see it."""

    value: T
    timestamp: int | None = None

    def get_value(self) -> T:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None


# -- state access for triggers and window functions -------------------------------------------------
class KeyedStateStore(ABC):
    """Hands out keyed state, scoped to the current key (and, for per-window state, to the window)."""

    @abstractmethod
    def get_state(self, state_descriptor: StateDescriptor[S]) -> S: ...

    def get_list_state(self, state_descriptor: StateDescriptor[S]) -> S:
        return self.get_state(state_descriptor)

    def get_map_state(self, state_descriptor: StateDescriptor[S]) -> S:
        return self.get_state(state_descriptor)

    def get_reducing_state(self, state_descriptor: StateDescriptor[S]) -> S:
        return self.get_state(state_descriptor)

    def get_aggregating_state(self, state_descriptor: StateDescriptor[S]) -> S:
        return self.get_state(state_descriptor)


# -- triggers ---------------------------------------------------------------------------------------
class TriggerResult(Enum):
    """What a trigger asks for: evaluate the window (fire), drop its contents (purge), both or neither.

    A fire on a window without contents evaluates nothing.
    """

    CONTINUE = (False, False)
    FIRE_AND_PURGE = (True, True)
    FIRE = (True, False)
    PURGE = (False, True)

    def is_fire(self) -> bool:
        return self._value_[0]  # not .value: an enum property, a Python call per access

    def is_purge(self) -> bool:
        return self._value_[1]


class Trigger(ABC, Generic[T, W]):
    """Decides when a window (of one key) is evaluated; keeps its state in ``ctx``, never in ``self``.

    One trigger object serves every key and window, so whatever it must remember goes
    to ``ctx.get_partitioned_state``; ``clear`` removes that state and the trigger's timers.
    Triggers used with merging (session) assigners must return True from ``can_merge``.
    """

    class TriggerContext(ABC):
        """Clocks, timers and per-window state for the window a trigger method is called for."""

        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_metric_group(self) -> Any: ...

        @abstractmethod
        def get_current_watermark(self) -> int: ...

        @abstractmethod
        def register_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def register_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def get_partitioned_state(self, state_descriptor: StateDescriptor[S]) -> S:
            """State scoped to the current key and window."""

    class OnMergeContext(TriggerContext):
        """The context of ``on_merge``: can fold the merged windows' trigger state into the new window."""

        @abstractmethod
        def merge_partitioned_state(self, state_descriptor: StateDescriptor[Any]) -> None: ...

    @abstractmethod
    def on_element(self, element: T, timestamp: int | None, window: W,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        """Called for every element added to ``window``."""

    @abstractmethod
    def on_processing_time(self, time: int, window: W, ctx: Trigger.TriggerContext) -> TriggerResult:
        """Called when a processing-time timer this trigger registered fires."""

    @abstractmethod
    def on_event_time(self, time: int, window: W, ctx: Trigger.TriggerContext) -> TriggerResult:
        """Called when an event-time timer this trigger registered fires."""

    def can_merge(self) -> bool:
        """Whether ``on_merge`` is implemented, so merging assigners may use this trigger."""
        return False

    def on_merge(self, window: W, ctx: Trigger.OnMergeContext) -> None:
        """Called when windows were merged into ``window``: re-register timers, merge state."""
        raise NotImplementedError(f"{type(self).__name__} does not support merging windows")

    @abstractmethod
    def clear(self, window: W, ctx: Trigger.TriggerContext) -> None:
        """Delete this trigger's timers and state for ``window`` (the window is being discarded)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class EventTimeTrigger(Trigger[Any, TimeWindow]):
    """Fires once the watermark passes the end of the window (and again for each late element)."""

    @staticmethod
    def create() -> EventTimeTrigger:
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger[Any, TimeWindow]):
    """Fires once the processing-time clock passes the end of the window."""

    @staticmethod
    def create() -> ProcessingTimeTrigger:
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


def _earliest(a: int, b: int) -> int:
    return min(a, b)


class _ContinuousTrigger(Trigger[Any, TimeWindow]):
    """Fires every ``interval`` ms of one clock while the window is open; the next firing time is state."""

    def __init__(self, interval: Size) -> None:
        self.interval = to_millis(interval, "trigger interval")
        if self.interval <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive interval, got {self.interval}")
        self.state_desc = ReducingStateDescriptor("fire-time", _earliest)

    @abstractmethod
    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        """Register a timer at ``time`` on this trigger's clock."""

    @abstractmethod
    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        """Delete the timer at ``time`` on this trigger's clock."""

    def _schedule_next(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext,
                       fire_time: ReducingState[Any]) -> None:
        next_fire = min(time + self.interval, window.max_timestamp())
        fire_time.add(next_fire)
        self._register(ctx, next_fire)

    def _fire_if_due(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() == time:
            fire_time.clear()
            self._schedule_next(time, window, ctx, fire_time)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: TimeWindow, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        next_fire = ctx.get_partitioned_state(self.state_desc).get()
        if next_fire is not None:
            self._register(ctx, next_fire)

    def clear(self, window: TimeWindow, ctx: Trigger.TriggerContext) -> None:
        fire_time = ctx.get_partitioned_state(self.state_desc)
        timestamp = fire_time.get()
        if timestamp is not None:
            self._delete(ctx, timestamp)
            fire_time.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.of({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time (by watermark) and once more at the window's end."""

    @staticmethod
    def of(interval: Size) -> ContinuousEventTimeTrigger:
        return ContinuousEventTimeTrigger(interval)

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.register_event_time_timer(time)

    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.delete_event_time_timer(time)

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() is None and timestamp is not None:
            self._schedule_next(timestamp - timestamp % self.interval, window, ctx, fire_time)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        return self._fire_if_due(time, window, ctx)


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time while the window has contents."""

    @staticmethod
    def of(interval: Size) -> ContinuousProcessingTimeTrigger:
        return ContinuousProcessingTimeTrigger(interval)

    def _register(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.register_processing_time_timer(time)

    def _delete(self, ctx: Trigger.TriggerContext, time: int) -> None:
        ctx.delete_processing_time_timer(time)

    def on_element(self, element: Any, timestamp: int | None, window: TimeWindow,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() is None:
            now = ctx.get_current_processing_time()
            self._schedule_next(now - now % self.interval, window, ctx, fire_time)
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._fire_if_due(time, window, ctx)

    def on_event_time(self, time: int, window: TimeWindow, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE


def _add(a: int, b: int) -> int:
    return a + b


class CountTrigger(Trigger[Any, Window]):
    """Fires when the window has received ``count`` elements since it last fired."""

    def __init__(self, window_size: int) -> None:
        if not isinstance(window_size, int) or isinstance(window_size, bool) or window_size <= 0:
            raise InvalidProgramError(f"CountTrigger needs a positive count, got {window_size!r}")
        self.count = window_size
        self.state_desc = ReducingStateDescriptor("count", _add)

    @staticmethod
    def of(window_size: int) -> CountTrigger:
        return CountTrigger(window_size)

    def on_element(self, element: Any, timestamp: int | None, window: Window,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        seen = ctx.get_partitioned_state(self.state_desc)
        seen.add(1)
        if seen.get() >= self.count:
            seen.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.merge_partitioned_state(self.state_desc)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ctx.get_partitioned_state(self.state_desc).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.count})"


class PurgingTrigger(Trigger[Any, Window]):
    """Wraps a trigger so that each of its firings also purges the window (FIRE → FIRE_AND_PURGE)."""

    def __init__(self, nested_trigger: Trigger[Any, Any]) -> None:
        if not isinstance(nested_trigger, Trigger):
            raise InvalidProgramError(f"PurgingTrigger.of expects a Trigger, got {nested_trigger!r}")
        self.nested_trigger = nested_trigger

    @staticmethod
    def of(nested_trigger: Trigger[Any, Any]) -> PurgingTrigger:
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int | None, window: Window,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_element(element, timestamp, window, ctx))

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_processing_time(time, window, ctx))

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return self._purging(self.nested_trigger.on_event_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested_trigger.can_merge()

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        self.nested_trigger.on_merge(window, ctx)

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        self.nested_trigger.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested_trigger!r})"


class NeverTrigger(Trigger[Any, Window]):
    """Never fires: the default of :class:`GlobalWindows`, which needs a trigger of the user's choice."""

    def on_element(self, element: Any, timestamp: int | None, window: Window,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        """Nothing to merge: this trigger keeps no state."""

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        """Nothing to clear: this trigger keeps no state."""


# -- assigners --------------------------------------------------------------------------------------
class WindowAssigner(ABC, Generic[T, W]):
    """Puts each record into zero or more windows; records of one key and window form a pane."""

    class WindowAssignerContext(ABC):
        """What an assigner may consult: the processing-time clock and the runtime context."""

        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_runtime_context(self) -> RuntimeContext: ...

    @abstractmethod
    def assign_windows(self, element: T, timestamp: int | None,
                       context: WindowAssigner.WindowAssignerContext) -> Collection[W]:
        """The windows ``element`` (with event timestamp ``timestamp``) belongs to."""

    @abstractmethod
    def get_default_trigger(self, env: Any = None) -> Trigger[T, W]:
        """The trigger used unless ``WindowedStream.trigger`` sets another."""

    @abstractmethod
    def is_event_time(self) -> bool:
        """Whether windows follow event time (watermarks) rather than the processing-time clock."""


class MergingWindowAssigner(WindowAssigner[T, W]):
    """An assigner whose windows may merge, such as sessions."""

    class MergeCallback(ABC, Generic[NW]):
        """Receives each group of windows that merge into one."""

        @abstractmethod
        def merge(self, to_be_merged: Iterable[NW], merge_result: NW) -> None: ...

    @abstractmethod
    def merge_windows(self, windows: Iterable[W], callback: MergingWindowAssigner.MergeCallback[W]) -> None:
        """Call ``callback.merge`` for every group among ``windows`` that merges."""


def _no_timestamp(assigner: WindowAssigner[Any, Any]) -> ValueError:
    return ValueError(f"{assigner!r} needs event timestamps, but the record has none: "
                      "did you forget assign_timestamps_and_watermarks(...)?")


def _check_offset(name: str, size: int, offset: int, against: str) -> None:
    if size <= 0 or abs(offset) >= size:
        raise InvalidProgramError(f"{name} needs a positive {against} larger than abs(offset), "
                                  f"got {against} {size} and offset {offset}")


class _TimeWindowAssigner(WindowAssigner[Any, TimeWindow]):
    """An assigner of :class:`TimeWindow` s."""

    def get_window_serializer(self) -> TimeWindowSerializer:
        return TimeWindowSerializer()


class _EventTimeAssigner(_TimeWindowAssigner):
    """The event-time clock of an assigner whose other base gives ``_windows_for(element, time)``:
    the record's timestamp; an :class:`EventTimeTrigger` fires by default."""

    _windows_for: Callable[[Any, int], list[TimeWindow]]  # the other base's (an annotation: it shadows nothing)

    def assign_windows(self, element: Any, timestamp: int | None,
                       context: WindowAssigner.WindowAssignerContext) -> list[TimeWindow]:
        if timestamp is None:
            raise _no_timestamp(self)
        return self._windows_for(element, timestamp)

    def get_default_trigger(self, env: Any = None) -> Trigger[Any, Any]:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class _ProcessingTimeAssigner(_TimeWindowAssigner):
    """The processing-time clock of an assigner whose other base gives ``_windows_for(element,
    time)``: the clock when the record arrives; a :class:`ProcessingTimeTrigger` fires by default."""

    _windows_for: Callable[[Any, int], list[TimeWindow]]  # the other base's (an annotation: it shadows nothing)

    def assign_windows(self, element: Any, timestamp: int | None,
                       context: WindowAssigner.WindowAssignerContext) -> list[TimeWindow]:
        return self._windows_for(element, context.get_current_processing_time())

    def get_default_trigger(self, env: Any = None) -> Trigger[Any, Any]:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class _TumblingWindows(WindowAssigner[Any, TimeWindow]):
    def __init__(self, size: Size, offset: Size | None = 0) -> None:
        self.size = to_millis(size, "window size")
        self.offset = to_millis(offset or 0, "window offset")
        _check_offset(type(self).__name__, self.size, self.offset, "size")

    def _windows_for(self, element: Any, time: int) -> list[TimeWindow]:
        start = TimeWindow.get_window_start_with_offset(time, self.offset, self.size)
        return [TimeWindow(start, start + self.size)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}" + (f", {self.offset})" if self.offset else ")")


class TumblingEventTimeWindows(_EventTimeAssigner, _TumblingWindows):
    """Non-overlapping windows of ``size`` by event time, aligned to the epoch plus ``offset``."""

    @staticmethod
    def of(size: Size, offset: Size | None = 0) -> TumblingEventTimeWindows:
        return TumblingEventTimeWindows(size, offset)


class TumblingProcessingTimeWindows(_ProcessingTimeAssigner, _TumblingWindows):
    """Non-overlapping windows of ``size`` by the processing-time clock when the record arrives."""

    @staticmethod
    def of(size: Size, offset: Size | None = 0) -> TumblingProcessingTimeWindows:
        return TumblingProcessingTimeWindows(size, offset)


class _SlidingWindows(WindowAssigner[Any, TimeWindow]):
    def __init__(self, size: Size, slide: Size, offset: Size | None = 0) -> None:
        self.size = to_millis(size, "window size")
        self.slide = to_millis(slide, "window slide")
        self.offset = to_millis(offset or 0, "window offset")
        if self.size <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive size, got {self.size}")
        _check_offset(type(self).__name__, self.slide, self.offset, "slide")

    def _windows_for(self, element: Any, time: int) -> list[TimeWindow]:
        last_start = TimeWindow.get_window_start_with_offset(time, self.offset, self.slide)
        return [TimeWindow(start, start + self.size)
                for start in range(last_start, time - self.size, -self.slide)]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.size}, {self.slide}"
                + (f", {self.offset})" if self.offset else ")"))


class SlidingEventTimeWindows(_EventTimeAssigner, _SlidingWindows):
    """Windows of ``size`` starting every ``slide`` by event time; a record is in about size/slide of them."""

    @staticmethod
    def of(size: Size, slide: Size, offset: Size | None = 0) -> SlidingEventTimeWindows:
        return SlidingEventTimeWindows(size, slide, offset)


class SlidingProcessingTimeWindows(_ProcessingTimeAssigner, _SlidingWindows):
    """Windows of ``size`` starting every ``slide`` by the processing-time clock."""

    @staticmethod
    def of(size: Size, slide: Size, offset: Size | None = 0) -> SlidingProcessingTimeWindows:
        return SlidingProcessingTimeWindows(size, slide, offset)


class SessionWindowTimeGapExtractor(ABC, Generic[T]):
    """Gives the session gap (ms) that follows an element, for dynamic-gap sessions."""

    @abstractmethod
    def extract(self, element: T) -> int: ...


class _CallableGapExtractor(SessionWindowTimeGapExtractor[Any]):
    def __init__(self, fn: Callable[[Any], int]) -> None:
        self.fn = fn

    def extract(self, element: Any) -> int:
        return self.fn(element)

    def __repr__(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


def _gap_extractor(extractor: Any) -> SessionWindowTimeGapExtractor[Any]:
    if isinstance(extractor, SessionWindowTimeGapExtractor):
        return extractor
    if callable(extractor):
        return _CallableGapExtractor(extractor)
    raise InvalidProgramError("with_dynamic_gap expects a SessionWindowTimeGapExtractor or a callable, "
                              f"got {extractor!r}")


class _SessionWindows(MergingWindowAssigner[Any, TimeWindow]):
    """Each element opens ``[t, t + gap)``; windows that overlap or touch merge into one session.
    ``session_gap`` is fixed; a dynamic assigner's gap is its extractor's for each element."""

    def __init__(self, session_gap: Size | None = None,
                 extractor: SessionWindowTimeGapExtractor[Any] | None = None) -> None:
        self.gap = None if session_gap is None else to_millis(session_gap, "session gap")
        self.extractor = extractor
        if self.gap is not None and self.gap <= 0:
            raise InvalidProgramError(f"{type(self).__name__} needs a positive gap, got {self.gap}")

    def _windows_for(self, element: Any, start: int) -> list[TimeWindow]:
        gap = self.gap if self.extractor is None else self.extractor.extract(element)
        if isinstance(gap, (Duration, Time)):
            gap = gap.millis
        if not isinstance(gap, int) or gap <= 0:
            raise ValueError(f"the session gap extractor returned {gap!r}; it must be positive milliseconds")
        return [TimeWindow(start, start + gap)]

    def merge_windows(self, windows: Iterable[TimeWindow],
                      callback: MergingWindowAssigner.MergeCallback[TimeWindow]) -> None:
        TimeWindow.merge_windows(windows, callback)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gap if self.extractor is None else self.extractor!r})"


class EventTimeSessionWindows(_EventTimeAssigner, _SessionWindows):
    """Sessions by event time: a gap of more than ``gap`` between elements of a key ends a session."""

    @staticmethod
    def with_gap(size: Size) -> EventTimeSessionWindows:
        return EventTimeSessionWindows(size)

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor[Any] | Callable[[Any], int]
                         ) -> DynamicEventTimeSessionWindows:
        return DynamicEventTimeSessionWindows.with_dynamic_gap(extractor)


class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """Event-time sessions whose gap after each element is ``extractor.extract(element)``."""

    def __init__(self, session_window_time_gap_extractor: SessionWindowTimeGapExtractor[Any] | Callable[[Any], int]
                 ) -> None:
        super().__init__(extractor=_gap_extractor(session_window_time_gap_extractor))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor[Any] | Callable[[Any], int]
                         ) -> DynamicEventTimeSessionWindows:
        return DynamicEventTimeSessionWindows(extractor)


class ProcessingTimeSessionWindows(_ProcessingTimeAssigner, _SessionWindows):
    """Sessions by the processing-time clock: ``gap`` without elements of a key ends a session."""

    @staticmethod
    def with_gap(size: Size) -> ProcessingTimeSessionWindows:
        return ProcessingTimeSessionWindows(size)

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor[Any] | Callable[[Any], int]
                         ) -> DynamicProcessingTimeSessionWindows:
        return DynamicProcessingTimeSessionWindows.with_dynamic_gap(extractor)


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """Processing-time sessions whose gap after each element is ``extractor.extract(element)``."""

    def __init__(self, session_window_time_gap_extractor: SessionWindowTimeGapExtractor[Any] | Callable[[Any], int]
                 ) -> None:
        super().__init__(extractor=_gap_extractor(session_window_time_gap_extractor))

    @staticmethod
    def with_dynamic_gap(extractor: SessionWindowTimeGapExtractor[Any] | Callable[[Any], int]
                         ) -> DynamicProcessingTimeSessionWindows:
        return DynamicProcessingTimeSessionWindows(extractor)


class GlobalWindows(WindowAssigner[Any, GlobalWindow]):
    """Puts every element of a key into one :class:`GlobalWindow`; fires only with a custom trigger."""

    def get_window_serializer(self) -> GlobalWindowSerializer:
        return GlobalWindowSerializer()

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int | None,
                       context: WindowAssigner.WindowAssignerContext) -> list[GlobalWindow]:
        return [_GLOBAL_WINDOW]

    @staticmethod
    def create_with_end_of_stream_trigger() -> EndOfStreamWindows:
        """Flink's name for :meth:`EndOfStreamWindows.get`: one window that fires at end of input."""
        return EndOfStreamWindows.get()

    def get_default_trigger(self, env: Any = None) -> Trigger[Any, Any]:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindows()"


class EndOfStreamTrigger(Trigger[Any, Window]):
    """Fires once, when event time reaches the end of the window: for the never-ending
    :class:`GlobalWindow` that is the maximum watermark every input sends at its end."""

    def on_element(self, element: Any, timestamp: int | None, window: Window,
                   ctx: Trigger.TriggerContext) -> TriggerResult:
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: Trigger.TriggerContext) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Window, ctx: Trigger.OnMergeContext) -> None:
        ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Window, ctx: Trigger.TriggerContext) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class EndOfStreamWindows(GlobalWindows):
    """All elements (of a key) in one :class:`GlobalWindow` that fires only at end of input (FLIP-327).

    The window is evaluated when the maximum watermark arrives, i.e. once every input has
    ended, so nothing is emitted before; results carry the timestamp ``MAX_TIMESTAMP``. An
    operator using it declares ``is_output_on_eof`` (its output edges block) and may sort its
    backlog. On an unbounded input it never fires. ``GlobalWindows.create_with_end_of_stream_trigger()``
    is Flink's name for the same assigner.

    Examples:
        >>> EndOfStreamWindows.get().assign_windows("any", None, None)
        [GlobalWindow]
        >>> GlobalWindows.create_with_end_of_stream_trigger() is EndOfStreamWindows.get()
        True
    """

    @staticmethod
    def get() -> EndOfStreamWindows:
        return _END_OF_STREAM_WINDOWS

    @staticmethod
    def create() -> EndOfStreamWindows:
        return _END_OF_STREAM_WINDOWS

    def get_default_trigger(self, env: Any = None) -> Trigger[Any, Any]:
        return EndOfStreamTrigger()

    def is_event_time(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "EndOfStreamWindows()"


_END_OF_STREAM_WINDOWS = EndOfStreamWindows()


def is_end_of_stream_window(assigner: Any, trigger: Any) -> bool:
    """Whether ``assigner`` with ``trigger`` emits only at end of input (EndOfStreamWindows with
    its own trigger, or any assigner of the global window with an :class:`EndOfStreamTrigger`)."""
    return isinstance(assigner, GlobalWindows) and isinstance(trigger, EndOfStreamTrigger)


def _positive_count(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidProgramError(f"{name} must be a positive integer, got {value!r}")
    return value


class _CountWindows(WindowAssigner[Any, CountWindow]):
    """Numbers each key's elements 0, 1, 2, … in keyed state and windows them by that number.

    The default trigger fires a window once it holds ``size`` elements and purges it,
    since a count window never receives elements again; a final, incomplete window
    never fires (as in Flink).
    """

    def __init__(self, window_size: int) -> None:
        self.size = _positive_count("count window size", window_size)
        self._counter = ValueStateDescriptor("count-window-assigner")

    def get_window_serializer(self) -> CountWindowSerializer:
        return CountWindowSerializer()

    def _next_index(self, context: WindowAssigner.WindowAssignerContext) -> int:
        counter = context.get_runtime_context().get_state(self._counter)
        index = counter.value() or 0
        counter.update(index + 1)
        return index

    def get_default_trigger(self, env: Any = None) -> Trigger[Any, Any]:
        return PurgingTrigger(CountTrigger(self.size))

    def is_event_time(self) -> bool:
        return False


class CountTumblingWindowAssigner(_CountWindows):
    """Windows of ``size`` consecutive elements per key: elements 0..size-1, size..2*size-1, …"""

    @staticmethod
    def of(window_size: int) -> CountTumblingWindowAssigner:
        return CountTumblingWindowAssigner(window_size)

    def assign_windows(self, element: Any, timestamp: int | None,
                       context: WindowAssigner.WindowAssignerContext) -> list[CountWindow]:
        return [CountWindow(self._next_index(context) // self.size)]

    def __repr__(self) -> str:
        return f"CountTumblingWindowAssigner({self.size})"


class CountSlidingWindowAssigner(_CountWindows):
    """Windows of ``size`` elements per key starting every ``slide`` elements: window i holds
    elements i*slide .. i*slide+size-1 and fires once it is full (PyFlink's semantics)."""

    def __init__(self, window_size: int, window_slide: int) -> None:
        super().__init__(window_size)
        self.slide = _positive_count("count window slide", window_slide)

    @staticmethod
    def of(window_size: int, window_slide: int) -> CountSlidingWindowAssigner:
        return CountSlidingWindowAssigner(window_size, window_slide)

    def assign_windows(self, element: Any, timestamp: int | None,
                       context: WindowAssigner.WindowAssignerContext) -> list[CountWindow]:
        index = self._next_index(context)
        first = max(0, (index - self.size) // self.slide + 1)
        return [CountWindow(i) for i in range(index // self.slide, first - 1, -1)]

    def __repr__(self) -> str:
        return f"CountSlidingWindowAssigner({self.size}, {self.slide})"


# -- evictors ---------------------------------------------------------------------------------------
class Evictor(ABC, Generic[T, W]):
    """Removes elements from a window's contents just before and/or after its window function runs.

    ``elements`` is the window's contents as a list of :class:`TimestampedValue` in
    arrival order; an evictor deletes from that list in place. With an evictor the
    window keeps every element, and reduce/aggregate run over what remains at firing.
    """

    class EvictorContext(ABC):
        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_current_watermark(self) -> int: ...

        @abstractmethod
        def get_metric_group(self) -> Any: ...

    @abstractmethod
    def evict_before(self, elements: list[TimestampedValue[Any]], size: int, window: W,
                     evictor_context: Evictor.EvictorContext) -> None: ...

    @abstractmethod
    def evict_after(self, elements: list[TimestampedValue[Any]], size: int, window: W,
                    evictor_context: Evictor.EvictorContext) -> None: ...


class CountEvictor(Evictor[Any, Window]):
    """Keeps at most the last ``max_count`` elements (before the function runs, or after it)."""

    def __init__(self, max_count: int, do_evict_after: bool = False) -> None:
        self.max_count = _positive_count("CountEvictor max_count", max_count)
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list[TimestampedValue[Any]]) -> None:
        if len(elements) > self.max_count:
            del elements[:len(elements) - self.max_count]

    def evict_before(self, elements: list[TimestampedValue[Any]], size: int, window: Window,
                     evictor_context: Evictor.EvictorContext) -> None:
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: list[TimestampedValue[Any]], size: int, window: Window,
                    evictor_context: Evictor.EvictorContext) -> None:
        if self.do_evict_after:
            self._evict(elements)

    def __repr__(self) -> str:
        return f"CountEvictor({self.max_count})"


class TimeEvictor(Evictor[Any, Window]):
    """Keeps only elements within ``window_size`` of the newest element's timestamp."""

    def __init__(self, window_size: Size, do_evict_after: bool = False) -> None:
        self.window_size = to_millis(window_size, "TimeEvictor window size")
        self.do_evict_after = do_evict_after

    @staticmethod
    def of(window_size: Size, do_evict_after: bool = False) -> TimeEvictor:
        return TimeEvictor(window_size, do_evict_after)

    def _evict(self, elements: list[TimestampedValue[Any]]) -> None:
        stamped = [e.timestamp for e in elements if e.timestamp is not None]
        if not stamped:
            return
        cutoff = max(stamped) - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def evict_before(self, elements: list[TimestampedValue[Any]], size: int, window: Window,
                     evictor_context: Evictor.EvictorContext) -> None:
        if not self.do_evict_after:
            self._evict(elements)

    def evict_after(self, elements: list[TimestampedValue[Any]], size: int, window: Window,
                    evictor_context: Evictor.EvictorContext) -> None:
        if self.do_evict_after:
            self._evict(elements)

    def __repr__(self) -> str:
        return f"TimeEvictor({self.window_size})"


# -- window functions -------------------------------------------------------------------------------
class _WindowContextBase(ABC, Generic[W]):
    """What a process window function learns about the window it evaluates."""

    @abstractmethod
    def window(self) -> W: ...

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def window_state(self) -> KeyedStateStore:
        """State scoped to the key and this window; clean it up in the function's ``clear``."""

    @abstractmethod
    def global_state(self) -> KeyedStateStore:
        """State scoped to the key, shared by all its windows."""

    @abstractmethod
    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to a side output (same as ``yield output_tag, value``)."""


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluates one window of one key; yields (or returns an iterable of) its outputs."""

    @abstractmethod
    def apply(self, key: KEY, window: W, inputs: Iterable[IN]) -> Iterable[OUT]: ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluates one window of an all-window (non-keyed) stream."""

    @abstractmethod
    def apply(self, window: W, inputs: Iterable[IN]) -> Iterable[OUT]: ...


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """Evaluates one window of one key with a context: the window, clocks, per-window state."""

    class Context(_WindowContextBase[NW], ABC):
        pass

    @abstractmethod
    def process(self, key: KEY, context: ProcessWindowFunction.Context[Any],
                elements: Iterable[IN]) -> Iterable[OUT]: ...

    def clear(self, context: ProcessWindowFunction.Context[Any]) -> None:
        """Called when the window is discarded (watermark past its end plus allowed lateness)."""


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """Evaluates one window of an all-window stream with a context."""

    class Context(_WindowContextBase[NW], ABC):
        pass

    @abstractmethod
    def process(self, context: ProcessAllWindowFunction.Context[Any], elements: Iterable[IN]) -> Iterable[OUT]: ...

    def clear(self, context: ProcessAllWindowFunction.Context[Any]) -> None:
        """Called when the window is discarded (watermark past its end plus allowed lateness)."""

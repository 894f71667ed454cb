"""User function classes, as in ``pyflink.datastream.functions``.

Users subclass these or pass plain callables; :func:`as_function` turns a callable
into the matching class so operators only ever see function objects. Process
functions yield their outputs; ``yield output_tag, value`` emits to a side output.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, Generic, TypeVar

from slipstream.attributes import OperatorAttributes
from slipstream.datastream.metrics import MetricGroup
from slipstream.errors import InvalidProgramError

IN = TypeVar("IN")
IN2 = TypeVar("IN2")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
ACC = TypeVar("ACC")


class TimeDomain(Enum):
    """Which clock fired a timer."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1


class TimerService(ABC):
    """Reads the clocks and registers timers for the current key."""

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def register_processing_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def register_event_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    @abstractmethod
    def delete_event_time_timer(self, timestamp: int) -> None: ...


class RuntimeContext(ABC):
    """What a function learns about where it runs, and its door to keyed state."""

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_attempt_number(self) -> int: ...

    def get_task_name_with_subtasks(self) -> str:
        return (f"{self.get_task_name()} ({self.get_index_of_this_subtask() + 1}"
                f"/{self.get_number_of_parallel_subtasks()})")

    @abstractmethod
    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None: ...

    @abstractmethod
    def get_metrics_group(self) -> MetricGroup:
        """The metric group of this subtask (see :mod:`slipstream.datastream.metrics`)."""

    @abstractmethod
    def get_state(self, state_descriptor: Any) -> Any: ...

    @abstractmethod
    def get_list_state(self, state_descriptor: Any) -> Any: ...

    @abstractmethod
    def get_map_state(self, state_descriptor: Any) -> Any: ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor: Any) -> Any: ...

    @abstractmethod
    def get_aggregating_state(self, state_descriptor: Any) -> Any: ...


class Function(ABC):  # noqa: B024  (an ABC as PyFlink's: users subclass it, no method is required)
    """Base of every user function: ``open`` before the first record, ``close`` after the last."""

    def open(self, runtime_context: RuntimeContext) -> None:
        """Set up: acquire state handles, connections. Default: nothing."""

    def close(self) -> None:
        """Tear down. Default: nothing."""

    def get_operator_attributes(self) -> OperatorAttributes | None:
        """Attributes this function declares for the operator running it (FLIP-327).

        For example a function that emits only at end of input returns
        ``OperatorAttributesBuilder().set_is_output_on_eof(True).build()``. None declares nothing.
        """
        return None


class MapFunction(Function, Generic[IN, OUT]):
    @abstractmethod
    def map(self, value: IN) -> OUT: ...


class FlatMapFunction(Function, Generic[IN, OUT]):
    @abstractmethod
    def flat_map(self, value: IN) -> Iterable[OUT]: ...


class FilterFunction(Function, Generic[IN]):
    @abstractmethod
    def filter(self, value: IN) -> bool: ...


class KeySelector(Function, Generic[IN, KEY]):
    @abstractmethod
    def get_key(self, value: IN) -> KEY: ...


class ReduceFunction(Function, Generic[IN]):
    @abstractmethod
    def reduce(self, value1: IN, value2: IN) -> IN: ...


class AggregateFunction(Function, Generic[IN, ACC, OUT]):
    @abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    def merge(self, acc_a: ACC, acc_b: ACC) -> ACC:
        raise NotImplementedError(f"{type(self).__name__} does not implement merge(), "
                                  "which merging (session) windows need")


class Partitioner(Function, Generic[KEY]):
    @abstractmethod
    def partition(self, key: KEY, num_partitions: int) -> int: ...


class BaseContext(ABC):
    """The context every process function receives."""

    @abstractmethod
    def timestamp(self) -> int | None:
        """Event timestamp of the current record, or None when it has none."""

    @abstractmethod
    def timer_service(self) -> TimerService: ...

    @abstractmethod
    def output(self, output_tag: Any, value: Any) -> None:
        """Emit ``value`` to the side output ``output_tag`` (same as ``yield output_tag, value``)."""

    @abstractmethod
    def is_backlog(self) -> bool:
        """Whether the record being processed is backlog (FLIP-327)."""


class ProcessFunction(Function, Generic[IN, OUT]):
    """Processes each record; yields outputs."""

    class Context(BaseContext, ABC):
        pass

    @abstractmethod
    def process_element(self, value: IN, ctx: ProcessFunction.Context) -> Iterable[OUT]: ...


class KeyedProcessFunction(Function, Generic[KEY, IN, OUT]):
    """Processes each record of a keyed stream with keyed state and timers; yields outputs."""

    class Context(BaseContext, ABC):
        @abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(Context, ABC):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element(self, value: IN, ctx: KeyedProcessFunction.Context) -> Iterable[OUT]: ...

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[OUT]:
        return ()


class CoMapFunction(Function):
    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function):
    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any]: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any]: ...


class CoProcessFunction(Function):
    class Context(BaseContext, ABC):
        pass

    @abstractmethod
    def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> Iterable[Any]: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> Iterable[Any]: ...


class KeyedCoProcessFunction(Function):
    class Context(BaseContext, ABC):
        @abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(Context, ABC):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element1(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Iterable[Any]: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Iterable[Any]: ...

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> Iterable[Any]:
        return ()


class BaseBroadcastProcessFunction(Function):
    """What :class:`BroadcastProcessFunction` and :class:`KeyedBroadcastProcessFunction` share, as
    PyFlink's: a function over a data stream connected with a broadcast stream, whose elements
    update broadcast state that every parallel instance holds a copy of."""

    class BaseContext(ABC):
        """The context of both sides: the element's timestamp, the clocks, side outputs."""

        @abstractmethod
        def timestamp(self) -> int | None:
            """Event timestamp of the element (or firing timer), None when it has none."""

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

        @abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            """Emit ``value`` to the side output ``output_tag`` (same as ``yield output_tag, value``)."""

        @abstractmethod
        def is_backlog(self) -> bool:
            """Whether the element being processed is backlog (FLIP-327)."""

    class Context(BaseContext, ABC):
        """The broadcast side's context: reads and writes the broadcast state."""

        @abstractmethod
        def get_broadcast_state(self, state_descriptor: Any) -> Any:
            """The ``BroadcastState`` described by the ``MapStateDescriptor`` given to ``broadcast``."""

    class ReadOnlyContext(BaseContext, ABC):
        """The data side's context: reads the broadcast state; changing it raises."""

        @abstractmethod
        def get_broadcast_state(self, state_descriptor: Any) -> Any:
            """A ``ReadOnlyBroadcastState`` view of the state described by ``state_descriptor``."""


class BroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[IN, IN2, OUT]):
    """Applied to a non-keyed stream connected with a broadcast stream
    (``ds.connect(rules.broadcast(descriptor)).process(fn)``), as PyFlink's: ``process_element``
    sees each record of the data stream with read-only broadcast state, ``process_broadcast_element``
    each broadcast element with writable broadcast state. Both yield outputs."""

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        pass

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        pass

    @abstractmethod
    def process_element(self, value: Any, ctx: BroadcastProcessFunction.ReadOnlyContext) -> Iterable[Any]: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: BroadcastProcessFunction.Context) -> Iterable[Any]: ...


class KeyedBroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[KEY, IN, IN2, OUT]):
    """Applied to a keyed stream connected with a broadcast stream, as PyFlink's: the data side
    also has keyed state and timers (``on_timer``); the broadcast side may visit every key's state
    with ``ctx.apply_to_keyed_state`` (Flink's Java ``applyToKeyedState``, which PyFlink lacks)."""

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        @abstractmethod
        def apply_to_keyed_state(self, state_descriptor: Any, function: Callable[[Any, Any], None]) -> None:
            """Call ``function(key, state)`` for every key of this subtask that has ``state_descriptor``'s
            state (``function`` may also be an object with ``process(key, state)``)."""

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        @abstractmethod
        def timer_service(self) -> TimerService: ...

        @abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(ReadOnlyContext, ABC):
        @abstractmethod
        def time_domain(self) -> TimeDomain: ...

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext) -> Iterable[Any]: ...

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: KeyedBroadcastProcessFunction.Context) -> Iterable[Any]: ...

    def on_timer(self, timestamp: int, ctx: KeyedBroadcastProcessFunction.OnTimerContext) -> Iterable[Any]:
        return ()


class _CallableFunction:
    """Mixin remembering the wrapped callable so names and errors can refer to it."""

    callable_: Callable[..., Any]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self.callable_, '__qualname__', self.callable_)!r})"


def _arity_accepts(fn: Callable[..., Any], count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments (True when unknowable)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def as_function(fn: Any, cls: type, method: str, arity: int, what: str) -> Any:
    """Return ``fn`` if it is a ``cls``; wrap a plain callable into one; refuse anything else.

    ``what`` names the API call (e.g. ``"DataStream.map"``) for the error message,
    and ``arity`` is how many positional arguments ``method`` receives.
    """
    if isinstance(fn, cls):
        return fn
    if isinstance(fn, Function):
        raise InvalidProgramError(f"{what} expects a {cls.__name__} or a callable, "
                                  f"got a {type(fn).__name__}")
    if not callable(fn):
        raise InvalidProgramError(f"{what} expects a {cls.__name__} or a callable, got {fn!r}")
    if not _arity_accepts(fn, arity):
        raise InvalidProgramError(f"{what}: the callable {getattr(fn, '__qualname__', fn)!r} "
                                  f"must accept {arity} positional argument(s) "
                                  f"(as {cls.__name__}.{method})")
    wrapper_cls = type(f"Callable{cls.__name__}", (_CallableFunction, cls), {
        method: staticmethod(fn),
        "__abstractmethods__": frozenset(),
    })
    wrapper = wrapper_cls()
    wrapper.callable_ = fn
    return wrapper


def function_name(fn: Any) -> str:
    """A readable name for a function object or the callable it wraps."""
    inner = getattr(fn, "callable_", fn)
    name = getattr(inner, "__name__", None) or type(inner).__name__
    return "lambda" if name == "<lambda>" else name


_WINDOW_FUNCTIONS = ("AllWindowFunction", "KeyedStateStore", "ProcessAllWindowFunction", "ProcessWindowFunction",
                     "WindowFunction")


def __getattr__(name: str) -> Any:
    """PyFlink keeps the window functions in this module too; they are defined with the windows
    (which import this module, hence the lazy look-up)."""
    if name in _WINDOW_FUNCTIONS:
        from slipstream.datastream import window
        return getattr(window, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AggregateFunction", "AllWindowFunction", "BaseBroadcastProcessFunction", "BaseContext",
           "BroadcastProcessFunction", "CoFlatMapFunction", "CoMapFunction", "CoProcessFunction", "FilterFunction",
           "FlatMapFunction", "Function", "KeySelector", "KeyedBroadcastProcessFunction", "KeyedCoProcessFunction",
           "KeyedProcessFunction", "KeyedStateStore", "MapFunction", "Partitioner", "ProcessAllWindowFunction",
           "ProcessFunction", "ProcessWindowFunction", "ReduceFunction", "RuntimeContext", "TimeDomain",
           "TimerService", "WindowFunction", "as_function", "function_name"]

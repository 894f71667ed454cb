"""``WindowedStream`` and ``AllWindowedStream``: what ``window``/``count_window`` return.

As in ``pyflink.datastream``, they collect the window's options (trigger, allowed
lateness, late-data side output, and — beyond PyFlink, as in Java Flink — an
evictor) and end in ``reduce``, ``aggregate``, ``apply`` or ``process`` (or, as in Java Flink,
the built-in ``sum``/``min``/``max``/``min_by``/``max_by`` of a field), which
appends one :class:`WindowTransformation` and returns the resulting ``DataStream``,
e.g. ``stream.key_by(k).window(TumblingEventTimeWindows.of(Time.seconds(5))).reduce(f)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slipstream.datastream.aggregation import aggregator
from slipstream.datastream.data_stream import DataStream, KeyedStream
from slipstream.datastream.functions import AggregateFunction, ReduceFunction, as_function, function_name
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import Duration, Time, to_millis
from slipstream.datastream.transformations import WindowTransformation
from slipstream.datastream.window import (
    AllWindowFunction,
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    Evictor,
    MergingWindowAssigner,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    Trigger,
    WindowAssigner,
    WindowFunction,
)
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.environment import StreamExecutionEnvironment


def _count_assigner(size: int, slide: int | None) -> WindowAssigner[Any, Any]:
    """PyFlink's choice: tumbling when ``slide`` is 0/None, else sliding count windows."""
    if slide is None or slide == 0:
        return CountTumblingWindowAssigner(size)
    return CountSlidingWindowAssigner(size, slide)


def _constant_key(_value: Any) -> int:
    """The key of every record of an all-window stream: they all meet in one subtask and one window set."""
    return 0


class _WindowedStreamBase:
    """What keyed and all-window streams share: options, validation and the transformation."""

    _api = "WindowedStream"
    _name_prefix = "Window"
    _window_function_classes: tuple[type, type] = (WindowFunction, ProcessWindowFunction)
    _apply_arity = 3

    def __init__(self, keyed: KeyedStream[Any], window_assigner: WindowAssigner[Any, Any]) -> None:
        if not isinstance(window_assigner, WindowAssigner):
            raise InvalidProgramError(f"{self._api} expects a WindowAssigner, got {window_assigner!r}")
        self._keyed = keyed
        self._assigner = window_assigner
        self._trigger: Trigger[Any, Any] | None = None
        self._evictor: Evictor[Any, Any] | None = None
        self._allowed_lateness = 0
        self._late_data_tag: OutputTag | None = None

    def get_execution_environment(self) -> StreamExecutionEnvironment:
        return self._keyed.get_execution_environment()

    def get_input_type(self) -> Any:
        return self._keyed.get_type()

    # -- options ---------------------------------------------------------------------------------
    def trigger(self, trigger: Trigger[Any, Any]) -> Any:
        """Replace the assigner's default trigger."""
        if not isinstance(trigger, Trigger):
            raise InvalidProgramError(f"{self._api}.trigger expects a Trigger, got {trigger!r}")
        if isinstance(self._assigner, MergingWindowAssigner) and not trigger.can_merge():
            raise InvalidProgramError(f"{self._api}.trigger: {trigger!r} cannot merge windows, which the "
                                      f"merging assigner {self._assigner!r} needs (can_merge() is False)")
        self._trigger = trigger
        return self

    def evictor(self, evictor: Evictor[Any, Any]) -> Any:
        """Evict elements before/after the window function runs (Java Flink's ``evictor``)."""
        if not isinstance(evictor, Evictor):
            raise InvalidProgramError(f"{self._api}.evictor expects an Evictor, got {evictor!r}")
        self._evictor = evictor
        return self

    def allowed_lateness(self, time_ms: int | Duration | Time) -> Any:
        """Keep event-time windows this long past their end, re-firing them for late elements."""
        lateness = to_millis(time_ms, "allowed lateness")
        if lateness < 0:
            raise InvalidProgramError(f"{self._api}.allowed_lateness must not be negative, got {lateness}")
        self._allowed_lateness = lateness
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> Any:
        """Send elements too late for any window to ``output_tag`` instead of dropping them."""
        if not isinstance(output_tag, OutputTag):
            raise InvalidProgramError(f"{self._api}.side_output_late_data expects an OutputTag, "
                                      f"got {output_tag!r}")
        self._late_data_tag = output_tag
        return self

    # -- functions -------------------------------------------------------------------------------
    def _window_function(self, fn: Any, what: str) -> Any:
        """Accept either window-function class (plain or process) or a callable as the plain one."""
        if isinstance(fn, self._window_function_classes):
            return fn
        plain = self._window_function_classes[0]
        return as_function(fn, plain, "apply", self._apply_arity, what)

    def reduce(self, reduce_function: ReduceFunction[Any] | Callable[[Any, Any], Any],
               window_function: Any = None, output_type: Any = None) -> DataStream[Any]:
        """Combine each window's elements pairwise as they arrive; emit the result when it fires
        (through ``window_function`` when given)."""
        function = as_function(reduce_function, ReduceFunction, "reduce", 2, f"{self._api}.reduce")
        wrapped = None if window_function is None else \
            self._window_function(window_function, f"{self._api}.reduce")
        if wrapped is None and output_type is None:
            output_type = self.get_input_type()
        return self._build("reduce", function, wrapped, output_type)

    def aggregate(self, aggregate_function: AggregateFunction[Any, Any, Any], window_function: Any = None,
                  accumulator_type: Any = None, output_type: Any = None) -> DataStream[Any]:
        """Fold each window's elements into an accumulator as they arrive; emit
        ``get_result`` when it fires (through ``window_function`` when given)."""
        if not isinstance(aggregate_function, AggregateFunction):
            raise InvalidProgramError(f"{self._api}.aggregate expects an AggregateFunction, "
                                      f"got {aggregate_function!r}")
        wrapped = None if window_function is None else \
            self._window_function(window_function, f"{self._api}.aggregate")
        return self._build("aggregate", aggregate_function, wrapped, output_type)

    def apply(self, window_function: Any, output_type: Any = None) -> DataStream[Any]:
        """Evaluate each window with a window function given all its elements."""
        plain = self._window_function_classes[0]
        function = as_function(window_function, plain, "apply", self._apply_arity, f"{self._api}.apply")
        return self._build("apply", function, None, output_type)

    def process(self, process_window_function: Any, output_type: Any = None) -> DataStream[Any]:
        """Evaluate each window with a process window function (context, per-window state)."""
        cls = self._window_function_classes[1]
        function = as_function(process_window_function, cls, "process", self._apply_arity,
                               f"{self._api}.process")
        return self._build("process", function, None, output_type)

    def sum(self, position_to_sum: int | str = 0) -> DataStream[Any]:
        """Each window's sum of a field; the other fields come from the window's first record
        (Java Flink's ``WindowedStream.sum``): ``reduce`` with a :class:`SumAggregator`."""
        return self.reduce(aggregator("sum", position_to_sum))

    def min(self, position_to_min: int | str = 0) -> DataStream[Any]:
        """Each window's minimum of a field; the other fields come from the window's first record."""
        return self.reduce(aggregator("min", position_to_min))

    def max(self, position_to_max: int | str = 0) -> DataStream[Any]:
        """Each window's maximum of a field; the other fields come from the window's first record."""
        return self.reduce(aggregator("max", position_to_max))

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream[Any]:
        """Each window's record with the smallest field (the first such record on ties)."""
        return self.reduce(aggregator("min_by", position_to_min_by))

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream[Any]:
        """Each window's record with the largest field (the first such record on ties)."""
        return self.reduce(aggregator("max_by", position_to_max_by))

    def _build(self, kind: str, function: Any, window_function: Any, output_type: Any) -> DataStream[Any]:
        trigger = self._trigger or self._assigner.get_default_trigger(self.get_execution_environment())
        parts = [repr(self._assigner), repr(trigger)]
        if self._evictor is not None:
            parts.append(repr(self._evictor))
        parts.append(function_name(function))
        if window_function is not None:
            parts.append(function_name(window_function))
        prefix = ("Evicting" if self._evictor is not None else "") + self._name_prefix
        transformation = self._keyed._append(
            WindowTransformation, f"{prefix}({', '.join(parts)})", output_type=output_type,
            assigner=self._assigner, trigger=trigger, evictor=self._evictor,
            allowed_lateness=self._allowed_lateness, late_data_tag=self._late_data_tag,
            function_kind=kind, function=function, window_function=window_function)
        return self._result(DataStream(self._keyed.get_execution_environment(), transformation))

    def _result(self, stream: DataStream[Any]) -> DataStream[Any]:
        return stream


class WindowedStream(_WindowedStreamBase):
    """A keyed stream cut into windows per key, as ``pyflink.datastream.WindowedStream``.

    Window functions are :class:`WindowFunction` (``apply(key, window, inputs)``) or
    :class:`ProcessWindowFunction` (``process(key, context, elements)``); plain
    callables with those arguments are accepted too.
    """

    def __init__(self, keyed_stream: KeyedStream[Any], window_assigner: WindowAssigner[Any, Any]) -> None:
        if not isinstance(keyed_stream, KeyedStream):
            raise InvalidProgramError(f"WindowedStream needs a KeyedStream, got {keyed_stream!r}")
        super().__init__(keyed_stream, window_assigner)

    @classmethod
    def count(cls, keyed_stream: KeyedStream[Any], size: int, slide: int | None = None) -> WindowedStream:
        """Count windows of ``size`` elements per key (sliding by ``slide`` when given)."""
        return cls(keyed_stream, _count_assigner(size, slide))


class AllWindowedStream(_WindowedStreamBase):
    """A whole stream cut into windows, as ``pyflink.datastream.AllWindowedStream``.

    All records go to one subtask (the operator runs at parallelism 1, as in Flink).
    Window functions are :class:`AllWindowFunction` (``apply(window, inputs)``) or
    :class:`ProcessAllWindowFunction` (``process(context, elements)``).
    """

    _api = "AllWindowedStream"
    _window_function_classes = (AllWindowFunction, ProcessAllWindowFunction)
    _apply_arity = 2
    _name_prefix = "AllWindow"

    def __init__(self, data_stream: DataStream[Any], window_assigner: WindowAssigner[Any, Any]) -> None:
        if not isinstance(data_stream, DataStream):
            raise InvalidProgramError(f"AllWindowedStream needs a DataStream, got {data_stream!r}")
        super().__init__(data_stream.key_by(_constant_key), window_assigner)

    @classmethod
    def count(cls, data_stream: DataStream[Any], size: int, slide: int | None = None) -> AllWindowedStream:
        """Count windows of ``size`` elements of the whole stream (sliding by ``slide`` when given)."""
        return cls(data_stream, _count_assigner(size, slide))

    def _result(self, stream: DataStream[Any]) -> DataStream[Any]:
        return stream.set_parallelism(1).set_max_parallelism(1)

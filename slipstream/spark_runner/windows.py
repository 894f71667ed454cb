"""Keyed event-time windows on Spark, as a keyed process function (``transformWithState``).

Flink's window operator with its default trigger fires a window when the watermark passes its
end, again for each late element within the allowed lateness, and drops its contents once the
watermark passes its end plus that lateness. :class:`EventTimeWindows` does the same with a
keyed process function's state and timers, which the Spark runner maps onto Spark's handle
(:mod:`slipstream.spark_runner.keyed`): each open window's contents (the elements, the reduced
value or the accumulator) in a map state by window start, an event-time timer at its end and one
at its cleanup time. Results carry the window's ``max_timestamp()``, as on the embedded runtime
(but for a firing caused by a late element, whose results carry that element's timestamp).

Spark's watermark advances once per micro-batch, so windows fire at the end of the micro-batch
that passed them; an element behind Spark's watermark is late by the same rule, so what is late
can differ from the embedded runtime, whose watermark follows each record.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.state import MapStateDescriptor
from slipstream.datastream.transformations import WindowTransformation
from slipstream.datastream.window import (
    AllWindowFunction,
    EventTimeTrigger,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    WindowFunction,
)
from slipstream.errors import SlipstreamError

WINDOWS_STATE = "windows"
"""The map state of a window operator on Spark: window start -> the window's contents."""


def unsupported(transformation: WindowTransformation) -> str | None:
    """Why the window operator ``transformation`` cannot run on Spark (None: it can)."""
    if not isinstance(transformation.assigner, (TumblingEventTimeWindows, SlidingEventTimeWindows)):
        return (f"its windows ({transformation.assigner!r}) are not tumbling or sliding event-time windows: "
                "session windows merge, count and processing-time windows fire by what Spark's "
                "micro-batches do not keep (arrival counts, the clock per record)")
    if type(transformation.trigger) is not EventTimeTrigger:
        return f"its trigger ({type(transformation.trigger).__name__}) is not the default EventTimeTrigger"
    if transformation.evictor is not None:
        return "it has an evictor"
    return None


class EventTimeWindows(KeyedProcessFunction[Any, Any, Any]):
    """The window operator ``transformation`` (see :func:`unsupported` for the forms) as a keyed
    process function."""

    def __init__(self, transformation: WindowTransformation) -> None:
        self.name = transformation.name
        self.assigner = transformation.assigner
        self.lateness = transformation.allowed_lateness
        self.late_tag = transformation.late_data_tag
        self.kind = transformation.function_kind
        self.function = transformation.function
        self.window_function = transformation.window_function

    def open(self, runtime_context: Any) -> None:
        self.windows = runtime_context.get_map_state(MapStateDescriptor(WINDOWS_STATE))
        for function in (self.function, self.window_function):
            if function is not None:
                function.open(runtime_context)

    def close(self) -> None:
        for function in (self.function, self.window_function):
            if function is not None:
                function.close()

    # -- elements ----------------------------------------------------------------------------------
    def process_element(self, value: Any, ctx: Any) -> Iterator[Any]:
        timestamp = ctx.timestamp()
        if timestamp is None:
            raise SlipstreamError(f"window operator '{self.name}' got a record without a timestamp: {value!r} "
                                  "(assign timestamps and watermarks before it)")
        timers = ctx.timer_service()
        watermark = timers.current_watermark()
        late = True
        for window in self.assigner.assign_windows(value, timestamp, None):
            if window.max_timestamp() + self.lateness <= watermark:
                continue  # past its cleanup time: the element is late for this window
            late = False
            start = window.start
            self.windows.put(start, self._added(value, self.windows.get(start)))
            if self.lateness:
                timers.register_event_time_timer(window.max_timestamp() + self.lateness)
            if window.max_timestamp() <= watermark:  # late within the lateness: fires again now
                yield from self._fire(window, ctx)
            else:
                timers.register_event_time_timer(window.max_timestamp())
        if late and self.late_tag is not None:
            yield self.late_tag, value

    def _added(self, value: Any, contents: Any) -> Any:
        if self.kind == "reduce":
            return value if contents is None else self.function.reduce(contents, value)
        if self.kind == "aggregate":
            accumulator = self.function.create_accumulator() if contents is None else contents
            return self.function.add(value, accumulator)
        return [value] if contents is None else [*contents, value]

    # -- timers ------------------------------------------------------------------------------------
    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        size = self.assigner.size
        for start in sorted(self.windows.keys()):
            window = TimeWindow(start, start + size)
            if window.max_timestamp() == timestamp:
                yield from self._fire(window, ctx)
            if window.max_timestamp() + self.lateness <= timestamp:
                self._clear(window, ctx)

    def _fire(self, window: TimeWindow, ctx: Any) -> Iterator[Any]:
        contents = self.windows.get(window.start)
        if self.kind == "aggregate":
            inputs = [self.function.get_result(contents)]
        else:
            inputs = [contents] if self.kind == "reduce" else list(contents)
        evaluator = self.function if self.kind in ("apply", "process") else self.window_function
        if evaluator is None:
            yield from inputs
            return
        key = ctx.get_current_key()
        if isinstance(evaluator, WindowFunction):
            results = evaluator.apply(key, window, inputs)
        elif isinstance(evaluator, AllWindowFunction):
            results = evaluator.apply(window, inputs)
        elif isinstance(evaluator, ProcessWindowFunction):
            results = evaluator.process(key, _WindowContext(self.name, window, ctx), inputs)
        else:
            results = evaluator.process(_WindowContext(self.name, window, ctx), inputs)
        yield from results or ()

    def _clear(self, window: TimeWindow, ctx: Any) -> None:
        self.windows.remove(window.start)
        evaluator = self.function if self.kind == "process" else self.window_function
        if isinstance(evaluator, (ProcessWindowFunction, ProcessAllWindowFunction)):
            evaluator.clear(_WindowContext(self.name, window, ctx))


class _WindowContext(ProcessWindowFunction.Context[TimeWindow], ProcessAllWindowFunction.Context[TimeWindow]):
    """What a process window function learns on Spark: the window, the clocks, side outputs."""

    def __init__(self, name: str, window: TimeWindow, ctx: Any) -> None:
        self._name, self._window, self._ctx = name, window, ctx

    def window(self) -> TimeWindow:
        return self._window

    def current_processing_time(self) -> int:
        result: int = self._ctx.timer_service().current_processing_time()
        return result

    def current_watermark(self) -> int:
        result: int = self._ctx.timer_service().current_watermark()
        return result

    def window_state(self) -> Any:
        raise SlipstreamError(f"window operator '{self._name}': per-window state (window_state) is not mapped on "
                              "the Spark runner; run the job on the embedded runtime")

    def global_state(self) -> Any:
        raise SlipstreamError(f"window operator '{self._name}': per-key state of a window function "
                              "(global_state) is not mapped on the Spark runner; run the job on the embedded runtime")

    def output(self, output_tag: Any, value: Any) -> None:
        self._ctx.output(output_tag, value)


__all__ = ["WINDOWS_STATE", "EventTimeWindows", "unsupported"]

"""Event-time windows over a sorted backlog, key by key: each window function called once per window.

Streaming a window operator costs, per record, a trigger call, a namespaced state update
and a timer registration. For the common case — time windows that do not merge (tumbling,
sliding), the default :class:`~slipstream.datastream.window.EventTimeTrigger`, no evictor, no
allowed lateness, and no windows pending from before the backlog — the backlog can instead
be run a key at a time (:class:`~slipstream.operators.key_replay.KeyReplay`) with the key's
open windows in a local dict: each record is added to its windows (appended, or folded with
the reduce/aggregate function); what streaming would drop as late is dropped (or side-output)
here too, since each record is judged at the watermark it arrived at. Once the key's records
are in, its windows that end by the backlog's last watermark are evaluated in order of their
ends, each once, with all its rows, at the watermark that fires it when streaming (the first
held one at or after its end), its output filed before that watermark. No record can join a
window after that watermark (it would be late), so evaluating them after the key's last
record gives what firing them between its records gives: the window function sees the same
windows, rows, watermarks and keyed state in the same order (only its calls and the
reduce/aggregate function's calls for other windows interleave otherwise). Windows still open
when the backlog ends are installed in the operator's state with their timers, so streaming
goes on from them.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.window import (
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
)
from slipstream.errors import user_code
from slipstream.operators.base import split_outputs
from slipstream.operators.key_replay import KeyReplay

if TYPE_CHECKING:
    from slipstream.operators.window import WindowOperator


def replays_windows_by_key(operator: WindowOperator) -> bool:
    """Whether ``operator``'s backlog can run key by key here (see the module docstring; a
    co-group's two inputs go their own way)."""
    return (operator.num_inputs == 1 and type(operator.assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
            and operator.uses_default_event_time_trigger() and operator.allowed_lateness == 0
            and operator.timers is not None
            and not operator.timers.num_event_time_timers() and not operator.timers.num_processing_time_timers())


class _KeyWindows:
    """The current key's open windows during the replay: their contents in a local dict by window start
    (an int: cheaper to hash and compare than a :class:`~slipstream.datastream.window.TimeWindow`, which
    is made only for the window function and for the windows installed at the end)."""

    def __init__(self, operator: WindowOperator) -> None:
        self.operator = operator
        self.size: int = operator.assigner.size  # type: ignore[attr-defined]  # tumbling or sliding
        self.kind = operator.kind
        self.function = operator.function
        evaluator = operator._evaluator()
        self.evaluator = evaluator
        self._clears = isinstance(evaluator, (ProcessWindowFunction, ProcessAllWindowFunction))
        function = self.function
        if self.kind == "reduce":
            self._fold: Any = lambda value, current: function.reduce(current, value)
            self._first: Any = lambda value: value
        elif self.kind == "aggregate":
            self._fold = function.add
            self._first = lambda value: function.add(value, function.create_accumulator())
        self.add = self._add_folded if self.kind in ("reduce", "aggregate") else self._add_row
        """``add(start, value)``: the record joins the window at ``start`` (appended, or folded into it)."""
        self.open: dict[int, Any] = {}
        self.firing = 0
        """The start of the window being evaluated, which :attr:`guard` names when its function fails."""
        self.guard = user_code(operator, lambda: self.window(self.firing),
                               what=lambda: f"key {operator.backend.get_current_key()!r}, window")

    def _add_row(self, start: int, value: Any) -> None:
        rows = self.open.get(start)
        if rows is not None:
            rows.append(value)
        else:
            self.open[start] = [value]

    def _add_folded(self, start: int, value: Any) -> None:
        current = self.open.get(start)
        self.open[start] = self._first(value) if current is None else self._fold(value, current)

    def window(self, start: int) -> TimeWindow:
        """The window at ``start``."""
        return TimeWindow(start, start + self.size)

    def clear(self, window: Any) -> None:
        """A fired window is gone: its window function clears its per-window state (its contents
        and trigger never reached the operator's state)."""
        if self._clears:
            context = self.operator.window_context
            context.current_window = window
            self.operator._evaluator().clear(context)

    def inputs(self, contents: Any) -> list[Any]:
        """What the window function gets for a window holding ``contents``."""
        if self.kind == "aggregate":
            return [self.function.get_result(contents)]
        return [contents] if self.kind == "reduce" else contents


def replay_windows(operator: WindowOperator, replay: KeyReplay) -> None:
    """Run the backlog key by key (:func:`replays_windows_by_key` must hold), then send it on.

    A record's windows are computed as their starts, as the assigner computes them: the window of
    ``size`` whose start is ``offset`` plus a multiple of ``slide`` (tumbling: of ``size``) at or before
    the timestamp, and for sliding windows every ``slide`` earlier one that still holds it."""
    assigner: Any = operator.assigner  # tumbling or sliding event-time windows (replays_windows_by_key)
    size, offset = assigner.size, assigner.offset
    slide = getattr(assigner, "slide", size)
    held = replay.held
    outputs = replay.outputs
    windows = _KeyWindows(operator)
    add = windows.add
    value: Any = None
    with user_code(operator, lambda: value):
        for key, intervals, stamps, values in replay.runs():
            windows.open = {}
            level = -1
            watermark = held[0]
            for index, value in enumerate(values):
                if intervals[index] != level:
                    level = outputs.interval = intervals[index]
                    watermark = held[level]
                timestamp = stamps[index]
                if timestamp is None:
                    operator.assigner.assign_windows(value, None, operator.assigner_context)  # raises, naming it
                # the windows holding the record start after `timestamp - size`; those the watermark left
                # open (their max_timestamp() after it), after `watermark - size + 1`
                bound = (timestamp if timestamp > watermark else watermark + 1) - size  # type: ignore[operator]
                start = timestamp - (timestamp - offset) % slide
                if start > bound:
                    while start > bound:
                        add(start, value)
                        start -= slide
                elif timestamp <= watermark:  # type: ignore[operator]  # late in every window
                    operator._late(value, timestamp)
                    operator._flush()
            _fire_due(operator, replay, windows, key)
            _install(operator, windows)
    replay.emit()


def _fire_due(operator: WindowOperator, replay: KeyReplay, windows: _KeyWindows, key: Any) -> None:
    """Evaluate the key's windows that end by the last held watermark in order of their ends, each
    at the watermark that fires it and filed before that watermark, and forget them."""
    held = replay.held
    last = replay.last
    open_windows = windows.open
    last_start = held[last] - windows.size + 1  # the windows starting by it end by the last watermark
    due = sorted(start for start in open_windows if start <= last_start)
    if not due:
        return
    outputs = replay.outputs
    size = windows.size
    call = operator._call_evaluator
    inputs = windows.inputs
    make_window = windows.evaluator is not None  # without a window function, nothing sees the window
    clear = windows.clear if windows._clears else None
    tag_type = OutputTag
    at, fired_at = 1, 0
    out_values: list[Any] = []
    out_stamps: list[int | None] = []
    with windows.guard:
        for start in due:
            end = start + size - 1  # the window's max_timestamp()
            at = bisect_left(held, end, at, last + 1)
            if at != fired_at:
                if operator._side:
                    operator._flush()  # the side outputs of the windows fired by the watermark before
                fired_at = at
                replay.set_watermark(held[at])
                outputs.interval = at - 1  # fired by watermark `at`: before it goes downstream
                out_values, out_stamps = outputs.timestamped_lists()
            windows.firing = start
            window = windows.window(start) if make_window else None
            for out in call(key, window, inputs(open_windows.pop(start))) or ():  # type: ignore[arg-type]
                if type(out) is tuple and len(out) == 2 and isinstance(out[0], tag_type):
                    split_outputs([out], end, out_values, out_stamps, operator._side)
                else:
                    out_values.append(out)
                    out_stamps.append(end)
            if clear is not None:
                clear(window)
    if operator._side:
        operator._flush()


def _install(operator: WindowOperator, windows: _KeyWindows) -> None:
    """Put the key's windows still open into the operator's state, each with its timer."""
    contents = operator.contents
    for start, held in windows.open.items():
        window = windows.window(start)
        contents.set_current_namespace(window)
        if windows.kind == "aggregate":
            contents.set_accumulator(held)
        elif windows.kind == "reduce":
            contents.add(held)
        else:
            contents.update(held)
        operator.timers.register_event_time_timer(window, window.max_timestamp())

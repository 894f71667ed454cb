"""Event-time windows over a sorted backlog, key by key: each window function called once per window.

Streaming a window operator costs, per record, a trigger call, a namespaced state update
and a timer registration. For the common case — time windows that do not merge (tumbling,
sliding), the default :class:`~slipstream.datastream.window.EventTimeTrigger`, no evictor, no
allowed lateness, and no windows pending from before the backlog — the backlog can instead
be run a key at a time (:class:`~slipstream.operators.key_replay.KeyReplay`) with the key's
open windows in a local dict: each record is added to its windows (appended, or folded with
the reduce/aggregate function), and a window is evaluated once, with all its rows, when the
watermark its record stream reached passes its end; what streaming would drop as late is
dropped (or side-output) here too, since each record is judged at the watermark it arrived at.
Windows still open when the backlog ends are installed in the operator's state with their
timers, so streaming goes on from them.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.window import (
    EventTimeTrigger,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from slipstream.errors import user_code
from slipstream.operators.key_replay import KeyReplay

if TYPE_CHECKING:
    from slipstream.operators.window import WindowOperator


def replays_windows_by_key(operator: WindowOperator) -> bool:
    """Whether ``operator``'s backlog can run key by key here (see the module docstring; a
    co-group's two inputs go their own way)."""
    return (operator.num_inputs == 1 and isinstance(operator.assigner, (TumblingEventTimeWindows,
                                                                            SlidingEventTimeWindows))
            and type(operator.trigger) is EventTimeTrigger and operator.evictor is None
            and operator.allowed_lateness == 0 and operator.timers is not None
            and not operator.timers.num_event_time_timers() and not operator.timers.num_processing_time_timers())


class _KeyWindows:
    """The current key's open windows during the replay: their contents, in a local dict."""

    def __init__(self, operator: WindowOperator) -> None:
        self.operator = operator
        self.kind = operator.kind
        self.function = operator.function
        evaluator = operator._evaluator()
        self._clears = isinstance(evaluator, (ProcessWindowFunction, ProcessAllWindowFunction))
        function = self.function
        if self.kind == "reduce":
            self._fold: Any = lambda value, current: function.reduce(current, value)
            self._first: Any = lambda value: value
        elif self.kind == "aggregate":
            self._fold = function.add
            self._first = lambda value: function.add(value, function.create_accumulator())
        self.add = self._add_folded if self.kind in ("reduce", "aggregate") else self._add_row
        """``add(window, value)``: the record joins the window (appended, or folded into it)."""
        self.open: dict[Any, Any] = {}
        self.next_end = MAX_TIMESTAMP
        """The least ``max_timestamp()`` of the open windows: nothing fires before it."""

    def reset(self) -> None:
        """The next key: no window open."""
        self.open = {}
        self.next_end = MAX_TIMESTAMP

    def _add_row(self, window: Any, value: Any) -> None:
        rows = self.open.get(window)
        if rows is not None:
            rows.append(value)
            return
        self.open[window] = [value]
        self._opened(window)

    def _add_folded(self, window: Any, value: Any) -> None:
        current = self.open.get(window)
        if current is not None:
            self.open[window] = self._fold(value, current)
            return
        self.open[window] = self._first(value)
        self._opened(window)

    def _opened(self, window: Any) -> None:
        if window.end <= self.next_end:
            self.next_end = window.end - 1

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
    """Run the backlog key by key (:func:`replays_windows_by_key` must hold), then send it on."""
    assign = operator.assigner.assign_windows
    assigner_context = operator.assigner_context
    held = replay.held
    windows = _KeyWindows(operator)
    add = windows.add
    value: Any = None
    with user_code(operator, lambda: value):
        for _key, intervals, stamps, values in replay.runs():
            windows.reset()
            level = -1
            for index, value in enumerate(values):
                if intervals[index] != level:
                    if windows.next_end <= held[intervals[index]]:
                        _fire_due(operator, replay, windows, level, intervals[index])
                    level = replay.outputs.interval = intervals[index]
                    watermark = held[level]
                timestamp = stamps[index]
                on_time = False
                for window in assign(value, timestamp, assigner_context):
                    if window.end > watermark + 1:  # its max_timestamp() is after the watermark
                        add(window, value)
                        on_time = True
                if not on_time and timestamp is not None and timestamp <= watermark:
                    operator._late(value, timestamp)
                    operator._flush()
            _fire_due(operator, replay, windows, max(level, 0), replay.last)
            _install(operator, windows)
    replay.emit()


def _fire_due(operator: WindowOperator, replay: KeyReplay, windows: _KeyWindows, level: int, interval: int) -> None:
    """Evaluate the key's windows that end by watermark ``interval``, each at the watermark that
    fires it, in order of their ends, and forget them."""
    held = replay.held
    if level < 0 or windows.next_end > held[interval]:
        return
    open_windows = windows.open
    if len(open_windows) == 1:
        due = list(open_windows)  # the one window ends at next_end: it is due
    else:
        due = sorted((window for window in open_windows if window.max_timestamp() <= held[interval]),
                     key=lambda window: window.max_timestamp())
    outputs = replay.outputs
    at = level + 1
    fired_at = -1
    window: Any = None
    guard = user_code(operator, lambda: window, what=lambda: f"key {operator.backend.get_current_key()!r}, window")
    for window in due:
        at = bisect_left(held, window.max_timestamp(), at, interval + 1)
        if at != fired_at:
            operator._flush()
            fired_at = at
            replay.set_watermark(held[at])
            outputs.interval = at - 1  # fired by watermark `at`: before it goes downstream
        with guard:
            operator._evaluate(window, windows.inputs(open_windows.pop(window)))
            windows.clear(window)
    operator._flush()
    windows.next_end = min((window.max_timestamp() for window in open_windows), default=MAX_TIMESTAMP)
    outputs.interval = level


def _install(operator: WindowOperator, windows: _KeyWindows) -> None:
    """Put the key's windows still open into the operator's state, each with its timer."""
    contents = operator.contents
    for window, held in windows.open.items():
        contents.set_current_namespace(window)
        if windows.kind == "aggregate":
            contents.set_accumulator(held)
        elif windows.kind == "reduce":
            contents.add(held)
        else:
            contents.update(held)
        operator.timers.register_event_time_timer(window, window.max_timestamp())

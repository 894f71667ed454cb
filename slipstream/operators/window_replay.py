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
    TimeWindow,
    TumblingEventTimeWindows,
)
from slipstream.errors import user_code
from slipstream.operators.key_replay import KeyReplay

if TYPE_CHECKING:
    from slipstream.operators.window import WindowOperator


def replays_windows_by_key(operator: WindowOperator) -> bool:
    """Whether ``operator``'s backlog can run key by key here (see the module docstring; a
    co-group's two inputs go their own way)."""
    return (operator.num_inputs == 1 and type(operator.assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
            and type(operator.trigger) is EventTimeTrigger and operator.evictor is None
            and operator.allowed_lateness == 0 and operator.timers is not None
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
        self.firing: Any = None
        """The window being evaluated, which :attr:`guard` names when its function fails."""
        self.guard = user_code(operator, lambda: self.firing,
                               what=lambda: f"key {operator.backend.get_current_key()!r}, window")
        self.next_end = MAX_TIMESTAMP
        """The least ``max_timestamp()`` of the open windows: nothing fires before it."""

    def reset(self) -> None:
        """The next key: no window open."""
        self.open = {}
        self.next_end = MAX_TIMESTAMP

    def _add_row(self, start: int, value: Any) -> None:
        rows = self.open.get(start)
        if rows is not None:
            rows.append(value)
            return
        self.open[start] = [value]
        self._opened(start)

    def _add_folded(self, start: int, value: Any) -> None:
        current = self.open.get(start)
        if current is not None:
            self.open[start] = self._fold(value, current)
            return
        self.open[start] = self._first(value)
        self._opened(start)

    def _opened(self, start: int) -> None:
        self.next_end = min(self.next_end, start + self.size - 1)

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
    last_start = held[interval] - windows.size + 1  # the windows starting by it end by the watermark
    if len(open_windows) == 1:
        due = list(open_windows)  # the one window ends at next_end: it is due
    else:
        due = sorted(start for start in open_windows if start <= last_start)
    outputs = replay.outputs
    at = level + 1
    fired_at = -1
    guard = windows.guard
    for start in due:
        window = windows.firing = windows.window(start)
        at = bisect_left(held, start + windows.size - 1, at, interval + 1)
        if at != fired_at:
            operator._flush()
            fired_at = at
            replay.set_watermark(held[at])
            outputs.interval = at - 1  # fired by watermark `at`: before it goes downstream
        with guard:
            operator._evaluate(window, windows.inputs(open_windows.pop(start)))
            windows.clear(window)
    operator._flush()
    windows.next_end = min(open_windows, default=MAX_TIMESTAMP - windows.size + 1) + windows.size - 1
    outputs.interval = level


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

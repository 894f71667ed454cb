"""``KeyReplay``: a sorted backlog replayed key by key, with each key's state set once per key.

The interval-by-interval replay of :mod:`slipstream.operators.backlog` hands the records to
``process_batch`` in watermark order, which costs what streaming them costs plus the sort.
A keyed operator's results for one key depend only on that key's records, its state, its
timers and the watermark each record arrived at, so a key's whole backlog can be run at once
(one ``set_current_key`` per key, the operator's tight loop over the key's records) provided
that:

* each record is processed at the watermark it arrived at (its *interval* in the sort
  buffer) — :meth:`KeyReplay.advance` sets the operator's event time to it;
* the key's event-time timers fire at the watermark that would have fired them while
  streaming, in timestamp order, before the key's records of later intervals —
  :meth:`KeyReplay.advance` fires them (and at the end of the key's run, every timer due
  by the last held watermark);
* what the key emits reaches downstream between the same watermarks as when streaming:
  outputs are filed per interval (:class:`IntervalOutputs`) and at the end sent interval
  by interval with the held watermarks between them (:meth:`KeyReplay.emit`).

Within one watermark interval outputs come key by key (each key's in its own order), as the
interval replay gives them. In BATCH mode every record is in one interval and the key's
timers fire at the end of its run, after all its records (Flink's sorted BATCH execution).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from slipstream.attributes import RecordAttributes
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import Watermark
from slipstream.errors import SlipstreamError
from slipstream.operators.base import Output
from slipstream.operators.elements import RecordBatch, WatermarkStatus
from slipstream.operators.sort_buffer import SortBuffer
from slipstream.operators.timers import InternalTimer

if TYPE_CHECKING:
    from slipstream.operators.backlog import BacklogSortingOperator


class IntervalOutputs(Output):
    """What a key-by-key replay emits, filed under the watermark interval it belongs to
    (:attr:`interval`, set by the replay); :meth:`flush` sends one interval's on."""

    def __init__(self, intervals: int, name: str, timestamped: bool) -> None:
        self.interval = 0
        self.name = name
        self.values: list[list[Any]] = [[] for _ in range(intervals)]
        """Per interval, the values sent on (a tight loop may append to them directly)."""
        self.stamps: list[list[int | None]] = [[] for _ in range(intervals)]
        """Per interval, the values' timestamps (they count where ``timestamped`` or a batch had some)."""
        self._timestamped = [timestamped] * intervals
        self._sides: list[list[tuple[OutputTag, RecordBatch]]] = [[] for _ in range(intervals)]

    def collect_batch(self, batch: RecordBatch) -> None:
        interval = self.interval
        self.values[interval].extend(batch.values)
        if batch.timestamps is None:
            self.stamps[interval].extend([None] * len(batch.values))
        else:
            self._timestamped[interval] = True
            self.stamps[interval].extend(batch.timestamps)

    def timestamped_lists(self) -> tuple[list[Any], list[int | None]]:
        """The current interval's lists of values and timestamps, for outputs that all carry one."""
        interval = self.interval
        self._timestamped[interval] = True
        return self.values[interval], self.stamps[interval]

    def collect_side(self, tag: OutputTag, batch: RecordBatch) -> None:
        self._sides[self.interval].append((tag, batch))

    def _refuse(self, event: object) -> None:
        raise SlipstreamError(f"operator '{self.name}' emitted {event!r} while replaying its backlog key by key")

    def emit_watermark(self, watermark: Watermark) -> None:
        self._refuse(watermark)

    def emit_record_attributes(self, attributes: RecordAttributes) -> None:
        self._refuse(attributes)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._refuse(status)

    def flush(self, interval: int, output: Output, size: int) -> None:
        """Send interval ``interval``'s outputs to ``output`` in batches of up to ``size``."""
        values, stamps = self.values[interval], self.stamps[interval]
        self.values[interval] = self.stamps[interval] = []
        timestamped = self._timestamped[interval]
        for start in range(0, len(values), size):
            output.collect_batch(RecordBatch(values[start:start + size],
                                             stamps[start:start + size] if timestamped else None))
        for tag, batch in self._sides[interval]:
            output.collect_side(tag, batch)
        self._sides[interval] = []


class KeyReplay:
    """One key-by-key replay of ``operator``'s buffered backlog (see the module docstring).

    Use: ``for key, intervals, stamps, values in replay.runs(): ...`` — the key is current and
    its earlier timers restored; whenever the interval of the next record differs from the
    last one's, call :meth:`outputs_at` (or :meth:`advance`) with it; send outputs to the lists
    it returns (or to ``operator.output``); then :meth:`emit`. In BATCH mode every interval is 0.
    """

    def __init__(self, operator: BacklogSortingOperator, buffer: SortBuffer, held: list[int],
                 fire: Callable[[InternalTimer], None] | None = None) -> None:
        """``fire(timer)`` fires a due event-time timer of the current key (by default the timer
        service's callback, which makes the key current again and emits through ``operator.output``)."""
        self.operator = operator
        self.buffer = buffer
        self.batch_mode = operator.ctx.batch_mode
        self.held = held
        self.last = len(held) - 1
        self.timers = operator.timers
        self.outputs = IntervalOutputs(len(held), operator.ctx.name, buffer.has_timestamps)
        self._level = 0
        self._aside = {} if self.timers is None else self.timers.set_aside_event_timers(held[-1])
        self._fire = fire if fire is not None or self.timers is None else self.timers.fire_event_timer

    def runs(self) -> Iterator[tuple[Any, list[int], list[int | None], list[Any]]]:
        """The buffer's key runs with the key current, ending each with its due timers fired;
        then the keys that have due timers but no backlog records."""
        operator = self.operator
        set_key = operator.keyed_backend().set_current_key
        downstream, operator.output = operator.output, self.outputs
        try:
            for key, intervals, stamps, values in self.buffer.key_runs():
                self._enter(key, set_key)
                yield key, [0] * len(values) if self.batch_mode else intervals, stamps, values
                self._leave()
            for key in list(self._aside):
                self._enter(key, set_key)
                self._leave()
        finally:
            if self.timers is not None:
                self.timers.end_key_run()
            operator.output = downstream
            self.set_watermark(self.held[0])

    def _enter(self, key: Any, set_key: Any) -> None:
        set_key(key)
        if self.timers is not None:
            self.timers.begin_key_run(key, self._aside.pop(key, []), hold_processing=self.batch_mode)
        self._level = 0
        self.set_watermark(self.held[0])
        self.outputs.interval = 0

    def _leave(self) -> None:
        """End the current key's run: fire its timers due by the last held watermark, and put the
        others back among every key's. In BATCH mode the key's event-time timers fire at the end of
        time and then its processing-time timers, timers registered meanwhile ignored (Flink's batch
        execution: otherwise a timer that registers the next one would never end)."""
        timers = self.timers
        if timers is None:
            self.advance(self.last)
            return
        timers.quiesced = self.batch_mode
        try:
            self.advance(self.last)
        finally:
            timers.quiesced = False
        if self.batch_mode:
            self.outputs.interval = max(self.last - 1, 0)  # beside its event-time timers' outputs
            timers.fire_processing_timers_at_end()
        timers.end_key_run()

    def advance(self, interval: int) -> None:
        """Bring the current key to interval ``interval``: fire its event-time timers due by the
        watermarks passed on the way, each at the watermark streaming fired it at."""
        outputs = self.outputs
        if interval <= self._level:
            outputs.interval = interval
            return
        held = self.held
        timers = self.timers
        fire = self._fire
        if timers is not None and not self.batch_mode:
            at = self._level + 1
            fired_at = -1
            pop = timers.pop_due_event_timer
            while (timer := pop(held[interval])) is not None:
                at = bisect_left(held, timer.timestamp, at, interval + 1)
                if at != fired_at:
                    fired_at = at
                    self.set_watermark(held[at])
                    outputs.interval = at - 1  # fired by watermark `at`, so before it goes downstream
                fire(timer)  # type: ignore[misc]  # set when there are timers
        elif timers is not None:
            self.set_watermark(held[interval])
            outputs.interval = interval - 1
            while (timer := timers.pop_due_event_timer(held[interval])) is not None:
                fire(timer)  # type: ignore[misc]
        self._level = interval
        self.set_watermark(held[interval])
        outputs.interval = interval

    def outputs_at(self, interval: int) -> tuple[list[Any], list[int | None]]:
        """:meth:`advance` to ``interval``, then the lists its outputs' values and timestamps go to
        (for a tight loop to append to)."""
        self.advance(interval)
        return self.outputs.values[interval], self.outputs.stamps[interval]

    def set_watermark(self, watermark: int) -> None:
        """Make ``watermark`` the operator's event time (and its timers')."""
        self.operator.current_watermark = watermark
        if self.timers is not None:
            self.timers.current_watermark = watermark

    def emit(self) -> None:
        """Send the filed outputs downstream interval by interval, applying the held watermarks
        between them (they fire nothing more: every due timer fired in its key's run)."""
        operator = self.operator
        size = operator.backlog_batch_size
        for interval in range(self.last + 1):
            if interval:
                operator.apply_held_watermarks(interval)
            self.outputs.flush(interval, operator.output, size)

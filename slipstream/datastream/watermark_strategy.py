"""Event time: ``WatermarkStrategy``, ``TimestampAssigner`` and watermark generators.

Mirrors ``pyflink.common.watermark_strategy`` and the Java interfaces behind it
(``WatermarkGenerator``, ``WatermarkOutput``), which PyFlink does not expose in
Python. A strategy is an immutable description; at run time the
timestamps-and-watermarks operator asks it for a fresh assigner and generator
per subtask.

Examples:
    >>> strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(5))
    ...             .with_timestamp_assigner(lambda event, ts: event[1]))
    >>> strategy.get_idle_timeout() is None
    True
"""

from __future__ import annotations

import dataclasses
import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slipstream.datastream.fields import get_field
from slipstream.datastream.functions import as_function
from slipstream.datastream.python_dependencies import warn_not_applied
from slipstream.datastream.time import MIN_TIMESTAMP, Duration, Time, Watermark, to_millis
from slipstream.errors import InvalidProgramError

__all__ = [
    "AscendingTimestampsWatermarks",
    "BoundedOutOfOrdernessWatermarks",
    "FieldTimestampAssigner",
    "NoWatermarksGenerator",
    "RecordTimestampAssigner",
    "TimestampAssigner",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStrategy",
    "WatermarksWithIdleness",
]


class TimestampAssigner(ABC):
    """Gives each record its event timestamp, in milliseconds since the epoch."""

    @abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        """Return the event timestamp of ``value``.

        ``record_timestamp`` is the timestamp the record already carries (from the
        source or an earlier assigner), or ``MIN_TIMESTAMP`` (Java's
        ``Long.MIN_VALUE``) when it has none.
        """


class RecordTimestampAssigner(TimestampAssigner):
    """Keeps the timestamp the record already carries; used when a strategy names no assigner."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return record_timestamp


class WatermarkOutput(ABC):
    """Where a :class:`WatermarkGenerator` sends watermarks and idleness."""

    @abstractmethod
    def emit_watermark(self, watermark: Watermark) -> None:
        """Emit a watermark (dropped unless above the last one); emitting also marks the output active."""

    @abstractmethod
    def mark_idle(self) -> None:
        """Declare this output idle: downstream stops waiting for its watermarks until it is active."""

    @abstractmethod
    def mark_active(self) -> None:
        """Declare this output active again after :meth:`mark_idle`."""


class FieldTimestampAssigner(TimestampAssigner):
    """Takes each record's timestamp from one of its fields
    (``with_timestamp_assigner(FieldTimestampAssigner("ts"))``).

    Unlike a lambda it says which field it reads, so records that travel as Arrow columns get
    their timestamps from the column, without becoming rows (as ``FieldKey`` does for keys).
    """

    def __init__(self, field: int | str) -> None:
        self.field = field

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        timestamp: int = get_field(value, self.field)  # a typed name, not a cast: this runs per record
        return timestamp

    def __repr__(self) -> str:
        return f"FieldTimestampAssigner({self.field!r})"


class WatermarkGenerator(ABC):
    """Decides watermarks from the events seen (punctuated) or on a periodic call (periodic)."""

    @abstractmethod
    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        """See one event with its assigned timestamp; may emit a watermark at once."""

    @abstractmethod
    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        """Emit the watermark now due, if any; called periodically."""


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Watermark ``max_timestamp - bound - 1``: events may arrive up to ``bound`` ms late.

    The ``- 1`` (as in Flink) lets an event exactly ``bound`` older than the
    newest one still be on time: a watermark ``t`` promises nothing ``<= t`` follows.
    """

    def __init__(self, max_out_of_orderness: Duration | Time | int) -> None:
        self._bound = to_millis(max_out_of_orderness, "max_out_of_orderness")
        if self._bound < 0:
            raise InvalidProgramError(f"max_out_of_orderness must not be negative, got {self._bound} ms")
        # Start so that the first periodic watermark is MIN_TIMESTAMP, never below it.
        self._max_timestamp = MIN_TIMESTAMP + self._bound + 1

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        self._max_timestamp = max(self._max_timestamp, event_timestamp)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        output.emit_watermark(Watermark(self._max_timestamp - self._bound - 1))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bound={self._bound} ms)"


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """For timestamps that never decrease: the bound is zero, so the watermark is ``max_timestamp - 1``."""

    def __init__(self) -> None:
        super().__init__(0)


class NoWatermarksGenerator(WatermarkGenerator):
    """Emits no watermarks, for jobs that only use processing time."""

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        pass

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        pass


class WatermarksWithIdleness(WatermarkGenerator):
    """Wraps a generator and marks the output idle when no event came for ``idle_timeout`` ms.

    Idleness is judged on the periodic call against ``clock`` (processing time in
    ms): while idle the wrapped generator's periodic watermarks are not asked
    for, so a silent input does not hold back downstream watermarks. The next
    event makes the output active again (emitting a watermark does too).
    """

    def __init__(self, generator: WatermarkGenerator, idle_timeout: Duration | Time | int,
                 clock: Callable[[], int]) -> None:
        self._generator = generator
        self._timeout = to_millis(idle_timeout, "idle_timeout")
        self._clock = clock
        self._last_activity = clock()
        self._idle = False

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        self._last_activity = self._clock()
        if self._idle:
            self._idle = False
            output.mark_active()
        self._generator.on_event(event, event_timestamp, output)

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        if self._clock() - self._last_activity >= self._timeout:
            if not self._idle:
                self._idle = True
                output.mark_idle()
        else:
            self._generator.on_periodic_emit(output)

    def __repr__(self) -> str:
        return f"WatermarksWithIdleness({self._generator!r}, idle_timeout={self._timeout} ms)"


def _wall_clock_millis() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a stream gets event timestamps and watermarks: an assigner plus a generator factory.

    Build one with the static methods and refine it with the ``with_*`` methods,
    each of which returns a new strategy (PyFlink's ``with_timestamp_assigner``
    changes the strategy in place and returns it; chained calls behave the same).
    """

    generator_supplier: Callable[[], WatermarkGenerator]
    timestamp_assigner: TimestampAssigner | None = None
    idle_timeout: int | None = None
    alignment: tuple[str, int, int] | None = None  # with_watermark_alignment: group, drift ms, update ms

    # -- the built-in strategies -----------------------------------------------------------
    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        """For timestamps that never decrease: watermark = newest timestamp - 1."""
        return WatermarkStrategy(AscendingTimestampsWatermarks)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration | Time | int) -> WatermarkStrategy:
        """For events at most ``max_out_of_orderness`` late: watermark = newest - bound - 1."""
        bound = to_millis(max_out_of_orderness, "max_out_of_orderness")
        if bound < 0:
            raise InvalidProgramError(f"max_out_of_orderness must not be negative, got {bound} ms")
        return WatermarkStrategy(functools.partial(BoundedOutOfOrdernessWatermarks, bound))

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        """No watermarks at all, for processing-time jobs."""
        return WatermarkStrategy(NoWatermarksGenerator)

    @staticmethod
    def for_generator(generator_supplier: Callable[[], WatermarkGenerator]) -> WatermarkStrategy:
        """A strategy with your own generator: ``generator_supplier()`` makes one per subtask.

        Flink's Java ``forGenerator``; PyFlink has no Python equivalent.
        """
        if not callable(generator_supplier):
            raise InvalidProgramError("WatermarkStrategy.for_generator expects a callable returning "
                                      f"a WatermarkGenerator, got {generator_supplier!r}")
        return WatermarkStrategy(generator_supplier)

    # -- refinements ---------------------------------------------------------------------------
    def with_timestamp_assigner(self, timestamp_assigner: TimestampAssigner | Callable[[Any, int], int]
                                ) -> WatermarkStrategy:
        """A copy that takes timestamps from ``timestamp_assigner``.

        Accepts a :class:`TimestampAssigner` or a plain callable ``(value, record_timestamp) -> int``;
        a :class:`FieldTimestampAssigner` lets Arrow batches keep their columns.
        """
        assigner = as_function(timestamp_assigner, TimestampAssigner, "extract_timestamp", 2,
                               "WatermarkStrategy.with_timestamp_assigner")
        return dataclasses.replace(self, timestamp_assigner=assigner)

    def with_idleness(self, idle_timeout: Duration | Time | int) -> WatermarkStrategy:
        """A copy that marks its stream idle after ``idle_timeout`` of processing time without records."""
        millis = to_millis(idle_timeout, "idle_timeout")
        if millis <= 0:
            raise InvalidProgramError(f"idle_timeout must be positive, got {millis} ms")
        return dataclasses.replace(self, idle_timeout=millis)

    def with_watermark_alignment(self, watermark_group: str, max_allowed_watermark_drift: Duration | Time | int,
                                 update_interval: Duration | Time | int | None = None) -> WatermarkStrategy:
        """A copy with Flink's watermark alignment (FLIP-182), kept (:meth:`get_alignment`) and warned
        about: it paces how fast sources read, never what they emit, and the sources of one job here
        share one scheduler, which reads the source whose input is there."""
        drift = to_millis(max_allowed_watermark_drift, "max_allowed_watermark_drift")
        interval = 1000 if update_interval is None else to_millis(update_interval, "update_interval")
        warn_not_applied(f"watermark alignment of group {watermark_group!r}",
                         "sources are not paused when ahead (alignment paces reading, it changes no result)")
        return dataclasses.replace(self, alignment=(watermark_group, drift, interval))

    def get_alignment(self) -> tuple[str, int, int] | None:
        """``(watermark group, max drift ms, update interval ms)`` given to :meth:`with_watermark_alignment`."""
        return self.alignment

    # -- what the runtime asks for ---------------------------------------------------------------
    def get_idle_timeout(self) -> int | None:
        """The idleness timeout in ms, or None when idleness is not detected."""
        return self.idle_timeout

    def create_timestamp_assigner(self) -> TimestampAssigner:
        """The assigner to use: the one given, or one that keeps the record's own timestamp."""
        return self.timestamp_assigner or RecordTimestampAssigner()

    def create_watermark_generator(self, clock: Callable[[], int] = _wall_clock_millis
                                   ) -> WatermarkGenerator:
        """A fresh generator for one subtask; ``clock`` (processing time in ms) judges idleness."""
        generator = self.generator_supplier()
        if not isinstance(generator, WatermarkGenerator):
            raise InvalidProgramError(f"the watermark generator supplier {self.generator_supplier!r} "
                                      f"returned {generator!r}, not a WatermarkGenerator")
        if self.idle_timeout is not None:
            return WatermarksWithIdleness(generator, self.idle_timeout, clock)
        return generator

"""A test source with in-band markers, as Beam's ``TestStream`` and bytewax's ``TestingSource``.

A :class:`TestStream` is a list of records and markers read in order by one reader:
:class:`AdvanceWatermark` emits a watermark after the records before it,
:class:`AdvanceProcessingTime` moves the job's :class:`~slipstream.testing.ManualClock` once
every record before it has been processed, :class:`EndOfBacklog` ends the backlog (FLIP-327:
what comes before it is backlog), and :class:`FailHere` makes the read fail once, so the job
takes its restart path (and, with checkpoints, resumes from the latest one). Records are plain
values or :class:`TimestampedValue` s. Read it with ``env.from_source(stream, None, "name")``
(no watermark strategy: the markers are the stream's event time):

>>> from slipstream.datastream import StreamExecutionEnvironment
>>> from slipstream.testing import CollectingSink, TestStream, TimestampedValue
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> stream = (TestStream().add_elements(TimestampedValue("a", 1), TimestampedValue("b", 2))
...           .advance_watermark_to(5).add_elements(TimestampedValue("c", 7)))
>>> sink = CollectingSink()
>>> _ = env.from_source(stream, None, "events").map(str.upper).sink_to(sink)
>>> _ = env.execute()
>>> sink.values
['A', 'B', 'C']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    NOTHING_AVAILABLE,
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
)
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.errors import InvalidProgramError
from slipstream.testing.clock import ManualClock


@dataclass(frozen=True)
class TimestampedValue:
    """A record with its event timestamp (Beam's ``TimestampedValue``)."""

    value: Any
    timestamp: int


@dataclass(frozen=True)
class AdvanceWatermark:
    """Event time reaches ``timestamp``: a watermark after the records before the marker."""

    timestamp: int


@dataclass(frozen=True)
class AdvanceProcessingTime:
    """The test stream's clock moves by ``millis`` once the job has processed what came before."""

    millis: int


@dataclass(frozen=True)
class EndOfBacklog:
    """What came before was backlog; what follows is live."""


@dataclass(frozen=True)
class FailHere:
    """The read fails here once (the first run that reaches it), with ``message``."""

    message: str = "injected failure"


class TestStreamFailure(RuntimeError):
    """What a :class:`FailHere` marker raises."""


_MARKERS = (AdvanceWatermark, AdvanceProcessingTime, EndOfBacklog, FailHere)


class TestStream(Source):
    """Records and markers in order, read by one reader (see the module docstring).

    Build it from a list, or with the builder methods (each returns the stream). ``clock`` is
    the job's clock (``env.configure(clock=...)``), which processing-time markers move. A
    stream is bounded: the job ends after its last item, with the final watermark. What comes
    before an :class:`EndOfBacklog` is backlog; a stream without one is live from its first record.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, items: Iterable[Any] = (), *, clock: ManualClock | None = None) -> None:
        self.items: list[Any] = []
        self.clock = clock
        self._watermark = -MAX_TIMESTAMP
        self._failed: set[int] = set()  # indexes of FailHere markers that failed, across restarts
        for item in items:
            self._append(item)

    def _append(self, item: Any) -> TestStream:
        if isinstance(item, AdvanceWatermark):
            if item.timestamp <= self._watermark:
                raise InvalidProgramError(f"TestStream: the watermark must advance, but {item.timestamp} "
                                          f"follows {self._watermark}")
            self._watermark = item.timestamp
        elif isinstance(item, AdvanceProcessingTime):
            if self.clock is None:
                raise InvalidProgramError("TestStream: advancing processing time needs the job's clock: "
                                          "TestStream(clock=clock) with env.configure(clock=clock)")
            if item.millis <= 0:
                raise InvalidProgramError(f"TestStream: processing time must advance, got {item.millis} ms")
        self.items.append(item)
        return self

    # -- builder (Beam's TestStream.Builder) ----------------------------------------------------
    def add_elements(self, *values: Any) -> TestStream:
        """Records: plain values, or :class:`TimestampedValue` s for their event time."""
        for value in values:
            self._append(value)
        return self

    def advance_watermark_to(self, timestamp: int) -> TestStream:
        return self._append(AdvanceWatermark(timestamp))

    def advance_watermark_to_infinity(self) -> TestStream:
        """The final watermark now (the stream ends with it anyway)."""
        return self._append(AdvanceWatermark(MAX_TIMESTAMP))

    def advance_processing_time(self, millis: int) -> TestStream:
        return self._append(AdvanceProcessingTime(millis))

    def end_of_backlog(self) -> TestStream:
        return self._append(EndOfBacklog())

    def fail_here(self, message: str = "injected failure") -> TestStream:
        return self._append(FailHere(message))

    # -- Source ---------------------------------------------------------------------------------
    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def max_parallelism(self) -> int | None:
        return 1  # one reader: the markers keep their order with the records

    def default_name(self) -> str:
        return "TestStream"

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        return _TestStreamReader(self)

    def fail_once(self, index: int) -> bool:
        """Whether the :class:`FailHere` at ``index`` is to fail now: only the first time it is read."""
        if index in self._failed:
            return False
        self._failed.add(index)
        return True


TestingSource = TestStream
"""bytewax's name for the same thing."""


class _TestStreamReader(SourceReader):
    def __init__(self, stream: TestStream) -> None:
        self._stream = stream
        self._items = stream.items
        self._position = 0
        self._backlog = any(isinstance(item, EndOfBacklog) for item in self._items)
        self._context = SourceReaderContext(0, 1)

    def open(self, context: SourceReaderContext) -> None:
        self._context = context
        self._backlog = any(isinstance(item, EndOfBacklog) for item in self._items[self._position:])
        clock = self._stream.clock
        moves_time = any(isinstance(item, AdvanceProcessingTime) for item in self._items)
        if moves_time and clock is not None and not clock.drives(context.current_processing_time):
            raise InvalidProgramError("TestStream: its clock is not the job's, so its processing-time "
                                      "markers would move nothing; give the job env.configure(clock=clock)")

    def is_backlog(self) -> bool | None:
        return self._backlog

    def poll(self, max_records: int) -> Any:
        values: list[Any] = []
        timestamps: list[int | None] = []
        while self._position < len(self._items) and len(values) < max_records:
            item = self._items[self._position]
            if not isinstance(item, _MARKERS):
                self._position += 1
                values.append(item.value if isinstance(item, TimestampedValue) else item)
                timestamps.append(item.timestamp if isinstance(item, TimestampedValue) else None)
                continue
            if values and not isinstance(item, AdvanceWatermark):
                break  # the records read so far go out first
            self._position += 1
            if isinstance(item, AdvanceWatermark):
                return SourceBatch(values, self._stamps(timestamps), watermark=item.timestamp)
            if isinstance(item, EndOfBacklog):
                self._backlog = False
            elif isinstance(item, FailHere):
                if self._stream.fail_once(self._position - 1):
                    raise TestStreamFailure(item.message)
            else:
                clock = self._stream.clock
                assert clock is not None  # a processing-time marker is refused without one
                clock.advance_when_idle(item.millis, self._context.notify_available)
                return NOTHING_AVAILABLE
        return SourceBatch(values, self._stamps(timestamps)) if values else END_OF_INPUT

    @staticmethod
    def _stamps(timestamps: list[int | None]) -> list[int | None] | None:
        return None if all(ts is None for ts in timestamps) else timestamps

    def records_remaining(self) -> int | None:
        return sum(1 for item in self._items[self._position:] if not isinstance(item, _MARKERS))

    def snapshot_position(self) -> Any:
        return self._position

    def restore_position(self, position: Any) -> None:
        self._position = int(position)

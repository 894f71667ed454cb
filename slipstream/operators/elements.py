"""The typed elements that travel through channels and operator chains."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow as pa

from slipstream.attributes import RecordAttributes
from slipstream.datastream.columnar import packed_rows, rows_from_arrow
from slipstream.datastream.scope import StreamScope
from slipstream.datastream.time import MAX_WATERMARK, Watermark
from slipstream.datastream.typeinfo import Row

__all__ = [
    "END_OF_INPUT",
    "MAX_WATERMARK",
    "EndOfInput",
    "LatencyMarker",
    "RecordAttributes",
    "RecordBatch",
    "StreamElement",
    "TerminationAttempt",
    "TerminationStatus",
    "Watermark",
    "WatermarkStatus",
]


class RecordBatch:
    """Records in arrival order; ``timestamps`` is parallel to ``values``, or None when none has one.

    Batching is what makes Python operators fast: an operator runs its user
    function over a whole batch in one loop rather than one call chain per record.
    A batch may instead hold its records as Arrow columns (``arrow``); then ``values``
    builds the rows on first use, so vectorised operators never pay for them. Its
    timestamps may likewise be an Arrow int64 array (read from a column), a Python
    list only when something asks for ``timestamps``.
    """

    __slots__ = ("_stamp_column", "_timestamps", "_values", "arrow")

    def __init__(self, values: list[Any] | None = None, timestamps: list[Any] | pa.Array | None = None,
                 arrow: pa.RecordBatch | pa.Table | None = None) -> None:
        if values is None and arrow is None:
            raise ValueError("a RecordBatch needs values or an Arrow batch")
        self._values = values
        if isinstance(timestamps, pa.Array):
            self._timestamps, self._stamp_column = None, timestamps
        else:
            self._timestamps, self._stamp_column = timestamps, None
        self.arrow = arrow

    @property
    def values(self) -> list[Any]:
        if self._values is None:
            self._values = rows_from_arrow(self.arrow)
        return self._values

    @property
    def timestamps(self) -> list[Any] | None:
        """The records' timestamps (None when none has one), as a list built on first use."""
        if self._timestamps is None and self._stamp_column is not None:
            self._timestamps = self._stamp_column.to_numpy().tolist()
        return self._timestamps

    @timestamps.setter
    def timestamps(self, timestamps: list[Any] | None) -> None:
        self._timestamps, self._stamp_column = timestamps, None

    def timestamp_column(self) -> pa.Array | None:
        """The timestamps as an Arrow int64 array (None when none has one): a columnar consumer's
        form, built from the list only when the batch came without it."""
        if self._stamp_column is None and self._timestamps is not None:
            return pa.array(self._timestamps, pa.int64())
        return self._stamp_column

    @property
    def is_columnar(self) -> bool:
        """Whether the records are (also) held as Arrow columns."""
        return self.arrow is not None

    def __len__(self) -> int:
        if self._values is not None:
            return len(self._values)
        assert self.arrow is not None  # a batch has values or Arrow columns
        rows: int = self.arrow.num_rows
        return rows

    def split(self, max_records: int) -> list[RecordBatch]:
        """This batch as consecutive batches of at most ``max_records`` records (itself when it
        fits); Arrow batches are sliced without copying."""
        count = len(self)
        if count <= max_records:
            return [self]
        column, timestamps, arrow = self._stamp_column, self._timestamps, self.arrow
        pieces = []
        for start in range(0, count, max_records):
            end = min(start + max_records, count)
            piece_ts = column.slice(start, end - start) if column is not None else \
                None if timestamps is None else timestamps[start:end]
            pieces.append(RecordBatch(arrow=arrow.slice(start, end - start), timestamps=piece_ts)
                          if arrow is not None else RecordBatch(self.values[start:end], piece_ts))
        return pieces

    def estimated_bytes(self) -> int:
        """Roughly the memory its records take: Arrow's own count for columns; for Python
        records, the sizes of a few records spread over the batch (each with what it directly
        holds), times the number of records."""
        if self.arrow is not None:
            size: int = self.arrow.nbytes
            return size
        values = self.values
        count = len(values)
        if not count:
            return 0
        sample = values[::max(1, count // SIZE_SAMPLE)][:SIZE_SAMPLE]
        per_record = sum(record_bytes(value) for value in sample) / len(sample)
        return int(sys.getsizeof(values) + per_record * count)

    __hash__ = None  # type: ignore[assignment]  # equal by content, so unhashable (as the __eq__ alone made it)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordBatch) and other.values == self.values and \
            other.timestamps == self.timestamps

    def __repr__(self) -> str:
        return f"RecordBatch({len(self)} records{', columnar' if self.arrow is not None else ''})"

    def __getstate__(self) -> tuple[Any, ...]:
        """Pickled (spilling channels, checkpoints) with its Arrow part as IPC bytes: pickling an
        Arrow slice directly would write the whole buffers it slices; rows built from it are dropped.
        Rows of a columnar source go as :class:`~slipstream.datastream.columnar.PackedRows`."""
        if self.arrow is None:
            return packed_rows(self.values), self.timestamps, None
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.arrow.schema) as writer:
            writer.write(self.arrow)
        return None, self.timestamps, (sink.getvalue(), isinstance(self.arrow, pa.Table))

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self._values, self.timestamps, arrow = state
        self.arrow = None
        if arrow is not None:
            data, is_table = arrow
            reader = pa.ipc.open_stream(data)
            self.arrow = reader.read_all() if is_table else reader.read_next_batch()


SIZE_SAMPLE = 8
"""How many records of a batch :meth:`RecordBatch.estimated_bytes` measures."""


def record_bytes(value: object) -> int:
    """A record's size with the fields it directly holds (nested objects count shallowly); an
    array's with the buffer it views (``nbytes``: ``sys.getsizeof`` of a numpy view leaves it out)."""
    size = sys.getsizeof(value)
    nbytes = getattr(value, "nbytes", None)
    if type(nbytes) is int:
        return max(size, nbytes)
    if isinstance(value, dict):
        return size + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in value.items())
    if isinstance(value, (tuple, list, Row)):
        return size + sum(sys.getsizeof(field) for field in value)
    fields = getattr(value, "__dict__", None)
    return size if fields is None else size + record_bytes(fields)


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """An input became idle (excluded from the watermark minimum) or active again."""

    idle: bool


@dataclass(frozen=True, slots=True)
class LatencyMarker:
    """Flink's ``LatencyMarker``: a source sends one every ``metrics.latency.interval`` ms while it
    streams. It queues behind the records ahead of it in every channel, but goes around user code
    (no function sees it); each operator it reaches records how long ago the source marked it
    (``marked_time``: ``time.monotonic()`` in ms, one clock for every process of the machine).
    It is never a record: counted nowhere, never in a feedback edge, a loop or a checkpoint."""

    marked_time: float
    source: str
    subtask_index: int


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """The channel that carried this will carry nothing more."""


END_OF_INPUT = EndOfInput()


class TerminationStatus(Enum):
    """What the operators a termination attempt passed say: IDLE, or BUSY when one of them
    may still emit records without new input (it holds processing-time timers), or when
    records came round a loop while the attempt was in it."""

    IDLE = "IDLE"
    BUSY = "BUSY"


@dataclass(frozen=True, slots=True)
class TerminationAttempt:
    """The FLIP-15 baton: one attempt to end loop ``scope``, travelling in band after records.

    ``attempt_id`` counts the scope's attempts from 1; ``last_visited_level`` is the scope
    level of the last task that forwarded it; ``last_completed_level`` is the level of the
    innermost scope known to be complete: ``scope``'s parent level while the attempt is in
    flight, ``scope``'s own level once the attempt succeeded (the baton then announces that
    ``scope`` and every loop inside it are complete, ahead of their end of input).
    ``status`` collects the BUSY/IDLE status of the tasks it passed.
    """

    scope: StreamScope
    attempt_id: int
    last_visited_level: int
    last_completed_level: int
    status: TerminationStatus = TerminationStatus.IDLE

    @property
    def is_completion(self) -> bool:
        """Whether this announces that ``scope`` is complete (rather than asking whether it is)."""
        return self.last_completed_level >= self.scope.get_level()

    def visited(self, level: int, busy: bool) -> TerminationAttempt:
        """The baton as a task at scope level ``level`` forwards it, adding its status."""
        status = TerminationStatus.BUSY if busy else self.status
        if level == self.last_visited_level and status is self.status:
            return self
        return TerminationAttempt(self.scope, self.attempt_id, level, self.last_completed_level, status)


StreamElement = RecordBatch | Watermark | WatermarkStatus | RecordAttributes | EndOfInput | TerminationAttempt

"""Sources over Python data: ``IteratorSource`` (an iterator or generator) and ``CollectionSource``.

``CollectionSource`` backs ``env.from_collection``: it is bounded and splits its
elements across subtasks. ``IteratorSource`` reads one iterator, so it runs in
one subtask; an unbounded one is read by a thread so that an iterator that
waits (on a socket, a queue, a clock) never blocks the scheduler.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    NOTHING_AVAILABLE,
    PollResult,
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
)
from slipstream.datastream.connectors.errors import SourceRestoreError
from slipstream.datastream.connectors.number_seq import RangeCursor, redistribute_slices, slice_bounds
from slipstream.errors import InvalidProgramError, JobExecutionError

# Records waiting here when the job pauses (a backlog's switch, a long batch) are processed before
# any newer one, so this bounds the catch-up after the pause: at ~10 us a record, 256 of them take
# ~2.5 ms (1024 took ~10 ms, the flagship's p99.9). Flink's source reader queue holds two fetches.
_QUEUE_CAPACITY = 256
"""Records an unbounded iterator's thread may read ahead of ``poll``; bounds memory (backpressure)."""

_DONE = object()
"""Put in the queue by the reader thread when the iterator ends."""


class IteratorSource(Source):
    """Records from a Python iterable, an iterator, a generator, or a function returning one.

    Pass a factory (a function of no arguments returning an iterable) or a
    re-iterable collection when the job should be able to resume from a
    snapshot: the restored reader starts a fresh iteration and skips the
    records already emitted. A one-shot iterator can only start from the
    beginning.

    With ``bounded=True`` the iterator is read inside ``poll``; it should not
    wait for data. With ``bounded=False`` a thread reads it into a bounded
    queue and wakes the scheduler, so the iterator may block; if it ends, the
    source ends too.

    Examples:
        >>> def numbers():
        ...     yield from range(3)
        >>> source = IteratorSource(numbers)
        >>> source.max_parallelism()
        1
    """

    def __init__(self, iterable_or_factory: Iterable[Any] | Callable[[], Iterable[Any]], bounded: bool = True) -> None:
        """Describe the source; fails at once unless given an iterable or a callable."""
        self._factory: Callable[[], Iterable[Any]] | None
        self._iterable: Iterable[Any] | None
        if isinstance(iterable_or_factory, Iterable):
            self._factory = None
            self._iterable = iterable_or_factory
        elif callable(iterable_or_factory):
            self._factory = iterable_or_factory
            self._iterable = None
        else:
            raise InvalidProgramError(
                "IteratorSource needs an iterable, an iterator or a function returning one, "
                f"got {type(iterable_or_factory).__name__} {iterable_or_factory!r}")
        self._bounded = bounded

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED if self._bounded else Boundedness.CONTINUOUS_UNBOUNDED

    def max_parallelism(self) -> int:
        """One: a single iterator cannot be shared between subtasks."""
        return 1

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        if parallelism != 1:
            raise InvalidProgramError(
                f"IteratorSource reads one iterator and runs with parallelism 1, got parallelism {parallelism}")
        if self._bounded:
            return _InlineIteratorReader(self.start_iteration)
        return _ThreadedIteratorReader(self.start_iteration)

    def start_iteration(self, skip: int) -> Iterator[Any]:
        """A fresh iterator positioned after the first ``skip`` records."""
        if self._factory is not None:
            iterable = self._factory()
        else:
            assert self._iterable is not None  # one of the two is given
            iterable = self._iterable
            if skip and iter(iterable) is iterable:
                raise SourceRestoreError(
                    f"IteratorSource over a one-shot iterator ({type(iterable).__name__}) cannot resume "
                    f"after record {skip}; pass a function returning a fresh iterator, or a collection")
        iterator = iter(iterable)
        skipped = sum(1 for _ in itertools.islice(iterator, skip))
        if skipped < skip:
            raise SourceRestoreError(
                f"IteratorSource cannot resume after record {skip}: the iterator now has only {skipped} records")
        return iterator


class _InlineIteratorReader(SourceReader):
    """Reads a bounded iterator inside ``poll``; its position is the number of records emitted."""

    def __init__(self, start_iteration: Callable[[int], Iterator[Any]]) -> None:
        self._start_iteration = start_iteration
        self._emitted = 0
        self._iterator: Iterator[Any] | None = None
        self._ended = False

    def open(self, context: SourceReaderContext) -> None:
        self._iterator = self._start_iteration(self._emitted)

    def poll(self, max_records: int) -> PollResult:
        if self._ended:
            return END_OF_INPUT
        assert self._iterator is not None  # made in open
        values = list(itertools.islice(self._iterator, max_records))
        if len(values) < max_records:
            self._ended = True
        if not values:
            return END_OF_INPUT
        self._emitted += len(values)
        return SourceBatch(values)

    def snapshot_position(self) -> int:
        return self._emitted

    def restore_position(self, position: Any) -> None:
        self._emitted = _checked_count(position)


class _ThreadedIteratorReader(SourceReader):
    """Reads an iterator that may block in a thread of its own, handing records to ``poll`` through a deque.

    The hand-off costs next to nothing per record: the thread appends to a deque and wakes the
    task only when it made the deque non-empty (a poll that found it empty may be waiting);
    ``poll`` takes everything there is. The deque holds at most ``_QUEUE_CAPACITY`` records:
    past that the thread waits until a poll made room (backpressure).
    """

    def __init__(self, start_iteration: Callable[[int], Iterator[Any]]) -> None:
        self._start_iteration = start_iteration
        self._emitted = 0
        self._queue: deque[Any] = deque()
        self._room = threading.Event()  # set by poll after taking records
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._ended = False

    def open(self, context: SourceReaderContext) -> None:
        self._thread = threading.Thread(
            target=self._read, args=(context.notify_available,), name="IteratorSource reader", daemon=True)
        self._thread.start()

    def _read(self, notify_available: Callable[[], None]) -> None:
        try:
            for value in self._start_iteration(self._emitted):
                if not self._put(value, notify_available):
                    return
        except BaseException as error:  # handed to poll, which raises it in the task's thread
            self._failure = error
        self._put(_DONE, notify_available)

    def _put(self, item: object, notify_available: Callable[[], None]) -> bool:
        """Queue ``item``, waiting while the deque is full; False once the reader is closed."""
        pending = self._queue
        while len(pending) >= _QUEUE_CAPACITY:
            self._room.clear()
            if self._stop.is_set():
                return False
            if len(pending) >= _QUEUE_CAPACITY:
                self._room.wait(0.1)
        pending.append(item)
        if len(pending) == 1:  # it was empty: a poll may have found nothing and the task sleep
            notify_available()
        return True

    def poll(self, max_records: int) -> PollResult:
        if self._ended:
            return self._end_of_input()
        pending = self._queue
        values: list[Any] = []
        while pending and len(values) < max_records:
            item = pending.popleft()
            if item is _DONE:
                self._ended = True
                break
            values.append(item)
        self._room.set()
        if values:
            self._emitted += len(values)
            return SourceBatch(values)
        if self._ended:
            return self._end_of_input()
        return NOTHING_AVAILABLE

    def _end_of_input(self) -> PollResult:
        """END_OF_INPUT once the iterator ended by itself; raises what it raised if it failed."""
        if self._failure is not None:
            raise JobExecutionError(
                f"IteratorSource: the iterator raised after record {self._emitted}: "
                f"{type(self._failure).__name__}: {self._failure}") from self._failure
        return END_OF_INPUT

    def snapshot_position(self) -> int:
        return self._emitted

    def restore_position(self, position: Any) -> None:
        if self._thread is not None:
            raise SourceRestoreError("IteratorSource: restore_position must come before open")
        self._emitted = _checked_count(position)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


class CollectionSource(Source):
    """A bounded source over a collection, as ``env.from_collection`` builds.

    Each subtask reads one contiguous slice of the elements (see
    :func:`~slipstream.datastream.connectors.number_seq.slice_bounds`), in
    order; its position is the index of the next element it would emit.

    Examples:
        >>> source = CollectionSource(["a", "b", "c"])
        >>> source.create_reader(0, 1).poll(10).values
        ['a', 'b', 'c']
    """

    def __init__(self, collection: Iterable[Any]) -> None:
        """Copy the elements now, so later changes to ``collection`` do not change the job."""
        if not isinstance(collection, Iterable) or isinstance(collection, (str, bytes)):
            raise InvalidProgramError(
                f"CollectionSource needs a collection of elements, got {type(collection).__name__} {collection!r}")
        self._elements = list(collection)

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        begin, end = slice_bounds(len(self._elements), subtask_index, parallelism)
        return _CollectionReader(self._elements, begin, end)

    def redistribute_positions(self, positions: list[Any], parallelism: int) -> list[Any]:
        """The elements the old subtasks had left, cut into ``parallelism`` contiguous shares."""
        return redistribute_slices(positions, len(self._elements), parallelism)


class _CollectionReader(SourceReader):
    """Reads ``elements[begin:end]`` (or, after a rescaled restore, the ranges it was given);
    its position is the index ranges left."""

    def __init__(self, elements: list[Any], begin: int, end: int) -> None:
        self._elements = elements
        self._begin = begin
        self._end = end
        self._cursor = RangeCursor(begin, end)

    def poll(self, max_records: int) -> PollResult:
        piece = self._cursor.take(max_records)
        if piece is None:
            return END_OF_INPUT
        return SourceBatch(self._elements[piece[0]:piece[1]])

    def snapshot_position(self) -> list[list[int]]:
        return self._cursor.snapshot()

    def records_remaining(self) -> int:
        return self._cursor.remaining()

    def restore_position(self, position: Any) -> None:
        self._cursor.restore(position, self._begin, self._end, 0, len(self._elements), "CollectionSource")


def _checked_count(position: Any) -> int:
    if not isinstance(position, int) or position < 0:
        raise SourceRestoreError(
            f"IteratorSource cannot resume at position {position!r}: expected a count of records emitted")
    return position

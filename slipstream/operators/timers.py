"""Timers of a keyed operator: event-time timers fire as the watermark passes them,
processing-time timers as the task's clock does; each fires with its key set as current.

Timers are deduplicated per (timestamp, key, namespace), as in Flink, and fire in
timestamp order (registration order among equal timestamps), which keeps runs deterministic.
The state backend keeps them (:meth:`KeyedStateBackend.timer_queue`): the heap backend in dicts
per timestamp (:class:`TimerQueue`), the RocksDB backend on disk in the same order.

A sorting operator replaying its backlog key by key (:mod:`slipstream.operators.backlog`)
fires one key's event-time timers at a time: it sets the other keys' due timers aside
(:meth:`InternalTimerService.set_aside_event_timers`), gives each key its own back when the
key's turn comes (:meth:`InternalTimerService.begin_key_run`: the key's timers then live in a small
queue of their own, not among every key's), and pops and fires them itself
(:meth:`InternalTimerService.pop_due_event_timer`, :meth:`InternalTimerService.fire_event_timer`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from slipstream.datastream.functions import TimerService
from slipstream.datastream.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from slipstream.operators.base import KeyedStateBackend, ProcessingTimeService

VOID_NAMESPACE = None
_log = logging.getLogger("slipstream.timers")


class InternalTimer(NamedTuple):
    timestamp: int
    key: Any
    namespace: Any


_new_tuple = tuple.__new__
"""``_new_tuple(InternalTimer, (timestamp, key, namespace))`` makes a timer in C: the named tuple's own
``__new__`` is a Python function, a third of a microsecond per timer fired."""


class TimerQueue:
    """The heap backend's timers of one time domain (:meth:`KeyedStateBackend.timer_queue`), grouped
    by timestamp: per timestamp a dict of its timers in registration order, and a heap of the
    timestamps. Registering, finding a duplicate and deleting are dict operations, and a
    deleted timer leaves its dict at once; only a timestamp whose timers were all deleted stays in the
    heap until it comes up, or until more than half the heap is such (then it is rebuilt). Timers
    mostly share few timestamps (a window's end, a period's): registering and firing 10^6 such timers
    cost a quarter of what they did in one sorted list of every timer.

    A dict's entries are the timers' keys while every timer has the void namespace (a process
    function's: no tuple to build and hash per timer, which cost a registration 0.6 µs against 0.25
    for the key), and ``(key, namespace)`` from the first timer with a namespace on (a window's).

    A frozen copy (:meth:`frozen`, for a checkpoint writer) shares the dicts; the first change to a
    shared dict copies it first, so the copy stays as it was until the writer has read it."""

    def __init__(self) -> None:
        self._buckets: dict[int, dict[Any, None]] = {}
        self._times: list[int] = []  # a heap of every timestamp in _buckets, and of some emptied ones
        self._count = 0
        self._by_key = True  # every timer so far has the void namespace: a dict's entries are keys
        self._firing_time: int | None = None  # the timestamp whose timers pop_due is handing out
        self._firing: list[Any] = []  # that timestamp's timers when it began, in order
        self._next = 0  # the next of them to look at
        self._shared: dict[int, dict[Any, None]] = {}  # the dicts a frozen copy reads

    def _own(self, timestamp: int, bucket: dict[Any, None]) -> dict[Any, None]:
        """``bucket``, copied first if a frozen copy still reads it."""
        if self._shared.get(timestamp) is bucket:
            bucket = self._buckets[timestamp] = dict(bucket)
        return bucket

    def _with_namespaces(self) -> None:
        """From now on a dict's entries are ``(key, namespace)``: every dict is made anew (a frozen
        copy still reads the old ones), in the same order. A timestamp being fired starts a new round
        from its dict, which holds the timers still to fire in the order they had."""
        self._by_key = False
        self._buckets = {timestamp: {(key, VOID_NAMESPACE): None for key in bucket}
                         for timestamp, bucket in self._buckets.items()}
        self._firing_time = None

    def add(self, timestamp: int, key: Any, namespace: Any) -> bool:
        if namespace is not VOID_NAMESPACE and self._by_key:
            self._with_namespaces()
        ident = key if self._by_key else (key, namespace)
        bucket = self._buckets.get(timestamp)
        if bucket is None:
            bucket = self._buckets[timestamp] = {}
            heapq.heappush(self._times, timestamp)
            if timestamp == self._firing_time:
                self._firing_time = None  # emptied and made again: its order starts afresh
        elif ident in bucket:
            return False
        elif self._shared:
            bucket = self._own(timestamp, bucket)
        bucket[ident] = None
        self._count += 1
        return True

    def remove(self, timestamp: int, key: Any, namespace: Any) -> None:
        if self._by_key:
            if namespace is not VOID_NAMESPACE:
                return  # no timer has a namespace
            ident = key
        else:
            ident = (key, namespace)
        bucket = self._buckets.get(timestamp)
        if bucket is None or ident not in bucket:
            return
        if self._shared:
            bucket = self._own(timestamp, bucket)
        del bucket[ident]
        self._count -= 1
        if not bucket:
            del self._buckets[timestamp]
            if len(self._times) > 2 * len(self._buckets) + 64:
                self._times = list(self._buckets)
                heapq.heapify(self._times)

    def pop_due(self, up_to: int) -> InternalTimer | None:
        """Remove and return the first timer at or before ``up_to`` (None: none is due)."""
        times, buckets = self._times, self._buckets
        while times and times[0] <= up_to:
            timestamp = times[0]
            bucket = buckets.get(timestamp)
            if not bucket:  # fired or deleted: its timestamp goes
                heapq.heappop(times)
                if bucket is not None:
                    del buckets[timestamp]
                continue
            if timestamp != self._firing_time:  # a timestamp begins (or resumes after an earlier one)
                self._firing_time, self._firing, self._next = timestamp, list(bucket), 0
            firing, position = self._firing, self._next
            while position < len(firing):
                ident = firing[position]
                position += 1
                if ident in bucket:
                    self._next = position
                    del (self._own(timestamp, bucket) if self._shared else bucket)[ident]
                    self._count -= 1
                    if self._by_key:
                        return _new_tuple(InternalTimer, (timestamp, ident, VOID_NAMESPACE))
                    return _new_tuple(InternalTimer, (timestamp, *ident))
            self._firing_time = None  # what is left was registered while it fired: a new round
        return None

    def __len__(self) -> int:
        return self._count

    def snapshot(self) -> list[tuple[int, Any, Any]]:
        """The timers in firing order (registration order among equal timestamps, which
        :meth:`restore` keeps by registering them in this order)."""
        return self.frozen()()

    def frozen(self) -> Callable[[], list[tuple[int, Any, Any]]]:
        """What reads the timers of now into :meth:`snapshot`'s list later, from any thread: a copy of
        the timestamps' dict (taken at C speed) whose dicts stay unchanged until it was read."""
        shared = self._shared = dict(self._buckets)
        by_key = self._by_key

        def read() -> list[tuple[int, Any, Any]]:
            if by_key:
                timers = [(timestamp, key, VOID_NAMESPACE) for timestamp in sorted(shared)
                          for key in shared[timestamp]]
            else:
                timers = [(timestamp, key, namespace) for timestamp in sorted(shared)
                          for key, namespace in shared[timestamp]]
            shared.clear()  # read: the queue may change its dicts in place again
            return timers
        return read

    def restore(self, timers: list[tuple[int, Any, Any]]) -> None:
        for timestamp, key, namespace in timers:
            self.add(timestamp, key, namespace)


class _KeyRunQueue:
    """The event-time timers of the one key a sorted backlog replays at a time: a heap and a dict,
    far cheaper per timer than the backend's queue of every key's timers (:class:`TimerQueue`). A deleted
    timer stays in the heap until it comes up, then is skipped; a deletion also reaches the timers of
    the key still in ``outer`` (those after the backlog's last watermark)."""

    def __init__(self, outer: Any) -> None:  # the backend's queue: a TimerQueue, or on disk with RocksDB
        self.outer = outer
        self.key: Any = None
        self._heap: list[tuple[int, int, Any]] = []  # (timestamp, seq, namespace): seq decides first
        self._live: dict[tuple[int, Any], int] = {}
        self._seq = itertools.count()

    def start(self, key: Any) -> None:
        self.key = key
        if self._live or self._heap:
            self._heap = []
            self._live = {}

    def add(self, timestamp: int, key: Any, namespace: Any) -> bool:
        if key != self.key:
            return bool(self.outer.add(timestamp, key, namespace))
        ident = (timestamp, namespace)
        if ident in self._live:
            return False
        seq = next(self._seq)
        self._live[ident] = seq
        heapq.heappush(self._heap, (timestamp, seq, namespace))
        return True

    def remove(self, timestamp: int, key: Any, namespace: Any) -> None:
        if key == self.key:
            self._live.pop((timestamp, namespace), None)
        self.outer.remove(timestamp, key, namespace)

    def pop_due(self, up_to: int) -> InternalTimer | None:
        heap, live = self._heap, self._live
        while heap and heap[0][0] <= up_to:
            timestamp, seq, namespace = heapq.heappop(heap)
            if live.get((timestamp, namespace)) == seq:
                del live[(timestamp, namespace)]
                return _new_tuple(InternalTimer, (timestamp, self.key, namespace))
        return None

    def __len__(self) -> int:
        return len(self._live)

    def drain(self) -> list[tuple[int, Any]]:
        """The timers left, ``(timestamp, namespace)`` in firing order; the queue is empty after."""
        live = self._live
        left = [(timestamp, namespace) for timestamp, seq, namespace in sorted(self._heap)
                if live.get((timestamp, namespace)) == seq] if live else []
        self.start(None)
        return left


class InternalTimerService:
    """Event- and processing-time timers of one operator subtask.

    ``on_event_time`` and ``on_processing_time`` are called with the timer after its key
    has been made current in the state backend.
    """

    def __init__(self, backend: KeyedStateBackend, processing_time_service: ProcessingTimeService,
                 on_event_time: Callable[[InternalTimer], None],
                 on_processing_time: Callable[[InternalTimer], None], processing_at_end: bool = False) -> None:
        """``processing_at_end`` (BATCH mode): processing-time timers never follow the clock; they wait
        for :meth:`fire_processing_timers_at_end`."""
        self._backend = backend
        self._processing_at_end = processing_at_end
        self._clock = processing_time_service
        self._on_event_time = on_event_time
        self._on_processing_time = on_processing_time
        self._all_event = backend.timer_queue("event")
        self._event: Any = self._all_event
        """Where event-time timers go: every key's queue (the backend's), or the key run's (:meth:`begin_key_run`)."""
        self._key_run = _KeyRunQueue(self._all_event)
        self._processing = backend.timer_queue("processing")
        self._processing_run = _KeyRunQueue(self._processing)
        self._processing_target: Any = self._processing
        """Where processing-time timers go: every key's queue, or in BATCH mode the key run's (held
        until the end of the key's run, see :meth:`begin_key_run`)."""
        self._wakeups: set[int] = set()
        self.quiesced = False
        """Set while the timers left at the end of the input fire (BATCH mode's, a processing-time window's):
        registrations are ignored then,
        as in Flink's batch execution, or a timer that registers the next one would never end."""
        self._quiesce_warned = False
        self.current_watermark = MIN_TIMESTAMP
        self.processing_time_registrations = 0
        """Processing-time timers registered so far (a backlog replay counts the ones it causes)."""

    def current_processing_time(self) -> int:
        return self._clock.get_current_processing_time()

    def register_event_time_timer(self, namespace: Any, timestamp: int) -> None:
        if self.quiesced:
            self._ignored("event", timestamp)
            return
        self._event.add(timestamp, self._backend.get_current_key(), namespace)

    def delete_event_time_timer(self, namespace: Any, timestamp: int) -> None:
        self._event.remove(timestamp, self._backend.get_current_key(), namespace)

    def register_processing_time_timer(self, namespace: Any, timestamp: int) -> None:
        if self.quiesced:
            self._ignored("processing", timestamp)
            return
        target = self._processing_target
        if target.add(timestamp, self._backend.get_current_key(), namespace):
            self.processing_time_registrations += 1
            if target is self._processing:
                self._schedule_wakeup(timestamp)

    def delete_processing_time_timer(self, namespace: Any, timestamp: int) -> None:
        self._processing_target.remove(timestamp, self._backend.get_current_key(), namespace)

    def _ignored(self, domain: str, timestamp: int) -> None:
        if not self._quiesce_warned:
            self._quiesce_warned = True
            _log.warning("a %s-time timer for %d was registered while the timers left at the end of the input "
                         "fired: ignored, as Flink's batch execution ignores it (and any later one like it)",
                         domain, timestamp)

    def fire_processing_timers_at_end(self) -> None:
        """BATCH mode: fire the processing-time timers waiting (the key run's, or every key's), each with
        its key current, in timestamp order: processing time jumps to the end of time once the input has
        ended, as in Flink's batch execution. Timers registered meanwhile are ignored."""
        queue = self._processing_target
        self.quiesced = True
        try:
            while (timer := queue.pop_due(MAX_TIMESTAMP)) is not None:
                self._backend.set_current_key(timer.key)
                self._on_processing_time(timer)
        finally:
            self.quiesced = False

    def _schedule_wakeup(self, timestamp: int) -> None:
        if not self._processing_at_end and timestamp not in self._wakeups:
            self._wakeups.add(timestamp)
            self._clock.register_timer(timestamp, self._fire_processing_time)

    def advance_watermark(self, timestamp: int) -> None:
        """Fire every event-time timer at or before ``timestamp``, each with its key current."""
        self.current_watermark = timestamp
        pop_due, set_key, fire = self._event.pop_due, self._backend.set_current_key, self._on_event_time
        while (timer := pop_due(timestamp)) is not None:
            set_key(timer.key)
            fire(timer)

    def pop_due_event_timer(self, up_to: int) -> InternalTimer | None:
        """Remove and return the next event-time timer at or before ``up_to``, without firing it."""
        timer: InternalTimer | None = self._event.pop_due(up_to)
        return timer

    def fire_event_timer(self, timer: InternalTimer) -> None:
        """Fire ``timer`` (popped by :meth:`pop_due_event_timer`) with its key current."""
        self._backend.set_current_key(timer.key)
        self._on_event_time(timer)

    def set_aside_event_timers(self, up_to: int) -> dict[Any, list[InternalTimer]]:
        """Remove every event-time timer at or before ``up_to``; return them per key, each key's in
        firing order, for :meth:`begin_key_run` to give back a key at a time."""
        aside: dict[Any, list[InternalTimer]] = {}
        while (timer := self._all_event.pop_due(up_to)) is not None:
            aside.setdefault(timer.key, []).append(timer)
        return aside

    def begin_key_run(self, key: Any, timers: list[InternalTimer], hold_processing: bool = False) -> None:
        """Until :meth:`end_key_run`, keep the event-time timers of ``key`` (the current key, whose
        backlog is replayed alone) in a queue of their own, starting with ``timers`` (set aside by
        :meth:`set_aside_event_timers`, in their order, so equal timestamps keep it); with
        ``hold_processing`` (BATCH mode) its processing-time timers too, for
        :meth:`fire_processing_timers_at_end` rather than the clock."""
        self._key_run.start(key)
        self._event = self._key_run
        for timer in timers:
            self._key_run.add(timer.timestamp, key, timer.namespace)
        if hold_processing:
            self._processing_run.start(key)
            self._processing_target = self._processing_run

    def end_key_run(self) -> None:
        """Put the key run's timers still waiting back among every key's, in firing order."""
        if self._processing_target is self._processing_run:
            key = self._processing_run.key
            self._processing_target = self._processing
            for timestamp, namespace in self._processing_run.drain():
                if self._processing.add(timestamp, key, namespace):
                    self._schedule_wakeup(timestamp)
        if self._event is self._all_event:
            return
        key = self._key_run.key
        self._event = self._all_event
        if not self._key_run:
            self._key_run.start(None)
            return
        for timestamp, namespace in self._key_run.drain():
            self._all_event.add(timestamp, key, namespace)

    def _fire_processing_time(self, now: int) -> None:
        self._wakeups.discard(now)
        while (timer := self._processing.pop_due(now)) is not None:
            self._backend.set_current_key(timer.key)
            self._on_processing_time(timer)

    def num_event_time_timers(self) -> int:
        return len(self._all_event) + (len(self._event) if self._event is self._key_run else 0)

    def num_processing_time_timers(self) -> int:
        return len(self._processing)

    def snapshot(self) -> dict[str, list[Any]]:
        return {"event": self._all_event.snapshot(), "processing": self._processing.snapshot()}

    def freeze(self) -> FrozenTimers:
        """The timers as they are now, read into :meth:`snapshot`'s lists later (by a checkpoint
        writer, off the task's turn) whatever the service does meanwhile."""
        return FrozenTimers({"event": self._all_event.frozen(), "processing": self._processing.frozen()})

    def restore(self, snapshot: dict[str, list[Any]]) -> None:
        self._all_event.restore(snapshot["event"])
        self._processing.restore(snapshot["processing"])
        for timestamp, _key, _namespace in snapshot["processing"]:
            self._schedule_wakeup(timestamp)


class FrozenTimers:
    """A timer service's timers as at a checkpoint barrier (:meth:`InternalTimerService.freeze`):
    per time domain a reader of the timers of that moment (the heap queue's :meth:`TimerQueue.frozen`; on
    RocksDB an iterator, which reads the database as it was when it was made), read into the lists
    of :meth:`InternalTimerService.snapshot` once asked for. It pickles as those lists, so a
    checkpoint reading it in its writer's thread takes the task's turn for the readers only."""

    def __init__(self, readers: dict[str, Callable[[], list[tuple[int, Any, Any]]]]) -> None:
        self._readers = readers
        self._lists: dict[str, list[tuple[int, Any, Any]]] | None = None

    def lists(self) -> dict[str, list[tuple[int, Any, Any]]]:
        """The timers per time domain, read the first time (the readers go then)."""
        if self._lists is None:
            self._lists = {domain: read() for domain, read in self._readers.items()}
            self._readers = {}
        return self._lists

    def __getitem__(self, domain: str) -> list[tuple[int, Any, Any]]:
        return self.lists()[domain]

    def __reduce__(self) -> tuple[type, tuple[dict[str, list[tuple[int, Any, Any]]]]]:
        return dict, (self.lists(),)


def merge_timer_snapshots(snapshots: list[dict[str, list[Any]]],
                          owns_key: Callable[[Any], bool]) -> dict[str, list[Any]]:
    """The timers of several subtasks' snapshots whose keys ``owns_key`` accepts (restoring at
    another parallelism: each new subtask takes the timers of the keys it now owns)."""
    return {domain: [timer for snapshot in snapshots for timer in snapshot[domain] if owns_key(timer[1])]
            for domain in ("event", "processing")}


class KeyedTimerService(TimerService):
    """The user's view of the timer service: timers for the current key, no namespace."""

    def __init__(self, internal: InternalTimerService) -> None:
        self._internal = internal

    def current_processing_time(self) -> int:
        return self._internal.current_processing_time()

    def current_watermark(self) -> int:
        return self._internal.current_watermark

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._internal.register_processing_time_timer(VOID_NAMESPACE, int(timestamp))

    def register_event_time_timer(self, timestamp: int) -> None:
        self._internal.register_event_time_timer(VOID_NAMESPACE, int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._internal.delete_processing_time_timer(VOID_NAMESPACE, int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._internal.delete_event_time_timer(VOID_NAMESPACE, int(timestamp))

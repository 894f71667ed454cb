"""State time-to-live on both state backends, with the semantics of Flink's TTL state decorators.

A state with an enabled :class:`~slipstream.datastream.state.StateTtlConfig` stores every
user value with the processing time of its last access (:class:`TtlValue`): the value of a
value, reducing or aggregating state, each element of a list state, each entry of a map
state. The handles here wrap a plain handle (the heap backend's handle classes, over a dict or,
on RocksDB, a column family; through its ``_read``/``_write``/``_remove``, so copy-on-write
during a checkpoint holds unchanged) and expire entries as Flink does:

* an entry has expired once ``last access + ttl <= now``;
* reading an expired entry removes it; it is returned that once only with
  ``ReturnExpiredIfNotCleanedUp``, never with ``NeverReturnExpired``;
* writes stamp the entry with now; reads too with ``OnReadAndWrite``;
* adding to a reducing or aggregating state whose value expired starts afresh;
* incremental cleanup checks a few entries of the state at every access to it (and at every
  new current key, with ``run_cleanup_for_every_record``), going round all of them (Flink
  does this on the heap only; slipstream on RocksDB too, where no compaction filter runs);
* full-snapshot cleanup leaves expired entries out of checkpoints (:func:`unexpired`).

Timestamps are part of the stored values, so they survive a checkpoint and a restore at
another parallelism as the values do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from slipstream.datastream.state import (
    InternalAggregatingState,
    InternalKvState,
    InternalListState,
    InternalMapState,
    InternalReducingState,
    InternalValueState,
    StateDescriptor,
    StateTtlConfig,
)
from slipstream.errors import SlipstreamError


class TtlValue(NamedTuple):
    """A user value and the processing time (epoch ms) of its last access; never changed in place."""

    value: Any
    last_access: int


def unexpired(stored: Any, now: int, ttl: int) -> Any:
    """What of a stored TTL entry (a :class:`TtlValue`, a list or a dict of them) has not expired
    at ``now``: the same object when nothing has, None when all has, else a new container."""
    kind = type(stored)
    if kind is list:
        live = [item for item in stored if item.last_access + ttl > now]
        return stored if len(live) == len(stored) else live or None
    if kind is dict:
        kept = {key: item for key, item in stored.items() if item.last_access + ttl > now}
        return stored if len(kept) == len(stored) else kept or None
    return stored if stored.last_access + ttl > now else None


class TtlPolicy:
    """One state's TTL configuration, read once, and the processing-time clock it expires by."""

    def __init__(self, config: StateTtlConfig, now: Callable[[], int]) -> None:
        self.ttl = config.ttl_millis
        self.update_on_read = config.update_type is StateTtlConfig.UpdateType.OnReadAndWrite
        self.return_expired = config.visibility is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
        self.in_full_snapshot = config.cleanup_strategies.in_full_snapshot()
        self.incremental = config.cleanup_strategies.get_incremental_cleanup_strategy()
        self.now = now

    def live(self, item: TtlValue, now: int) -> bool:
        return item.last_access + self.ttl > now


_PASS_END = object()
"""The end of a cleanup pass's entries."""


class IncrementalCleanup:
    """Flink's incremental cleanup: a lazy pass over the state's entries, ``size`` entries per
    call, removing what has expired. ``entries`` starts a pass: on the heap the entry keys of the
    moment (entries added since wait for the next pass); on RocksDB a walk of the column family a
    page at a time, so a pass never holds every key in memory."""

    def __init__(self, state: _TtlState, size: int, entries: Callable[[], Iterable[Any]]) -> None:
        self._raw, self._policy, self._check = state._raw, state._policy, state._check
        self._size, self._entries = size, entries
        self._pending: Iterator[Any] = iter(())

    def run(self) -> None:
        """Check the next ``size`` entries; a pass ends early when the state has no more."""
        now, ttl, refilled = self._policy.now(), self._policy.ttl, False
        for _ in range(self._size):
            entry = next(self._pending, _PASS_END)
            if entry is _PASS_END:
                if refilled:
                    return
                self._pending, refilled = iter(self._entries()), True
                entry = next(self._pending, _PASS_END)
                if entry is _PASS_END:
                    return
            stored = self._raw._peek(entry)
            if stored is None:
                continue
            self._check(entry, stored)
            live = unexpired(stored, now, ttl)
            if live is None:
                self._raw._remove(entry)
            elif live is not stored:
                self._raw._write(entry, live)


class _TtlState(InternalKvState):
    """What every TTL handle shares: the wrapped heap handle, the policy, the cleanup on access."""

    _shape: type = TtlValue
    """The type of a stored entry."""

    def __init__(self, raw: Any, policy: TtlPolicy) -> None:
        self._raw, self._policy = raw, policy
        self._cleanup: IncrementalCleanup | None = None

    def set_current_namespace(self, namespace: Any) -> None:
        self._raw.set_current_namespace(namespace)

    def clear(self) -> None:
        self._raw.clear()

    def _entry(self) -> Any:
        """The current entry key, after this access's share of the incremental cleanup."""
        if self._cleanup is not None:
            self._cleanup.run()
        return self._raw._entry_key()

    def _stored(self, entry: Any) -> Any:
        """The stored entry (None when absent), checked by :meth:`_check`."""
        stored = self._raw._read(entry)
        if stored is not None:
            self._check(entry, stored)
        return stored

    def _check(self, entry: Any, stored: Any) -> None:
        """Refuse an entry not written with TTL (state restored from a job without TTL on it)."""
        if type(stored) is not self._shape:
            raise SlipstreamError(f"state {self._raw._descriptor.name!r} has time-to-live, but its entry for "
                                  f"{entry!r} was written without ({stored!r}): enabling TTL on existing "
                                  f"state needs a fresh start, as in Flink")

    def _checked(self, item: TtlValue | None, remove: Callable[[], None],
                 restamp: Callable[[TtlValue], None]) -> TtlValue | None:
        """Flink's read of one TTL entry: None when absent; an expired entry is removed and
        returned only if the visibility allows; a live one is restamped on read if asked."""
        if item is None:
            return None
        now = self._policy.now()
        if not self._policy.live(item, now):
            remove()
            return item if self._policy.return_expired else None
        if self._policy.update_on_read:
            restamp(TtlValue(item.value, now))
        return item

    def _checked_entry(self, entry: Any) -> TtlValue | None:
        """A value-shaped entry (value, reducing, aggregating state) read through :meth:`_checked`."""
        return self._checked(self._stored(entry), lambda: self._raw._remove(entry),
                             lambda item: self._raw._write(entry, item))

    def _live_entry(self, entry: Any) -> Any:
        """A value-shaped entry's user value when it has not expired (what adding builds on), else None."""
        stored = self._stored(entry)
        return None if stored is None or not self._policy.live(stored, self._policy.now()) else stored.value

    def _stamped(self, value: Any) -> TtlValue:
        return TtlValue(value, self._policy.now())


class TtlValueState(_TtlState, InternalValueState[Any]):
    def value(self) -> Any:
        item = self._checked_entry(self._entry())
        return None if item is None else item.value

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._raw._write(self._entry(), self._stamped(value))


class TtlListState(_TtlState, InternalListState[Any]):
    _shape = list

    def get(self) -> list[Any]:
        entry = self._entry()
        stored = self._stored(entry)
        if not stored:
            return []
        now = self._policy.now()
        live = unexpired(stored, now, self._policy.ttl)
        returned = stored if self._policy.return_expired else live or []
        if self._policy.update_on_read and live:
            live = [TtlValue(item.value, now) for item in live]
        if live is None:
            self._raw._remove(entry)
        elif live is not stored:
            self._raw._write(entry, live)
        return [item.value for item in returned]

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state {self._raw._descriptor.name!r}: cannot add None")
        self.add_all([value])

    def add_all(self, values: list[Any]) -> None:
        if values:
            entry = self._entry()
            stamped = [self._stamped(value) for value in values]
            current = self._stored(entry)
            if current is None:
                self._raw._write(entry, stamped)
            else:
                current.extend(stamped)

    def update(self, values: list[Any]) -> None:
        if values:
            self._raw._write(self._entry(), [self._stamped(value) for value in values])
        else:
            self.clear()


class TtlMapState(_TtlState, InternalMapState[Any, Any]):
    """Each map entry expires on its own; the state's entry goes when its last map entry does."""

    _shape = dict

    def _item(self, key: Any) -> TtlValue | None:
        entry = self._entry()
        mapping = self._stored(entry)
        if mapping is None:
            return None

        def remove() -> None:
            del mapping[key]
            if not mapping:
                self._raw._remove(entry)

        return self._checked(mapping.get(key), remove, lambda item: mapping.__setitem__(key, item))

    def get(self, key: Any) -> Any:
        item = self._item(key)
        return None if item is None else item.value

    def contains(self, key: Any) -> bool:
        return self._item(key) is not None

    def put(self, key: Any, value: Any) -> None:
        self.put_all({key: value})

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        entry = self._entry()
        stamped = {key: self._stamped(value) for key, value in dict_value.items()}
        mapping = self._stored(entry)
        if mapping is None:
            if stamped:
                self._raw._write(entry, stamped)
        else:
            mapping.update(stamped)

    def remove(self, key: Any) -> None:
        entry = self._entry()
        mapping = self._stored(entry)
        if mapping is not None:
            mapping.pop(key, None)
            if not mapping:
                self._raw._remove(entry)

    def items(self) -> Iterable[tuple[Any, Any]]:
        """The entries to return; expired ones are removed, live ones restamped on read if asked."""
        entry = self._entry()
        mapping = self._stored(entry)
        if not mapping:
            return []
        now = self._policy.now()
        returned = list(mapping.items()) if self._policy.return_expired else \
            [(key, item) for key, item in mapping.items() if self._policy.live(item, now)]
        for key, item in list(mapping.items()):
            if not self._policy.live(item, now):
                del mapping[key]
            elif self._policy.update_on_read:
                mapping[key] = TtlValue(item.value, now)
        if not mapping:
            self._raw._remove(entry)
        return [(key, item.value) for key, item in returned]

    def keys(self) -> Iterable[Any]:
        return [key for key, _ in self.items()]

    def values(self) -> Iterable[Any]:
        return [value for _, value in self.items()]

    def is_empty(self) -> bool:
        return not self.items()


class TtlReducingState(_TtlState, InternalReducingState[Any]):
    def get(self) -> Any:
        item = self._checked_entry(self._entry())
        return None if item is None else item.value

    def add(self, value: Any) -> None:
        entry = self._entry()
        current = self._live_entry(entry)
        reduced = value if current is None else self._raw._descriptor.reduce_function.reduce(current, value)
        self._raw._write(entry, self._stamped(reduced))


class TtlAggregatingState(_TtlState, InternalAggregatingState[Any, Any]):
    def get(self) -> Any:
        item = self._checked_entry(self._entry())
        return None if item is None else self._raw._descriptor.agg_function.get_result(item.value)

    def add(self, value: Any) -> None:
        entry = self._entry()
        fn = self._raw._descriptor.agg_function
        accumulator = self._live_entry(entry)
        if accumulator is None:
            accumulator = fn.create_accumulator()
        self._raw._write(entry, self._stamped(fn.add(value, accumulator)))

    def get_accumulator(self) -> Any:
        item = self._checked_entry(self._entry())
        return None if item is None else item.value

    def set_accumulator(self, accumulator: Any) -> None:
        self._raw._write(self._entry(), self._stamped(accumulator))


_TTL_CLASSES: dict[str, type[_TtlState]] = {
    "value": TtlValueState,
    "list": TtlListState,
    "map": TtlMapState,
    "reducing": TtlReducingState,
    "aggregating": TtlAggregatingState,
}


def ttl_state(descriptor: StateDescriptor[Any], raw: Any, policy: TtlPolicy,
              entries: Callable[[], Iterable[Any]]) -> tuple[_TtlState, IncrementalCleanup | None]:
    """The TTL handle of ``descriptor`` over the plain handle ``raw``, and its incremental cleanup
    (None when there is none); ``entries`` starts a pass over the state's entry keys."""
    state, strategy = _TTL_CLASSES[descriptor.kind](raw, policy), policy.incremental
    if strategy is not None and strategy.get_cleanup_size() > 0:
        state._cleanup = IncrementalCleanup(state, strategy.get_cleanup_size(), entries)
    return state, state._cleanup

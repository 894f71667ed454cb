"""Keyed state kept in Python dictionaries, one table per state name.

Tables are keyed by the record key (or ``(key, namespace)`` for namespaced state
such as per-window contents), so a state access is one dict lookup. Key groups are
computed only when a snapshot is taken, never on the per-record path.

A checkpoint takes its snapshot without copying: :meth:`HeapKeyedStateBackend.freeze`
hands the tables themselves to the checkpoint writer, which reads them in another
thread while the job goes on. Until :meth:`HeapKeyedStateBackend.release`, the tables
stay exactly as they were at the barrier: changes go to a delta per table (a removal
is a tombstone), reads look there first, and a value from the frozen table that could
be changed in place (a list, a dict, a row, an object — anything but plain immutable
values) is copied into the delta before it is handed out, as Flink's copy-on-write
state map does. So a value read from state belongs to that call: change it in place
only right away or through the state, never later through a reference kept from an
earlier call.

After the release the deltas are folded back into the tables a bounded number of
entries at a time (:meth:`HeapKeyedStateBackend.merge_some`, between the tasks'
turns): folding them all at once would stop the job for about a microsecond per
changed entry, 100 ms after a long write. Meanwhile reads still look in the deltas
first and writes go to the tables.

For incremental checkpoints each state also keeps, from the first freeze on, the set of
its entries changed since the last freeze (a write, a removal, or a read handing out a value that could be changed
in place). A freeze hands those sets to the checkpoint with the files of the last
completed checkpoint (``KeyedStateView.dirty`` and ``base``): the writer may then write
only the changed entries. If that checkpoint does not complete, its sets are folded back
into the current ones on :meth:`HeapKeyedStateBackend.release`, so the next one still
writes them.
"""

from __future__ import annotations

import copy
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from slipstream.datastream.pipeline_options import TASK_HEAP
from slipstream.datastream.state import (
    AggregatingStateDescriptor,
    InternalAggregatingState,
    InternalKvState,
    InternalListState,
    InternalMapState,
    InternalReducingState,
    InternalValueState,
    ReducingStateDescriptor,
    S,
    StateDescriptor,
)
from slipstream.datastream.typeinfo import Row
from slipstream.errors import CheckpointError, SlipstreamError, unhashable_key
from slipstream.operators.memory import SAMPLE_ENTRIES, MemoryBudget, entry_bytes
from slipstream.operators.timers import TimerQueue
from slipstream.runtime.checkpoint.pacing import chunk_rows, paced
from slipstream.runtime.checkpoint.state_files import SstFile, encode_keyed_state
from slipstream.runtime.clock import SystemClock
from slipstream.runtime.key_groups import assign_to_key_groups
from slipstream.runtime.state.ttl import TtlPolicy, TtlValue, ttl_state, unexpired

_UNCHANGED = object()
"""Not in a delta: the frozen table has the entry's value."""

_REMOVED = object()
"""In a delta: the entry was removed since the freeze."""

class _Untracked:
    """Where a state's changes go before its backend's first freeze: nowhere (no checkpoint would
    use them, and a job without checkpoints would keep a set of every key). ``add`` is a builtin
    doing nothing with its argument, as cheap to call as ``set.add``."""

    add = staticmethod(id)


_UNTRACKED = _Untracked()

_ATOMS = frozenset({int, float, complex, str, bytes, bool, type(None)})


def _is_immutable(value: Any) -> bool:
    """Whether nothing can change ``value`` in place: a plain scalar, or a tuple or frozenset of them."""
    kind = type(value)
    if kind in _ATOMS:
        return True
    if kind is TtlValue:  # never changed in place: only what it holds may be
        return _is_immutable(value.value)
    if kind is tuple or kind is frozenset:
        for item in value:
            if not _is_immutable(item):
                return False
        return True
    return False


def _copied(value: Any, state_name: str, entry: Any) -> Any:
    """A copy of ``value`` that can be changed without changing ``value`` (shallow where its
    items are immutable)."""
    kind = type(value)
    try:
        if kind is Row:  # the common case (rows bootstrapped from a columnar backlog), without deepcopy's dispatch
            return value.__deepcopy__({})
        if kind is list and all(_is_immutable(item) for item in value):
            return list(value)
        if kind is dict and all(_is_immutable(item) for item in value.values()):
            return dict(value)
        return copy.deepcopy(value)
    except Exception as exc:  # noqa: BLE001 - any failure to copy names the state and the entry
        raise SlipstreamError(f"state {state_name!r}: the value of {entry!r} cannot be copied, which "
                              f"keeping a checkpoint exact while it is written needs: "
                              f"{type(exc).__name__}: {exc}") from exc


class KeyedBackendBase(ABC):
    """What the keyed state backends share: the current key, the state handles by name (the
    heap's handle classes over each backend's tables) and time-to-live over them. A backend
    gives each state its table (:meth:`_table_for`: a dict, or what acts as one) and wires a
    new handle to its checkpoint bookkeeping (:meth:`_attach`)."""

    def __init__(self, max_parallelism: int, now: Callable[[], int] | None = None,
                 budget: MemoryBudget | None = None) -> None:
        self.max_parallelism = max_parallelism
        self.memory_budget = budget  # the subtask's share of the job's memory for its state (None: unbounded)
        self.current_key: Any = None
        self._now = now or SystemClock().now_ms
        self._states: dict[tuple[str, bool], _HeapState] = {}
        self._ttl: dict[str, TtlPolicy] = {}  # the states with time-to-live
        self._ttl_handles: dict[tuple[str, bool], InternalKvState] = {}  # their handles, over the plain ones in _states
        self._key_listeners: list[Callable[[], None]] = []  # incremental TTL cleanups run for every record
        self._kinds: dict[str, str] = {}
        self._frozen = False
        self._base: Any = None  # the files of the last completed checkpoint (opaque: see FrozenView)
        self._view: FrozenView | None = None  # the frozen view of the checkpoint being written

    def set_current_key(self, key: Any) -> None:
        try:
            hash(key)
        except TypeError:
            raise unhashable_key(key) from None
        self.current_key = key
        if self._key_listeners:
            for listener in self._key_listeners:
                listener()

    def unset_current_key(self, reason: str) -> None:
        """No key is current (a broadcast element's turn): reaching keyed state raises ``reason``
        (Flink: "No key set") until the next :meth:`set_current_key`."""
        self.current_key = _NoKey(reason)

    def get_current_key(self) -> Any:
        return self.current_key

    def get_state(self, descriptor: StateDescriptor[S], namespaced: bool = False) -> S:
        """The state named by ``descriptor``; the same object for the same name."""
        name = descriptor.name
        known = self._kinds.setdefault(name, descriptor.kind)
        if known != descriptor.kind:
            raise ValueError(f"state {name!r} was registered as {known} state, "
                             f"now asked for as {descriptor.kind} state")
        handle = self._states.get((name, namespaced))
        if handle is None:
            handle = self._new_handle(descriptor, namespaced)
        # the handle's class is the descriptor's kind (_STATE_CLASSES), or its TTL handle's
        return cast(S, self._ttl_handles.get((name, namespaced), handle) if self._ttl_handles else handle)

    def _new_handle(self, descriptor: StateDescriptor[Any], namespaced: bool) -> _HeapState:
        """The plain handle of a state, registered; a state with time-to-live gets its TTL handle
        over it (:mod:`~slipstream.runtime.state.ttl`), which reads and writes through it."""
        name, ttl = descriptor.name, descriptor.ttl_config
        table = self._table_for(name)
        if ttl is not None and ttl.is_enabled():
            cls: type[_HeapState] = _HeapState
        else:
            cls = HeapKeyValueState if descriptor.kind == "value" and not namespaced else \
                _STATE_CLASSES[descriptor.kind]
        handle = cls(self, table, descriptor, namespaced)
        self._attach(handle, name)
        self._states[(name, namespaced)] = handle
        if cls is _HeapState and ttl is not None:  # the one implies the other
            policy = self._ttl.setdefault(name, TtlPolicy(ttl, self._now))
            wrapper, cleanup = ttl_state(descriptor, handle, policy, lambda: self._cleanup_pass(name))
            self._ttl_handles[(name, namespaced)] = wrapper
            incremental = policy.incremental
            if cleanup is not None and incremental is not None and incremental.run_cleanup_for_every_record():
                self._key_listeners.append(cleanup.run)
        return handle

    @abstractmethod
    def fresh(self) -> KeyedBackendBase:
        """An empty backend of the same kind, clock and memory budget (a new round's keyed state)."""

    def dispose(self) -> None:
        """The job is over: free what garbage collection would not (nothing, for the heap)."""

    def release(self) -> None:
        """The frozen state is written (or given up): the changes made since go back in through
        :meth:`merge_some` (at once if nothing changed). Nothing to do when not frozen.
        A completed checkpoint's files become the base of the next; otherwise the entries it
        would have saved stay marked changed."""
        view, self._view = self._view, None
        if view is not None:
            if view.completed is not None:
                self._base = view.completed
            else:
                self._keep_changes(view.dirty)
        self._frozen = False
        self.merge_some(0)

    @abstractmethod
    def account_memory(self) -> None:
        """Hold the state's memory to :attr:`memory_budget` and record its usage (after every turn
        of the task): the heap backend fails past it, RocksDB writes past it to disk."""

    @abstractmethod
    def value_accessors(
        self, descriptor: StateDescriptor[Any]
    ) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]:
        """``get(key)`` and ``put(key, value)`` of a value state by record key, for built-in operators."""

    @abstractmethod
    def bulk_load(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], values: Iterable[Any]) -> None:
        """Install the final value of a value state for many keys at once (a None value leaves its key)."""

    def install_namespaced(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], namespaces: Iterable[Any],
                           values: Iterable[Any]) -> None:
        """Give each (key, namespace) entry of a namespaced value or reducing state its value, where none
        of them holds one yet (the windows a sorted backlog leaves open): what making the key current,
        the namespace current and adding the value does, entry by entry."""
        handle: Any = self.get_state(descriptor, namespaced=True)
        put = handle.add if descriptor.kind == "reducing" else handle.update
        for key, namespace, value in zip(keys, namespaces, values):
            self.set_current_key(key)
            handle.set_current_namespace(namespace)
            put(value)

    @abstractmethod
    def timer_queue(self, domain: str) -> Any:
        """The timers of time domain ``domain`` (``event`` or ``processing``)."""

    @abstractmethod
    def snapshot(self) -> dict[str, dict[int, list[tuple[Any, Any]]]]:
        """Every entry by state name and key group, copied now."""

    @abstractmethod
    def restore(self, snapshot: dict[str, Any], key_groups: range | None = None) -> None:
        """Load the entries of ``key_groups`` (all when None) from one layer of a checkpoint."""

    @abstractmethod
    def freeze(self) -> FrozenView:
        """The state as it is now, for a checkpoint writer to read while the job goes on."""

    @property
    @abstractmethod
    def merging(self) -> bool:
        """Whether released changes still wait to be put back (:meth:`merge_some`)."""

    @abstractmethod
    def merge_some(self, budget: int) -> bool:
        """Put up to ``budget`` changes made while frozen back into the state; whether all are."""

    @abstractmethod
    def _keep_changes(self, dirty: dict[str, Any]) -> None:
        """A checkpoint was given up: its changed entries stay marked changed for the next."""

    @abstractmethod
    def _table_for(self, name: str) -> Any:
        """State ``name``'s table (created when new): what its handles read and write."""

    @abstractmethod
    def _attach(self, handle: _HeapState, name: str) -> None:
        """Wire a new handle of state ``name`` to the backend's checkpoint bookkeeping."""

    @abstractmethod
    def keys(self, state_name: str) -> Iterable[Any]:
        """The keys that have an entry in ``state_name``."""

    def _cleanup_pass(self, name: str) -> Iterable[Any]:
        """The entry keys a pass of TTL's incremental cleanup of state ``name`` goes over (see
        :class:`~slipstream.runtime.state.ttl.IncrementalCleanup`): those of the moment."""
        return self.keys(name)

    def _expiring(self) -> dict[str, int]:
        """The states whose expired entries checkpoints leave out (TTL's full-snapshot cleanup), with their TTL."""
        return {name: policy.ttl for name, policy in self._ttl.items() if policy.in_full_snapshot}


class HeapKeyedStateBackend(KeyedBackendBase):
    """Keyed state of one operator subtask; ``now`` is the processing-time clock state
    time-to-live expires by (epoch ms)."""

    def __init__(self, max_parallelism: int, now: Callable[[], int] | None = None,
                 budget: MemoryBudget | None = None) -> None:
        super().__init__(max_parallelism, now, budget)
        self._tables: dict[str, dict[Any, Any]] = {}
        self._deltas: dict[str, dict[Any, Any]] | None = None  # frozen, or merging: the changes per table
        self._dirty: dict[str, set[Any]] | None = None  # per state: the entries changed since the last freeze

    def fresh(self) -> HeapKeyedStateBackend:
        return HeapKeyedStateBackend(self.max_parallelism, self._now, self.memory_budget)

    def _table_for(self, name: str) -> dict[Any, Any]:
        return self._tables.setdefault(name, {})

    def _attach(self, handle: _HeapState, name: str) -> None:
        handle._delta = None if self._deltas is None else self._deltas.get(name)
        handle._dirty = _UNTRACKED if self._dirty is None else self._dirty.setdefault(name, set())

    def timer_queue(self, domain: str) -> TimerQueue:
        """The timers of time domain ``domain`` (``event`` or ``processing``), in dicts per timestamp."""
        return TimerQueue()

    def bulk_load(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], values: Iterable[Any]) -> None:
        """Install the final value of a value state for many keys at once (a sorted backlog's
        result); a None value leaves its key as it is. Written into the state's table at once, as
        :meth:`install_namespaced` is (entry by entry with a time-to-live, or while a checkpoint is written)."""
        self.get_state(descriptor)
        handle = self._states[(descriptor.name, False)]
        if descriptor.name not in self._ttl and handle._delta is None:
            entries = [(key, value) for key, value in zip(keys, values) if value is not None]
            self._tables[descriptor.name].update(entries)
            if isinstance(handle._dirty, set):
                handle._dirty.update(key for key, _ in entries)
            return
        _, put = self.value_accessors(descriptor)
        for key, value in zip(keys, values):
            if value is not None:
                put(key, value)

    def install_namespaced(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], namespaces: Iterable[Any],
                           values: Iterable[Any]) -> None:
        """As :meth:`KeyedBackendBase.install_namespaced`, written into the state's table at once (a
        state with a time-to-live, or one a checkpoint is being written of, takes the entries one by one)."""
        self.get_state(descriptor, namespaced=True)
        handle = self._states[(descriptor.name, True)]
        if descriptor.name in self._ttl or descriptor.kind not in ("value", "reducing") or handle._delta is not None:
            super().install_namespaced(descriptor, keys, namespaces, values)
            return
        entries = list(map(_NamespacedKey, zip(keys, namespaces)))
        self._tables[descriptor.name].update(zip(entries, values))
        if isinstance(handle._dirty, set):
            handle._dirty.update(entries)

    def value_accessors(
        self, descriptor: StateDescriptor[Any]
    ) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]:
        """``get(key)`` and ``put(key, value)`` of a value state by record key: the per-record
        fast path of built-in operators (the dict's own methods unless a snapshot is being
        written). Take them afresh for every batch. Users go through :meth:`get_state`."""
        handle = self.get_state(descriptor)
        if handle._delta is None:
            table, dirty = self._tables[descriptor.name], handle._dirty

            def put(key: Any, value: Any) -> None:
                table[key] = value
                dirty.add(key)
            return table.get, put
        return handle._read, handle._write

    def keys(self, state_name: str) -> Iterable[Any]:
        """The keys that have an entry in ``state_name`` (for batch export and tests)."""
        table = self._tables.get(state_name, {})
        delta = None if self._deltas is None else self._deltas.get(state_name)
        if not delta:
            return list(table)
        return [entry for entry in table if delta.get(entry, _UNCHANGED) is not _REMOVED] + \
            [entry for entry, value in delta.items() if entry not in table and value is not _REMOVED]

    def estimated_bytes(self) -> int:
        """Roughly the memory the entries take, what the task heap budget is checked against: per
        state, their count times the mean size of a few of them (:func:`~slipstream.operators.memory.entry_bytes`)."""
        return int(sum(len(table) * entry_bytes(itertools.islice(table.items(), SAMPLE_ENTRIES))
                       for table in self._tables.values()))

    def account_memory(self) -> None:
        """Past its share of the task heap the state fails the job (:class:`~slipstream.errors.MemoryBudgetError`
        naming the operator and the budget), before the operating system would kill the process."""
        if self.memory_budget is not None:
            self.memory_budget.check(self.estimated_bytes(), "its keyed state (kept on the heap)",
                                     f"raise {TASK_HEAP}, or keep the state on disk with a RocksDB state backend")

    # -- snapshots ----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, dict[int, list[tuple[Any, Any]]]]:
        """Entries grouped by state name and key group, so they can be redistributed on restore;
        copied now (a checkpoint takes :meth:`freeze` instead)."""
        view = self.freeze()
        try:
            result: dict[str, dict[int, list[tuple[Any, Any]]]] = {}
            for name in view.names:
                state, groups = view.entries(name), result.setdefault(name, {})
                for keys, values in state.chunks(1 << 16):
                    for group, entry, value in zip(state.key_groups(keys), keys, values):
                        groups.setdefault(group, []).append((entry, _own_copy(value)))
            return result
        finally:
            self.release()

    def freeze(self) -> KeyedStateView:
        """The tables as they are now, for a checkpoint writer to read while the job goes on;
        until :meth:`release` they do not change (see the module docstring)."""
        if self._frozen:
            raise SlipstreamError("keyed state is already frozen for a checkpoint being written")
        while not self.merge_some(1 << 20):  # what the last checkpoint left to fold back, if anything
            pass
        self._deltas = {name: {} for name in self._tables}
        dirty, self._dirty = self._dirty or {}, {name: set() for name in self._tables}
        self._frozen = True
        for (name, _), handle in self._states.items():
            handle._delta, handle._dirty = self._deltas[name], self._dirty[name]
        expiring = self._expiring()
        self._view = KeyedStateView(dict(self._tables), self.max_parallelism, dirty, self._base,
                                    expiring, self._now() if expiring else 0)
        return self._view

    def _keep_changes(self, dirty: dict[str, set[Any]]) -> None:
        assert self._dirty is not None  # tracked since the first freeze, which made the view
        for name, keys in dirty.items():
            self._dirty.setdefault(name, set()).update(keys)

    @property
    def merging(self) -> bool:
        """Whether released changes still wait to be folded back (:meth:`merge_some`)."""
        return self._deltas is not None and not self._frozen

    def merge_some(self, budget: int) -> bool:
        """Fold up to ``budget`` released changes back into the tables; whether all are."""
        if self._deltas is None or self._frozen:
            return not self._frozen
        for name, delta in self._deltas.items():
            table = self._tables[name]
            while delta:
                if budget <= 0:
                    return False
                budget -= 1
                entry, value = delta.popitem()
                if value is _REMOVED:
                    table.pop(entry, None)
                else:
                    table[entry] = value
        self._deltas = None
        for handle in self._states.values():
            handle._delta = None
        return True

    def restore(self, snapshot: dict[str, dict[int, list[tuple[Any, Any]]]],
                key_groups: range | None = None) -> None:
        """Load the entries of ``key_groups`` (all when None) from one or more snapshots; an entry
        whose value is None was removed (in the changes of an incremental checkpoint)."""
        for name, groups in snapshot.items():
            if isinstance(groups, SstFile):
                raise CheckpointError(f"state {name!r} was checkpointed by EmbeddedRocksDBStateBackend, as a "
                                      "RocksDB table file, which HashMapStateBackend cannot read: restore the "
                                      "job with env.set_state_backend(EmbeddedRocksDBStateBackend())")
            table = self._tables.setdefault(name, {})
            for group, entries in groups.items():
                if key_groups is None or group in key_groups:
                    for entry_key, value in entries:
                        if value is None:
                            table.pop(entry_key, None)
                        else:
                            table[entry_key] = _own_copy(value)


class FrozenView(ABC):
    """What a frozen backend's view tells its checkpoint writer, on either backend: the state
    names (``tables``: each state's table), ``dirty`` per state the entries changed since the
    previous freeze, ``base`` what the checkpoint writer recorded as ``completed`` in the
    backend's last checkpoint that completed (None: none has yet). The states named in
    ``expiring`` (with their TTL) leave out what has expired at ``now``: TTL's full-snapshot
    cleanup (a changed entry that expired is written as removed)."""

    def __init__(self, tables: dict[str, Any], max_parallelism: int,
                 dirty: dict[str, set[Any]] | None = None, base: Any = None,
                 expiring: dict[str, int] | None = None, now: int = 0) -> None:
        self._tables = tables
        self.max_parallelism = max_parallelism
        self.dirty = {} if dirty is None else dirty
        self.base = base
        self.completed: Any = None  # set by the writer once the checkpoint is durable
        self._expiring, self.now = expiring or {}, now

    @property
    def names(self) -> list[str]:
        return list(self._tables)

    @property
    def changed(self) -> int:
        """Entries changed since the previous freeze, over all states."""
        return sum(len(self.dirty.get(name, ())) for name in self._tables)

    @property
    @abstractmethod
    def size(self) -> int:
        """Entries over all states (the coordinator writes small state at once)."""

    @abstractmethod
    def encode_layer(self, incremental: bool) -> tuple[list[tuple[str, str, memoryview]], int]:
        """The files of a checkpoint's layer, as ``(state name, format, contents)``, and how many
        entries they hold: every entry, or (``incremental``) those changed since the previous freeze."""


class KeyedStateView(FrozenView):
    """The heap backend's tables as they were at a checkpoint barrier, read (by the checkpoint
    writer, in its own thread) while the backend is frozen."""

    @property
    def size(self) -> int:
        """Entries over all states."""
        return sum(len(table) for table in self._tables.values())

    def entries(self, name: str) -> _FrozenState:
        """State ``name`` as the checkpoint file encoder reads it, chunk by chunk."""
        table = self._tables[name]
        return _FrozenState(table, table.__getitem__, self, self._expiring.get(name))

    def changes(self, name: str) -> _FrozenState:
        """The entries of state ``name`` changed since the previous freeze, a removed one with value None."""
        return _FrozenState(self.dirty.get(name, ()), self._tables[name].get, self, self._expiring.get(name),
                            removed_as_none=True)

    def encode_layer(self, incremental: bool) -> tuple[list[tuple[str, str, memoryview]], int]:
        """The files of a checkpoint's layer, as ``(state name, format, contents)``, and how many
        entries they hold: every entry, or (``incremental``) those changed since the previous freeze."""
        if incremental:
            changed = {name: self.changes(name) for name in self.names if self.dirty.get(name)}
            return encode_keyed_state(changed), self.changed
        return encode_keyed_state({name: self.entries(name) for name in self.names}), self.size

    def key_groups(self, entries: list[Any]) -> list[int]:
        """The key group of each entry key."""
        return assign_to_key_groups([entry[0] if type(entry) is _NamespacedKey else entry for entry in entries],
                                    self.max_parallelism)


class _FrozenState:
    """One state of a :class:`KeyedStateView`: the ``StateChunks`` the checkpoint file encoder reads."""

    def __init__(self, keys: Iterable[Any], value_of: Callable[[Any], Any], view: KeyedStateView,
                 ttl: int | None = None, removed_as_none: bool = False) -> None:
        self._keys, self._value_of, self.key_groups = keys, value_of, view.key_groups
        self._ttl, self._now, self._removed_as_none = ttl, view.now, removed_as_none

    def chunks(self, size: int) -> Iterator[tuple[list[Any], list[Any]]]:
        """The entries' keys and values, ``size`` at a time in table order: what is built for one
        chunk is garbage before the next, so the writer never holds millions of objects (a full
        garbage collection would walk them), and each step is a short call. A background writer
        reads fewer at a time, in the job's idle time (:mod:`slipstream.runtime.checkpoint.pacing`)."""
        return paced(self._chunks(chunk_rows(size)))

    def _chunks(self, size: int) -> Iterator[tuple[list[Any], list[Any]]]:
        entries, value_of = iter(self._keys), self._value_of
        while True:
            keys = list(itertools.islice(entries, size))
            if not keys:
                return
            if self._ttl is None:
                yield keys, list(map(value_of, keys))
            else:
                yield self._unexpired(keys, list(map(value_of, keys)))

    def _unexpired(self, keys: list[Any], values: list[Any]) -> tuple[list[Any], list[Any]]:
        """The entries of a chunk without what has expired (new containers: the table stays as it
        is); in a layer of changes an expired entry stays, as removed (None)."""
        ttl, now = self._ttl, self._now
        assert ttl is not None  # called only for a state with time-to-live
        live = [None if value is None else unexpired(value, now, ttl) for value in values]
        if self._removed_as_none:
            return keys, live
        kept = [position for position, value in enumerate(live) if value is not None]
        return [keys[position] for position in kept], [live[position] for position in kept]


def _own_copy(value: Any) -> Any:
    """Copy the containers list and map state mutate in place, so a snapshot stays as taken."""
    kind = type(value)
    return kind(value) if kind is list or kind is dict else value


class _NoKey:
    """The current key when none is: every state access hashes its key, so this raises there, at
    no cost to the accesses that have a key."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __hash__(self) -> int:
        raise RuntimeError(self.reason)

    def __repr__(self) -> str:
        return "<no key>"


class _NamespacedKey(tuple[Any, ...]):
    """``(key, namespace)``: the table key of namespaced state."""

    __slots__ = ()


class _HeapState:
    """A state handle: reads and writes the table, or while frozen its delta (see the module docstring)."""

    def __init__(self, backend: KeyedBackendBase, table: Any,
                 descriptor: StateDescriptor[Any], namespaced: bool) -> None:
        self._backend = backend
        self._table = table
        self._delta: dict[Any, Any] | None = None
        self._dirty: set[Any] | _Untracked = _UNTRACKED  # the backend's set of this state's changed entries
        self._descriptor = descriptor
        self._namespaced = namespaced
        self.namespace: Any = None

    def set_current_namespace(self, namespace: Any) -> None:
        self.namespace = namespace

    def _entry_key(self) -> Any:
        if self._namespaced:
            return _NamespacedKey((self._backend.current_key, self.namespace))
        return self._backend.current_key

    def _peek(self, entry: Any) -> Any:
        """The entry's value (None when absent) to look at only: never to change in place."""
        delta = self._delta
        if delta is not None:
            value = delta.get(entry, _UNCHANGED)
            if value is not _UNCHANGED:
                return None if value is _REMOVED else value
        return self._table.get(entry)

    def _read(self, entry: Any) -> Any:
        """The entry's live value (None when absent), which the caller may change in place."""
        delta = self._delta
        if delta is None:
            value = self._table.get(entry)
        else:
            value = delta.get(entry, _UNCHANGED)
            if value is _UNCHANGED:
                value = self._table.get(entry)
                if value is not None and self._backend._frozen and not _is_immutable(value):
                    value = delta[entry] = _copied(value, self._descriptor.name, entry)
            elif value is _REMOVED:
                value = None
        if type(value) not in _ATOMS:  # the caller may change it in place
            self._dirty.add(entry)
        return value

    def _write(self, entry: Any, value: Any) -> None:
        self._dirty.add(entry)
        delta = self._delta
        if delta is not None:
            if self._backend._frozen:
                delta[entry] = value
                return
            delta.pop(entry, None)  # merging: the table holds the newest value from now on
        self._table[entry] = value

    def _remove(self, entry: Any) -> None:
        self._dirty.add(entry)
        delta = self._delta
        if delta is not None:
            if self._backend._frozen:
                delta[entry] = _REMOVED
                return
            delta.pop(entry, None)
        self._table.pop(entry, None)

    def clear(self) -> None:
        self._remove(self._entry_key())


class HeapValueState(_HeapState, InternalValueState[Any]):
    def value(self) -> Any:
        return self._read(self._entry_key())

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._write(self._entry_key(), value)


class HeapKeyValueState(HeapValueState):
    """Value state without a namespace: the common case, one dict access per call."""

    def value(self) -> Any:
        if self._delta is None:
            key = self._backend.current_key
            value = self._table.get(key)
            if type(value) not in _ATOMS:  # the caller may change it in place
                self._dirty.add(key)
            return value
        return self._read(self._backend.current_key)

    def update(self, value: Any) -> None:
        if self._delta is not None:
            HeapValueState.update(self, value)
            return
        key = self._backend.current_key
        self._dirty.add(key)
        if value is None:
            self._table.pop(key, None)
        else:
            self._table[key] = value


class HeapListState(_HeapState, InternalListState[Any]):
    def get(self) -> list[Any]:
        values = self._read(self._entry_key())
        return [] if values is None else values

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state {self._descriptor.name!r}: cannot add None")
        entry = self._entry_key()
        current = self._read(entry)
        if current is None:
            self._write(entry, [value])
        else:
            current.append(value)

    def add_all(self, values: list[Any]) -> None:
        if values:
            entry = self._entry_key()
            current = self._read(entry)
            if current is None:
                self._write(entry, list(values))
            else:
                current.extend(values)

    def update(self, values: list[Any]) -> None:
        if values:
            self._write(self._entry_key(), list(values))
        else:
            self.clear()


class HeapMapState(_HeapState, InternalMapState[Any, Any]):
    def _map(self) -> dict[Any, Any]:
        mapping = self._read(self._entry_key())
        return {} if mapping is None else mapping

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        entry = self._entry_key()
        mapping = self._read(entry)
        if mapping is None:
            self._write(entry, {key: value})
        else:
            mapping[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        entry = self._entry_key()
        mapping = self._read(entry)
        if mapping is None:
            self._write(entry, dict(dict_value))
        else:
            mapping.update(dict_value)

    def remove(self, key: Any) -> None:
        entry = self._entry_key()
        mapping = self._read(entry)
        if mapping is not None:
            mapping.pop(key, None)
            if not mapping:
                self._remove(entry)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self._map().items())

    def keys(self) -> Iterable[Any]:
        return list(self._map().keys())

    def values(self) -> Iterable[Any]:
        return list(self._map().values())

    def is_empty(self) -> bool:
        return not self._map()


class HeapReducingState(_HeapState, InternalReducingState[Any]):
    _descriptor: ReducingStateDescriptor
    def get(self) -> Any:
        return self._read(self._entry_key())

    def add(self, value: Any) -> None:
        entry = self._entry_key()
        current = self._read(entry)
        self._write(entry, value if current is None else self._descriptor.reduce_function.reduce(current, value))


class HeapAggregatingState(_HeapState, InternalAggregatingState[Any, Any]):
    _descriptor: AggregatingStateDescriptor
    def get(self) -> Any:
        acc = self._read(self._entry_key())
        return None if acc is None else self._descriptor.agg_function.get_result(acc)

    def add(self, value: Any) -> None:
        entry = self._entry_key()
        fn = self._descriptor.agg_function
        acc = self._read(entry)
        if acc is None:
            acc = fn.create_accumulator()
        self._write(entry, fn.add(value, acc))

    def get_accumulator(self) -> Any:
        return self._read(self._entry_key())

    def set_accumulator(self, accumulator: Any) -> None:
        self._write(self._entry_key(), accumulator)


_STATE_CLASSES: dict[str, type[_HeapState]] = {
    "value": HeapValueState,
    "list": HeapListState,
    "map": HeapMapState,
    "reducing": HeapReducingState,
    "aggregating": HeapAggregatingState,
}

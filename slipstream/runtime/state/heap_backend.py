"""Keyed state kept in Python dictionaries, one table per state name.

Tables are keyed by the record key (or ``(key, namespace)`` for namespaced state
such as per-window contents), so a state access is one dict lookup. Key groups are
computed only when a snapshot is taken, never on the per-record path.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable

from slipstream.datastream.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    State,
    StateDescriptor,
    ValueState,
)
from slipstream.runtime.key_groups import assign_to_key_group


class HeapKeyedStateBackend:
    """Keyed state of one operator subtask."""

    def __init__(self, max_parallelism: int) -> None:
        self.max_parallelism = max_parallelism
        self.current_key: Any = None
        self._tables: dict[str, dict[Any, Any]] = {}
        self._states: dict[tuple[str, bool], _HeapState] = {}
        self._kinds: dict[str, str] = {}

    def set_current_key(self, key: Any) -> None:
        try:
            hash(key)
        except TypeError:
            raise TypeError(f"the key {key!r} is not hashable: a key selector must return a hashable "
                            f"value (a tuple rather than a list), got a {type(key).__name__}") from None
        self.current_key = key

    def get_current_key(self) -> Any:
        return self.current_key

    def get_state(self, descriptor: StateDescriptor, namespaced: bool = False) -> State:
        """The state named by ``descriptor``; the same object for the same name."""
        name = descriptor.name
        known = self._kinds.setdefault(name, descriptor.kind)
        if known != descriptor.kind:
            raise ValueError(f"state {name!r} was registered as {known} state, "
                             f"now asked for as {descriptor.kind} state")
        handle = self._states.get((name, namespaced))
        if handle is None:
            if descriptor.ttl_config is not None and descriptor.ttl_config.is_enabled():
                warnings.warn(f"state {name!r}: time-to-live is accepted but not yet enforced; "
                              "entries are kept until cleared", stacklevel=3)
            table = self._tables.setdefault(name, {})
            cls = HeapKeyValueState if descriptor.kind == "value" and not namespaced else \
                _STATE_CLASSES[descriptor.kind]
            handle = cls(self, table, descriptor, namespaced)
            self._states[(name, namespaced)] = handle
        return handle

    def value_table(self, descriptor: StateDescriptor) -> dict[Any, Any]:
        """The dict behind a value state, keyed by record key: the per-record fast path of
        built-in operators (one lookup, no method calls). Users go through :meth:`get_state`."""
        self.get_state(descriptor)
        return self._tables[descriptor.name]

    def keys(self, state_name: str) -> Iterable[Any]:
        """The keys that have an entry in ``state_name`` (for batch export and tests)."""
        return list(self._tables.get(state_name, {}))

    def snapshot(self) -> dict[str, dict[int, list[tuple[Any, Any]]]]:
        """Entries grouped by state name and key group, so they can be redistributed on restore."""
        result: dict[str, dict[int, list[tuple[Any, Any]]]] = {}
        for name, table in self._tables.items():
            groups: dict[int, list[tuple[Any, Any]]] = {}
            for entry_key, value in table.items():
                key = entry_key[0] if isinstance(entry_key, _NamespacedKey) else entry_key
                groups.setdefault(assign_to_key_group(key, self.max_parallelism), []).append(
                    (entry_key, _own_copy(value)))
            result[name] = groups
        return result

    def restore(self, snapshot: dict[str, dict[int, list[tuple[Any, Any]]]],
                key_groups: range | None = None) -> None:
        """Load the entries of ``key_groups`` (all when None) from one or more snapshots."""
        for name, groups in snapshot.items():
            table = self._tables.setdefault(name, {})
            for group, entries in groups.items():
                if key_groups is None or group in key_groups:
                    table.update((entry_key, _own_copy(value)) for entry_key, value in entries)


def _own_copy(value: Any) -> Any:
    """Copy the containers list and map state mutate in place, so a snapshot stays as taken."""
    kind = type(value)
    return kind(value) if kind is list or kind is dict else value


class _NamespacedKey(tuple):
    """``(key, namespace)``: the table key of namespaced state."""

    __slots__ = ()


class _HeapState:
    def __init__(self, backend: HeapKeyedStateBackend, table: dict[Any, Any],
                 descriptor: StateDescriptor, namespaced: bool) -> None:
        self._backend = backend
        self._table = table
        self._descriptor = descriptor
        self._namespaced = namespaced
        self.namespace: Any = None

    def set_current_namespace(self, namespace: Any) -> None:
        self.namespace = namespace

    def _entry_key(self) -> Any:
        if self._namespaced:
            return _NamespacedKey((self._backend.current_key, self.namespace))
        return self._backend.current_key

    def clear(self) -> None:
        self._table.pop(self._entry_key(), None)


class HeapValueState(_HeapState, ValueState):
    def value(self) -> Any:
        return self._table.get(self._entry_key())

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
        else:
            self._table[self._entry_key()] = value


class HeapKeyValueState(HeapValueState):
    """Value state without a namespace: the common case, one dict access per call."""

    def value(self) -> Any:
        return self._table.get(self._backend.current_key)

    def update(self, value: Any) -> None:
        if value is None:
            self._table.pop(self._backend.current_key, None)
        else:
            self._table[self._backend.current_key] = value


class HeapListState(_HeapState, ListState):
    def get(self) -> list:
        return self._table.get(self._entry_key(), [])

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError(f"list state {self._descriptor.name!r}: cannot add None")
        self._table.setdefault(self._entry_key(), []).append(value)

    def add_all(self, values: list) -> None:
        if values:
            self._table.setdefault(self._entry_key(), []).extend(values)

    def update(self, values: list) -> None:
        if values:
            self._table[self._entry_key()] = list(values)
        else:
            self.clear()


class HeapMapState(_HeapState, MapState):
    def _map(self) -> dict:
        return self._table.get(self._entry_key(), {})

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._table.setdefault(self._entry_key(), {})[key] = value

    def put_all(self, dict_value: dict) -> None:
        self._table.setdefault(self._entry_key(), {}).update(dict_value)

    def remove(self, key: Any) -> None:
        entry = self._entry_key()
        mapping = self._table.get(entry)
        if mapping is not None:
            mapping.pop(key, None)
            if not mapping:
                del self._table[entry]

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


class HeapReducingState(_HeapState, ReducingState):
    def get(self) -> Any:
        return self._table.get(self._entry_key())

    def add(self, value: Any) -> None:
        entry = self._entry_key()
        current = self._table.get(entry)
        self._table[entry] = value if current is None else \
            self._descriptor.reduce_function.reduce(current, value)


class HeapAggregatingState(_HeapState, AggregatingState):
    def get(self) -> Any:
        acc = self._table.get(self._entry_key())
        return None if acc is None else self._descriptor.agg_function.get_result(acc)

    def add(self, value: Any) -> None:
        entry = self._entry_key()
        fn = self._descriptor.agg_function
        acc = self._table.get(entry)
        if acc is None:
            acc = fn.create_accumulator()
        self._table[entry] = fn.add(value, acc)

    def get_accumulator(self) -> Any:
        return self._table.get(self._entry_key())

    def set_accumulator(self, accumulator: Any) -> None:
        self._table[self._entry_key()] = accumulator


_STATE_CLASSES: dict[str, type[_HeapState]] = {
    "value": HeapValueState,
    "list": HeapListState,
    "map": HeapMapState,
    "reducing": HeapReducingState,
    "aggregating": HeapAggregatingState,
}

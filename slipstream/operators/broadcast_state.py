"""Broadcast state: the map states one instance of a broadcast operator keeps, and their snapshot.

Every parallel instance receives every broadcast element and keeps its own copy of each
broadcast state, so a copy is all a restore needs: at the same parallelism an instance takes
its own; at another one, instance ``i`` takes old instance ``i mod n``'s (Flink's rule, which
spreads the reads; the copies are equal when the function changes them only from broadcast
elements, as it must). The states are written as part of the operator's own state, through
the checkpoint storage's existing operator-state file, with no format of their own.

The data side sees :class:`ReadOnlyBroadcastStateView`, whose changing methods raise naming
the operator and the state; the broadcast side gets :class:`HeapBroadcastState`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slipstream.datastream.state import BroadcastState, MapStateDescriptor, ReadOnlyBroadcastState
from slipstream.errors import CheckpointError, SlipstreamError


class _BroadcastStateReader(ReadOnlyBroadcastState[Any, Any]):
    """Reading one broadcast state's entries (a dict owned by the :class:`BroadcastStateStore`)."""

    def __init__(self, entries: dict[Any, Any], name: str, operator_name: str) -> None:
        self._entries = entries
        self._name = name
        self._operator_name = operator_name

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def items(self) -> Iterable[tuple[Any, Any]]:
        return list(self._entries.items())

    def keys(self) -> Iterable[Any]:
        return list(self._entries)

    def values(self) -> Iterable[Any]:
        return list(self._entries.values())

    def is_empty(self) -> bool:
        return not self._entries

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r}, {len(self._entries)} entries)"


class ReadOnlyBroadcastStateView(_BroadcastStateReader):
    """What ``process_element`` (the data side) gets: reads, and refuses every change."""

    def _refuse(self, call: str) -> SlipstreamError:
        return SlipstreamError(
            f"operator '{self._operator_name}': broadcast state {self._name!r} is read-only in process_element "
            f"and on_timer (the data side), so {call} is refused; only process_broadcast_element may change it, "
            "which keeps every parallel instance's copy the same")

    def put(self, key: Any, value: Any) -> None:
        raise self._refuse(f"put({key!r}, ...)")

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        raise self._refuse("put_all(...)")

    def remove(self, key: Any) -> None:
        raise self._refuse(f"remove({key!r})")

    def clear(self) -> None:
        raise self._refuse("clear()")

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)


class HeapBroadcastState(_BroadcastStateReader, BroadcastState[Any, Any]):
    """What ``process_broadcast_element`` gets: the writable broadcast state, kept in a dict."""

    def put(self, key: Any, value: Any) -> None:
        self._entries[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self._entries.update(dict_value)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()


class BroadcastStateStore:
    """The broadcast states of one operator instance, one per ``MapStateDescriptor`` given to
    ``broadcast``; a function may only ask for those (by descriptor, matched by name)."""

    def __init__(self, descriptors: list[MapStateDescriptor], operator_name: str) -> None:
        self._operator_name = operator_name
        self._entries: dict[str, dict[Any, Any]] = {d.name: {} for d in descriptors}
        self._writable = {name: HeapBroadcastState(entries, name, operator_name)
                          for name, entries in self._entries.items()}
        self._read_only = {name: ReadOnlyBroadcastStateView(entries, name, operator_name)
                           for name, entries in self._entries.items()}

    def _name_of(self, descriptor: Any) -> str:
        if not isinstance(descriptor, MapStateDescriptor):
            raise SlipstreamError(f"operator '{self._operator_name}': get_broadcast_state expects the "
                                  f"MapStateDescriptor given to broadcast(), got {descriptor!r}")
        if descriptor.name not in self._writable:
            raise SlipstreamError(f"operator '{self._operator_name}': no broadcast state {descriptor.name!r}; "
                                  f"broadcast() declared {sorted(self._writable)}")
        return descriptor.name

    def writable(self, descriptor: MapStateDescriptor) -> HeapBroadcastState:
        return self._writable[self._name_of(descriptor)]

    def read_only(self, descriptor: MapStateDescriptor) -> ReadOnlyBroadcastStateView:
        return self._read_only[self._name_of(descriptor)]

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        """Every state's entries, copied (the checkpoint serialises them in this same turn)."""
        return {name: dict(entries) for name, entries in self._entries.items()}

    def restore(self, snapshot: dict[str, dict[Any, Any]]) -> None:
        """Put back what :meth:`snapshot` returned. A state the job no longer declares is refused:
        dropping it would lose what the broadcast elements built up."""
        unknown = sorted(set(snapshot) - set(self._entries))
        if unknown:
            raise CheckpointError(f"operator '{self._operator_name}': the checkpoint holds broadcast state "
                                  f"{unknown} that broadcast() no longer declares (it declares "
                                  f"{sorted(self._entries)}); declare it again to restore this checkpoint")
        for name, entries in snapshot.items():
            self._entries[name].clear()
            self._entries[name].update(entries)


def copy_for_instance(snapshots: list[Any], subtask_index: int) -> Any:
    """The snapshot a new instance ``subtask_index`` restores from when the operator had
    ``len(snapshots)`` instances before: old instance ``subtask_index mod len(snapshots)``'s."""
    return snapshots[subtask_index % len(snapshots)]


__all__ = ["BroadcastStateStore", "HeapBroadcastState", "ReadOnlyBroadcastStateView", "copy_for_instance"]

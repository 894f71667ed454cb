"""Keyed state: descriptors (what a function asks for) and the state interfaces it gets back.

Mirrors ``pyflink.datastream.state``. State is scoped to the key of the record
(or timer) being processed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Generic, Iterable, TypeVar

from slipstream.datastream.functions import AggregateFunction, ReduceFunction, as_function
from slipstream.datastream.time import Duration, Time, to_millis

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class StateTtlConfig:
    """Time-to-live of state entries, as Flink's ``StateTtlConfig``.

    Accepted by descriptors; entries older than the TTL (by processing time since
    last write) are treated as absent.
    """

    class UpdateType(Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    def __init__(self, ttl_millis: int, update_type: StateTtlConfig.UpdateType,
                 visibility: StateTtlConfig.StateVisibility) -> None:
        self.ttl_millis = ttl_millis
        self.update_type = update_type
        self.visibility = visibility

    @staticmethod
    def new_builder(ttl: Time | Duration) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def get_ttl(self) -> Time:
        return Time(self.ttl_millis)

    def get_update_type(self) -> StateTtlConfig.UpdateType:
        return self.update_type

    def is_enabled(self) -> bool:
        return self.update_type != StateTtlConfig.UpdateType.Disabled

    class Builder:
        def __init__(self, ttl: Time | Duration) -> None:
            self._ttl = to_millis(ttl, "TTL")
            self._update = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._visibility = StateTtlConfig.StateVisibility.NeverReturnExpired

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: StateTtlConfig.StateVisibility) -> StateTtlConfig.Builder:
            self._visibility = visibility
            return self

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def set_ttl(self, ttl: Time | Duration) -> StateTtlConfig.Builder:
            self._ttl = to_millis(ttl, "TTL")
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(self._ttl, self._update, self._visibility)


class StateDescriptor(ABC):
    """Names a piece of keyed state and its type; the name is its identity within an operator."""

    kind: str = ""

    def __init__(self, name: str, type_info: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a state descriptor needs a non-empty name, got {name!r}")
        self.name = name
        self.type_info = type_info
        self.ttl_config: StateTtlConfig | None = None

    def get_name(self) -> str:
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        self.ttl_config = ttl_config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        super().__init__(name, type_info)
        self.reduce_function = as_function(reduce_function, ReduceFunction, "reduce", 2,
                                           "ReducingStateDescriptor")


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: AggregateFunction, state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, AggregateFunction):
            raise TypeError(f"AggregatingStateDescriptor needs an AggregateFunction, got {agg_function!r}")
        self.agg_function = agg_function


class State(ABC):
    @abstractmethod
    def clear(self) -> None: ...


class ValueState(State, Generic[T]):
    @abstractmethod
    def value(self) -> T | None: ...

    @abstractmethod
    def update(self, value: T) -> None: ...


class AppendingState(State, Generic[T, V]):
    @abstractmethod
    def get(self) -> V: ...

    @abstractmethod
    def add(self, value: T) -> None: ...


class ListState(AppendingState[T, Iterable[T]]):
    @abstractmethod
    def update(self, values: list[T]) -> None: ...

    @abstractmethod
    def add_all(self, values: list[T]) -> None: ...

    def __iter__(self):
        return iter(self.get())


class ReducingState(AppendingState[T, T]):
    pass


class AggregatingState(AppendingState[T, V]):
    pass


class _ReadableMap(ABC, Generic[K, V]):
    """Reading a map-shaped state: what :class:`MapState` and :class:`ReadOnlyBroadcastState` share."""

    @abstractmethod
    def get(self, key: K) -> V | None: ...

    @abstractmethod
    def contains(self, key: K) -> bool: ...

    @abstractmethod
    def items(self) -> Iterable[tuple[K, V]]: ...

    @abstractmethod
    def keys(self) -> Iterable[K]: ...

    @abstractmethod
    def values(self) -> Iterable[V]: ...

    @abstractmethod
    def is_empty(self) -> bool: ...

    def __getitem__(self, key: K) -> V | None:
        return self.get(key)

    def __contains__(self, key: K) -> bool:
        return self.contains(key)

    def __iter__(self):
        return iter(self.keys())


class _WritableMap(_ReadableMap[K, V]):
    """Changing a map-shaped state: what :class:`MapState` and :class:`BroadcastState` share."""

    @abstractmethod
    def put(self, key: K, value: V) -> None: ...

    @abstractmethod
    def put_all(self, dict_value: dict[K, V]) -> None: ...

    @abstractmethod
    def remove(self, key: K) -> None: ...

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)


class MapState(State, _WritableMap[K, V]):
    """Keyed state holding a map per key."""


class ReadOnlyBroadcastState(State, _ReadableMap[K, V]):
    """A read-only view of a :class:`BroadcastState`: what the data side of a broadcast connected
    stream sees (``ReadOnlyContext.get_broadcast_state``), as PyFlink's ``ReadOnlyBroadcastState``.

    Values are handed out as stored, not copied: changing a value got from here would change
    the state of this subtask only, so that its copy would differ from the others'.
    """


class BroadcastState(ReadOnlyBroadcastState[K, V], _WritableMap[K, V]):
    """Map state every parallel instance of a broadcast operator holds a copy of, written only
    by ``process_broadcast_element`` (``Context.get_broadcast_state``), as PyFlink's ``BroadcastState``.

    Every instance receives every broadcast element, so the copies stay equal as long as the
    function updates them from the broadcast elements alone; a restore at another parallelism
    gives every new instance a copy (Flink's rule: instance ``i`` takes old instance ``i mod n``'s).
    """

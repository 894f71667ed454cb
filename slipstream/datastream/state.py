"""Keyed state: descriptors (what a function asks for) and the state interfaces it gets back.

Mirrors ``pyflink.datastream.state``. State is scoped to the key of the record
(or timer) being processed.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from enum import Enum
from typing import Any, Generic, TypeVar, cast

from slipstream.datastream.functions import AggregateFunction, ReduceFunction, as_function
from slipstream.datastream.time import Duration, Time, to_millis

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S", bound="InternalKvState")  # the state a descriptor yields (backends hand these out)


class StateTtlConfig:
    """Time-to-live of state entries, as Flink's ``StateTtlConfig``, enforced by the heap backend.

    An entry (a value, a list element, a map entry) expires ``ttl`` after its last access by
    processing time; the update type says which accesses count, the visibility whether an
    expired entry not yet removed may still be returned (once: reading it removes it). Expired
    entries are removed when read, a few at every state access (``cleanup_incrementally``, on by
    default with 5 entries, as Flink's heap backend), and left out of checkpoints with
    ``cleanup_full_snapshot``.
    """

    class UpdateType(Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(Enum):
        ProcessingTime = 0

    def __init__(self, update_type: StateTtlConfig.UpdateType, state_visibility: StateTtlConfig.StateVisibility,
                 ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic, ttl: Time | Duration,
                 cleanup_strategies: StateTtlConfig.CleanupStrategies) -> None:
        self.ttl_millis = to_millis(ttl, "TTL")
        if self.ttl_millis <= 0:
            raise ValueError(f"a state TTL must be positive, got {self.ttl_millis} ms")
        self.update_type = update_type
        self.visibility = state_visibility
        self.ttl_time_characteristic = ttl_time_characteristic
        self.cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Time | Duration) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def get_ttl(self) -> Time:
        return Time(self.ttl_millis)

    def get_update_type(self) -> StateTtlConfig.UpdateType:
        return self.update_type

    def get_state_visibility(self) -> StateTtlConfig.StateVisibility:
        return self.visibility

    def get_ttl_time_characteristic(self) -> StateTtlConfig.TtlTimeCharacteristic:
        return self.ttl_time_characteristic

    def get_cleanup_strategies(self) -> StateTtlConfig.CleanupStrategies:
        return self.cleanup_strategies

    def is_enabled(self) -> bool:
        return self.update_type != StateTtlConfig.UpdateType.Disabled

    def __repr__(self) -> str:
        return (f"StateTtlConfig<update_type={self.update_type}, state_visibility={self.visibility}, "
                f"ttl_time_characteristic={self.ttl_time_characteristic}, ttl={self.ttl_millis} ms>")

    class Builder:
        def __init__(self, ttl: Time | Duration) -> None:
            self._ttl = ttl
            self._update = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._strategies: dict[StateTtlConfig.CleanupStrategies.Strategies, Any] = {}
            self._in_background = True

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: StateTtlConfig.StateVisibility) -> StateTtlConfig.Builder:
            self._visibility = state_visibility
            return self

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def set_ttl_time_characteristic(self, ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic
                                        ) -> StateTtlConfig.Builder:
            """Processing time is the only one, as in Flink."""
            if not isinstance(ttl_time_characteristic, StateTtlConfig.TtlTimeCharacteristic):
                raise TypeError(f"set_ttl_time_characteristic expects a StateTtlConfig.TtlTimeCharacteristic, "
                                f"got {ttl_time_characteristic!r}")
            self._characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Leave expired entries out of every checkpoint (the state in memory is not changed)."""
            strategies = StateTtlConfig.CleanupStrategies
            self._strategies[strategies.Strategies.FULL_STATE_SCAN_SNAPSHOT] = strategies.EMPTY_STRATEGY
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool
                                  ) -> StateTtlConfig.Builder:
            """Check ``cleanup_size`` entries of the state for expiry at every access to it (and
            at every record when ``run_cleanup_for_every_record``), going round all its entries."""
            if not isinstance(cleanup_size, int) or cleanup_size < 0:
                raise ValueError(f"cleanup_incrementally needs a cleanup size >= 0, got {cleanup_size!r}")
            strategies = StateTtlConfig.CleanupStrategies
            self._strategies[strategies.Strategies.INCREMENTAL_CLEANUP] = \
                strategies.IncrementalCleanupStrategy(cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int,
                                              periodic_compaction_time: Time | Duration | None = None
                                              ) -> StateTtlConfig.Builder:
            """Kept, with a warning: slipstream's RocksDB backend runs no compaction filter; on both
            backends the other cleanups (on read, incremental, full snapshot) apply."""
            warnings.warn("StateTtlConfig.cleanup_in_rocksdb_compact_filter has no effect: slipstream runs no "
                          "compaction filter; on both state backends expired entries are removed on read, "
                          "incrementally and (with cleanup_full_snapshot) left out of checkpoints", stacklevel=2)
            strategies = StateTtlConfig.CleanupStrategies
            self._strategies[strategies.Strategies.ROCKSDB_COMPACTION_FILTER] = \
                strategies.RocksdbCompactFilterCleanupStrategy(query_time_after_num_entries,
                                                               periodic_compaction_time or Duration.of_days(30))
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """No incremental cleanup unless :meth:`cleanup_incrementally` asks for it."""
            self._in_background = False
            return self

        def set_ttl(self, ttl: Time | Duration) -> StateTtlConfig.Builder:
            self._ttl = ttl
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(self._update, self._visibility, self._characteristic, self._ttl,
                                  StateTtlConfig.CleanupStrategies(dict(self._strategies), self._in_background))

    class CleanupStrategies:
        """When expired entries are removed besides on read, as PyFlink's ``CleanupStrategies``."""

        class Strategies(Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        class CleanupStrategy:
            """What a strategy is configured with."""

        class EmptyCleanupStrategy(CleanupStrategy):
            pass

        class IncrementalCleanupStrategy(CleanupStrategy):
            def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> None:
                self._cleanup_size = cleanup_size
                self._run_cleanup_for_every_record = bool(run_cleanup_for_every_record)

            def get_cleanup_size(self) -> int:
                return self._cleanup_size

            def run_cleanup_for_every_record(self) -> bool:
                return self._run_cleanup_for_every_record

        class RocksdbCompactFilterCleanupStrategy(CleanupStrategy):
            def __init__(self, query_time_after_num_entries: int,
                         periodic_compaction_time: Time | Duration | None = None) -> None:
                self._query_time_after_num_entries = query_time_after_num_entries
                self._periodic_compaction_time = periodic_compaction_time or Duration.of_days(30)

            def get_query_time_after_num_entries(self) -> int:
                return self._query_time_after_num_entries

            def get_periodic_compaction_time(self) -> Time | Duration:
                return self._periodic_compaction_time

        EMPTY_STRATEGY: StateTtlConfig.CleanupStrategies.EmptyCleanupStrategy

        def __init__(self, strategies: dict[Any, Any], is_cleanup_in_background: bool) -> None:
            self._strategies = strategies
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

        def get_incremental_cleanup_strategy(
                self) -> StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy | None:
            """The configured one; by default (cleanup in background) 5 entries per access, as Flink."""
            strategies = StateTtlConfig.CleanupStrategies
            default = strategies.IncrementalCleanupStrategy(5, False) if self._is_cleanup_in_background else None
            return self._strategies.get(strategies.Strategies.INCREMENTAL_CLEANUP, default)

        def get_rocksdb_compact_filter_cleanup_strategy(
                self) -> StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy | None:
            strategies = StateTtlConfig.CleanupStrategies
            default = strategies.RocksdbCompactFilterCleanupStrategy(1000) if self._is_cleanup_in_background else None
            return self._strategies.get(strategies.Strategies.ROCKSDB_COMPACTION_FILTER, default)


StateTtlConfig.CleanupStrategies.EMPTY_STRATEGY = StateTtlConfig.CleanupStrategies.EmptyCleanupStrategy()


class StateDescriptor(ABC, Generic[S]):
    """Names a piece of keyed state and its type; the name is its identity within an operator.

    Generic in the state it yields, so a backend's ``get_state(descriptor)`` is typed by the kind.
    """

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
        """Expire this state's entries as ``ttl_config`` says (see :class:`StateTtlConfig`)."""
        if not isinstance(ttl_config, StateTtlConfig):
            raise TypeError(f"enable_time_to_live expects a StateTtlConfig, got {ttl_config!r}")
        self.ttl_config = ttl_config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor["InternalValueState[Any]"]):
    kind = "value"

    def __init__(self, name: str, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor["InternalListState[Any]"]):
    kind = "list"

    def __init__(self, name: str, elem_type_info: Any = None) -> None:
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor["InternalMapState[Any, Any]"]):
    kind = "map"

    def __init__(self, name: str, key_type_info: Any = None, value_type_info: Any = None) -> None:
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info


class ReducingStateDescriptor(StateDescriptor["InternalReducingState[Any]"]):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: Any = None) -> None:
        super().__init__(name, type_info)
        self.reduce_function = as_function(reduce_function, ReduceFunction, "reduce", 2,
                                           "ReducingStateDescriptor")

    def get_reduce_function(self) -> ReduceFunction[Any]:
        return cast(ReduceFunction[Any], self.reduce_function)


class AggregatingStateDescriptor(StateDescriptor["InternalAggregatingState[Any, Any]"]):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: AggregateFunction[Any, Any, Any], state_type_info: Any = None) -> None:
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, AggregateFunction):
            raise TypeError(f"AggregatingStateDescriptor needs an AggregateFunction, got {agg_function!r}")
        self.agg_function = agg_function

    def get_agg_function(self) -> AggregateFunction[Any, Any, Any]:
        return self.agg_function


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


class MergingState(AppendingState[T, V]):
    """An appending state whose contents merge when the windows they belong to merge (sessions)."""


class ListState(MergingState[T, Iterable[T]]):
    @abstractmethod
    def update(self, values: list[T]) -> None: ...

    @abstractmethod
    def add_all(self, values: list[T]) -> None: ...

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class ReducingState(MergingState[T, T]):
    pass


class AggregatingState(MergingState[T, V]):
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

    def __iter__(self) -> Iterator[K]:
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


class InternalKvState(State):
    """The runtime's handle on a state of every key (Flink's ``InternalKvState``): the user's view,
    plus the namespace (a window) its reads and writes go to. Backends hand these out."""

    @abstractmethod
    def set_current_namespace(self, namespace: Any) -> None: ...


class InternalValueState(InternalKvState, ValueState[T]):
    """Value state as backends implement it."""


class InternalListState(InternalKvState, ListState[T]):
    """List state as backends implement it."""


class InternalMapState(InternalKvState, MapState[K, V]):
    """Map state as backends implement it."""


class InternalReducingState(InternalKvState, ReducingState[T]):
    """Reducing state as backends implement it."""


class InternalAggregatingState(InternalKvState, AggregatingState[T, V]):
    """Aggregating state as backends implement it; the accumulator itself is reachable, so
    windows can merge it (Flink's ``getInternal``/``updateInternal``)."""

    @abstractmethod
    def get_accumulator(self) -> Any: ...

    @abstractmethod
    def set_accumulator(self, accumulator: Any) -> None: ...


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

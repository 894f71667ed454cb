"""A ``KeyedProcessFunction`` as Spark's row-based ``StatefulProcessor`` (``transformWithState``).

The function's state descriptors become state variables of Spark's handle, holding pickled
values: its ``ValueState``s, ``ReducingState``s (the reduced value) and ``AggregatingState``s
(the accumulator) share one ``value binary`` state, a dict of their values by name, read once
per key and handler call and written back at its end (each state-server call is a round trip
to the JVM); one with a TTL has its own; a ``ListState`` is a list of ``value binary``, a
``MapState`` a map from ``key binary`` to ``value binary``. Timers
are the handle's timers, in the one time domain Spark gives the operator: event time when a
watermark reaches it, else processing time (a timer of the other domain fails, naming the
operator). Within a micro-batch a key's records are processed in the order they were read
(the ``ord`` column), then its due timers fire; outputs keep the record's timestamp, a
timer's outputs the timer's (event time). State TTL maps onto Spark's where Spark has the
same rule (Flink's ``OnCreateAndWrite`` with ``NeverReturnExpired``: an entry expires its TTL
after its last write, in processing time).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from slipstream.datastream.functions import KeyedProcessFunction, TimeDomain, TimerService
from slipstream.datastream.state import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    StateDescriptor,
    StateTtlConfig,
    ValueState,
)
from slipstream.datastream.time import MIN_TIMESTAMP
from slipstream.datastream.transformations import CoProcessTransformation, Transformation
from slipstream.errors import SlipstreamError, UserFunctionError
from slipstream.spark_runner.plan import EVENT_TIME, PROCESSING_TIME, SHARED_VALUES
from slipstream.spark_runner.records import (
    ORDER,
    TIMESTAMP,
    VALUE,
    RecordContext,
    SparkRuntimeContext,
    child_order,
    dumps,
    encode_line,
    loads,
    split_results,
)

VALUE_SCHEMA, KEY_SCHEMA = "value binary", "key binary"
TIMER_ORDER = b"\xff"  # a timer's outputs sort after every record's of the same batch


class ValueRow:
    """Value states of one operator held together in one Spark value state (a pickled dict of
    their values by name), read once per key and call and written back once at its end
    (:meth:`flush`): one state-server round trip each way per key a micro-batch, however many
    value states the function has."""

    def __init__(self, state: Any) -> None:
        self._state = state
        self._loaded = self._dirty = False
        self._values: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if not self._loaded:
            found = self._state.get()  # None when unset
            self._values = {} if found is None else loads(found[0])
            self._loaded = True
        return self._values.get(name)

    def set(self, name: str, value: Any) -> None:
        self.get(name)
        if value is None:
            self._values.pop(name, None)
        else:
            self._values[name] = value
        self._dirty = True

    def flush(self) -> None:
        """Write what changed to Spark's state and forget the key's values (the next call may be another key's)."""
        if self._dirty:
            if self._values:
                self._state.update((dumps(self._values),))
            else:
                self._state.clear()
        self._loaded = self._dirty = False
        self._values = {}


class SparkValueState(ValueState[Any]):
    """One value state of a function: its entry in the operator's :class:`ValueRow`."""

    def __init__(self, row: ValueRow, name: str) -> None:
        self._row = row
        self._name = name

    def value(self) -> Any:
        return self._row.get(self._name)

    def update(self, value: Any) -> None:
        self._row.set(self._name, value)

    def clear(self) -> None:
        self._row.set(self._name, None)


class SparkListState(ListState[Any]):
    def __init__(self, state: Any) -> None:
        self._state = state

    def get(self) -> list[Any]:
        return [loads(row[0]) for row in self._state.get()] if self._state.exists() else []

    def add(self, value: Any) -> None:
        self._state.appendValue((dumps(value),))

    def update(self, values: list[Any]) -> None:
        if values:
            self._state.put([(dumps(value),) for value in values])
        else:
            self._state.clear()

    def add_all(self, values: list[Any]) -> None:
        if values:
            self._state.appendList([(dumps(value),) for value in values])

    def clear(self) -> None:
        self._state.clear()


class SparkMapState(MapState[Any, Any]):
    def __init__(self, state: Any) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        found = self._state.getValue((dumps(key),)) if self._state.exists() else None
        return None if found is None else loads(found[0])

    def contains(self, key: Any) -> bool:
        return bool(self._state.exists() and self._state.containsKey((dumps(key),)))

    def put(self, key: Any, value: Any) -> None:
        self._state.updateValue((dumps(key),), (dumps(value),))

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        for key, value in dict_value.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        if self.contains(key):
            self._state.removeKey((dumps(key),))

    def items(self) -> list[tuple[Any, Any]]:
        if not self._state.exists():
            return []
        return [(loads(key[0]), loads(value[0])) for key, value in self._state.iterator()]

    def keys(self) -> list[Any]:
        return [key for key, _ in self.items()]

    def values(self) -> list[Any]:
        return [value for _, value in self.items()]

    def is_empty(self) -> bool:
        return not self._state.exists()

    def clear(self) -> None:
        self._state.clear()


class SparkReducingState(ReducingState[Any]):
    """The reduced value in one Spark value state."""

    def __init__(self, state: SparkValueState, reduce_function: Any) -> None:
        self._value = state
        self._reduce = reduce_function.reduce

    def get(self) -> Any:
        return self._value.value()

    def add(self, value: Any) -> None:
        current = self._value.value()
        self._value.update(value if current is None else self._reduce(current, value))

    def clear(self) -> None:
        self._value.clear()


class SparkAggregatingState(AggregatingState[Any, Any]):
    """The accumulator in one Spark value state."""

    def __init__(self, state: SparkValueState, agg_function: Any) -> None:
        self._accumulator = state
        self._function = agg_function

    def get(self) -> Any:
        accumulator = self._accumulator.value()
        return None if accumulator is None else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        accumulator = self._accumulator.value()
        if accumulator is None:
            accumulator = self._function.create_accumulator()
        self._accumulator.update(self._function.add(value, accumulator))

    def clear(self) -> None:
        self._accumulator.clear()


class KeyedRuntimeContext(SparkRuntimeContext):
    """The keyed stage's runtime context: state descriptors become the Spark handle's state variables."""

    def __init__(self, name: str, parallelism: int, job_parameters: dict[str, str],
                 handle: StatefulProcessorHandle, time_mode: str) -> None:
        super().__init__(name, parallelism, job_parameters)
        self._handle = handle
        self._time_mode = time_mode
        self.value_rows: dict[str, ValueRow] = {}  # by Spark state name
        self.rows_by_state: dict[str, ValueRow] = {}  # by the function's state name

    def _ttl(self, descriptor: StateDescriptor[Any]) -> int | None:
        config = descriptor.ttl_config
        if config is None:
            return None
        same_rule = (config.update_type is StateTtlConfig.UpdateType.OnCreateAndWrite
                     and config.visibility is StateTtlConfig.StateVisibility.NeverReturnExpired)
        if not same_rule or self._time_mode == EVENT_TIME:
            raise SlipstreamError(
                f"operator '{self._name}': state '{descriptor.name}' has a TTL Spark cannot keep exactly: Spark "
                "expires an entry its TTL after its last write, never returning it after, and not in an "
                "event-time operator (update_ttl_on_create_and_write, never_return_expired, no "
                "watermark before the operator); got "
                f"{config.update_type.name}/{config.visibility.name} in {self._time_mode.lower()}")
        return config.ttl_millis

    def get_state(self, state_descriptor: Any) -> SparkValueState:
        return self._value_variable(state_descriptor)

    def get_list_state(self, state_descriptor: Any) -> SparkListState:
        return SparkListState(self._handle.getListState(state_descriptor.name, VALUE_SCHEMA,
                                                        self._ttl(state_descriptor)))

    def get_map_state(self, state_descriptor: Any) -> SparkMapState:
        return SparkMapState(self._handle.getMapState(state_descriptor.name, KEY_SCHEMA, VALUE_SCHEMA,
                                                      self._ttl(state_descriptor)))

    def get_reducing_state(self, state_descriptor: Any) -> SparkReducingState:
        return SparkReducingState(self._value_variable(state_descriptor), state_descriptor.reduce_function)

    def get_aggregating_state(self, state_descriptor: Any) -> SparkAggregatingState:
        return SparkAggregatingState(self._value_variable(state_descriptor), state_descriptor.agg_function)

    def _value_variable(self, descriptor: StateDescriptor[Any]) -> SparkValueState:
        """A value state's entry in the operator's shared row, or in a row of its own when it has
        a TTL (Spark expires a state variable as a whole)."""
        ttl = self._ttl(descriptor)
        row = self.value_row(SHARED_VALUES if ttl is None else descriptor.name, ttl)
        self.rows_by_state[descriptor.name] = row
        return SparkValueState(row, descriptor.name)

    def value_row(self, name: str, ttl: int | None) -> ValueRow:
        """The row kept in Spark's value state ``name`` (made on first use: in ``init`` only)."""
        row = self.value_rows.get(name)
        if row is None:
            row = self.value_rows[name] = ValueRow(self._handle.getValueState(name, VALUE_SCHEMA, ttl))
        return row

    def install(self, states: dict[str, Any]) -> None:
        """The key at hand's value states, by name (a bootstrap's initial state)."""
        for name, value in states.items():
            self.rows_by_state.get(name, self.value_rows[SHARED_VALUES]).set(name, value)

    def flush(self) -> None:
        """The value states' changes for the key at hand, to Spark's state."""
        for row in self.value_rows.values():
            row.flush()


class SparkTimerService(TimerService):
    """The Spark handle's timers, in the operator's one time domain, and the batch's clocks."""

    def __init__(self, name: str, handle: StatefulProcessorHandle, time_mode: str) -> None:
        self._name = name
        self._handle = handle
        self._time_mode = time_mode
        self.values: TimerValues | None = None

    def current_processing_time(self) -> int:
        assert self.values is not None
        return self.values.getCurrentProcessingTimeInMs()

    def current_watermark(self) -> int:
        watermark = self.values.getCurrentWatermarkInMs() if self.values is not None else -1
        return watermark if self._time_mode == EVENT_TIME and watermark >= 0 else MIN_TIMESTAMP

    def _in(self, mode: str, what: str) -> None:
        if self._time_mode != mode:
            raise SlipstreamError(
                f"operator '{self._name}': {what} on the Spark runner needs an operator in Spark's time mode "
                f"{mode}, and this one runs in time mode {self._time_mode}: Spark gives an operator one time "
                "domain (event time when a watermark strategy comes before it, else processing time when its function "
                "has an on_timer, else none)")

    def register_event_time_timer(self, timestamp: int) -> None:
        self._in(EVENT_TIME, "an event-time timer")
        self._handle.registerTimer(timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._in(PROCESSING_TIME, "a processing-time timer")
        self._handle.registerTimer(timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._in(EVENT_TIME, "deleting an event-time timer")
        self._handle.deleteTimer(timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._in(PROCESSING_TIME, "deleting a processing-time timer")
        self._handle.deleteTimer(timestamp)


class KeyedContext(RecordContext, KeyedProcessFunction.OnTimerContext):
    """The context a keyed process function gets per record and per timer."""

    def __init__(self, timers: SparkTimerService) -> None:
        super().__init__()
        self._timers = timers
        self.key: Any = None
        self.domain = TimeDomain.EVENT_TIME

    def timer_service(self) -> TimerService:
        return self._timers

    def get_current_key(self) -> Any:
        return self.key

    def time_domain(self) -> TimeDomain:
        return self.domain


class KeyedFunctionProcessor(StatefulProcessor):
    """Runs a keyed process function (or keyed co-process function, whose input the ``input``
    column says) on Spark's handle (see the module docstring). The initial state, the records of
    a bounded input run before the stream, goes through the function's method for that input."""

    def __init__(self, transformation: Transformation, time_mode: str, parallelism: int,
                 job_parameters: dict[str, str], encoder: Any = None, bootstrap: bool = False) -> None:
        self.encoder = encoder  # a row-format sink's: emit its lines of the main output, not records
        self.bootstrap = bootstrap  # the initial state is each key's value states, from process_backlog
        self.transformation = transformation
        self.time_mode = time_mode
        self.parallelism = parallelism
        self.job_parameters = job_parameters

    def init(self, handle: StatefulProcessorHandle) -> None:
        name = self.transformation.name
        self.function = cast(Any, self.transformation).function
        two_inputs = isinstance(self.transformation, CoProcessTransformation)
        self.methods = [self.function.process_element1, self.function.process_element2] if two_inputs \
            else [self.function.process_element]
        self.timers = SparkTimerService(name, handle, self.time_mode)
        self.context = KeyedContext(self.timers)
        self.runtime_context = KeyedRuntimeContext(name, self.parallelism, self.job_parameters, handle, self.time_mode)
        self.function.open(self.runtime_context)
        if self.bootstrap:  # process_backlog may return states open() did not ask for: they go to the shared row
            self.runtime_context.value_row(SHARED_VALUES, None)

    def handleInputRows(self, key: Any, rows: Any, timerValues: TimerValues) -> Iterator[Row]:
        self._at(key, timerValues)
        for row in sorted(rows, key=lambda r: (r.ord, r.input)):
            if row.value is not None:  # None: the end of input, which only moves the watermark
                yield from self._rows(self._process(row.input, row.value, row.ts), row.ord)
        self.runtime_context.flush()

    def handleInitialState(self, key: Any, initialState: Any, timerValues: TimerValues) -> None:
        self._at(key, timerValues)
        if self.bootstrap:
            self.runtime_context.install(loads(initialState.state))
            self.runtime_context.flush()
            return
        for entry in sorted(initialState.records, key=lambda r: r[ORDER]):  # structs come as dicts
            outputs = self._process(initialState.input, entry[VALUE], entry[TIMESTAMP])
            if outputs:
                raise SlipstreamError(
                    f"operator '{self.transformation.name}' emitted {outputs[0][0]!r} while its bounded input "
                    f"{initialState.input + 1} became Spark's initial state for key {self.context.key!r}: "
                    "Spark's initial state cannot emit; run the job on the embedded runtime")
        self.runtime_context.flush()

    def _process(self, index: int, data: bytes, timestamp: int | None) -> list[tuple[Any, int | None, str | None]]:
        """Input ``index``'s record (pickled) through the function; what it emits."""
        context = self.context
        context.current_timestamp = timestamp
        value = loads(data)
        try:
            return split_results(self.methods[index](value, context), timestamp, context.side)
        except Exception as exc:
            raise self._failure(exc, value, "record") from exc

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Row]:
        self._at(key, timerValues)
        context = self.context
        timestamp = expiredTimerInfo.getExpiryTimeInMs()
        event_time = self.time_mode == EVENT_TIME
        context.domain = TimeDomain.EVENT_TIME if event_time else TimeDomain.PROCESSING_TIME
        context.current_timestamp = timestamp if event_time else None
        try:
            outputs = split_results(self.function.on_timer(timestamp, context), context.current_timestamp,
                                    context.side)
        except Exception as exc:
            raise self._failure(exc, timestamp, f"the timer of key {context.key!r} at") from exc
        finally:
            context.domain = TimeDomain.EVENT_TIME
        self.runtime_context.flush()
        yield from self._rows(outputs, TIMER_ORDER + timestamp.to_bytes(8, "big", signed=True))

    def close(self) -> None:
        self.function.close()

    def _at(self, key: Any, timer_values: TimerValues) -> None:
        self.context.key = loads(key[0])
        self.timers.values = timer_values

    def _failure(self, exc: Exception, record: Any, what: str) -> Exception:
        """What a failure of the user's function is raised as: slipstream's own errors as they are,
        anything else naming the operator and the record (or timer)."""
        if isinstance(exc, SlipstreamError):
            return exc
        return UserFunctionError(self.transformation.name, 0, 1, record, exc, uid=self.transformation.uid, what=what)

    def _rows(self, outputs: Iterable[tuple[Any, int | None, str | None]], order: bytes) -> Iterator[Row]:
        if self.encoder is not None:
            yield from (Row(value=encode_line(self.encoder, value)) for value, _, tag in outputs if tag is None)
            return
        for index, (value, timestamp, tag) in enumerate(outputs):
            yield Row(value=dumps(value), ts=timestamp, ord=child_order(order, index), tag=tag)

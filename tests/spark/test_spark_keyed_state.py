"""How a keyed function's state reaches Spark's state server: value states share one round trip.

Spark's ``transformWithState`` reaches each state variable through a socket to the JVM, so the
processor's calls on the handle are what a micro-batch pays per key. These tests drive
``KeyedFunctionProcessor`` on a handle that records the calls, without a SparkSession.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from slipstream.datastream import KeyedProcessFunction, ReducingStateDescriptor, ValueStateDescriptor
from slipstream.datastream.state import StateTtlConfig
from slipstream.datastream.time import Time
from slipstream.datastream.transformations import KeyedProcessTransformation
from slipstream.spark_runner.keyed import KeyedFunctionProcessor
from slipstream.spark_runner.plan import PROCESSING_TIME, SHARED_VALUES
from slipstream.spark_runner.records import dumps, loads


class RecordedValueState:
    """A Spark value state variable in memory, per key, noting every call made on it."""

    def __init__(self, name: str, calls: list[tuple[str, str]], handle: RecordingHandle) -> None:
        self.name, self.calls, self.handle = name, calls, handle
        self.stored: dict[Any, tuple[bytes]] = {}

    def get(self) -> tuple[bytes] | None:
        self.calls.append(("get", self.name))
        return self.stored.get(self.handle.key)

    def update(self, row: tuple[bytes]) -> None:
        self.calls.append(("update", self.name))
        self.stored[self.handle.key] = row

    def clear(self) -> None:
        self.calls.append(("clear", self.name))
        self.stored.pop(self.handle.key, None)


class RecordingHandle:
    """The part of Spark's ``StatefulProcessorHandle`` a function of value states uses."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.variables: dict[str, RecordedValueState] = {}
        self.ttls: dict[str, int | None] = {}
        self.key: Any = None

    def getValueState(self, name: str, schema: str, ttl: int | None = None) -> RecordedValueState:  # noqa: N802
        self.ttls[name] = ttl
        return self.variables.setdefault(name, RecordedValueState(name, self.calls, self))


class CountAndTotal(KeyedProcessFunction):
    """Per key a count, a total and a largest amount, in three kinds of value-backed state."""

    def __init__(self, ttl_on_total: bool = False) -> None:
        self.ttl_on_total = ttl_on_total

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        total = ValueStateDescriptor("total")
        if self.ttl_on_total:
            total.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(60)).build())
        self.total = runtime_context.get_state(total)
        self.largest = runtime_context.get_reducing_state(ReducingStateDescriptor("largest", max))

    def process_element(self, value: tuple[str, int], ctx: Any) -> Iterator[tuple[str, int, int, int]]:
        count = (self.count.value() or 0) + 1
        total = (self.total.value() or 0) + value[1]
        self.count.update(count)
        self.total.update(total)
        self.largest.add(value[1])
        yield value[0], count, total, self.largest.get()


def run_batches(function: KeyedProcessFunction, batches: list[list[tuple[str, int]]]) -> tuple[
        RecordingHandle, list[list[tuple[str, int, int, int]]]]:
    """Each batch's records through a processor on a recording handle, a key's records per call."""
    transformation = KeyedProcessTransformation(id=1, name="averages", function=function)
    processor = KeyedFunctionProcessor(transformation, PROCESSING_TIME, 1, {})
    handle = RecordingHandle()
    processor.init(handle)  # type: ignore[arg-type]
    timers = SimpleNamespace(getCurrentProcessingTimeInMs=lambda: 0, getCurrentWatermarkInMs=lambda: -1)
    outputs = []
    for batch in batches:
        emitted = []
        for key in dict.fromkeys(record[0] for record in batch):
            handle.key = key
            rows = [SimpleNamespace(value=dumps(r), ts=None, ord=bytes([n]), input=0)
                    for n, r in enumerate(batch) if r[0] == key]
            emitted.extend(loads(row.value) for row in processor.handleInputRows((dumps(key),), rows, timers))
        outputs.append(emitted)
    return handle, outputs


def test_a_keys_value_states_are_read_once_and_written_once_per_call_whatever_their_number() -> None:
    handle, outputs = run_batches(CountAndTotal(), [[("a", 5), ("b", 1), ("a", 7)], [("a", 2)]])
    assert outputs == [[("a", 1, 5, 5), ("a", 2, 12, 7), ("b", 1, 1, 1)], [("a", 3, 14, 7)]]
    assert list(handle.variables) == [SHARED_VALUES]
    assert handle.calls == [("get", SHARED_VALUES), ("update", SHARED_VALUES)] * 3  # a, b, then a again


def test_a_value_state_with_a_ttl_has_a_spark_state_of_its_own_which_spark_expires() -> None:
    handle, outputs = run_batches(CountAndTotal(ttl_on_total=True), [[("a", 5), ("a", 7)], [("a", 2)]])
    assert outputs == [[("a", 1, 5, 5), ("a", 2, 12, 7)], [("a", 3, 14, 7)]]
    assert handle.ttls == {SHARED_VALUES: None, "total": 60_000}
    assert loads(handle.variables["total"].stored["a"][0]) == {"total": 14}
    assert loads(handle.variables[SHARED_VALUES].stored["a"][0]) == {"count": 3, "largest": 7}


def test_clearing_every_value_state_of_a_key_clears_its_spark_state() -> None:
    class Forget(KeyedProcessFunction):
        def open(self, runtime_context: Any) -> None:
            self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))

        def process_element(self, value: tuple[str, int], ctx: Any) -> Iterator[tuple[str, int]]:
            if value[1] < 0:
                self.seen.clear()
            else:
                self.seen.update(value[1])
            yield value

    handle, _ = run_batches(Forget(), [[("a", 1)], [("a", -1)]])
    assert handle.calls[-1] == ("clear", SHARED_VALUES)
    assert "a" not in handle.variables[SHARED_VALUES].stored

"""BroadcastProcessOperator driven directly, so the order of the two inputs is the test's: the broadcast
side reaching every key's state (``apply_to_keyed_state``), the data side waiting (with event time)
while the broadcast input is backlog, and its state restored at another parallelism."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from slipstream.attributes import RecordAttributes
from slipstream.datastream.functions import KeyedBroadcastProcessFunction
from slipstream.datastream.state import MapStateDescriptor, ValueStateDescriptor
from slipstream.datastream.time import MAX_WATERMARK, Watermark
from slipstream.datastream.transformations import BroadcastProcessTransformation
from slipstream.errors import SlipstreamError, UserFunctionError
from slipstream.operators.base import OperatorContext
from slipstream.operators.broadcast import BroadcastProcessOperator
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend

from test_window_operator import CollectingOutput, ManualClock  # noqa: E402  (tests/operators on sys.path)

FACTORS = MapStateDescriptor("factors", None, None)
COUNT = ValueStateDescriptor("count")
MAX_PARALLELISM = 128


class CountTimesFactor(KeyedBroadcastProcessFunction):
    """Counts records per key; a broadcast ``("scale", n)`` multiplies every key's count by ``n`` through
    ``apply_to_keyed_state``, ``(name, value)`` sets a factor. Each record emits its key, count and the
    factor of its key, and a timer at its timestamp + 10 emits the count then."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(COUNT)

    def process_broadcast_element(self, value, ctx):
        if value[0] == "scale":
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.update(state.value() * value[1]))
        else:
            ctx.get_broadcast_state(FACTORS).put(value[0], value[1])
        yield ("broadcast", value)

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if ctx.timestamp() is not None:
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        yield (value, count, ctx.get_broadcast_state(FACTORS).get(value))

    def on_timer(self, timestamp, ctx):
        yield ("timer", ctx.get_current_key(), timestamp, self.count.value())


class Harness:
    def __init__(self, *, bounded: bool, subtask: int = 0, parallelism: int = 1,
                 function: Any = None, memory_budget: int = 100_000, spill_dir: str | None = None) -> None:
        transformation = BroadcastProcessTransformation(
            id=1, name="Broadcast", key_selectors=[lambda value: value, None],
            function=function or CountTimesFactor(), descriptors=[FACTORS], broadcast_bounded=bounded)
        self.operator = BroadcastProcessOperator(transformation)
        self.output = CollectingOutput()
        self.operator.setup(OperatorContext(
            name="Broadcast", uid="broadcast", subtask_index=subtask, parallelism=parallelism,
            max_parallelism=MAX_PARALLELISM, output=self.output, processing_time_service=ManualClock(),
            keyed_backend=HeapKeyedStateBackend(MAX_PARALLELISM), channel_memory_budget=memory_budget,
            spill_dir=spill_dir))

    def open(self) -> Harness:
        self.operator.open()
        return self

    def data(self, *records: tuple[Any, int | None]) -> Harness:
        self.operator.process_batch(RecordBatch([r for r, _ in records], [t for _, t in records]), 0)
        return self

    def broadcast(self, *values: Any) -> Harness:
        self.operator.process_batch(RecordBatch(list(values)), 1)
        return self

    def watermark(self, input_index: int, timestamp: int) -> Harness:
        self.operator.process_watermark(Watermark(timestamp), input_index)
        return self

    def end_broadcast(self) -> Harness:
        self.operator.process_watermark(MAX_WATERMARK, 1)
        self.operator.end_input(1)
        return self

    def emitted(self) -> list[Any]:
        return [event for event in self.output.events if not isinstance(event, RecordAttributes)]


def test_the_broadcast_side_reaches_every_keys_state_with_apply_to_keyed_state():
    harness = Harness(bounded=False).open().data(("a", None), ("b", None), ("a", None))
    harness.broadcast(("a", 7), ("scale", 10)).data(("a", None), ("b", None), ("c", None))
    assert [value for value, _ in harness.output.records] == [
        ("a", 1, None), ("b", 1, None), ("a", 2, None), ("broadcast", ("a", 7)), ("broadcast", ("scale", 10)),
        ("a", 21, 7), ("b", 11, None), ("c", 1, None)]
    assert harness.operator.ctx.keyed_backend.get_current_key() == "c"


class UsesTheKeyOnTheBroadcastSide(CountTimesFactor):
    def process_broadcast_element(self, value, ctx):
        getattr(ctx, value)()
        return ()


@pytest.mark.parametrize("call", ["get_current_key", "timer_service"])
def test_the_broadcast_side_has_no_key_and_no_timers(call):
    harness = Harness(bounded=False, function=UsesTheKeyOnTheBroadcastSide()).open()
    with pytest.raises(SlipstreamError, match=rf"'Broadcast': {call}\(\) in process_broadcast_element: a broadcast "
                                              "element has no key; use ctx.apply_to_keyed_state"):
        harness.broadcast(call)


class ReadsKeyedStateOnTheBroadcastSide(CountTimesFactor):
    """Reads the count directly, before or after reaching every key's with apply_to_keyed_state."""

    def process_broadcast_element(self, value, ctx):
        if value == "after apply":
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.value())
        yield ("read", self.count.value())


@pytest.mark.parametrize("when", ["first", "after apply"])
def test_keyed_state_read_directly_on_the_broadcast_side_has_no_key(when):
    """Not the state of the key the last data record left current (Flink: no key set)."""
    harness = Harness(bounded=False, function=ReadsKeyedStateOnTheBroadcastSide()).open().data(("a", None))
    with pytest.raises(UserFunctionError, match=r"'Broadcast'.*keyed state read directly in process_broadcast_"
                                                r"element: a broadcast element has no key; use ctx.apply_to_keyed"):
        harness.broadcast(when)
    harness.data(("a", None))  # the next data record has its key again
    assert harness.output.records[-1][0] == ("a", 2, None)


def test_a_bounded_broadcast_input_holds_the_data_side_and_event_time_until_it_ends():
    harness = Harness(bounded=True).open()
    harness.data(("a", 1), ("b", 2)).watermark(0, 50).watermark(1, 40).data(("a", 60))
    assert harness.emitted() == []  # nothing processed, no timer fired, no watermark passed
    harness.broadcast(("a", 3), ("b", 4))
    assert [value for value, _ in harness.output.records] == [("broadcast", ("a", 3)), ("broadcast", ("b", 4))]
    harness.end_broadcast()
    records = [event for event in harness.emitted()[2:]]
    assert records == [("a", 1, 3), ("b", 1, 4), ("a", 2, 3),
                       ("timer", "a", 11, 2), ("timer", "b", 12, 1), Watermark(50)]
    harness.data(("b", 70))
    assert harness.output.records[-1] == (("b", 2, 4), 70)


def test_held_records_past_the_memory_budget_spill_and_come_back_in_order(tmp_path):
    harness = Harness(bounded=True, memory_budget=4, spill_dir=str(tmp_path)).open()
    records = [(f"k{i % 3}", i) for i in range(20)]
    for record in records:
        harness.data(record)
    assert harness.operator.held.spilled_bytes > 0 and harness.emitted() == []
    assert harness.operator.ctx.metrics["backlog_records"] == len(records)
    restored = Harness(bounded=True, memory_budget=4, spill_dir=str(tmp_path))
    restored.operator.initialize_state(harness.operator.snapshot_state())
    restored.open().broadcast(("k1", 5)).end_broadcast()
    counts: Counter = Counter()
    expected = []
    for key, _ in records:
        counts[key] += 1
        expected.append((key, counts[key], 5 if key == "k1" else None))
    assert [value for value, _ in restored.output.records if value[0] not in ("broadcast", "timer")] == expected
    assert restored.operator.ctx.metrics["spilled_bytes"] > 0
    for operator in (harness.operator, restored.operator):
        operator.close()
    assert not any(tmp_path.iterdir())  # the spill files are gone


def test_a_broadcast_input_that_becomes_backlog_holds_the_data_side_while_it_is():
    harness = Harness(bounded=False).open().data(("a", None))
    harness.operator.process_record_attributes(RecordAttributes(True), 1)
    harness.data(("a", None)).broadcast(("a", 5))
    assert [value for value, _ in harness.output.records] == [("a", 1, None), ("broadcast", ("a", 5))]
    harness.operator.process_record_attributes(RecordAttributes(False), 1)
    assert harness.output.records[-1][0] == ("a", 2, 5)


def owner(key: Any, parallelism: int) -> int:
    group = assign_to_key_group(key, MAX_PARALLELISM)
    return next(i for i in range(parallelism) if group in key_group_range(MAX_PARALLELISM, parallelism, i))


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (2, 1), (1, 4)])
def test_rescaled_every_instance_gets_a_copy_of_the_broadcast_state_and_its_keys_held_records(old, new):
    keys = [f"k{i}" for i in range(30)]
    snapshots = []
    for subtask in range(old):
        harness = Harness(bounded=True, subtask=subtask, parallelism=old).open()
        harness.broadcast(("k1", 10), ("k2", 20), ("k1", 11))
        harness.data(*[(key, i) for i, key in enumerate(keys) if owner(key, old) == subtask])
        snapshots.append(harness.operator.snapshot_state())
    outputs: Counter = Counter()
    for subtask in range(new):
        harness = Harness(bounded=True, subtask=subtask, parallelism=new)
        groups = key_group_range(MAX_PARALLELISM, new, subtask)
        harness.operator.initialize_rescaled_state(
            snapshots, lambda key, _groups=groups: assign_to_key_group(key, MAX_PARALLELISM) in _groups)
        harness.open().end_broadcast()
        assert harness.operator.broadcast_state.snapshot() == {"factors": {"k1": 11, "k2": 20}}
        data = [value for value, _ in harness.output.records if value[0] != "timer"]
        assert all(owner(value[0], new) == subtask for value in data)
        outputs.update(data)
    assert outputs == Counter((key, 1, {"k1": 11, "k2": 20}.get(key)) for key in keys)

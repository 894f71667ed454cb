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
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import BroadcastProcessTransformation
from slipstream.errors import SlipstreamError, UserFunctionError
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.testing import OperatorHarness, Record


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


def broadcast_harness(*, bounded: bool, subtask: int = 0, parallelism: int = 1, function: Any = None,
                      memory_budget: int = 100_000, spill_dir: str | None = None, **options: Any) -> OperatorHarness:
    """A harness of the keyed broadcast operator: data on input 0, broadcast on input 1."""
    transformation = BroadcastProcessTransformation(
        id=1, name="Broadcast", uid="broadcast", key_selectors=[lambda value: value, None],
        function=function or CountTimesFactor(), descriptors=[FACTORS], broadcast_bounded=bounded)
    return OperatorHarness(transformation, subtask_index=subtask, parallelism=parallelism,
                           max_parallelism=MAX_PARALLELISM, channel_memory_budget=memory_budget,
                           spill_dir=spill_dir, **options)


def emitted(harness: OperatorHarness) -> list[Any]:
    """The values and watermarks the operator emitted, in order."""
    return [event.value if isinstance(event, Record) else event for event in harness.get_output()
            if not isinstance(event, RecordAttributes)]


def test_the_broadcast_side_reaches_every_keys_state_with_apply_to_keyed_state():
    harness = broadcast_harness(bounded=False).process_elements([("a", None), ("b", None), ("a", None)])
    harness.process_values([("a", 7), ("scale", 10)], 1).process_elements([("a", None), ("b", None), ("c", None)])
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
    harness = broadcast_harness(bounded=False, function=UsesTheKeyOnTheBroadcastSide())
    with pytest.raises(SlipstreamError, match=rf"'Broadcast': {call}\(\) in process_broadcast_element: a broadcast "
                                              "element has no key; use ctx.apply_to_keyed_state"):
        harness.process_values([call], 1)


class ReadsKeyedStateOnTheBroadcastSide(CountTimesFactor):
    """Reads the count directly, before or after reaching every key's with apply_to_keyed_state."""

    def process_broadcast_element(self, value, ctx):
        if value == "after apply":
            ctx.apply_to_keyed_state(COUNT, lambda key, state: state.value())
        yield ("read", self.count.value())


@pytest.mark.parametrize("when", ["first", "after apply"])
def test_keyed_state_read_directly_on_the_broadcast_side_has_no_key(when):
    """Not the state of the key the last data record left current (Flink: no key set)."""
    harness = broadcast_harness(bounded=False, function=ReadsKeyedStateOnTheBroadcastSide()).process_element("a")
    with pytest.raises(UserFunctionError, match=r"'Broadcast'.*keyed state read directly in process_broadcast_"
                                                r"element: a broadcast element has no key; use ctx.apply_to_keyed"):
        harness.process_values([when], 1)
    harness.process_element("a")  # the next data record has its key again
    assert harness.output.records[-1][0] == ("a", 2, None)


def test_a_bounded_broadcast_input_holds_the_data_side_and_event_time_until_it_ends():
    harness = broadcast_harness(bounded=True)
    harness.process_elements([("a", 1), ("b", 2)]).process_watermark(50, 0).process_watermark(40, 1)
    harness.process_element("a", 60)
    assert emitted(harness) == []  # nothing processed, no timer fired, no watermark passed
    harness.process_values([("a", 3), ("b", 4)], 1)
    assert [value for value, _ in harness.output.records] == [("broadcast", ("a", 3)), ("broadcast", ("b", 4))]
    harness.end_input(1)
    records = [event for event in emitted(harness)[2:]]
    assert records == [("a", 1, 3), ("b", 1, 4), ("a", 2, 3),
                       ("timer", "a", 11, 2), ("timer", "b", 12, 1), Watermark(50)]
    harness.process_element("b", 70)
    assert harness.output.records[-1] == (("b", 2, 4), 70)


def test_held_records_past_the_memory_budget_spill_and_come_back_in_order(tmp_path):
    harness = broadcast_harness(bounded=True, memory_budget=4, spill_dir=str(tmp_path))
    records = [(f"k{i % 3}", i) for i in range(20)]
    for record in records:
        harness.process_elements([record])
    assert harness.operator.held.spilled_bytes > 0 and emitted(harness) == []
    assert harness.operator.ctx.metrics["backlog_records"] == len(records)
    restored = broadcast_harness(bounded=True, memory_budget=4, spill_dir=str(tmp_path), restore=harness.snapshot())
    restored.process_values([("k1", 5)], 1).end_input(1)
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
    harness = broadcast_harness(bounded=False).process_element("a")
    harness.set_backlog(True, 1)
    harness.process_element("a").process_values([("a", 5)], 1)
    assert [value for value, _ in harness.output.records] == [("a", 1, None), ("broadcast", ("a", 5))]
    harness.set_backlog(False, 1)
    assert harness.output.records[-1][0] == ("a", 2, 5)


def owner(key: Any, parallelism: int) -> int:
    group = assign_to_key_group(key, MAX_PARALLELISM)
    return next(i for i in range(parallelism) if group in key_group_range(MAX_PARALLELISM, parallelism, i))


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2), (2, 1), (1, 4)])
def test_rescaled_every_instance_gets_a_copy_of_the_broadcast_state_and_its_keys_held_records(old, new):
    keys = [f"k{i}" for i in range(30)]
    snapshots = []
    for subtask in range(old):
        harness = broadcast_harness(bounded=True, subtask=subtask, parallelism=old)
        harness.process_values([("k1", 10), ("k2", 20), ("k1", 11)], 1)
        harness.process_elements([(key, i) for i, key in enumerate(keys) if owner(key, old) == subtask])
        snapshots.append(harness.snapshot())
    outputs: Counter = Counter()
    for subtask in range(new):
        harness = broadcast_harness(bounded=True, subtask=subtask, parallelism=new, restore=snapshots)
        harness.end_input(1)
        assert harness.operator.broadcast_state.snapshot() == {"factors": {"k1": 11, "k2": 20}}
        data = [value for value, _ in harness.output.records if value[0] != "timer"]
        assert all(owner(value[0], new) == subtask for value in data)
        outputs.update(data)
    assert outputs == Counter((key, 1, {"k1": 11, "k2": 20}.get(key)) for key in keys)

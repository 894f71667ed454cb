"""The operator harness of the test kit: records, watermarks, backlog, end of input and processing
time in; records, side outputs, watermarks and timers out; snapshots restored at the same and at
another parallelism."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import pytest

from slipstream.datastream import (
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    ValueStateDescriptor,
)
from slipstream.datastream.time import MAX_TIMESTAMP, Watermark
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.testing import (
    KeyedTwoInputStreamOperatorTestHarness,
    OperatorHarness,
    Record,
)

COUNT = ValueStateDescriptor("count")
SMALL = OutputTag("small")


class CountAndRemind(KeyedProcessFunction):
    """Counts records per key and emits the count; a record's event timer (its timestamp + 10)
    emits ("event", key, count), a processing-time timer 100 ms after it ("processing", key);
    values below 0 go to the side output ``small``."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(COUNT)

    def process_element(self, value: Any, ctx: Any) -> Any:
        if value[1] < 0:
            yield SMALL, value
            return
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if ctx.timestamp() is not None:
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 100)
        yield ctx.get_current_key(), count

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        kind = "event" if ctx.time_domain().name == "EVENT_TIME" else "processing"
        yield kind, ctx.get_current_key(), timestamp, self.count.value()


def counting_harness(**options: Any) -> OperatorHarness:
    return OperatorHarness.of(lambda env: env.from_collection([]).key_by(lambda r: r[0]).process(CountAndRemind()),
                              **options)


def test_records_come_out_with_their_timestamps_and_side_outputs_apart() -> None:
    harness = counting_harness()
    harness.process_element(("a", 1), 5).process_element(("b", 1), 6).process_element(("a", -1), 7)
    harness.process_element(("a", 2), 8)
    assert harness.extract_output_records() == [Record(("a", 1), 5), Record(("b", 1), 6), Record(("a", 2), 8)]
    assert harness.get_side_output(SMALL) == [Record(("a", -1), 7)]
    assert harness.get_side_output("small") == harness.get_side_output(SMALL)


def test_event_time_timers_are_listed_and_fire_as_the_watermark_passes_them() -> None:
    harness = counting_harness()
    harness.process_elements([(("a", 1), 5), (("b", 1), 20), (("a", 1), 5)])
    assert harness.timers()["event"] == [(15, "a", None), (30, "b", None)]  # one per key and time
    harness.process_watermark(15)
    assert harness.extract_output_values()[-1] == ("event", "a", 15, 2)
    assert harness.num_event_time_timers() == 1
    assert harness.output.watermarks == [15]
    harness.process_watermark(14)  # a task forwards only rising watermarks
    assert harness.output.watermarks == [15]
    harness.end_input()
    assert harness.extract_output_values()[-1] == ("event", "b", 30, 1)
    assert harness.output.watermarks == [15, MAX_TIMESTAMP]


def test_processing_time_timers_fire_when_the_test_moves_processing_time() -> None:
    harness = counting_harness(start_time_ms=1_000)
    harness.process_element(("a", 1)).advance_processing_time(50).process_element(("b", 1))
    assert harness.timers()["processing"] == [(1_100, "a", None), (1_150, "b", None)]
    harness.advance_processing_time(50)
    assert harness.extract_output_values()[-1] == ("processing", "a", 1_100, 1)
    assert harness.num_processing_time_timers() == 1
    harness.set_processing_time(2_000)
    assert harness.extract_output_values()[-1] == ("processing", "b", 1_150, 1)
    assert harness.get_processing_time() == 2_000


@pytest.mark.parametrize("seed", range(3))
def test_a_sorting_reduce_emits_nothing_during_backlog_and_each_keys_final_value_at_the_switch(seed: int) -> None:
    rng = random.Random(seed)
    records = [((rng.choice("abcd"), rng.randint(1, 9)), rng.randint(0, 100)) for _ in range(200)]
    harness = OperatorHarness.of(lambda env: env.from_collection([]).key_by(lambda r: r[0]).sum(1),
                                 batch_engine=PolarsBatchEngine(), batch_mode=True)
    harness.set_backlog(True).process_elements(records, batch_size=16)
    assert harness.extract_output_values() == []
    harness.set_backlog(False)
    oracle: Counter = Counter()
    for (key, value), _ in records:
        oracle[key] += value
    assert dict(harness.extract_output_values()) == dict(oracle)
    harness.process_element(("a", 1000), 101)
    assert harness.extract_output_values()[-1] == ("a", oracle["a"] + 1000)


class Totals(KeyedCoProcessFunction):
    """Adds up input 1's values per key and emits the total whenever input 2 asks for a key."""

    def open(self, runtime_context: Any) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element1(self, value: Any, ctx: Any) -> Any:
        self.total.update((self.total.value() or 0) + value[1])
        return ()

    def process_element2(self, value: Any, ctx: Any) -> Any:
        yield value, self.total.value()


def two_input_harness(**options: Any) -> OperatorHarness:
    def build(env: Any) -> Any:
        left = env.from_collection([("x", 0)])
        right = env.from_collection(["x"])
        return left.connect(right).key_by(lambda r: r[0], lambda k: k).process(Totals())
    return KeyedTwoInputStreamOperatorTestHarness.of(build, **options)


def test_a_two_input_operator_takes_each_input_and_the_minimum_of_their_watermarks() -> None:
    harness = two_input_harness()
    harness.process_element(("x", 3), input_index=0).process_element(("x", 4), input_index=0)
    harness.process_element("x", input_index=1).process_element("y", input_index=1)
    assert harness.extract_output_values() == [("x", 7), ("y", None)]
    harness.process_watermark(20, input_index=0).process_watermark(10, input_index=1)
    assert harness.output.watermarks == [10]
    harness.end_input(1)
    assert harness.output.watermarks == [10, 20]
    with pytest.raises(ValueError, match="input 1 has ended"):
        harness.process_element("x", input_index=1)
    with pytest.raises(ValueError, match="has 2 input"):
        harness.process_element("x", input_index=2)


def test_a_snapshot_restored_in_a_new_harness_goes_on_with_state_and_timers() -> None:
    first = counting_harness()
    first.process_elements([(("a", 1), 5), (("a", 1), 6), (("b", 1), 7)])
    snapshot = first.snapshot()
    first.process_element(("a", 1), 8)  # after the snapshot: not in it
    second = counting_harness(restore=snapshot)
    assert second.timers()["event"] == [(15, "a", None), (16, "a", None), (17, "b", None)]
    second.process_element(("a", 1), 9).end_input()
    values = second.extract_output_values()
    assert values[0] == ("a", 3)
    assert [v for v in values if v[0] == "event"] == [("event", "a", 15, 3), ("event", "a", 16, 3),
                                                       ("event", "b", 17, 1), ("event", "a", 19, 3)]


def owner(key: str, parallelism: int) -> int:
    """The subtask whose key groups hold ``key``."""
    group = assign_to_key_group(key, 128)
    return next(i for i in range(parallelism) if group in key_group_range(128, parallelism, i))


@pytest.mark.parametrize("old,new", [(2, 1), (1, 3), (4, 2)])
def test_snapshots_of_every_subtask_restore_at_another_parallelism(old: int, new: int) -> None:
    keys = [f"k{i}" for i in range(40)]
    oracle: Counter = Counter()
    harnesses = [counting_harness(subtask_index=i, parallelism=old) for i in range(old)]
    for n, key in enumerate(keys * 3):
        harnesses[owner(key, old)].process_element((key, 1), n)
        oracle[key] += 1
    snapshots = [h.snapshot() for h in harnesses]
    restored = [counting_harness(subtask_index=i, parallelism=new, restore=snapshots) for i in range(new)]
    counts: dict[str, int] = defaultdict(int)
    for key in keys:
        harness = restored[owner(key, new)]
        harness.process_element((key, 1), 1_000)
        counts[key] = harness.extract_output_values()[-1][1]
    assert counts == {key: oracle[key] + 1 for key in keys}
    timers = sorted(t for h in restored for t in h.timers()["event"])
    assert len(timers) == len(keys * 3) + len(keys)


def test_operator_state_round_trips_through_a_snapshot() -> None:
    harness = OperatorHarness.of(lambda env: env.from_collection([]).map(lambda x: x))
    assert harness.snapshot().operator is None and harness.snapshot().keyed is None
    assert harness.process_values([1, 2]).extract_output_records() == [Record(1, None), Record(2, None)]
    assert harness.get_output()[-1] == Record(2, None)
    harness.process_watermark(5)
    assert harness.get_output()[-1] == Watermark(5)

"""TimestampsAndWatermarksOperator driven directly, in the test kit's harness."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Watermark
from slipstream.datastream.transformations import TimestampsAndWatermarksTransformation
from slipstream.datastream.watermark_strategy import (WatermarkGenerator, WatermarkOutput,
                                                      WatermarkStrategy)
from slipstream.errors import InvalidProgramError, UserFunctionError
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch, WatermarkStatus
from slipstream.operators.timestamps import TimestampsAndWatermarksOperator
from slipstream.testing import HarnessOutput, OperatorHarness, Record


IDLE, ACTIVE = WatermarkStatus(idle=True), WatermarkStatus(idle=False)


def make_operator(strategy: WatermarkStrategy) -> tuple[TimestampsAndWatermarksOperator, HarnessOutput, OperatorHarness]:
    """The operator of ``strategy`` in a harness: the operator, what it emits, the harness (its clock)."""
    transformation = TimestampsAndWatermarksTransformation(id=7, name="Timestamps/Watermarks", uid="ts-uid",
                                                           watermark_strategy=strategy)
    harness = OperatorHarness(transformation)
    assert isinstance(harness.operator, TimestampsAndWatermarksOperator)
    return harness.operator, harness.output, harness


def by_second_field(strategy: WatermarkStrategy) -> WatermarkStrategy:
    return strategy.with_timestamp_assigner(lambda event, _ts: event[1])


def test_out_of_order_events_give_the_hand_computed_watermarks() -> None:
    op, out, _ = make_operator(by_second_field(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(5))))
    op.process_batch(RecordBatch([("a", 10), ("b", 5)]))
    op.process_batch(RecordBatch([("c", 20), ("d", 15)]))
    op.process_batch(RecordBatch([("e", 12)]))  # older than the max: no new watermark
    op.process_batch(RecordBatch([("f", 30)]))
    # max 10 -> 10-5-1 = 4; max 20 -> 14; max still 20 -> nothing; max 30 -> 24
    assert out.events == [
        Record(("a", 10), 10), Record(("b", 5), 5), Watermark(4),
        Record(("c", 20), 20), Record(("d", 15), 15), Watermark(14),
        Record(("e", 12), 12),
        Record(("f", 30), 30), Watermark(24),
    ]


def test_monotonous_timestamps_trail_the_newest_by_one() -> None:
    op, out, _ = make_operator(by_second_field(WatermarkStrategy.for_monotonous_timestamps()))
    op.process_batch(RecordBatch([("a", 1), ("b", 7)]))
    op.process_batch(RecordBatch([("c", 9)]))
    assert out.watermarks == [6, 8]


def test_assigner_receives_the_existing_timestamp_or_min_timestamp() -> None:
    seen: list[int] = []

    def assign(value: Any, record_timestamp: int) -> int:
        seen.append(record_timestamp)
        return value

    op, out, _ = make_operator(WatermarkStrategy.no_watermarks().with_timestamp_assigner(assign))
    op.process_batch(RecordBatch([1, 2]))                 # no timestamps at all
    op.process_batch(RecordBatch([3, 4], [100, None]))    # one has a timestamp, one not
    assert seen == [MIN_TIMESTAMP, MIN_TIMESTAMP, 100, MIN_TIMESTAMP]
    assert out.records == [(1, 1), (2, 2), (3, 3), (4, 4)]


def test_without_an_assigner_records_keep_their_timestamps() -> None:
    op, out, _ = make_operator(WatermarkStrategy.for_monotonous_timestamps())
    op.process_batch(RecordBatch(["x", "y"], [50, 60]))
    assert out.records == [("x", 50), ("y", 60)]
    assert out.watermarks == [59]


def test_upstream_watermarks_and_statuses_are_ignored_but_max_is_forwarded() -> None:
    op, out, _ = make_operator(by_second_field(WatermarkStrategy.for_monotonous_timestamps()))
    op.process_batch(RecordBatch([("a", 10)]))
    op.process_watermark(Watermark(1_000))
    op.process_watermark_status(True)
    assert out.events == [Record(("a", 10), 10), Watermark(9)]
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    op.end_input()
    op.finish()
    assert out.watermarks == [9, MAX_TIMESTAMP]


def test_no_watermarks_strategy_emits_only_the_final_watermark() -> None:
    op, out, _ = make_operator(by_second_field(WatermarkStrategy.no_watermarks()))
    op.process_batch(RecordBatch([("a", 10), ("b", 20)]))
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    assert out.watermarks == [MAX_TIMESTAMP]


def test_a_failing_assigner_names_the_operator_and_the_record() -> None:
    def assign(value: Any, _ts: int) -> int:
        return value["ts"]

    op, _, _ = make_operator(WatermarkStrategy.for_monotonous_timestamps()
                             .with_timestamp_assigner(assign))
    op.process_batch(RecordBatch([{"ts": 1}]))
    with pytest.raises(UserFunctionError) as info:
        op.process_batch(RecordBatch([{"ts": 2}, {"time": 3}]))
    message = str(info.value)
    assert "Timestamps/Watermarks" in message and "ts-uid" in message
    assert "{'time': 3}" in message and "KeyError" in message
    assert info.value.record == {"time": 3}
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("bad", [1.5, "12", True, None])
def test_a_non_integer_timestamp_is_refused(bad: Any) -> None:
    op, _, _ = make_operator(WatermarkStrategy.no_watermarks()
                             .with_timestamp_assigner(lambda v, ts: bad))
    with pytest.raises(UserFunctionError, match="integer milliseconds"):
        op.process_batch(RecordBatch(["r"]))


def test_integer_like_timestamps_are_accepted() -> None:
    class MillisLike:
        def __index__(self) -> int:
            return 42

    op, out, _ = make_operator(WatermarkStrategy.no_watermarks()
                               .with_timestamp_assigner(lambda v, ts: MillisLike()))
    op.process_batch(RecordBatch(["r"]))
    assert out.records == [("r", 42)]
    assert type(out.records[0][1]) is int


class PunctuatedGenerator(WatermarkGenerator):
    """Emits a watermark at once for every event whose value is marked with '!'."""

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        if event[0].endswith("!"):
            output.emit_watermark(Watermark(event_timestamp))

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        pass


def test_a_watermark_emitted_from_on_event_follows_its_record() -> None:
    op, out, _ = make_operator(by_second_field(WatermarkStrategy.for_generator(PunctuatedGenerator)))
    op.process_batch(RecordBatch([("a", 1), ("b!", 2), ("c", 3), ("d!", 4), ("e", 5)]))
    assert out.events == [
        Record(("a", 1), 1), Record(("b!", 2), 2), Watermark(2),
        Record(("c", 3), 3), Record(("d!", 4), 4), Watermark(4),
        Record(("e", 5), 5),
    ]


def test_a_failing_generator_is_reported_as_a_user_error() -> None:
    class Broken(WatermarkGenerator):
        def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
            pass

        def on_periodic_emit(self, output: WatermarkOutput) -> None:
            raise RuntimeError("clock exploded")

    op, _, _ = make_operator(WatermarkStrategy.for_generator(Broken))
    with pytest.raises(UserFunctionError, match="on_periodic_emit.*clock exploded"):
        op.process_batch(RecordBatch(["r"], [1]))


def test_a_failing_generator_supplier_fails_open() -> None:
    def supplier() -> WatermarkGenerator:
        raise ValueError("no generator today")

    with pytest.raises(UserFunctionError, match="no generator today"):
        make_operator(WatermarkStrategy.for_generator(supplier))


def test_the_transformation_must_carry_a_strategy() -> None:
    transformation = TimestampsAndWatermarksTransformation(id=1, name="ts", watermark_strategy=None)
    with pytest.raises(InvalidProgramError, match="WatermarkStrategy"):
        StreamOperator.for_transformation(transformation)


def test_idleness_marks_the_output_idle_and_records_revive_it() -> None:
    strategy = by_second_field(WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(2))
                               .with_idleness(Duration.of_millis(100)))
    op, out, clock = make_operator(strategy)
    op.process_batch(RecordBatch([("a", 10)]))          # at processing time 0
    clock.set_processing_time(60)
    op.process_batch(RecordBatch([("b", 20)]))          # activity at 60: idle no earlier than 160
    clock.set_processing_time(159)
    assert IDLE not in out.events
    clock.set_processing_time(160)
    assert out.events[-1] == IDLE
    clock.set_processing_time(1_000)                             # stays idle; no repeated statuses
    assert out.events.count(IDLE) == 1
    op.process_batch(RecordBatch([("c", 30)]))          # at 1000: active again, before the records
    assert out.events[-3:] == [ACTIVE, Record(("c", 30), 30), Watermark(27)]
    clock.set_processing_time(1_100)
    assert out.events[-1] == IDLE
    assert out.watermarks == [7, 17, 27]


def test_an_input_with_no_records_at_all_becomes_idle() -> None:
    _, out, clock = make_operator(WatermarkStrategy.for_monotonous_timestamps()
                                  .with_idleness(Duration.of_seconds(1)))
    clock.set_processing_time(999)
    assert out.events == []
    clock.set_processing_time(1_000)
    assert out.events == [IDLE]


def test_no_idle_status_after_the_final_watermark() -> None:
    op, out, clock = make_operator(WatermarkStrategy.for_monotonous_timestamps()
                                   .with_idleness(Duration.of_millis(10)))
    op.process_watermark(Watermark(MAX_TIMESTAMP))
    clock.set_processing_time(1_000)
    assert out.events == [Watermark(MAX_TIMESTAMP)]


@settings(max_examples=200, deadline=None)
@given(timestamps=st.lists(st.integers(-10_000, 10_000), min_size=1, max_size=60),
       bound=st.integers(0, 500),
       cuts=st.lists(st.integers(1, 8), max_size=20))
def test_watermarks_rise_and_never_pass_max_minus_bound_minus_one(
        timestamps: list[int], bound: int, cuts: list[int]) -> None:
    op, out, _ = make_operator(WatermarkStrategy.for_bounded_out_of_orderness(bound)
                               .with_timestamp_assigner(lambda v, ts: v))
    batches, start = [], 0
    for size in cuts + [len(timestamps)]:
        if start < len(timestamps):
            batches.append(timestamps[start:start + size])
            start += size
    max_so_far = MIN_TIMESTAMP
    for batch in batches:
        before = len(out.watermarks)
        op.process_batch(RecordBatch(list(batch)))
        max_so_far = max(max_so_far, *batch)
        for wm in out.watermarks[before:]:
            assert wm <= max_so_far - bound - 1
    watermarks = out.watermarks
    assert all(a < b for a, b in zip(watermarks, watermarks[1:]))
    assert watermarks[-1] == max(timestamps) - bound - 1
    assert out.records == [(t, t) for t in timestamps]


@pytest.mark.parametrize("kind", ["int64", "int32", "uint64"])
def test_timestamps_read_from_an_arrow_column_are_the_records_path_s(kind: str) -> None:
    """An Arrow batch whose timestamps are a field keeps them as an int64 array (no Python list
    unless asked); they, the watermark, the split pieces and a pickled copy equal what the records'
    path gives (a uint64 column takes that path: its values may not fit a timestamp)."""
    import pickle

    import pyarrow as pa

    from slipstream.datastream.watermark_strategy import FieldTimestampAssigner

    stamps = [5, 3, 9, 2]
    arrow = pa.record_batch({"k": ["a", "b", "c", "d"], "ts": pa.array(stamps, getattr(pa, kind)())})
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(FieldTimestampAssigner("ts"))
    op, out, _ = make_operator(strategy)
    kept: list[tuple[bool, RecordBatch]] = []
    collect = out.collect_batch
    out.collect_batch = lambda batch: (kept.append((batch._timestamps is None, batch)), collect(batch))  # type: ignore[method-assign]
    op.process_batch(RecordBatch(None, None, arrow=arrow))
    ((lazy, batch),) = kept
    assert lazy == (kind != "uint64")
    assert batch.timestamp_column().to_pylist() == stamps
    assert [p.timestamps for p in batch.split(3)] == [[5, 3, 9], [2]]
    assert batch.timestamps == stamps and type(batch.timestamps[0]) is int
    assert pickle.loads(pickle.dumps(batch)).timestamps == stamps
    assert [record.timestamp for record in out.records] == stamps
    assert out.watermarks == [8]
    batch.timestamps = [1, 1, 1, 1]
    assert batch.timestamp_column().to_pylist() == [1, 1, 1, 1]

"""CoGroupOperator (and the window operator with EndOfStreamWindows) driven directly: records,
watermarks, record attributes and end of input in; what comes out, and when, compared with
plain-Python oracles."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import polars as pl
import pytest

from slipstream.attributes import RecordAttributes
from slipstream.datastream.co_group import (
    CoGroupFunction,
    FlatJoinFunction,
    JoinCoGroupFunction,
    JoinFunction,
    VectorizedCoGroupFunction,
)
from slipstream.datastream.functions import ReduceFunction, as_function
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import MAX_TIMESTAMP, MAX_WATERMARK, Watermark
from slipstream.datastream.transformations import (
    CoGroupTransformation,
    WindowTransformation,
)
from slipstream.datastream.typeinfo import Row, Types
from slipstream.datastream.window import (
    CountTrigger,
    EndOfStreamWindows,
    GlobalWindows,
    TumblingEventTimeWindows,
)
from slipstream.errors import UserFunctionError
from slipstream.operators.co_group import CoGroupOperator, frame_rows, records_to_frame
from slipstream.operators.elements import RecordBatch
from slipstream.operators.window import WindowOperator
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.testing import HarnessOutput, OperatorHarness


def first_field(record: Any) -> Any:
    return record[0]


def setup(operator: Any, batch_engine: Any = None, **options: Any) -> HarnessOutput:
    """Set ``operator`` up and open it in a harness; what it emits, in order."""
    return OperatorHarness(operator, batch_engine=batch_engine, **options).output


def co_group_operator(function: Any, assigner: Any = None, *, trigger: Any = None,
                      vectorized: bool = False, kind: str = "co_group",
                      input_types: list | None = None) -> CoGroupOperator:
    assigner = assigner or EndOfStreamWindows.get()
    return CoGroupOperator(CoGroupTransformation(
        id=1, name="CoGroup", key_selectors=[first_field, first_field], assigner=assigner,
        trigger=trigger or assigner.get_default_trigger(), function=function, vectorized=vectorized,
        kind=kind, input_types=input_types or []))


def count_sides(first: list, second: list) -> Any:
    key = (first or second)[0][0]
    yield key, len(first), len(second), sum(r[1] for r in first) + sum(r[1] for r in second)


COUNT = as_function(count_sides, CoGroupFunction, "co_group", 2, "test")


def push(operator: CoGroupOperator, input_index: int, records: list, timestamps: list | None = None) -> None:
    operator.process_batch(RecordBatch(list(records), timestamps), input_index)


def end(operator: CoGroupOperator) -> None:
    """What the task does when both inputs end: the final watermark on each, then end of input."""
    for index in (0, 1):
        operator.process_watermark(MAX_WATERMARK, index)
    for index in (0, 1):
        operator.end_input(index)


def oracle(first: list, second: list) -> set:
    groups: dict[Any, tuple[list, list]] = defaultdict(lambda: ([], []))
    for record in first:
        groups[record[0]][0].append(record)
    for record in second:
        groups[record[0]][1].append(record)
    return {(key, len(a), len(b), sum(r[1] for r in a) + sum(r[1] for r in b)) for key, (a, b) in groups.items()}


# -- EndOfStreamWindows -----------------------------------------------------------------------------
def test_end_of_stream_co_group_emits_only_after_the_final_watermark_of_both_inputs() -> None:
    operator = co_group_operator(COUNT)
    out = setup(operator)
    first = [("a", 1), ("b", 2), ("a", 3)]
    second = [("a", 10), ("c", 20)]
    push(operator, 0, first[:2])
    push(operator, 1, second)
    push(operator, 0, first[2:])
    operator.process_watermark(Watermark(1_000), 0)
    operator.process_watermark(Watermark(1_000), 1)
    operator.process_watermark(MAX_WATERMARK, 0)
    assert out.values == []
    operator.process_watermark(MAX_WATERMARK, 1)
    assert set(out.values) == oracle(first, second)
    assert all(ts == MAX_TIMESTAMP for _, ts in out.records)
    # results come before the final watermark they were fired by
    assert out.events[-1] == MAX_WATERMARK
    operator.end_input(0)
    operator.end_input(1)
    assert len(out.values) == 3


def test_keys_on_one_side_get_an_empty_other_side_and_join_emits_nothing_for_them() -> None:
    calls: list[tuple[list, list]] = []

    def record_calls(first: list, second: list) -> Any:
        calls.append((list(first), list(second)))
        return ()

    operator = co_group_operator(as_function(record_calls, CoGroupFunction, "co_group", 2, "t"))
    setup(operator)
    push(operator, 0, [("only-first", 1)])
    push(operator, 1, [("only-second", 2)])
    end(operator)
    assert sorted(calls, key=str) == sorted([([("only-first", 1)], []), ([], [("only-second", 2)])], key=str)

    def pairs(a: Any, b: Any) -> Any:
        yield a[1], b[1]

    join = co_group_operator(JoinCoGroupFunction(as_function(pairs, FlatJoinFunction, "join", 2, "t")),
                             kind="join")
    out = setup(join)
    push(join, 0, [("only-first", 1), ("both", 1)])
    push(join, 1, [("only-second", 2), ("both", 2), ("both", 3)])
    end(join)
    assert sorted(out.values) == [(1, 2), (1, 3)]


def test_join_is_the_nested_loop_per_key() -> None:
    rng = random.Random(3)
    first = [(rng.randrange(6), i) for i in range(40)]
    second = [(rng.randrange(8), -i) for i in range(30)]
    join_fn = JoinCoGroupFunction(as_function(lambda a, b: (a[0], a[1], b[1]), JoinFunction, "join", 2, "t"))
    operator = co_group_operator(join_fn, kind="join")
    out = setup(operator)
    push(operator, 0, first[:20])
    push(operator, 1, second)
    push(operator, 0, first[20:])
    end(operator)
    expected = sorted((a[0], a[1], b[1]) for a in first for b in second if a[0] == b[0])
    assert sorted(out.values) == expected


@pytest.mark.parametrize("all_window", [False, True])
def test_window_operator_with_end_of_stream_windows_fires_at_the_final_watermark(all_window: bool) -> None:
    selector = (lambda record: 0) if all_window else first_field
    assigner = GlobalWindows.create_with_end_of_stream_trigger()
    operator = WindowOperator(WindowTransformation(
        id=1, name="Window", key_selectors=[selector], assigner=assigner,
        trigger=assigner.get_default_trigger(), function_kind="reduce",
        function=as_function(lambda a, b: (a[0], a[1] + b[1]), ReduceFunction, "reduce", 2, "t")))
    output = setup(operator)
    operator.process_batch(RecordBatch([("a", 1), ("b", 2), ("a", 3)], [5, 6, 7]))
    operator.process_watermark(Watermark(10_000))
    operator.process_watermark(Watermark(MAX_TIMESTAMP - 1))
    assert output.values == []
    operator.process_watermark(MAX_WATERMARK)
    expected = [("a", 6)] if all_window else [("a", 4), ("b", 2)]
    assert sorted(output.values) == expected
    assert {ts for _, ts in output.records} == {MAX_TIMESTAMP}
    operator.end_input(0)
    assert len(output.values) == len(expected)
    assert WindowOperator.attributes_for(operator.transformation).is_output_on_eof()


# -- time windows, triggers -------------------------------------------------------------------------
def test_tumbling_event_time_co_group_fires_per_window_at_the_watermark() -> None:
    operator = co_group_operator(COUNT, TumblingEventTimeWindows.of(10))
    out = setup(operator)
    push(operator, 0, [("a", 1), ("a", 2), ("b", 3)], [1, 12, 5])
    push(operator, 1, [("a", 10), ("b", 20)], [3, 15])
    operator.process_watermark(Watermark(9), 0)
    assert out.values == []
    operator.process_watermark(Watermark(9), 1)
    assert sorted(out.records) == [(("a", 1, 1, 11), 9), (("b", 1, 0, 3), 9)]
    end(operator)
    assert sorted(out.records) == sorted([(("a", 1, 1, 11), 9), (("b", 1, 0, 3), 9),
                                          (("a", 1, 0, 2), 19), (("b", 0, 1, 20), 19)])


def test_a_custom_trigger_sees_the_elements_of_both_inputs() -> None:
    operator = co_group_operator(COUNT, GlobalWindows.create(), trigger=CountTrigger.of(3))
    out = setup(operator)
    push(operator, 0, [("k", 1), ("k", 2)])
    assert out.values == []
    push(operator, 1, [("k", 3)])
    assert out.values == [("k", 2, 1, 6)]


def test_co_group_may_yield_side_outputs() -> None:
    tag = OutputTag("sizes")

    def fn(first: list, second: list) -> Any:
        yield tag, len(first) + len(second)
        yield "main"

    operator = co_group_operator(as_function(fn, CoGroupFunction, "co_group", 2, "t"))
    out = setup(operator)
    push(operator, 0, [("a", 1)])
    push(operator, 1, [("a", 2)])
    end(operator)
    assert out.values == ["main"]
    assert [record.value for record in out.side_output("sizes")] == [2]


# -- vectorised form ----------------------------------------------------------------------------------
class FrameCount(VectorizedCoGroupFunction):
    """The vectorised twin of ``count_sides``: counts and sums per key over both frames."""

    def co_group(self, first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
        def per_key(frame: pl.DataFrame, n: str, s: str) -> pl.DataFrame:
            return frame.group_by("f0").agg(pl.len().cast(pl.Int64).alias(n), pl.col("f1").sum().alias(s))

        joined = per_key(first, "n1", "s1").join(per_key(second, "n2", "s2"), on="f0", how="full",
                                                 coalesce=True)
        return joined.select(
            "f0", pl.col("n1").fill_null(0), pl.col("n2").fill_null(0),
            (pl.col("s1").fill_null(0) + pl.col("s2").fill_null(0)).alias("total"))


TUPLE_TYPE = Types.TUPLE([Types.STRING(), Types.LONG()])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_co_group_equals_the_per_key_form(seed: int) -> None:
    rng = random.Random(seed)
    first = [(f"k{rng.randrange(9)}", rng.randrange(100)) for _ in range(60)]
    second = [(f"k{rng.randrange(12)}", rng.randrange(100)) for _ in range(45)]
    results = []
    for function, vectorized in ((COUNT, False), (FrameCount(), True)):
        operator = co_group_operator(function, vectorized=vectorized, input_types=[TUPLE_TYPE, TUPLE_TYPE])
        out = setup(operator)
        for i in range(0, 60, 7):
            push(operator, 0, first[i:i + 7])
            push(operator, 1, second[i:i + 7])
        end(operator)
        results.append(sorted(out.values))
        assert {ts for _, ts in out.records} == {MAX_TIMESTAMP}
    assert results[0] == results[1] == sorted(oracle(first, second))


def test_a_vectorised_function_gets_all_keys_of_a_window_in_one_call() -> None:
    sizes: list[tuple[int, int]] = []

    def fn(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
        sizes.append((first.height, second.height))
        return first

    operator = co_group_operator(as_function(fn, VectorizedCoGroupFunction, "co_group", 2, "t"), vectorized=True)
    out = setup(operator)
    push(operator, 0, [(k, 1) for k in "abcde"])
    push(operator, 1, [(k, 2) for k in "cdefg"])
    end(operator)
    assert sizes == [(5, 5)]
    assert sorted(out.values) == [(k, 1) for k in "abcde"]


def test_frames_follow_the_records_shape_and_rows_come_back_in_it() -> None:
    tuples = records_to_frame([(1, "x"), (2, "y")], None, None)
    assert tuples.columns == ["f0", "f1"] and tuples.height == 2
    dicts = records_to_frame([{"id": 1, "name": "x"}], None, None)
    assert dicts.columns == ["id", "name"]
    named = records_to_frame([Row(id=1, name="x")], None, None)
    assert named.columns == ["id", "name"]
    typed_empty = records_to_frame([], TUPLE_TYPE, None)
    assert typed_empty.columns == ["f0", "f1"] and typed_empty.height == 0
    frame = pl.DataFrame({"id": [1], "name": ["x"]})
    assert frame_rows(frame, (0,)) == [(1, "x")]
    assert frame_rows(frame, {"a": 1}) == [{"id": 1, "name": "x"}]
    row = frame_rows(frame, Row(a=1))[0]
    assert isinstance(row, Row) and row.id == 1 and row.name == "x"
    assert frame_rows(None, (0,)) == []
    with pytest.raises(TypeError, match="must return a polars DataFrame"):
        frame_rows([(1, "x")], (0,))


# -- errors -----------------------------------------------------------------------------------------
def test_a_failing_co_group_function_names_the_operator_and_the_key() -> None:
    def fail(first: list, second: list) -> Any:
        if first and first[0][0] == "bad":
            raise ZeroDivisionError("boom")
        return ()

    operator = co_group_operator(as_function(fail, CoGroupFunction, "co_group", 2, "t"))
    setup(operator)
    push(operator, 0, [("good", 1), ("bad", 2)])
    with pytest.raises(UserFunctionError, match=r"operator 'CoGroup'.*key 'bad'.*ZeroDivisionError: boom"):
        end(operator)


def test_a_co_group_function_that_returns_a_non_iterable_is_named() -> None:
    operator = co_group_operator(as_function(lambda a, b: 42, CoGroupFunction, "co_group", 2, "t"))
    setup(operator)
    push(operator, 0, [("k", 1)])
    with pytest.raises(UserFunctionError, match="must yield its outputs"):
        end(operator)


def test_a_failing_key_selector_names_the_record_and_its_input() -> None:
    operator = CoGroupOperator(CoGroupTransformation(
        id=1, name="CoGroup", key_selectors=[first_field, lambda r: r["missing"]],
        assigner=EndOfStreamWindows.get(), trigger=EndOfStreamWindows.get().get_default_trigger(),
        function=COUNT))
    setup(operator)
    with pytest.raises(UserFunctionError, match=r"record of input 2 \{'x': 1\}.*KeyError"):
        push(operator, 1, [{"x": 1}])


# -- attributes -------------------------------------------------------------------------------------
def test_attributes_declare_the_sorter_and_output_on_eof_only_for_end_of_stream_windows() -> None:
    eos = co_group_operator(COUNT)
    assert eos.get_operator_attributes().is_output_on_eof()
    assert eos.get_operator_attributes().has_internal_sorter()
    tumbling = co_group_operator(COUNT, TumblingEventTimeWindows.of(10))
    assert not tumbling.get_operator_attributes().is_output_on_eof()
    assert tumbling.get_operator_attributes().has_internal_sorter()
    counted = co_group_operator(COUNT, EndOfStreamWindows.get(), trigger=CountTrigger.of(2))
    assert not counted.get_operator_attributes().is_output_on_eof()


# -- backlog: the batch path ------------------------------------------------------------------------
def run_with_backlog(operator: CoGroupOperator, first: list, second: list,
                     timestamps: tuple[list | None, list | None] = (None, None), sorting: bool = True) -> HarnessOutput:
    """Both inputs backlog from the start, then each ends: final watermark, backlog off, end
    (``sorting`` False: the same without a batch engine, so the backlog streams)."""
    out = setup(operator, PolarsBatchEngine() if sorting else None)
    operator.process_record_attributes(RecordAttributes(True), 0)
    operator.process_record_attributes(RecordAttributes(True), 1)
    for i in range(0, max(len(first), len(second)), 5):
        push(operator, 0, first[i:i + 5], None if timestamps[0] is None else timestamps[0][i:i + 5])
        push(operator, 1, second[i:i + 5], None if timestamps[1] is None else timestamps[1][i:i + 5])
        operator.process_watermark(Watermark(i), 0)
        operator.process_watermark(Watermark(i), 1)
    if sorting:
        assert out.events == [RecordAttributes(True)], "nothing but the backlog flag leaves during backlog"
    for index in (0, 1):
        operator.process_watermark(MAX_WATERMARK, index)
        assert not (sorting and out.values)
        operator.process_record_attributes(RecordAttributes(False), index)
        operator.end_input(index)
    return out


@pytest.mark.parametrize("vectorized", [False, True])
def test_backlog_is_buffered_then_run_as_batch_work_with_the_same_result(vectorized: bool) -> None:
    rng = random.Random(7)
    first = [(f"k{rng.randrange(20)}", rng.randrange(50)) for _ in range(80)]
    second = [(f"k{rng.randrange(25)}", rng.randrange(50)) for _ in range(70)]
    function = FrameCount() if vectorized else COUNT
    operator = co_group_operator(function, vectorized=vectorized, input_types=[TUPLE_TYPE, TUPLE_TYPE])
    out = run_with_backlog(operator, first, second)
    assert sorted(out.values) == sorted(oracle(first, second))
    assert operator.ctx.metrics["backlog_records"] == 150
    # the results, then the held final watermark, then the switch to non-backlog
    kinds = [type(e).__name__ if not isinstance(e, tuple) else "record" for e in out.events]
    assert kinds[0] == "RecordAttributes" and kinds[-2:] == ["Watermark", "RecordAttributes"]
    assert out.events[-1] == RecordAttributes(False) and out.events[-2] == MAX_WATERMARK


def test_backlog_with_time_windows_replays_sorted_and_equals_streaming() -> None:
    rng = random.Random(11)
    first = [(f"k{rng.randrange(5)}", i) for i in range(40)]
    second = [(f"k{rng.randrange(5)}", -i) for i in range(40)]
    ts1 = [rng.randrange(100) for _ in first]
    ts2 = [rng.randrange(100) for _ in second]
    streaming = co_group_operator(COUNT, TumblingEventTimeWindows.of(25))
    expected = run_with_backlog(streaming, first, second, (ts1, ts2), sorting=False)
    batch = co_group_operator(COUNT, TumblingEventTimeWindows.of(25))
    out = run_with_backlog(batch, first, second, (ts1, ts2))
    # the same watermarks between the same records: the same windows, the same late records dropped
    assert sorted(out.records) == sorted(expected.records)
    assert len(out.records) > 4
    assert batch.ctx.metrics["num_late_records_dropped"] == streaming.ctx.metrics["num_late_records_dropped"] > 0


def test_after_the_backlog_live_records_join_the_installed_state() -> None:
    """A backlog that ends before the input does (a hybrid source): the sorted backlog becomes
    window state and later records of the same keys meet it at end of input."""
    operator = co_group_operator(COUNT)
    out = setup(operator, PolarsBatchEngine())
    operator.process_record_attributes(RecordAttributes(True), 0)
    operator.process_record_attributes(RecordAttributes(True), 1)
    history = [("a", 1), ("b", 2)]
    push(operator, 0, history)
    push(operator, 1, [("a", 10)])
    operator.process_watermark(Watermark(50), 0)
    operator.process_watermark(Watermark(50), 1)
    operator.process_record_attributes(RecordAttributes(False), 0)
    assert out.values == []
    operator.process_record_attributes(RecordAttributes(False), 1)
    assert out.values == [] and Watermark(50) in out.events
    live = [("a", 3), ("c", 4)]
    push(operator, 0, live)
    push(operator, 1, [("c", 40)])
    end(operator)
    assert set(out.values) == oracle(history + live, [("a", 10), ("c", 40)])


def test_without_a_batch_engine_backlog_runs_record_by_record() -> None:
    operator = co_group_operator(COUNT)
    out = setup(operator, None)
    operator.process_record_attributes(RecordAttributes(True), 0)
    push(operator, 0, [("a", 1)])
    assert operator.ctx.metrics.get("backlog_records", 0) == 0 and not operator.is_buffering_backlog
    operator.process_record_attributes(RecordAttributes(False), 0)
    end(operator)
    assert out.values == [("a", 1, 0, 1)]


def test_a_backlog_larger_than_the_memory_budget_spills_and_gives_the_same_result(tmp_path: Any) -> None:
    rng = random.Random(5)
    first = [(rng.randrange(30), rng.randrange(10)) for _ in range(300)]
    second = [(rng.randrange(40), rng.randrange(10)) for _ in range(200)]
    for vectorized in (False, True):
        operator = co_group_operator(FrameCount() if vectorized else COUNT, vectorized=vectorized)
        out = setup(operator, PolarsBatchEngine(), sort_memory_budget=16, spill_dir=str(tmp_path))
        for index in (0, 1):
            operator.process_record_attributes(RecordAttributes(True), index)
        for i in range(0, 300, 10):
            push(operator, 0, first[i:i + 10])
            push(operator, 1, second[i:i + 10])
        assert operator.ctx.metrics["spilled_bytes"] > 0 and not out.values
        for index in (0, 1):
            operator.process_watermark(MAX_WATERMARK, index)
            operator.process_record_attributes(RecordAttributes(False), index)
            operator.end_input(index)
        assert sorted(out.values) == sorted(oracle(first, second))
        assert operator.ctx.metrics["backlog_records"] == 500
    assert not list(tmp_path.iterdir()), "the spill directories are removed after the switch"


def test_checkpoints_take_the_buffered_backlog_with_them() -> None:
    operator = co_group_operator(COUNT)
    setup(operator, PolarsBatchEngine())
    assert operator.is_checkpoint_blocked() is None and operator.snapshot_backlog() is None
    operator.process_record_attributes(RecordAttributes(True), 1)
    assert operator.is_checkpoint_blocked() is None
    assert len(operator.snapshot_backlog()["buffers"]) == 2
    operator.process_record_attributes(RecordAttributes(False), 1)
    assert operator.is_checkpoint_blocked() is None and operator.snapshot_backlog() is None


def test_frames_of_records_with_different_fields() -> None:
    assert records_to_frame([{"a": 1}, {"a": 2, "b": 3}], None, None).columns == ["a", "b"]
    assert records_to_frame([Row(a=1), Row(a=2, b=3)], None, None).columns == ["a", "b"]
    with pytest.raises(TypeError, match=r"same number of fields.*\(3,\) has 1"):
        records_to_frame([(1, 2), (3,)], None, None)
    typed = records_to_frame([(1, 2.5)], Types.TUPLE([Types.LONG(), Types.DOUBLE()]), None)
    assert typed.schema == {"f0": pl.Int64, "f1": pl.Float64}

"""SortBuffer: records come back grouped by key (first-seen key order), each key's records by
timestamp then arrival, whether they stayed in memory or were spilled in runs."""

from __future__ import annotations

import os
import stat
import threading
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream.columnar import rows_from_columns
from slipstream.datastream.typeinfo import Row, RowKind
from slipstream.errors import SlipstreamError
from slipstream.operators import sort_buffer
from slipstream.operators.sort_buffer import BufferOrder, KeyDictionary, SortBuffer, co_grouped
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine

ENGINE = PolarsBatchEngine()


def oracle(records: list[tuple[Any, int | None, Any]]) -> list[tuple[Any, int | None, Any]]:
    """Independent order: keys by first appearance, then (timestamp with None first, arrival)."""
    first_seen: dict[Any, int] = {}
    for key, _, _ in records:
        first_seen.setdefault(key, len(first_seen))
    indexed = list(enumerate(records))
    indexed.sort(key=lambda item: (first_seen[item[1][0]], item[1][1] is not None,
                                   item[1][1] if item[1][1] is not None else 0, item[0]))
    return [record for _, record in indexed]


def fill(buffer: SortBuffer, records: list[tuple[Any, int | None, Any]], batch: int = 3) -> None:
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        buffer.add([k for k, _, _ in chunk], [v for _, _, v in chunk], [t for _, t, _ in chunk])


def test_records_come_back_grouped_by_key_in_timestamp_then_arrival_order() -> None:
    records = [("b", 5, "b5"), ("a", 3, "a3"), ("b", 1, "b1"), ("a", 3, "a3-second"), ("c", None, "c"),
               ("a", 1, "a1"), ("b", 5, "b5-second")]
    with SortBuffer(ENGINE) as buffer:
        fill(buffer, records)
        assert len(buffer) == len(records)
        assert list(buffer.records()) == oracle(records)
        assert [(key, values) for key, _, values in buffer.groups()] == [
            ("b", ["b1", "b5", "b5-second"]), ("a", ["a1", "a3", "a3-second"]), ("c", ["c"])]
        assert buffer.spilled_bytes == 0 and buffer.num_runs == 0


def test_records_without_timestamps_keep_arrival_order_and_batches_carry_no_timestamps() -> None:
    with SortBuffer(ENGINE) as buffer:
        buffer.add([1, 2, 1, 2], ["x", "y", "z", "w"])
        batches = list(buffer.batches(size=3))
        assert [b.values for b in batches] == [["x", "z", "y"], ["w"]]
        assert all(b.timestamps is None for b in batches)


def test_a_tiny_budget_spills_runs_into_a_private_directory_and_merges_them(tmp_path: Any) -> None:
    records = [(i % 7, (i * 37) % 11, ("value", i)) for i in range(200)]
    metrics: dict[str, Any] = {}
    buffer = SortBuffer(ENGINE, memory_budget=10, spill_dir=str(tmp_path / "spill"), metrics=metrics)
    fill(buffer, records, batch=4)
    assert buffer.num_runs >= 10 and buffer.spilled_bytes > 0
    assert metrics["backlog_records"] == 200 and metrics["spilled_bytes"] == buffer.spilled_bytes
    (private,) = list((tmp_path / "spill").iterdir())
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
    assert list(buffer.records()) == oracle(records)
    assert list(buffer.records()) == oracle(records)  # reading back twice works
    buffer.close()
    assert not private.exists()


class Point(Row):
    """A subclass of Row, at module level so pickle finds it."""


def test_spilled_rows_come_back_as_the_same_rows_packed_or_not(tmp_path: Any) -> None:
    """Rows of a columnar source spill packed (names and kind once per chunk); rows that differ in
    names, kind or class beside them spill one by one. Either way each comes back equal, of its
    kind, with values of its own."""

    columnar = rows_from_columns(["key", "ts", "value"], [[i % 5 for i in range(300)], list(range(300)),
                                                          [i * 10 for i in range(300)]])
    deleted = Row(key=1, ts=0, value=-1)
    deleted.set_row_kind(RowKind.DELETE)
    odd = [Row(1, 2, 3), deleted, Point(2, 3, 4), ("tuple", 5)]
    records = [(row["key"], row["ts"], row) for row in columnar] + [(1, 7, value) for value in odd]
    buffer = SortBuffer(ENGINE, memory_budget=10, spill_dir=str(tmp_path / "spill"))
    fill(buffer, records, batch=100)
    assert buffer.num_runs >= 2
    back = list(buffer.records())
    assert back == oracle(records)
    rows = [value for _, _, value in back if type(value) is Row and value.get_row_kind() is RowKind.INSERT
            and value._fields is not None]
    assert len(rows) == 300 and all(row._fields == ["key", "ts", "value"] for row in rows)
    assert len({id(row._values) for row in rows}) == 300
    assert next(v for _, _, v in back if v == deleted).get_row_kind() is RowKind.DELETE
    assert type(next(v for _, _, v in back if v == Point(2, 3, 4))) is Point
    buffer.close()


def test_keys_that_are_equal_as_dict_keys_share_a_group() -> None:
    with SortBuffer(ENGINE) as buffer:
        buffer.add([1, 1.0, True, (1, "a")], ["int", "float", "bool", "tuple"], [3, 2, 1, 0])
        assert [(key, values) for key, _, values in buffer.groups()] == [
            (1, ["bool", "float", "int"]), ((1, "a"), ["tuple"])]


def test_an_unhashable_key_is_a_clear_error() -> None:
    with SortBuffer(ENGINE) as buffer, pytest.raises(TypeError, match="not hashable.*list"):
        buffer.add([[1, 2]], ["v"])


def test_an_unpicklable_record_names_the_operator_when_it_must_spill() -> None:
    with SortBuffer(ENGINE, memory_budget=1, name="my reduce") as buffer, \
            pytest.raises(SlipstreamError, match="my reduce.*cannot be pickled.*sort_memory_budget"):
        buffer.add(["k", "k"], [threading.Lock(), threading.Lock()], [1, 2])


def test_field_column_is_kept_only_for_plain_numbers() -> None:
    def field(v: Any) -> Any:
        return v[1]

    with SortBuffer(ENGINE, field=field) as ints:
        ints.add(["a", "b"], [("a", 1), ("b", 2)], [1, 2])
        table = ints.field_table()
        assert table is not None and table.column("field").to_pylist() == [1, 2]
    for bad in ([("a", 1), ("b", 2.5)], [("a", True)], [("a", float("nan"))], [("a", -0.0)],
                [("a", 2 ** 63)], [("a",)]):
        with SortBuffer(ENGINE, field=field) as buffer:
            buffer.add(["k"] * len(bad), bad)
            assert buffer.field_table() is None, bad


def test_field_table_and_values_at_span_memory_and_runs(tmp_path: Any) -> None:
    records = [(i % 3, i, (i % 3, i * 10)) for i in range(25)]
    with SortBuffer(ENGINE, memory_budget=4, spill_dir=str(tmp_path), field=lambda v: v[1]) as buffer:
        fill(buffer, records, batch=5)
        table = buffer.field_table()
        assert sorted(table.column("seq").to_pylist()) == list(range(25))
        by_seq = dict(zip(table.column("seq").to_pylist(), table.column("field").to_pylist()))
        assert by_seq == {i: i * 10 for i in range(25)}
        wanted = [0, 7, 24, 13]
        assert buffer.values_at(wanted) == {i: records[i][2] for i in wanted}


def test_co_grouped_walks_buffers_sharing_a_key_dictionary() -> None:
    keys = KeyDictionary()
    with SortBuffer(ENGINE, key_dictionary=keys) as left, \
            SortBuffer(ENGINE, key_dictionary=keys, memory_budget=1) as right:
        left.add(["x", "y", "x"], ["l-x2", "l-y", "l-x1"], [2, 0, 1])
        right.add(["z", "x"], ["r-z", "r-x"], [0, 0])
        got = [(key, [values for _, values in groups]) for key, groups in co_grouped(left, right)]
        assert got == [("x", [["l-x1", "l-x2"], ["r-x"]]), ("y", [["l-y"], []]), ("z", [[], ["r-z"]])]
    with pytest.raises(ValueError, match="share one KeyDictionary"):
        list(co_grouped(SortBuffer(ENGINE), SortBuffer(ENGINE)))


records_strategy = st.lists(st.tuples(st.sampled_from(["a", "b", "c", 1, 2, (3, "x")]),
                                      st.one_of(st.none(), st.integers(-5, 5)),
                                      st.integers()), max_size=80)


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, budget=st.integers(1, 30), batch=st.integers(1, 9))
def test_property_order_matches_a_sorted_oracle(records: list, budget: int, batch: int) -> None:
    with SortBuffer(ENGINE, memory_budget=budget) as buffer:
        fill(buffer, records, batch)
        assert list(buffer.records()) == oracle(records)
        assert [v for b in buffer.batches(size=batch) for v in b.values] == [v for _, _, v in oracle(records)]


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, budget=st.integers(1, 30), batch=st.integers(1, 9), block=st.integers(1, 12),
       arrival=st.booleans())
def test_property_key_runs_match_an_oracle_across_runs_and_blocks(records: list, budget: int, batch: int,
                                                                  block: int, arrival: bool) -> None:
    """Key runs read back a block of whole keys at a time (a key longer than a block whole), merging
    the spilled runs and the in-memory records; each record keeps its interval (its batch's number)."""
    order = BufferOrder.ARRIVAL if arrival else BufferOrder.TIME
    tagged = [(key, stamp, (value, index // batch)) for index, (key, stamp, value) in enumerate(records)]
    if arrival:
        first_seen = {key: rank for rank, key in reversed(list(enumerate(key for key, _, _ in tagged)))}
        expected = sorted(tagged, key=lambda record: first_seen[record[0]])  # stable: arrival within a key
    else:
        expected = oracle(tagged)
    runs: list[tuple[Any, list[int], list[Any], list[Any]]] = []
    for key, stamp, value in expected:
        if not runs or runs[-1][0] != key:
            runs.append((key, [], [], []))
        runs[-1][1].append(value[1])
        runs[-1][2].append(stamp)
        runs[-1][3].append(value)
    with SortBuffer(ENGINE, memory_budget=budget, order=order) as buffer, \
            mock.patch.object(sort_buffer, "KEY_RUN_BLOCK", block):
        for start in range(0, len(tagged), batch):
            chunk = tagged[start:start + batch]
            buffer.add([k for k, _, _ in chunk], [v for _, _, v in chunk], [t for _, t, _ in chunk],
                       interval=start // batch)
        assert list(buffer.key_runs()) == runs
        assert [(key, values) for key, _, values in buffer.groups()] == [(key, values) for key, _, _, values in runs]

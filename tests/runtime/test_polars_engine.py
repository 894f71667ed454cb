"""PolarsBatchEngine against the BatchEngine protocol: Arrow in, Arrow out, checked with plain Python."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.operators.batch_engine import Aggregation, BatchEngine
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine

ENGINE = PolarsBatchEngine()


def test_is_a_batch_engine_with_a_name() -> None:
    assert isinstance(ENGINE, BatchEngine) and ENGINE.name == "polars"


def test_sort_puts_nulls_first_keeps_every_column_and_schema() -> None:
    table = pa.table({"k": pa.array([2, 1, 2, 1], pa.int64()), "ts": pa.array([5, None, 1, 3], pa.int64()),
                      "blob": pa.array([b"a", b"b", b"c", b"d"], pa.large_binary())})
    result = ENGINE.sort(table, ["k", "ts"])
    assert result.schema == table.schema
    assert result.to_pydict() == {"k": [1, 1, 2, 2], "ts": [None, 3, 1, 5], "blob": [b"b", b"d", b"c", b"a"]}
    descending = ENGINE.sort(table, ["k", "ts"], descending=[True, False])
    assert descending.column("ts").to_pylist() == [1, 5, None, 3]


def test_sort_of_empty_and_single_row_tables() -> None:
    empty = pa.table({"k": pa.array([], pa.int64())})
    assert ENGINE.sort(empty, ["k"]).num_rows == 0
    one = pa.table({"k": [7]})
    assert ENGINE.sort(one, ["k"]).to_pydict() == {"k": [7]}


def test_group_aggregate_orders_groups_by_key_and_takes_first_last_in_order_by() -> None:
    table = pa.table({"k": [2, 1, 2, 1, 2], "ts": pa.array([3, 1, None, 2, 1], pa.int64()),
                      "x": [10, 20, 30, 40, 50], "seq": [0, 1, 2, 3, 4]})
    result = ENGINE.group_aggregate(
        table, ["k"],
        [Aggregation("sum", "x", "sum"), Aggregation("min", "x", "min"), Aggregation("max", "ts", "max"),
         Aggregation("count", "ts", "count"), Aggregation("first", "x", "first"),
         Aggregation("last", "x", "last")],
        order_by=["ts", "seq"])
    assert result.to_pylist() == [
        {"k": 1, "sum": 60, "min": 20, "max": 2, "count": 2, "first": 20, "last": 40},
        {"k": 2, "sum": 90, "min": 10, "max": 3, "count": 2, "first": 30, "last": 10},
    ]
    assert result.schema.field("count").type == pa.int64()


def test_group_aggregate_refuses_unknown_ops_and_unordered_first() -> None:
    table = pa.table({"k": [1], "x": [1]})
    with pytest.raises(ValueError, match="unknown aggregation"):
        ENGINE.group_aggregate(table, ["k"], [Aggregation("median", "x", "m")])
    with pytest.raises(ValueError, match="needs order_by"):
        ENGINE.group_aggregate(table, ["k"], [Aggregation("first", "x", "f")])


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 4), st.integers(-100, 100), st.integers(-5, 5)), max_size=60),
       descending=st.booleans())
def test_property_matches_plain_python(rows: list[tuple[int, int, int]], descending: bool) -> None:
    table = pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "x": pa.array([r[1] for r in rows], pa.int64()),
                      "o": pa.array([r[2] for r in rows], pa.int64()), "seq": pa.array(range(len(rows)), pa.int64())})
    ordered = ENGINE.sort(table, ["k", "o", "seq"], descending=[False, descending, False])
    sign = -1 if descending else 1
    expected = sorted(range(len(rows)), key=lambda i: (rows[i][0], sign * rows[i][2], i))
    assert ordered.column("seq").to_pylist() == expected
    groups: dict[int, list[int]] = defaultdict(list)
    for i in expected:
        groups[rows[i][0]].append(i)
    result = ENGINE.group_aggregate(
        table, ["k"], [Aggregation("sum", "x", "s"), Aggregation("max", "x", "mx"),
                       Aggregation("first", "seq", "f"), Aggregation("last", "seq", "l")],
        order_by=["o", "seq"], descending=[descending, False])
    want: list[dict[str, Any]] = [
        {"k": k, "s": sum(rows[i][1] for i in members), "mx": max(rows[i][1] for i in members),
         "f": members[0], "l": members[-1]} for k, members in sorted(groups.items())]
    assert result.to_pylist() == want

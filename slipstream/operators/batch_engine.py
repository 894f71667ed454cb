"""The ``BatchEngine`` protocol: the columnar work a sorting operator hands off at the backlog switch.

An operator with ``has_internal_sorter`` buffers its backlog (see
:mod:`slipstream.operators.sort_buffer`) and, when the backlog ends, runs it as
sorted batch work on the engine it was given (``OperatorContext.batch_engine``).
The protocol is engine-neutral: tables go in and come out as Arrow, so polars
(the embedded default, :mod:`slipstream.runtime.batch.polars_engine`) and Spark
implement the same calls and must return the same tables.

The protocol holds only what the operators use:

* :meth:`BatchEngine.sort` — order a table by columns (the sort buffer orders
  ``(key, timestamp, seq)`` and merges spilled runs with it);
* :meth:`BatchEngine.group_aggregate` — the built-in aggregations per key
  (the vectorised path of keyed ``sum``/``min``/``max``/``min_by``/``max_by``).

Both results are deterministic tables, never relying on an engine's incidental
row order: ``sort`` sorts by columns that together are unique in every use here, and
``group_aggregate`` returns its groups ordered by the key columns and takes
``first``/``last`` in an explicit ``order_by``. An engine that needs more (a join for a
vectorised co-group) adds a method here and to every engine, with a differential test.

Example (any engine):

>>> import pyarrow as pa
>>> from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
>>> engine = PolarsBatchEngine()
>>> table = pa.table({"key": [2, 1, 2], "ts": [5, 9, 1], "x": [10, 20, 30]})
>>> engine.sort(table, ["key", "ts"]).column("x").to_pylist()
[20, 30, 10]
>>> out = engine.group_aggregate(table, ["key"], [Aggregation("sum", "x", "total"),
...                                              Aggregation("first", "x", "earliest")],
...                              order_by=["ts"])
>>> out.to_pylist()
[{'key': 1, 'total': 20, 'earliest': 20}, {'key': 2, 'total': 40, 'earliest': 30}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa

AGGREGATION_OPS = frozenset({"sum", "min", "max", "count", "first", "last"})
"""What :meth:`BatchEngine.group_aggregate` computes: ``count`` counts non-null values;
``first``/``last`` take the value of the first/last row of a group in ``order_by`` order."""


class Aggregation(NamedTuple):
    """One output column of :meth:`BatchEngine.group_aggregate`: ``op`` over ``column``, named ``name``."""

    op: str
    column: str
    name: str


@runtime_checkable
class BatchEngine(Protocol):
    """Runs the columnar part of backlog work. Arrow tables in, Arrow tables out.

    Implementations must agree exactly: the same input gives the same output table
    (same rows, same order, same values) on every engine.
    """

    name: str
    """A short name shown in plans and metrics ("polars", "spark")."""

    def sort(self, table: pa.Table, by: Sequence[str], *,
             descending: Sequence[bool] | None = None) -> pa.Table:
        """``table`` sorted by the columns ``by`` (each ascending unless ``descending`` says so).

        Nulls sort first, in either direction. Rows equal in every ``by`` column keep no
        guaranteed order, so callers include a unique column (an arrival sequence) in ``by``.
        Every column of ``table`` is carried along.
        """
        ...

    def group_aggregate(self, table: pa.Table, keys: Sequence[str], aggregations: Sequence[Aggregation], *,
                        order_by: Sequence[str] = (),
                        descending: Sequence[bool] | None = None) -> pa.Table:
        """One row per distinct combination of ``keys``, ordered by ``keys`` ascending.

        The result has the ``keys`` columns, then one column per aggregation, named by it.
        ``sum``/``min``/``max`` skip nulls (null when a group has only nulls); ``count``
        counts non-null values (int64); ``first``/``last`` are the values of the group's first and
        last rows when the group is ordered by ``order_by`` (with ``descending`` as in
        :meth:`sort`); they require ``order_by``, which should make rows unique.
        """
        ...


def check_aggregations(aggregations: Sequence[Aggregation], order_by: Sequence[str]) -> None:
    """Raise ValueError for an unknown op, or ``first``/``last`` without ``order_by`` (engines share this)."""
    for aggregation in aggregations:
        if aggregation.op not in AGGREGATION_OPS:
            raise ValueError(f"unknown aggregation {aggregation.op!r}; expected one of "
                             f"{', '.join(sorted(AGGREGATION_OPS))}")
        if aggregation.op in ("first", "last") and not order_by:
            raise ValueError(f"aggregation {aggregation.op!r} of column {aggregation.column!r} needs "
                             "order_by: engines keep no row order of their own")

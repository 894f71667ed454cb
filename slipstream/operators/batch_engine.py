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

* :meth:`BatchEngine.co_group` — a per-key Python function over both sides of every key
  (``co_group``/``join`` with EndOfStreamWindows), records travelling pickled;
* :meth:`BatchEngine.co_group_vectorized` — a function over polars DataFrames of many keys
  (the vectorised co-group), which an engine may call once or once per partition of keys.

Both results are deterministic tables, never relying on an engine's incidental
row order: ``sort`` sorts by columns that together are unique in every use here, and
``group_aggregate`` returns its groups ordered by the key columns and takes
``first``/``last`` in an explicit ``order_by``; ``co_group`` returns its outputs ordered by
key id, then in the order the function yielded them. The one exception is
``co_group_vectorized``: the same rows on every engine, in an order the engine chooses
(a vectorised function whose row order matters sorts its result). An engine that needs more
adds a method here and to every engine, with a differential test (``tests/spark``).

``in_process`` says whether an engine runs functions in this process (polars) or ships them
to workers (Spark): an operator whose own in-process path is faster than going through the
engine (the co-group's per-key walk over its sort buffers) keeps it for in-process engines.

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

import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import pyarrow as pa

from slipstream.errors import SlipstreamError

if TYPE_CHECKING:
    import polars as pl

CO_GROUP_COLUMNS = ("key", "ts", "seq", "value")
"""The columns of each side of :meth:`BatchEngine.co_group`."""

KEY_COLUMN = "__slipstream_key"
"""The key-id column of each side of :meth:`BatchEngine.co_group_vectorized` (dropped before the call)."""

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

    in_process: bool
    """Whether functions given to :meth:`co_group`/:meth:`co_group_vectorized` run in this process."""

    def co_group(self, first: pa.Table, second: pa.Table,
                 function: Callable[[list[Any], list[Any]], Iterable[Any] | None]) -> pa.Table:
        """Call ``function(first_values, second_values)`` once per key present on either side.

        ``first`` and ``second`` have the columns of :data:`CO_GROUP_COLUMNS`: ``key`` (an int64
        key id), ``ts`` (int64, null for records without a timestamp), ``seq`` (int64, unique
        per side) and ``value`` (the record, pickled). Each side's values of a key are in
        ``(ts, seq)`` order, records without a timestamp first; a side without records of the
        key gives an empty list. The function may run in another process (it is pickled).

        Returns ``key`` (int64) and ``value`` (large_binary: each output the function yielded,
        pickled), ordered by key id, then in the order the function yielded them. When the
        function raises (or yields something that cannot be pickled) for a key, raises
        :class:`CoGroupFunctionError` naming that key id.
        """
        ...

    def co_group_vectorized(self, first: pa.Table, second: pa.Table,
                            function: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame | None], *,
                            key: str = KEY_COLUMN) -> pa.Table | None:
        """Call ``function(first_frame, second_frame)`` over polars DataFrames of many keys.

        ``first`` and ``second`` hold the records as columns, plus a ``key`` column (the key id,
        int64) that decides which records must meet in one call and is dropped before the call.
        An engine may call the function once with everything (polars) or once per partition of
        keys (Spark), each key's records of both sides in one call. Returns the concatenation of
        the DataFrames returned (as Arrow), or None when every call returned None. Raises
        :class:`CoGroupFunctionError` (naming the key ids of the failed call) when it raises or
        returns something else than a polars DataFrame or None.
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


class CoGroupFunctionError(SlipstreamError):
    """A co-group function failed inside an engine: ``key_ids`` of the failed call, and ``cause``.

    The operator turns it into a :class:`~slipstream.errors.UserFunctionError` naming the keys.
    ``cause`` is the original exception when it could be brought back from a worker, else a
    ``RuntimeError`` carrying its type, message and the worker's traceback.
    """

    def __init__(self, key_ids: list[int], cause: BaseException) -> None:
        self.key_ids = list(key_ids)
        self.cause = cause
        super().__init__(f"co-group function failed for key id(s) {self.key_ids[:5]}: "
                         f"{type(cause).__name__}: {cause}")


def empty_co_group_result() -> pa.Table:
    """The result of :meth:`BatchEngine.co_group` with no outputs."""
    return pa.table({"key": pa.array([], pa.int64()), "value": pa.array([], pa.large_binary())})


def sorted_sides(table: pa.Table) -> pa.Table:
    """A :meth:`BatchEngine.co_group` side ordered by ``(key, ts, seq)``, timestamps null first."""
    if table.num_rows < 2:
        return table
    import warnings

    import pyarrow.compute as pc
    with warnings.catch_warnings():  # null_placement moves into the sort keys in newer pyarrow
        warnings.simplefilter("ignore", FutureWarning)
        order = pc.sort_indices(table.select(["key", "ts", "seq"]),
                                sort_keys=[("key", "ascending"), ("ts", "ascending"), ("seq", "ascending")],
                                null_placement="at_start")
    return table.take(order)


def run_co_group(first: pa.Table, second: pa.Table, function: Callable[[list[Any], list[Any]], Iterable[Any] | None]
                 ) -> tuple[pa.Table, CoGroupFunctionError | None]:
    """:meth:`BatchEngine.co_group` in this process, over any subset of keys (engines call it per
    partition). Returns the outputs so far and, when the function failed for a key, the error
    (not raised, so that a worker can send it back)."""
    first, second = sorted_sides(first), sorted_sides(second)
    sides = []
    for table in (first, second):
        keys = table.column("key").to_pylist()
        sides.append((keys, table.column("value").to_pylist()))
    loads, dumps = pickle.loads, pickle.dumps
    out_keys: list[int] = []
    out_values: list[bytes] = []
    positions = [0, 0]
    lengths = [len(sides[0][0]), len(sides[1][0])]
    while positions[0] < lengths[0] or positions[1] < lengths[1]:
        heads = [sides[i][0][positions[i]] for i in (0, 1) if positions[i] < lengths[i]]
        key_id = min(heads)
        groups: list[list[Any]] = []
        for index in (0, 1):
            keys, blobs = sides[index]
            start = position = positions[index]
            while position < lengths[index] and keys[position] == key_id:
                position += 1
            positions[index] = position
            groups.append([loads(blob) for blob in blobs[start:position]])
        try:
            results = function(groups[0], groups[1])
            if results is not None:
                for result in results:
                    out_values.append(dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
                    out_keys.append(key_id)
        except Exception as exc:  # noqa: BLE001 - handed back, raised by the caller naming the key
            return _co_group_table(out_keys, out_values), CoGroupFunctionError([key_id], exc)
    return _co_group_table(out_keys, out_values), None


def _co_group_table(keys: list[int], values: list[bytes]) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.int64()), "value": pa.array(values, pa.large_binary())})


def run_co_group_vectorized(first: pa.Table, second: pa.Table,
                            function: Callable[[Any, Any], Any], key: str = KEY_COLUMN
                            ) -> tuple[pa.Table | None, CoGroupFunctionError | None]:
    """:meth:`BatchEngine.co_group_vectorized` as one call in this process (engines call it per
    partition); returns the result, or the error (not raised, so that a worker can send it back)."""
    import polars as pl
    key_ids = sorted(set(first.column(key).to_pylist()) | set(second.column(key).to_pylist()))
    try:
        frames = [pl.from_arrow(table.drop_columns([key])) for table in (first, second)]
        result = function(*frames)
        if result is None:
            return None, None
        if not isinstance(result, pl.DataFrame):
            raise TypeError(f"a vectorised co-group function must return a polars DataFrame (or None), "
                            f"got {type(result).__name__}: {result!r}"[:300])
        return result.to_arrow(), None
    except Exception as exc:  # noqa: BLE001 - handed back, raised by the caller naming the keys
        return None, CoGroupFunctionError(key_ids, exc)

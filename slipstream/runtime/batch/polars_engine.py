"""``PolarsBatchEngine``: the embedded default :class:`~slipstream.operators.batch_engine.BatchEngine`.

Tables cross the boundary as Arrow (``pl.from_arrow`` / ``DataFrame.to_arrow``, both
zero-copy for the fixed-width columns sorting operators use). polars is imported on
first use, so jobs that never sort a backlog do not pay for importing it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from slipstream.operators.batch_engine import (
    KEY_COLUMN,
    Aggregation,
    check_aggregations,
    run_co_group,
    run_co_group_vectorized,
)


def _polars() -> Any:
    import polars
    return polars


class PolarsBatchEngine:
    """Sorts and aggregates Arrow tables with polars, in this process."""

    name = "polars"
    in_process = True

    def __repr__(self) -> str:
        return "PolarsBatchEngine()"

    def sort(self, table: pa.Table, by: Sequence[str], *,
             descending: Sequence[bool] | None = None) -> pa.Table:
        pl = _polars()
        frame = pl.from_arrow(table)
        if not by or frame.height < 2:
            return table
        flags = list(descending) if descending is not None else [False] * len(by)
        ordered = frame.sort(list(by), descending=flags, nulls_last=False, maintain_order=True)
        return _to_arrow(ordered, table)

    def group_aggregate(self, table: pa.Table, keys: Sequence[str], aggregations: Sequence[Aggregation], *,
                        order_by: Sequence[str] = (),
                        descending: Sequence[bool] | None = None) -> pa.Table:
        check_aggregations(aggregations, order_by)
        pl = _polars()
        frame = pl.from_arrow(table)
        flags = list(descending) if descending is not None else [False] * len(order_by)
        expressions = []
        for aggregation in aggregations:
            column = pl.col(aggregation.column)
            if aggregation.op in ("first", "last"):
                column = column.sort_by(list(order_by), descending=flags, nulls_last=False,
                                        maintain_order=True)
                expression = column.first() if aggregation.op == "first" else column.last()
            elif aggregation.op == "count":
                expression = column.count().cast(pl.Int64)
            elif aggregation.op == "sum":  # null for a group of only nulls, as the protocol says
                expression = pl.when(column.count() > 0).then(column.sum())
            else:
                expression = getattr(column, aggregation.op)()
            expressions.append(expression.alias(aggregation.name))
        result = frame.group_by(list(keys)).agg(expressions).sort(list(keys), nulls_last=False)
        return result.to_arrow()

    def co_group(self, first: pa.Table, second: pa.Table, function: Any) -> pa.Table:
        result, error = run_co_group(first, second, function)
        if error is not None:
            raise error
        return result

    def co_group_vectorized(self, first: pa.Table, second: pa.Table, function: Any, *,
                            key: str = KEY_COLUMN) -> pa.Table | None:
        result, error = run_co_group_vectorized(first, second, function, key)
        if error is not None:
            raise error
        return result


def _to_arrow(frame: Any, like: pa.Table) -> pa.Table:
    """``frame`` as Arrow, with ``like``'s schema where polars changed a type (views, large types)."""
    result = frame.to_arrow()
    if result.schema != like.schema:
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            result = result.cast(like.schema)  # else keep polars' types
    return result

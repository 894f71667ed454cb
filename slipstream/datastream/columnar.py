"""Records kept as Arrow columns, turned into rows only when a Python function needs them.

Columnar sources (Parquet, Arrow tables) and vectorised operators pass Arrow record
batches along; the first operator that runs a per-record Python function asks for
``values`` and gets named :class:`Row` objects, built here in one place.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from slipstream.datastream.typeinfo import Row


def named_row(names: Sequence[str], values: Sequence[Any]) -> Row:
    """A ``Row`` with fields ``names`` in this order (``Row(**kwargs)`` would sort them)."""
    row = Row(*values)
    row.set_field_names(list(names))
    return row


def rows_from_arrow(data: pa.RecordBatch | pa.Table) -> list[Row]:
    """The rows of an Arrow batch or table, as named rows, in order."""
    names = data.schema.names
    if not names:
        return [named_row([], []) for _ in range(data.num_rows)]
    columns = [column.to_pylist() for column in data.columns]
    return [named_row(names, values) for values in zip(*columns)]

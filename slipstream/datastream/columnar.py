"""Records kept as Arrow columns, turned into rows only when a Python function needs them.

Columnar sources (Parquet, Arrow tables) and vectorised operators pass Arrow record
batches along; the first operator that runs a per-record Python function asks for
``values`` and gets named :class:`Row` objects, built here in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, eq, is_
from typing import Any, cast

import pyarrow as pa

from slipstream.datastream.typeinfo import Row, RowKind


def named_row(names: Sequence[str], values: Sequence[Any]) -> Row:
    """A ``Row`` with fields ``names`` in this order (``Row(**kwargs)`` would sort them)."""
    row = Row(*values)
    row.set_field_names(list(names))
    return row


def column_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """A column's values as Python objects, as ``to_pylist()`` gives them.

    Integer and floating columns without nulls go through numpy's ``tolist`` (same
    values, several times faster); everything else through ``to_pylist``.
    """
    kind = column.type
    if column.null_count == 0 and (pa.types.is_integer(kind) or
                                   (pa.types.is_floating(kind) and not pa.types.is_float16(kind))):
        return cast("list[Any]", column.to_numpy().tolist())
    return cast("list[Any]", column.to_pylist())


def rows_from_columns(names: Sequence[str], columns: Sequence[list[Any]]) -> list[Row]:
    """Named rows of parallel Python ``columns`` (one list per field of ``names``).

    The hot loop of every columnar-to-row conversion: rows share one list of field
    names (a row's names are replaced, never changed in place) and skip ``Row.__init__``.
    """
    return rows_of_columns(list(names), RowKind.INSERT, columns)


def rows_of_columns(fields: list[str] | None, row_kind: RowKind, columns: Sequence[Sequence[Any]]) -> list[Row]:
    """Rows of one kind sharing the names ``fields`` (None: unnamed), from parallel columns of values;
    also what :class:`PackedRows` unpickles to."""
    if not columns:
        return []
    rows: list[Row] = list(map(Row.__new__, repeat(Row, min(map(len, columns)))))  # made in C, filled below
    for row, values in zip(rows, map(list, zip(*columns))):
        row._values = values
        row._fields = fields
        row._row_kind = row_kind
    return rows


class PackedRows:
    """A list of rows of one kind, one width and equal names, in the form pickle writes
    fastest: the names and kind once, then the values as columns, with no Python call per row
    (pickling a row calls ``Row.__reduce__``: two thirds of the cost); it unpickles as the list of rows."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        first = self.rows[0]
        return rows_of_columns, (first._fields, first._row_kind, list(zip(*map(_VALUES, self.rows))))


_VALUES, _FIELDS, _KIND = attrgetter("_values"), attrgetter("_fields"), attrgetter("_row_kind")


def packed_rows(values: list[Any]) -> list[Any] | PackedRows:
    """``values`` to pickle: as :class:`PackedRows` when they are all rows (not a subclass) of one kind
    and one width (at least one field) with equal names — as a columnar source makes them — else as
    they are (checked in C). Unpickled, they share the first row's list of names."""
    if not values or type(values[0]) is not Row or not values[0]._values:
        return values
    first = values[0]
    if all(map(is_, map(type, values), repeat(Row))) and all(map(eq, map(_FIELDS, values), repeat(first._fields))) \
            and all(map(is_, map(_KIND, values), repeat(first._row_kind))) \
            and len(set(map(len, map(_VALUES, values)))) == 1:
        return PackedRows(values)
    return values


def rows_from_arrow(data: pa.RecordBatch | pa.Table) -> list[Row]:
    """The rows of an Arrow batch or table, as named rows, in order."""
    names = data.schema.names
    if not names:
        return [named_row([], []) for _ in range(data.num_rows)]
    return rows_from_columns(names, [column_values(column) for column in data.columns])


def unfit_field(schema: pa.Schema, row: Any) -> str | None:
    """Why ``row`` (a mapping by field name) does not fit ``schema``, naming the first field at
    fault; None when it fits. Used to find the record behind a failed bulk conversion."""
    for field in schema:
        value = row.get(field.name)
        if value is None and not field.nullable:
            return f"field {field.name!r} is missing or null, and the schema does not allow nulls"
        try:
            pa.array([value], type=field.type)
        except (pa.ArrowException, TypeError, ValueError) as error:
            return f"field {field.name!r} = {value!r} does not fit {field.type}: {error}"
    return None

"""DataFrames for a vectorised co-group function, and rows from the DataFrame it returns.

A :class:`~slipstream.datastream.co_group.VectorizedCoGroupFunction` gets each input as a polars
DataFrame (typed by the input's declared row or tuple type, else inferred) and returns one; these
conversions serve the co-group operator's streaming path and its batch work alike.
"""

from __future__ import annotations

from typing import Any

from slipstream.datastream.typeinfo import Row, RowTypeInfo, TupleTypeInfo


def records_to_frame(records: list[Any], type_info: Any, empty_like: Any) -> Any:
    """A polars DataFrame of ``records``: typed by ``type_info`` (a row or tuple type) when
    given, else inferred — tuples and unnamed Rows as ``f0``, ``f1``, …, dicts and named
    Rows by field name, scalars as ``f0``. An empty list gives ``empty_like`` (or no columns).

    Records are transposed into columns first, which is much faster than converting them
    one by one.
    """
    import polars as pl
    import pyarrow as pa
    if isinstance(type_info, (RowTypeInfo, TupleTypeInfo)):
        names = type_info.get_field_names() if isinstance(type_info, RowTypeInfo) else \
            [f"f{i}" for i in range(len(type_info.get_field_types()))]
        types = [t.to_arrow_type() for t in type_info.get_field_types()]
        try:
            columns = _columns(records, names)
            if columns is not None:
                return pl.from_arrow(pa.table({name: pa.array(column, type=arrow_type)
                                               for name, column, arrow_type in zip(names, columns, types)}))
        except (pa.ArrowException, TypeError, ValueError, KeyError, IndexError):
            pass  # a value arrow cannot take as it is: convert record by record, which names it
        return pl.from_arrow(pa.Table.from_struct_array(type_info.to_arrow_array(records)))
    if not records:
        return empty_like if empty_like is not None else pl.DataFrame()
    sample = records[0]
    fields = sample._fields if isinstance(sample, Row) else None
    if isinstance(sample, dict):
        names = list(sample)
    elif fields is not None:
        names = list(fields)
    elif isinstance(sample, (tuple, list, Row)):
        names = [f"f{i}" for i in range(len(sample))]
    else:
        return pl.DataFrame({"f0": records})
    columns = _columns(records, names)
    if columns is None:
        if isinstance(sample, dict) or (isinstance(sample, Row) and sample._fields is not None):
            # dicts or named rows with different fields: polars lines them up by name
            rows = [record.as_dict() if isinstance(record, Row) else record for record in records]
            return pl.DataFrame(rows, infer_schema_length=None)
        odd = next(record for record in records if len(record) != len(names))
        raise TypeError(f"records of one input must have the same number of fields to become a "
                        f"DataFrame: {sample!r} has {len(names)}, {odd!r} has {len(odd)}")
    return pl.DataFrame({name: list(column) for name, column in zip(names, columns)})


def _columns(records: list[Any], names: list[str]) -> list[Any] | None:
    """The records' fields as columns, or None when the records do not all have ``names``."""
    if not records:
        return [[] for _ in names]
    sample = records[0]
    if isinstance(sample, dict) or (isinstance(sample, Row) and sample._fields is not None):
        width = len(names)
        if any(len(record) != width for record in records):
            return None
        try:
            return [[record[name] for record in records] for name in names]
        except (KeyError, TypeError, IndexError):
            return None
    columns = list(zip(*records))
    if len(columns) != len(names) or any(len(record) != len(names) for record in records):
        return None
    return columns


def frame_rows(frame: Any, like: Any) -> list[Any]:
    """The rows of the DataFrame a vectorised function returned, shaped like the record ``like``:
    named Rows for Rows, dicts for dicts, tuples otherwise. None means no rows."""
    import polars as pl
    if frame is None:
        return []
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"a vectorised co-group function must return a polars DataFrame (or None), "
                        f"got {type(frame).__name__}: {frame!r}"[:300])
    if isinstance(like, dict):
        return frame.to_dicts()
    if isinstance(like, Row):
        columns = frame.columns
        rows = []
        for values in frame.iter_rows():
            row = Row(*values)
            row.set_field_names(columns)
            rows.append(row)
        return rows
    return frame.rows()


__all__ = ["frame_rows", "records_to_frame"]

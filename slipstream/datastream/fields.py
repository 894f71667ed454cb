"""Reading and replacing one field of a record, for the built-in aggregations (``sum(1)``, ``max_by('x')``).

A field is a position (tuples, lists, rows) or a name (dicts, rows, objects with
attributes). A scalar record is its own field 0.
"""

from __future__ import annotations

from typing import Any


def _is_scalar(record: Any) -> bool:
    return isinstance(record, (int, float, complex)) and not isinstance(record, bool)


def get_field(record: Any, field: int | str) -> Any:
    """The value of ``field`` in ``record``; raises KeyError/IndexError/TypeError naming the field."""
    if _is_scalar(record):
        if field in (0, None):
            return record
        raise TypeError(f"a scalar record has only field 0, asked for field {field!r}")
    if isinstance(field, int):
        return record[field]
    if isinstance(record, dict):
        return record[field]
    if hasattr(record, "as_dict") and not hasattr(type(record), field):
        return record.as_dict()[field]
    try:
        return getattr(record, field)
    except AttributeError:
        raise KeyError(f"record has no field {field!r}") from None


def replace_field(record: Any, field: int | str, value: Any) -> Any:
    """A copy of ``record`` whose ``field`` is ``value`` (records are never changed in place)."""
    if _is_scalar(record):
        return value
    if isinstance(record, dict):
        copy = dict(record)
        copy[field] = value
        return copy
    if isinstance(record, list):
        copy = list(record)
        copy[field] = value
        return copy
    if isinstance(record, tuple) and isinstance(field, int):
        items = list(record)
        items[field] = value
        rebuilt = _rebuild_tuple(record, items)
        return rebuilt
    if hasattr(record, "as_dict"):
        values = record.as_dict()
        values[field] = value
        return _rebuild_tuple(record, list(values.values()))
    raise TypeError(f"cannot set field {field!r} of a {type(record).__name__} record")


def _rebuild_tuple(record: tuple, items: list) -> Any:
    """Rebuild a tuple, named tuple or row of the same class with ``items``."""
    cls = type(record)
    if cls is tuple:
        return tuple(items)
    if hasattr(record, "_fields") and hasattr(cls, "_make"):
        return cls._make(items)
    copy = cls(*items)
    names = getattr(record, "_fields", None)
    if names and hasattr(copy, "set_field_names"):
        copy.set_field_names(list(names))
    if hasattr(record, "get_row_kind") and hasattr(copy, "set_row_kind"):
        copy.set_row_kind(record.get_row_kind())
    return copy

"""Reading and replacing one field of a record, for the built-in aggregations (``sum(1)``, ``max_by('x')``).

A field is a position (tuples, lists, rows) or a name (dicts, rows, objects with
attributes). A scalar record is its own field 0.
"""

from __future__ import annotations

import copy
from typing import Any

from slipstream.datastream.typeinfo import Row


def _is_scalar(record: Any) -> bool:
    return isinstance(record, (int, float, complex)) and not isinstance(record, bool)


def get_field(record: Any, field: int | str) -> Any:
    """The value of ``field`` in ``record``; raises KeyError/IndexError/TypeError naming the field."""
    if type(record) is tuple and type(field) is int:  # the common record: no type tests below
        return record[field]
    if _is_scalar(record):
        if field in (0, None):
            return record
        raise TypeError(f"a scalar record has only field 0, asked for field {field!r}")
    if isinstance(field, int) or isinstance(record, (dict, Row)):
        return record[field]
    try:
        return getattr(record, field)
    except AttributeError:
        raise KeyError(f"record has no field {field!r}") from None


def replace_field(record: Any, field: int | str, value: Any) -> Any:
    """A copy of ``record`` whose ``field`` is ``value`` (records are never changed in place)."""
    if type(record) is tuple and type(field) is int and 0 <= field < len(record):  # the common record, by slices
        return (*record[:field], value, *record[field + 1:])
    if _is_scalar(record):
        return value
    if isinstance(record, (dict, list, Row)):
        changed: Any = copy.copy(record)
        changed[field] = value
        return changed
    if isinstance(record, tuple) and isinstance(field, int):
        items = list(record)
        items[field] = value
        return _rebuild_tuple(record, items)
    raise TypeError(f"cannot set field {field!r} of a {type(record).__name__} record")


def _rebuild_tuple(record: tuple[Any, ...], items: list[Any]) -> Any:
    """Rebuild a tuple or named tuple of the same class with ``items``."""
    cls = type(record)
    if hasattr(cls, "_make"):
        return cls._make(items)
    return cls(items)


class FieldKey:
    """A key selector that reads one ``field`` of a record (what ``key_by(0)``/``where('f0')`` build).

    Unlike a lambda it says which field it reads, so a columnar operator can take the
    key column of an Arrow batch instead of building rows to call it.
    """

    __slots__ = ("field",)

    def __init__(self, field: int | str) -> None:
        self.field = field

    def __call__(self, record: Any) -> Any:
        return get_field(record, self.field)

    def __repr__(self) -> str:
        return f"FieldKey({self.field!r})"

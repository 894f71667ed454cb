"""Reading and replacing one field of a record, for the built-in aggregations (``sum(1)``, ``max_by('x')``),
and key selectors that read one.

A field is a position (tuples, lists, rows) or a name (dicts, rows, objects with
attributes). A scalar record is its own field 0.
"""

from __future__ import annotations

import copy
import dis
import inspect
import operator
import types
from collections.abc import Callable
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


_SUBSCRIPT = ["LOAD_FAST", "LOAD_CONST", "BINARY_SUBSCR", "RETURN_VALUE"]


def as_item_getter(function: Callable[..., Any], arguments: int = 1) -> Callable[..., Any]:
    """``operator.itemgetter(c)`` for a plain ``lambda r: r[c]`` (PyFlink's usual ``key_by(lambda x:
    x[0])``), else ``function`` itself. The same lookup with the same errors, done in C: it costs a
    third of the lambda's call, paid for every record by a hash edge and again by the keyed operator.
    With ``arguments=2`` the same for ``lambda r, _: r[c]`` (a timestamp assigner), whose getter takes
    the record alone. A lambda of any other form (a default, a closure's index, a slice) is left as it is."""
    if type(function) is not types.FunctionType or function.__defaults__ or function.__kwdefaults__:
        return function
    code = function.__code__
    variadic = code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    if code.co_argcount != arguments or code.co_kwonlyargcount or variadic:
        return function
    steps = [step for step in dis.get_instructions(function) if step.opname not in ("RESUME", "CACHE", "NOP")]
    if [step.opname for step in steps] != _SUBSCRIPT or steps[0].arg != 0:  # r[c], r the one argument
        return function
    return operator.itemgetter(steps[1].argval)


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

    __slots__ = ("field", "what")

    def __init__(self, field: int | str, what: str = "key_by") -> None:
        self.field = field
        self.what = what
        """The call that made it (``key_by``, ``where``, ``equal_to``), which a failure names."""

    def __call__(self, record: Any) -> Any:
        try:
            return get_field(record, self.field)
        except (TypeError, KeyError, IndexError) as exc:  # the operator reading keys names the record
            raise type(exc)(f"{self.what}({self.field!r}): {exc.args[0] if exc.args else exc}") from None

    def __repr__(self) -> str:
        return f"FieldKey({self.field!r})"


class Projection:
    """The function of ``DataStream.project``: a tuple of the record's fields at ``indexes``, in that order."""

    __slots__ = ("indexes",)

    def __init__(self, indexes: tuple[int, ...]) -> None:
        self.indexes = indexes

    def __call__(self, record: Any) -> tuple[Any, ...]:
        return tuple(record[index] for index in self.indexes)

    def __repr__(self) -> str:
        return f"Projection{self.indexes!r}"

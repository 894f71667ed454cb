"""Record types: ``Types`` and ``TypeInformation`` (as ``pyflink.common.typeinfo``) and ``Row``.

A ``TypeInformation`` says what a stream's records look like. PyFlink needs it to
pick serializers; slipstream needs it to keep records columnar: each type knows
its Arrow type (:meth:`TypeInformation.to_arrow_type`) and converts whole lists
of Python values to and from Arrow arrays, so batch work on polars or Spark can
run without Python rows. :meth:`TypeInformation.from_python` checks one value
and brings it to the type's canonical Python form (an ``int`` becomes a
``float`` for ``DOUBLE``, a tuple becomes a ``Row`` for ``ROW``).

Every type accepts ``None`` (Arrow columns are nullable); PyFlink documents some
primitive types as not supporting ``None`` but does not check it either.

``Row`` and ``RowKind`` mirror ``pyflink.common.Row``, including its quirks:
``Row(name=..., age=...)`` sorts fields by name, and ``x in row`` looks at the
values, not the names.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any, cast

import pyarrow as pa

from slipstream.errors import InvalidProgramError

__all__ = [
    "BasicArrayTypeInfo",
    "BasicType",
    "BasicTypeInfo",
    "DateTypeInfo",
    "ListTypeInfo",
    "MapTypeInfo",
    "ObjectArrayTypeInfo",
    "PickledBytesTypeInfo",
    "PrimitiveArrayTypeInfo",
    "Row",
    "RowKind",
    "RowTypeInfo",
    "TimeTypeInfo",
    "TimestampTypeInfo",
    "TupleTypeInfo",
    "TypeInformation",
    "Types",
]


# -- Row -------------------------------------------------------------------------------------

class RowKind(Enum):
    """The change a row describes in a changelog, as Flink's ``RowKind``."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3


def _create_row(fields: list[str] | None, values: Sequence[Any], row_kind: RowKind,
                cls: type[Row] | None = None) -> Row:
    """Rebuild a row (of class ``cls``, a subclass of ``Row``) from its parts; the target of
    ``Row.__reduce__`` so rows pickle. Rows pickled together keep sharing their list of names (pickle
    unpickles one list for them), as rows made from one source do: a row's names are replaced, never
    changed in place."""
    row = Row.__new__(cls or Row)
    row._fields = fields
    row._values = list(values)
    row._row_kind = row_kind
    return row


_IMMUTABLE_SCALARS = frozenset({int, float, str, bytes, bool, type(None), decimal.Decimal, datetime.date,
                                datetime.datetime, datetime.time})


class Row:
    """A record with positional fields and, optionally, field names.

    Fields are read by index, by name (``row['age']``) or as attributes
    (``row.age``), and a row unpacks like a tuple. Rows compare equal when
    their names (or both their lack of names), kind and values are equal, and
    hash by their values, so they can serve as keys; mutating a row used as a
    key breaks the dict or state holding it, as with any Python key.

    Examples:
        >>> Row(1, 'a')
        <Row(1, 'a')>
        >>> row = Row(name='Alice', age=11)   # keyword fields are sorted by name
        >>> row
        Row(age=11, name='Alice')
        >>> row.name, row[0]
        ('Alice', 11)
        >>> Person = Row('name', 'age')       # a row of names is a row factory
        >>> Person('Alice', 11)
        Row(name='Alice', age=11)
    """

    __slots__ = ("_fields", "_row_kind", "_values")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args and kwargs:
            raise InvalidProgramError("Row takes positional or keyword fields, not both")
        if kwargs:
            names = sorted(kwargs)
            self._fields: list[str] | None = names
            self._values = [kwargs[name] for name in names]
        else:
            self._fields = None
            self._values = list(args)
        self._row_kind = RowKind.INSERT

    def as_dict(self, recursive: bool = False) -> dict[str, Any]:
        """The fields as a dict by name; ``recursive`` also turns nested rows into dicts."""
        if self._fields is None:
            raise TypeError(f"cannot convert {self!r} to a dict: the row has no field names")
        if not recursive:
            return dict(zip(self._fields, self._values))
        return {name: _as_plain(value) for name, value in zip(self._fields, self._values)}

    @staticmethod
    def of_kind(row_kind: RowKind, *args: Any, **kwargs: Any) -> Row:
        """A row of ``row_kind`` (a change in a changelog) with these fields, as PyFlink's."""
        row = Row(*args, **kwargs)
        row.set_row_kind(row_kind)
        return row

    def get_fields_by_names(self, names: list[str]) -> list[Any]:
        """The values of the fields ``names``, in that order."""
        if self._fields is None or names == self._fields:
            return list(self._values)
        unknown = sorted(set(names) - set(self._fields))
        if unknown:
            raise KeyError(f"row has no field(s) {unknown}; its fields are {self._fields}")
        return [self._values[self._fields.index(name)] for name in names]

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        self._row_kind = row_kind

    def set_field_names(self, field_names: list[str]) -> None:
        """Name the fields (in place), e.g. after building the row positionally."""
        self._fields = list(field_names)

    def __call__(self, *args: Any) -> Row:
        """Use a row of names as a factory: ``Row('name', 'age')('Alice', 11)``."""
        if len(args) != len(self._values):
            raise InvalidProgramError(f"row factory {self!r} takes {len(self._values)} value(s), "
                                      f"got {len(args)}: {args!r}")
        return _create_row([str(name) for name in self._values], args, self._row_kind)

    def __copy__(self) -> Row:
        """A shallow copy with its own list of values (what ``replace_field`` changes); the list of
        names is shared, as names are replaced, never changed in place. Much cheaper than pickling's
        ``__reduce__``, which ``copy.copy`` would use otherwise."""
        row = Row.__new__(Row)
        row._values = list(self._values)
        row._fields = self._fields
        row._row_kind = self._row_kind
        return row

    def _index_of(self, name: str) -> int:
        if self._fields is None:
            raise KeyError(f"field {name!r}: {self!r} has no field names")
        try:
            return self._fields.index(name)
        except ValueError:
            raise KeyError(f"row has no field {name!r}; its fields are {self._fields}") from None

    def __getitem__(self, item: int | slice | str) -> Any:
        if type(item) is int or isinstance(item, (int, slice)):  # an int index, the common case, tested first
            return self._values[item]
        return self._values[self._index_of(item)]

    def __setitem__(self, key: int | slice | str, value: Any) -> None:
        if isinstance(key, (int, slice)):
            self._values[key] = value
        else:
            self._values[self._index_of(key)] = value

    def __getattr__(self, item: str) -> Any:
        # Called only when normal lookup fails: for field names (and unset slots), the first time
        # a name is read as an attribute, or on rows without that field.
        if item.startswith("_"):
            raise AttributeError(item)
        try:
            value = self._values[self._index_of(item)]
        except KeyError as exc:
            raise AttributeError(exc.args[0]) from None
        _install_field_attribute(item)
        return value

    def __contains__(self, item: Any) -> bool:
        return item in self._values

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Row) or type(self) is not type(other):
            return False
        return (self._fields == other._fields and self._row_kind == other._row_kind
                and self._values == other._values)

    def __hash__(self) -> int:
        return hash(tuple(self._values))

    def __reduce__(self) -> tuple[Any, ...]:
        if type(self) is Row:
            return _create_row, (self._fields, tuple(self._values), self._row_kind)
        # a subclass: its class, and the attributes it may have beyond the row's
        return _create_row, (self._fields, tuple(self._values), self._row_kind, type(self)), \
            getattr(self, "__dict__", None)

    def __deepcopy__(self, memo: dict[int, Any]) -> Row:
        """A row whose values are copies; it shares the list of field names, which no method
        changes in place (a state backend copies rows on write while a checkpoint is written)."""
        row = Row.__new__(Row)
        memo[id(self)] = row
        row._fields = self._fields
        row._values = [value if type(value) in _IMMUTABLE_SCALARS else copy.deepcopy(value, memo)
                       for value in self._values]
        row._row_kind = self._row_kind
        return row

    def __repr__(self) -> str:
        if self._fields is None:
            return "<Row({})>".format(", ".join(repr(value) for value in self._values))
        return "Row({})".format(", ".join(f"{name}={value!r}"
                                     for name, value in zip(self._fields, self._values)))


FIELD_ATTRIBUTES_KEPT = 4096
"""At most this many field names get an attribute on ``Row`` (:func:`_install_field_attribute`)."""

_field_attributes: set[str] = set()


def _install_field_attribute(name: str) -> None:
    """Give ``Row`` an attribute ``name`` that reads that field of a row that has it, once a row's
    field was read by that name. Reaching a field through ``__getattr__`` costs a failed lookup
    and an exception each time (about 1.2 µs on a 2.5 GHz Xeon, 40 times a slot's cost); the
    attribute costs one list search. On a row without the field it raises AttributeError, so
    ``__getattr__`` still says why. Names of ``Row``'s own attributes are never shadowed, and
    past :data:`FIELD_ATTRIBUTES_KEPT` names (rows of ever-new schemas) the slow path stays."""
    if name in Row.__dict__ or len(_field_attributes) >= FIELD_ATTRIBUTES_KEPT:
        return

    def field(row: Row) -> Any:
        try:
            return row._values[row._fields.index(name)]  # type: ignore[union-attr]  # None: no names
        except (ValueError, AttributeError):
            raise AttributeError(name) from None

    _field_attributes.add(name)
    setattr(Row, name, property(field, doc=f"The field {name!r} of a row that has one."))


def _as_plain(value: Any) -> Any:
    if isinstance(value, Row):
        return value.as_dict(True)
    if isinstance(value, list):
        return [_as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_plain(v) for k, v in value.items()}
    return value


# -- TypeInformation --------------------------------------------------------------------------

class TypeInformation(ABC):
    """The type of a stream's records: its Arrow type and how Python values map onto it.

    ``to_arrow_array``/``from_arrow_array`` convert a whole list at once; they
    take a fast path (plain ``pa.array``/``to_pylist``) for types whose Python
    values are already what Arrow expects.
    """

    #: Whether Python values and Arrow's Python values coincide, so lists convert without a loop.
    _arrow_identity: bool = True

    @abstractmethod
    def to_arrow_type(self) -> pa.DataType:
        """The Arrow type that holds values of this type in a column."""

    @abstractmethod
    def from_python(self, value: Any) -> Any:
        """Check ``value`` against this type; return it in canonical form, or raise TypeError."""

    def to_arrow_array(self, values: Sequence[Any]) -> pa.Array:
        """Convert a list of Python values of this type to one Arrow array."""
        if self._arrow_identity:
            return pa.array(values, type=self.to_arrow_type())
        return pa.array([None if v is None else self._to_arrow_value(v) for v in values],
                        type=self.to_arrow_type())

    def from_arrow_array(self, array: pa.Array | pa.ChunkedArray) -> list[Any]:
        """Convert an Arrow array back to the Python values :meth:`to_arrow_array` was given."""
        values = array.to_pylist()
        if self._arrow_identity:
            return cast("list[Any]", values)
        return [None if v is None else self._from_arrow_value(v) for v in values]

    def _to_arrow_value(self, value: Any) -> Any:
        return value

    def _from_arrow_value(self, value: Any) -> Any:
        return value

    def record_converter(self) -> Callable[[Any], Any] | None:
        """A cheap function giving a value of this type its canonical shape (a ``Row`` with the
        type's field names for ``ROW``, a tuple for ``TUPLE``, recursively), as PyFlink hands
        records of a declared type to the next function; None when values pass as they are.

        Unlike :meth:`from_python` it checks shapes (field counts, names), not every leaf value,
        so it can run on every record; it raises TypeError on a value of the wrong shape.
        """
        return None

    @abstractmethod
    def _key(self) -> tuple[Any, ...]:
        """What makes two type informations equal."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _mismatch(self, value: Any) -> TypeError:
        shown = repr(value)
        if len(shown) > 200:
            shown = shown[:197] + "..."
        return TypeError(f"expected a value of type {self!r}, got {shown} ({type(value).__name__})")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class BasicType(Enum):
    """The basic types, valued by the Java class names PyFlink prints."""

    STRING = "String"
    BYTE = "Byte"
    BOOLEAN = "Boolean"
    SHORT = "Short"
    INT = "Integer"
    LONG = "Long"
    FLOAT = "Float"
    DOUBLE = "Double"
    CHAR = "Char"
    BIG_INT = "BigInteger"
    BIG_DEC = "BigDecimal"
    INSTANT = "Instant"


_INT_BITS = {BasicType.BYTE: 8, BasicType.SHORT: 16, BasicType.INT: 32, BasicType.LONG: 64}

_BIG_INT_DIGITS = 38
_BIG_DEC_SCALE = 18

_ARROW_BASIC: dict[BasicType, Callable[[], pa.DataType]] = {
    BasicType.STRING: pa.string,
    BasicType.BYTE: pa.int8,
    BasicType.BOOLEAN: pa.bool_,
    BasicType.SHORT: pa.int16,
    BasicType.INT: pa.int32,
    BasicType.LONG: pa.int64,
    BasicType.FLOAT: pa.float32,
    BasicType.DOUBLE: pa.float64,
    BasicType.CHAR: pa.string,
    # Arrow has no unbounded integers or decimals: these hold up to 38 digits, as
    # Flink's table planner bounds BigDecimal to DECIMAL(38, 18).
    BasicType.BIG_INT: lambda: pa.decimal128(_BIG_INT_DIGITS, 0),
    BasicType.BIG_DEC: lambda: pa.decimal128(_BIG_INT_DIGITS, _BIG_DEC_SCALE),
    BasicType.INSTANT: lambda: pa.timestamp("us", tz="UTC"),
}


class BasicTypeInfo(TypeInformation):
    """Strings, booleans, numbers of each width, characters, big numbers and instants.

    In Python: ``str``; ``bool``; ``int`` checked against the width (BYTE 8 bits
    … LONG 64); ``float`` (an ``int`` is accepted and converted); a one-character
    ``str`` for CHAR; ``int`` for BIG_INT; ``decimal.Decimal`` for BIG_DEC; a
    timezone-aware ``datetime.datetime`` for INSTANT.
    """

    def __init__(self, basic_type: BasicType) -> None:
        self._basic_type = basic_type
        self._arrow_identity = basic_type is not BasicType.BIG_INT

    # PyFlink's static factories, one per basic type (``Types.STRING()`` and the others are the same)
    @staticmethod
    def STRING_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.STRING)

    @staticmethod
    def BOOLEAN_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.BOOLEAN)

    @staticmethod
    def BYTE_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.BYTE)

    @staticmethod
    def SHORT_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.SHORT)

    @staticmethod
    def INT_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.INT)

    @staticmethod
    def LONG_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.LONG)

    @staticmethod
    def FLOAT_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.FLOAT)

    @staticmethod
    def DOUBLE_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.DOUBLE)

    @staticmethod
    def CHAR_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.CHAR)

    @staticmethod
    def BIG_INT_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.BIG_INT)

    @staticmethod
    def BIG_DEC_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.BIG_DEC)

    @staticmethod
    def INSTANT_TYPE_INFO() -> BasicTypeInfo:
        return BasicTypeInfo(BasicType.INSTANT)

    def to_arrow_type(self) -> pa.DataType:
        return _ARROW_BASIC[self._basic_type]()

    def from_python(self, value: Any) -> Any:
        if value is None:
            return None
        kind = self._basic_type
        if kind in _INT_BITS:
            bound = 1 << (_INT_BITS[kind] - 1)
            if _is_int(value) and -bound <= value < bound:
                return value
        elif kind in (BasicType.FLOAT, BasicType.DOUBLE):
            if isinstance(value, float):
                return value
            if _is_int(value):
                return float(value)
        elif kind is BasicType.STRING:
            if isinstance(value, str):
                return value
        elif kind is BasicType.BOOLEAN:
            if isinstance(value, bool):
                return value
        elif kind is BasicType.CHAR:
            if isinstance(value, str) and len(value) == 1:
                return value
        elif kind is BasicType.BIG_INT:
            if _is_int(value):
                return value
        elif kind is BasicType.BIG_DEC:
            if isinstance(value, decimal.Decimal):
                return value
            if _is_int(value):
                return decimal.Decimal(value)
        elif kind is BasicType.INSTANT and isinstance(value, datetime.datetime) and value.tzinfo is not None:
            return value
        raise self._mismatch(value)

    def _to_arrow_value(self, value: Any) -> Any:
        return decimal.Decimal(value) if self._basic_type is BasicType.BIG_INT else value

    def _from_arrow_value(self, value: Any) -> Any:
        return int(value) if self._basic_type is BasicType.BIG_INT else value

    def _key(self) -> tuple[Any, ...]:
        return (self._basic_type,)

    def __repr__(self) -> str:
        return self._basic_type.value


class DateTypeInfo(TypeInformation):
    """SQL dates: ``datetime.date`` (not a ``datetime``), held as Arrow ``date32``."""

    def to_arrow_type(self) -> pa.DataType:
        return pa.date32()

    def from_python(self, value: Any) -> Any:
        if value is None or (isinstance(value, datetime.date)
                             and not isinstance(value, datetime.datetime)):
            return value
        raise self._mismatch(value)

    def _key(self) -> tuple[Any, ...]:
        return ()

    def __repr__(self) -> str:
        return "DateTypeInfo"


class TimeTypeInfo(TypeInformation):
    """SQL times of day: ``datetime.time``, held as Arrow ``time64('us')``."""

    def to_arrow_type(self) -> pa.DataType:
        return pa.time64("us")

    def from_python(self, value: Any) -> Any:
        if value is None or isinstance(value, datetime.time):
            return value
        raise self._mismatch(value)

    def _key(self) -> tuple[Any, ...]:
        return ()

    def __repr__(self) -> str:
        return "TimeTypeInfo"


class TimestampTypeInfo(TypeInformation):
    """SQL timestamps: ``datetime.datetime``, held as Arrow ``timestamp('us')`` without a zone."""

    def to_arrow_type(self) -> pa.DataType:
        return pa.timestamp("us")

    def from_python(self, value: Any) -> Any:
        if value is None or isinstance(value, datetime.datetime):
            return value
        raise self._mismatch(value)

    def _key(self) -> tuple[Any, ...]:
        return ()

    def __repr__(self) -> str:
        return "TimestampTypeInfo"


class PickledBytesTypeInfo(TypeInformation):
    """Any picklable Python object; in a column each value is stored pickled, as Arrow ``binary``."""

    _arrow_identity = False

    def to_arrow_type(self) -> pa.DataType:
        return pa.binary()

    def from_python(self, value: Any) -> Any:
        return value

    def _to_arrow_value(self, value: Any) -> Any:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def _from_arrow_value(self, value: Any) -> Any:
        return pickle.loads(value)

    def _key(self) -> tuple[Any, ...]:
        return ()

    def __repr__(self) -> str:
        return "PickledByteArrayTypeInfo"


def _named_row(names: list[str], values: list[Any], row_kind: RowKind) -> Row:
    """A row sharing the list ``names`` (a row's names are replaced, never changed in place)."""
    row = Row.__new__(Row)
    row._values = values
    row._fields = names
    row._row_kind = row_kind
    return row


def _nested_converters(types: Sequence[TypeInformation]) -> list[tuple[int, Callable[[Any], Any]]]:
    """The converters of the fields (by position) whose values need one."""
    converters = [(index, t.record_converter()) for index, t in enumerate(types)]
    return [(index, converter) for index, converter in converters if converter is not None]


def _identity(value: Any) -> Any:
    return value


def _check_types(field_types: Sequence[Any], what: str) -> list[TypeInformation]:
    types = list(field_types)
    for i, t in enumerate(types):
        if not isinstance(t, TypeInformation):
            raise InvalidProgramError(f"{what}: field {i} must be a TypeInformation "
                                      f"(e.g. Types.INT()), got {t!r}")
    return types


def _field_error(where: str, exc: TypeError) -> TypeError:
    return TypeError(f"{where}: {exc}")


class RowTypeInfo(TypeInformation):
    """Rows with typed fields, optionally named (``Types.ROW`` / ``Types.ROW_NAMED``).

    Held as an Arrow struct; unnamed fields are called ``f0``, ``f1``, … as in
    Flink, and rows of the type carry those names (``Row(f0=1, f1='a')``), as
    PyFlink's do. Only ``INSERT`` rows are kept columnar, since a struct has no room for
    the row kind. Unlike PyFlink, two row types with the same field types but
    different names are not equal: they describe different columns.
    """

    _arrow_identity = False

    def __init__(self, types: Sequence[TypeInformation], field_names: Sequence[str] | None = None) -> None:
        self._field_types = _check_types(types, "Types.ROW")
        self._named = field_names is not None
        if field_names is None:
            self._field_names = [f"f{i}" for i in range(len(self._field_types))]
        else:
            self._field_names = [str(name) for name in field_names]
            if len(self._field_names) != len(self._field_types):
                raise InvalidProgramError(
                    f"Types.ROW_NAMED got {len(self._field_names)} name(s) {self._field_names} "
                    f"but {len(self._field_types)} type(s)")
            if len(set(self._field_names)) != len(self._field_names):
                raise InvalidProgramError(f"Types.ROW_NAMED: duplicate field names in {self._field_names}")

    def get_field_names(self) -> list[str]:
        return list(self._field_names)

    def get_field_index(self, field_name: str) -> int:
        """The position of ``field_name``, or -1 when there is no such field."""
        try:
            return self._field_names.index(field_name)
        except ValueError:
            return -1

    def get_field_types(self) -> list[TypeInformation]:
        return list(self._field_types)

    def to_arrow_type(self) -> pa.DataType:
        return pa.struct([pa.field(name, t.to_arrow_type())
                          for name, t in zip(self._field_names, self._field_types)])

    def _positional(self, value: Any) -> list[Any]:
        if isinstance(value, Row) and value._fields is not None and self._named:
            if sorted(value._fields) != sorted(self._field_names):
                raise TypeError(f"row fields {value._fields} do not match {self!r}")
            return [value[name] for name in self._field_names]
        if isinstance(value, (Row, tuple, list)):
            if len(value) != len(self._field_types):
                raise TypeError(f"expected {len(self._field_types)} field(s) for {self!r}, "
                                f"got {len(value)} in {value!r}")
            return list(value)
        if isinstance(value, Mapping):
            missing = [name for name in self._field_names if name not in value]
            if missing:
                raise TypeError(f"{value!r} lacks field(s) {missing} of {self!r}")
            return [value[name] for name in self._field_names]
        raise self._mismatch(value)

    def _make_row(self, values: list[Any]) -> Row:
        """A row of this type: its fields carry the type's names (``f0``, ``f1``, … for
        ``Types.ROW``), as PyFlink's rows of a declared row type do."""
        return _named_row(self._field_names, values, RowKind.INSERT)

    def record_converter(self) -> Callable[[Any], Any]:
        names = self._field_names
        nested = _nested_converters(self._field_types)

        def convert(value: Any) -> Any:
            if value is None:
                return None
            if type(value) is Row and not nested and value._fields == names:
                return value
            values = self._positional(value)
            for index, field_converter in nested:
                if values[index] is not None:
                    values[index] = field_converter(values[index])
            return _named_row(names, values, value._row_kind if isinstance(value, Row) else RowKind.INSERT)

        return convert

    def from_python(self, value: Any) -> Any:
        if value is None:
            return None
        values = self._positional(value)
        converted = []
        for name, t, v in zip(self._field_names, self._field_types, values):
            try:
                converted.append(t.from_python(v))
            except TypeError as exc:
                raise _field_error(f"field {name!r}", exc) from None
        row = self._make_row(converted)
        if isinstance(value, Row):
            row._row_kind = value._row_kind
        return row

    def _to_arrow_value(self, value: Any) -> Any:
        if isinstance(value, Row) and value._row_kind is not RowKind.INSERT:
            raise ValueError(f"cannot store {value!r} of kind {value._row_kind.name} in a column; "
                             "only INSERT rows are kept columnar")
        values = self._positional(value)
        return {name: None if v is None else t._to_arrow_value(v)
                for name, t, v in zip(self._field_names, self._field_types, values)}

    def _from_arrow_value(self, value: Any) -> Any:
        return self._make_row([None if value[name] is None else t._from_arrow_value(value[name])
                               for name, t in zip(self._field_names, self._field_types)])

    def _key(self) -> tuple[Any, ...]:
        return (tuple(self._field_types), tuple(self._field_names) if self._named else None)

    def __repr__(self) -> str:
        if self._named:
            return "RowTypeInfo({})".format(", ".join(
                f"{name}: {t!r}" for name, t in zip(self._field_names, self._field_types)))
        return "RowTypeInfo({})".format(", ".join(repr(t) for t in self._field_types))


class TupleTypeInfo(TypeInformation):
    """Python tuples with typed fields (``Types.TUPLE``), held as an Arrow struct of ``f0``, ``f1``, …"""

    _arrow_identity = False

    def __init__(self, types: Sequence[TypeInformation]) -> None:
        self._field_types = _check_types(types, "Types.TUPLE")

    def get_field_types(self) -> list[TypeInformation]:
        return list(self._field_types)

    def to_arrow_type(self) -> pa.DataType:
        return pa.struct([pa.field(f"f{i}", t.to_arrow_type())
                          for i, t in enumerate(self._field_types)])

    def from_python(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (tuple, list, Row)):
            raise self._mismatch(value)
        if len(value) != len(self._field_types):
            raise TypeError(f"expected {len(self._field_types)} field(s) for {self!r}, "
                            f"got {len(value)} in {value!r}")
        converted = []
        for i, (t, v) in enumerate(zip(self._field_types, value)):
            try:
                converted.append(t.from_python(v))
            except TypeError as exc:
                raise _field_error(f"field {i}", exc) from None
        return tuple(converted)

    def record_converter(self) -> Callable[[Any], Any]:
        arity = len(self._field_types)
        nested = _nested_converters(self._field_types)

        def convert(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, (tuple, list, Row)):
                raise self._mismatch(value)
            if len(value) != arity:
                raise TypeError(f"expected {arity} field(s) for {self!r}, got {len(value)} in {value!r}")
            if not nested:
                return value if type(value) is tuple else tuple(value)
            values = list(value)
            for index, field_converter in nested:
                if values[index] is not None:
                    values[index] = field_converter(values[index])
            return tuple(values)

        return convert

    def _to_arrow_value(self, value: Any) -> Any:
        return {f"f{i}": None if v is None else t._to_arrow_value(v)
                for i, (t, v) in enumerate(zip(self._field_types, value))}

    def _from_arrow_value(self, value: Any) -> Any:
        return tuple(None if value[f"f{i}"] is None else t._from_arrow_value(value[f"f{i}"])
                     for i, t in enumerate(self._field_types))

    def _key(self) -> tuple[Any, ...]:
        return tuple(self._field_types)

    def __repr__(self) -> str:
        return "TupleTypeInfo({})".format(", ".join(repr(t) for t in self._field_types))


class _SequenceTypeInfo(TypeInformation):
    """Lists of one element type, held as an Arrow ``list_``; the four array/list kinds share this."""

    _label = ""
    _allows_null_elements = True

    def __init__(self, element_type: TypeInformation) -> None:
        if not isinstance(element_type, TypeInformation):
            raise InvalidProgramError(f"{type(self).__name__} needs a TypeInformation as element "
                                      f"type (e.g. Types.INT()), got {element_type!r}")
        self._element_type = element_type
        self._arrow_identity = element_type._arrow_identity

    def get_element_type(self) -> TypeInformation:
        return self._element_type

    def to_arrow_type(self) -> pa.DataType:
        return pa.list_(self._element_type.to_arrow_type())

    def from_python(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise self._mismatch(value)
        converted = []
        for i, v in enumerate(value):
            if v is None and not self._allows_null_elements:
                raise TypeError(f"element {i}: {self!r} cannot hold None")
            try:
                converted.append(self._element_type.from_python(v))
            except TypeError as exc:
                raise _field_error(f"element {i}", exc) from None
        return converted

    def record_converter(self) -> Callable[[Any], Any] | None:
        element = self._element_type.record_converter()
        if element is None:
            return None

        def convert(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, (list, tuple)):
                raise self._mismatch(value)
            return [None if v is None else element(v) for v in value]

        return convert

    def _to_arrow_value(self, value: Any) -> Any:
        convert = self._element_type._to_arrow_value
        return [None if v is None else convert(v) for v in value]

    def _from_arrow_value(self, value: Any) -> Any:
        convert = self._element_type._from_arrow_value
        return [None if v is None else convert(v) for v in value]

    def _key(self) -> tuple[Any, ...]:
        return (self._element_type,)

    def __repr__(self) -> str:
        return f"{self._label}<{self._element_type!r}>"


_PRIMITIVE_ELEMENTS = {BasicType.BOOLEAN, BasicType.BYTE, BasicType.SHORT, BasicType.INT,
                       BasicType.LONG, BasicType.FLOAT, BasicType.DOUBLE, BasicType.CHAR}


def _require_basic(element_type: Any, allowed: set[BasicType], what: str) -> None:
    if not (isinstance(element_type, BasicTypeInfo) and element_type._basic_type in allowed):
        names = ", ".join(sorted(f"Types.{k.name}()" for k in allowed))
        raise InvalidProgramError(f"{what} takes one of {names} as element type, got {element_type!r}")


class PrimitiveArrayTypeInfo(_SequenceTypeInfo):
    """Arrays of a primitive type, elements never None; ``PRIMITIVE_ARRAY(BYTE())`` holds ``bytes``."""

    _label = "PrimitiveArrayTypeInfo"
    _allows_null_elements = False

    def __init__(self, element_type: TypeInformation) -> None:
        _require_basic(element_type, _PRIMITIVE_ELEMENTS, "Types.PRIMITIVE_ARRAY")
        super().__init__(element_type)
        self._is_bytes = element_type == BasicTypeInfo(BasicType.BYTE)

    def to_arrow_type(self) -> pa.DataType:
        return pa.binary() if self._is_bytes else super().to_arrow_type()

    def from_python(self, value: Any) -> Any:
        if self._is_bytes:
            if value is None or isinstance(value, bytes):
                return value
            if isinstance(value, bytearray):
                return bytes(value)
            raise self._mismatch(value)
        return super().from_python(value)

    def _to_arrow_value(self, value: Any) -> Any:
        return value if self._is_bytes else super()._to_arrow_value(value)

    def _from_arrow_value(self, value: Any) -> Any:
        return value if self._is_bytes else super()._from_arrow_value(value)


class BasicArrayTypeInfo(_SequenceTypeInfo):
    """Arrays of a basic type (boxed in Java, so elements may be None)."""

    _label = "BasicArrayTypeInfo"

    def __init__(self, element_type: TypeInformation) -> None:
        _require_basic(element_type, _PRIMITIVE_ELEMENTS | {BasicType.STRING}, "Types.BASIC_ARRAY")
        super().__init__(element_type)


class ObjectArrayTypeInfo(_SequenceTypeInfo):
    """Arrays of any type, elements may be None."""

    _label = "ObjectArrayTypeInfo"


class ListTypeInfo(_SequenceTypeInfo):
    """Python lists of one element type."""

    _label = "ListTypeInfo"


class MapTypeInfo(TypeInformation):
    """Python dicts with typed keys and values, held as an Arrow ``map_`` (keys never None)."""

    _arrow_identity = False

    def __init__(self, key_type_info: TypeInformation, value_type_info: TypeInformation) -> None:
        self._key_type, self._value_type = _check_types([key_type_info, value_type_info], "Types.MAP")

    def get_key_type(self) -> TypeInformation:
        return self._key_type

    def get_value_type(self) -> TypeInformation:
        return self._value_type

    def to_arrow_type(self) -> pa.DataType:
        return pa.map_(self._key_type.to_arrow_type(), self._value_type.to_arrow_type())

    def from_python(self, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self._mismatch(value)
        converted = {}
        for k, v in value.items():
            if k is None:
                raise TypeError(f"{self!r} cannot hold a None key")
            try:
                converted[self._key_type.from_python(k)] = self._value_type.from_python(v)
            except TypeError as exc:
                raise _field_error(f"entry {k!r}", exc) from None
        return converted

    def record_converter(self) -> Callable[[Any], Any] | None:
        key, val = self._key_type.record_converter(), self._value_type.record_converter()
        if key is None and val is None:
            return None
        key = key or _identity
        val = val or _identity

        def convert(value: Any) -> Any:
            if value is None:
                return None
            if not isinstance(value, Mapping):
                raise self._mismatch(value)
            return {key(k): None if v is None else val(v) for k, v in value.items()}

        return convert

    def _to_arrow_value(self, value: Any) -> Any:
        key, val = self._key_type._to_arrow_value, self._value_type._to_arrow_value
        return [(key(k), None if v is None else val(v)) for k, v in value.items()]

    def _from_arrow_value(self, value: Any) -> Any:
        key, val = self._key_type._from_arrow_value, self._value_type._from_arrow_value
        return {key(k): None if v is None else val(v) for k, v in value}

    def _key(self) -> tuple[Any, ...]:
        return (self._key_type, self._value_type)

    def __repr__(self) -> str:
        return f"MapTypeInfo<{self._key_type!r}, {self._value_type!r}>"


class Types:
    """Factories for the common types, named as in ``pyflink.common.typeinfo.Types``.

    Examples:
        >>> Types.ROW_NAMED(['name', 'age'], [Types.STRING(), Types.INT()])
        RowTypeInfo(name: String, age: Integer)
    """

    @staticmethod
    def STRING() -> TypeInformation:
        return BasicTypeInfo(BasicType.STRING)

    @staticmethod
    def BYTE() -> TypeInformation:
        return BasicTypeInfo(BasicType.BYTE)

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return BasicTypeInfo(BasicType.BOOLEAN)

    @staticmethod
    def SHORT() -> TypeInformation:
        return BasicTypeInfo(BasicType.SHORT)

    @staticmethod
    def INT() -> TypeInformation:
        return BasicTypeInfo(BasicType.INT)

    @staticmethod
    def LONG() -> TypeInformation:
        return BasicTypeInfo(BasicType.LONG)

    @staticmethod
    def FLOAT() -> TypeInformation:
        return BasicTypeInfo(BasicType.FLOAT)

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return BasicTypeInfo(BasicType.DOUBLE)

    @staticmethod
    def CHAR() -> TypeInformation:
        return BasicTypeInfo(BasicType.CHAR)

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return BasicTypeInfo(BasicType.BIG_INT)

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        return BasicTypeInfo(BasicType.BIG_DEC)

    @staticmethod
    def INSTANT() -> TypeInformation:
        return BasicTypeInfo(BasicType.INSTANT)

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        return DateTypeInfo()

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        return TimeTypeInfo()

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        return TimestampTypeInfo()

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return PickledBytesTypeInfo()

    @staticmethod
    def ROW(field_types: Sequence[TypeInformation]) -> RowTypeInfo:
        return RowTypeInfo(field_types)

    @staticmethod
    def ROW_NAMED(field_names: Sequence[str], field_types: Sequence[TypeInformation]) -> RowTypeInfo:
        return RowTypeInfo(field_types, field_names)

    @staticmethod
    def TUPLE(field_types: Sequence[TypeInformation]) -> TupleTypeInfo:
        return TupleTypeInfo(field_types)

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return PrimitiveArrayTypeInfo(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return BasicArrayTypeInfo(element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ObjectArrayTypeInfo(element_type)

    @staticmethod
    def LIST(element_type_info: TypeInformation) -> TypeInformation:
        return ListTypeInfo(element_type_info)

    @staticmethod
    def MAP(key_type_info: TypeInformation, value_type_info: TypeInformation) -> TypeInformation:
        return MapTypeInfo(key_type_info, value_type_info)

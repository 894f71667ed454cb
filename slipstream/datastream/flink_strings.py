"""Records as Flink's ``print()`` writes them: ``toString()`` of the Java value of a typed record.

PyFlink prints a stream with a declared type (``output_type=Types.ROW([...])``, say) through Java's
print sink, which writes each record's Java ``toString()``: a row ``+I[1, a]``, a tuple ``(1,a)``, a
boolean ``true``, a missing value ``null``, a double ``1.0E-5``. A stream without a type (PyFlink's
pickled records) is printed with Python's ``str()``. :func:`flink_formatter` gives the function that
writes a record of a type as Flink would, so a typed job prints the same lines on both.

Examples:
    >>> from slipstream.datastream.typeinfo import Row, Types
    >>> flink_formatter(Types.ROW([Types.INT(), Types.STRING(), Types.DOUBLE()]))(Row(1, "a", 1e-05))
    '+I[1, a, 1.0E-5]'
    >>> flink_formatter(Types.TUPLE([Types.STRING(), Types.BOOLEAN()]))(("a", None))
    '(a,null)'
    >>> flink_formatter(None)(("a", 1))
    "('a', 1)"
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from slipstream.datastream.typeinfo import (
    BasicType,
    BasicTypeInfo,
    DateTypeInfo,
    ListTypeInfo,
    MapTypeInfo,
    PickledBytesTypeInfo,
    RowKind,
    RowTypeInfo,
    TimestampTypeInfo,
    TimeTypeInfo,
    TupleTypeInfo,
    TypeInformation,
    _SequenceTypeInfo,
)

Formatter = Callable[[Any], str]

ROW_KINDS = {RowKind.INSERT: "+I", RowKind.UPDATE_BEFORE: "-U", RowKind.UPDATE_AFTER: "+U", RowKind.DELETE: "-D"}
"""``RowKind.shortString()``: how a row's change is written before its fields."""


def java_double(value: float, single: bool = False) -> str:
    """``Double.toString`` (``Float.toString`` when ``single``): the shortest digits that read back,
    in plain notation from 10^-3 up to 10^7 and as ``d.dddE±n`` outside it, always with a fraction."""
    if single:
        with np.errstate(over="ignore"):
            value = float(np.float32(value))  # what a Java float holds (past its range, infinity)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    digits = decimal.Decimal(np.format_float_scientific(np.float32(value), unique=True) if single
                             else repr(value))
    if 1e-3 <= abs(value) < 1e7:
        text = format(digits, "f")
        return text if "." in text else f"{text}.0"
    sign, numerals, exponent = digits.normalize().as_tuple()
    mantissa = "".join(map(str, numerals))
    power = len(mantissa) - 1 + int(exponent)
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"


def _basic(kind: BasicType) -> Formatter:
    if kind is BasicType.BOOLEAN:
        return lambda value: "true" if value else "false"
    if kind in (BasicType.FLOAT, BasicType.DOUBLE):
        single = kind is BasicType.FLOAT
        return lambda value: java_double(float(value), single)
    if kind is BasicType.INSTANT:
        return lambda value: value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    if kind is BasicType.BIG_DEC:
        return _big_decimal
    return str  # strings, characters, integers of every width


_SCALE = decimal.Decimal(1).scaleb(-18)
_DECIMAL_38 = decimal.Context(prec=38, rounding=decimal.ROUND_HALF_UP)
"""Flink's DECIMAL(38, 18), which PyFlink's BigDecimal values take."""


def _big_decimal(value: decimal.Decimal) -> str:
    """``BigDecimal.toString`` of a Python ``Decimal`` as PyFlink hands it to Java: at scale 18."""
    return str(decimal.Decimal(value).quantize(_SCALE, context=_DECIMAL_38))


def _java_bytes(value: bytes | bytearray) -> str:
    """A Java ``byte[]`` as Flink's rows write it (``arrayAwareToString``): signed bytes in brackets."""
    return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in value) + "]"


def _sql_timestamp(value: datetime.datetime) -> str:
    """``java.sql.Timestamp.toString``: the fraction of a second without trailing zeros, at least one digit."""
    fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
    return f"{value:%Y-%m-%d %H:%M:%S}.{fraction}"


def flink_formatter(type_info: TypeInformation | None) -> Formatter:
    """The function writing a record of ``type_info`` as Flink's print sink does (``str`` for a
    stream without a type, or of a pickled type)."""
    if type_info is None or isinstance(type_info, PickledBytesTypeInfo):
        return str
    return _nullable(type_info)


def _nullable(type_info: TypeInformation) -> Formatter:
    inner = _field_formatter(type_info)
    return lambda value: "null" if value is None else inner(value)


def _field_formatter(type_info: TypeInformation) -> Formatter:
    if isinstance(type_info, RowTypeInfo):
        fields = [_nullable(t) for t in type_info.get_field_types()]
        return lambda row: (f"{ROW_KINDS[row.get_row_kind()]}["
                            + ", ".join(write(value) for write, value in zip(fields, row)) + "]")
    if isinstance(type_info, TupleTypeInfo):
        fields = [_nullable(t) for t in type_info.get_field_types()]
        return lambda record: "(" + ",".join(write(value) for write, value in zip(fields, record)) + ")"
    if isinstance(type_info, BasicTypeInfo):
        return _basic(type_info._basic_type)
    if isinstance(type_info, (ListTypeInfo, _SequenceTypeInfo)):
        element_type = type_info.get_element_type()
        if isinstance(element_type, BasicTypeInfo) and element_type._basic_type is BasicType.BYTE:
            return lambda values: _java_bytes(bytes(value & 0xFF for value in values))
        element = _nullable(element_type)
        return lambda values: "[" + ", ".join(element(value) for value in values) + "]"
    if isinstance(type_info, PickledBytesTypeInfo):  # a field of a row or tuple: bytes reach Java as byte[]
        return lambda value: _java_bytes(value) if isinstance(value, (bytes, bytearray)) else str(value)
    if isinstance(type_info, MapTypeInfo):
        key, item = _nullable(type_info.get_key_type()), _nullable(type_info.get_value_type())
        return lambda mapping: "{" + ", ".join(f"{key(k)}={item(v)}" for k, v in mapping.items()) + "}"
    if isinstance(type_info, DateTypeInfo):
        return lambda value: value.isoformat()
    if isinstance(type_info, TimeTypeInfo):
        return lambda value: f"{value:%H:%M:%S}"
    if isinstance(type_info, TimestampTypeInfo):
        return _sql_timestamp
    return str


__all__ = ["ROW_KINDS", "Formatter", "flink_formatter", "java_double"]

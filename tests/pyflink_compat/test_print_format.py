"""``print()`` writes what PyFlink's prints: a record of a declared type as Flink's Java print sink
writes its Java value (``toString()``), a record without a type with Python's ``str``."""

from __future__ import annotations

import datetime
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.common import Row, Types
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.flink_strings import flink_formatter, java_double
from slipstream.datastream.typeinfo import RowKind


@pytest.mark.parametrize(("value", "double", "single"), [
    (1.0, "1.0", "1.0"), (0.1, "0.1", "0.1"), (100.0, "100.0", "100.0"), (1234567.0, "1234567.0", "1234567.0"),
    (1e7, "1.0E7", "1.0E7"), (1.5e-5, "1.5E-5", "1.5E-5"), (-1e-5, "-1.0E-5", "-1.0E-5"), (0.001, "0.001", "0.001"),
    (0.0009, "9.0E-4", "9.0E-4"), (123456789.123, "1.23456789123E8", "1.2345679E8"), (-0.0, "-0.0", "-0.0"),
    (float("nan"), "NaN", "NaN"), (float("-inf"), "-Infinity", "-Infinity"), (1e300, "1.0E300", "Infinity"),
    (1.1, "1.1", "1.1"), (1 / 3, "0.3333333333333333", "0.33333334"),
])
def test_doubles_and_floats_are_written_as_java_writes_them(value: float, double: str, single: str) -> None:
    assert java_double(value) == double
    assert java_double(value, single=True) == single


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_written_double_reads_back_as_the_same_double(value: float) -> None:
    assert float(java_double(value).replace("E", "e")) == value


def test_each_type_is_written_as_flinks_java_value() -> None:
    row = Types.ROW([Types.INT(), Types.STRING(), Types.BOOLEAN(), Types.DOUBLE(), Types.LONG()])
    assert flink_formatter(row)(Row(1, "a", True, None, 7)) == "+I[1, a, true, null, 7]"
    deleted = Row(2, "b", False, 0.5, 8)
    deleted.set_row_kind(RowKind.DELETE)
    assert flink_formatter(row)(deleted) == "-D[2, b, false, 0.5, 8]"
    named = Types.ROW_NAMED(["id", "inner"], [Types.INT(), Types.ROW([Types.STRING()])])
    assert flink_formatter(named)(Row(id=1, inner=Row("x"))) == "+I[1, +I[x]]"
    assert flink_formatter(Types.TUPLE([Types.STRING(), Types.FLOAT()]))(("a", 2.5)) == "(a,2.5)"
    assert flink_formatter(Types.LIST(Types.INT()))([1, None, 3]) == "[1, null, 3]"
    assert flink_formatter(Types.MAP(Types.STRING(), Types.BOOLEAN()))({"a": True}) == "{a=true}"
    assert flink_formatter(Types.BIG_DEC())(decimal.Decimal("1.50")) == "1.500000000000000000"  # DECIMAL(38, 18)
    assert flink_formatter(Types.PRIMITIVE_ARRAY(Types.BYTE()))([1, -1, 127]) == "[1, -1, 127]"
    assert flink_formatter(Types.SQL_DATE())(datetime.date(2024, 2, 29)) == "2024-02-29"
    assert flink_formatter(Types.SQL_TIME())(datetime.time(13, 5, 7)) == "13:05:07"
    assert flink_formatter(Types.SQL_TIMESTAMP())(datetime.datetime(2024, 2, 29, 13, 5, 7)) == "2024-02-29 13:05:07.0"
    assert flink_formatter(Types.SQL_TIMESTAMP())(datetime.datetime(2024, 2, 29, 13, 5, 7, 120000)) == \
        "2024-02-29 13:05:07.12"
    assert flink_formatter(Types.STRING())(None) == "null"
    assert flink_formatter(None)(None) == "None" and flink_formatter(Types.PICKLED_BYTE_ARRAY())(("a", 1)) == "('a', 1)"


def test_a_row_of_every_basic_type_is_written_as_pyflinks_own_test_expects() -> None:
    """The row of Flink's ``test_from_collection_with_data_types``, written as its expected line."""
    row_type = Types.ROW([Types.LONG(), Types.LONG(), Types.SHORT(), Types.BOOLEAN(), Types.SHORT(), Types.INT(),
                          Types.FLOAT(), Types.DOUBLE(), Types.PICKLED_BYTE_ARRAY(), Types.STRING(), Types.SQL_DATE(),
                          Types.SQL_TIME(), Types.SQL_TIMESTAMP(), Types.BASIC_ARRAY(Types.LONG()), Types.BIG_DEC(),
                          Types.BIG_DEC()])
    row = Row(1, None, 1, True, 32767, -2147483648, 1.23, 1.98932, bytearray(b"flink"), "pyflink",
              datetime.date(2014, 9, 13), datetime.time(12, 0, 0, 123000), datetime.datetime(2018, 3, 11, 3, 0, 0, 123000),
              [1, 2, 3], decimal.Decimal("1000000000000000000.05"),
              decimal.Decimal("1000000000000000000.05999999999999999899999999999"))
    assert flink_formatter(row_type)(row) == (
        "+I[1, null, 1, true, 32767, -2147483648, 1.23, 1.98932, [102, 108, 105, 110, 107], pyflink, 2014-09-13, "
        "12:00:00, 2018-03-11 03:00:00.123, [1, 2, 3], 1000000000000000000.050000000000000000, "
        "1000000000000000000.059999999999999999]")


def test_print_writes_typed_records_as_flink_and_untyped_ones_with_str(capfd) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([(1, "a", None)], type_info=Types.ROW([Types.INT(), Types.STRING(), Types.DOUBLE()])).print()
    env.from_collection([(1, "a")], type_info=Types.TUPLE([Types.INT(), Types.STRING()])).print("tuples")
    env.from_collection([(1, "a")]).map(lambda t: t).print("untyped")
    env.execute()
    lines = set(capfd.readouterr().out.splitlines())
    assert {"+I[1, a, null]", "tuples> (1,a)", "untyped> (1, 'a')"} <= lines

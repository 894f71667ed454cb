"""Declared types are honoured as PyFlink honours them: a ``ROW``/``ROW_NAMED`` output makes named ``Row``s,
a ``TUPLE`` output tuples, and ``from_collection(..., type_info=...)`` converts its elements.

Where PyFlink corrupts (an integer too wide for its declared type wraps around), slipstream raises.
Expected values come from Flink's PyFlink tests (``test_data_stream.py``); the tests are written anew.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest

from slipstream.common import Row, Types, WatermarkStrategy
from slipstream.common.watermark_strategy import TimestampAssigner
from slipstream.datastream import ProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.errors import InvalidProgramError, UserFunctionError

PAIR = Types.ROW_NAMED(["k", "v2"], [Types.STRING(), Types.INT()])


pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING), pytest.mark.configure(batch_size=3)]


def test_row_reprs_are_pyflinks() -> None:
    assert str(Row("cfgs", 5, decimal.Decimal(3))) == "<Row('cfgs', 5, Decimal('3'))>"
    assert str(Types.ROW([Types.INT(), Types.STRING()]).from_python((1, "1603708211000"))) == \
        "Row(f0=1, f1='1603708211000')"
    assert repr(PAIR.from_python(("a", 1))) == "Row(k='a', v2=1)"


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(0, 1, 5)
@pytest.mark.workers(1, 2)
def test_a_row_named_output_gives_named_rows_that_sum_by_field_name(env: StreamExecutionEnvironment) -> None:
    data = [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]
    rows = env.from_collection(data).map(lambda r: (r[0], r[1] * 10), output_type=PAIR)
    out = list(rows.key_by(lambda row: row.k).sum("v2").execute_and_collect())
    assert all(isinstance(row, Row) and row.as_dict().keys() == {"k", "v2"} for row in out)
    finals = {k: max(row.v2 for row in out if row.k == k) for k in ("a", "b")}
    assert finals == {"a": 90, "b": 60} and len(out) == len(data)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_from_collection_converts_elements_to_the_declared_type(env: StreamExecutionEnvironment) -> None:
    rows = list(env.from_collection([(1, "1603708211000"), (2, "1603708224000")],
                                    type_info=Types.ROW([Types.INT(), Types.STRING()])).execute_and_collect())
    assert rows == [Row("f0", "f1")(1, "1603708211000"), Row("f0", "f1")(2, "1603708224000")]
    assert list(env.from_collection([[1, 2, 3, 4]], type_info=Types.TUPLE([Types.INT()] * 4))
                .execute_and_collect()) == [(1, 2, 3, 4)]
    named = list(env.from_collection([{"k": "a", "v2": 1}, Row(v2=2, k="b")], type_info=PAIR).execute_and_collect())
    assert [row.as_dict() for row in named] == [{"k": "a", "v2": 1}, {"k": "b", "v2": 2}]


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_from_collection_with_many_types_keeps_the_values_pyflink_keeps(env: StreamExecutionEnvironment) -> None:
    """The first record of Flink's ``test_from_collection_with_data_types`` (the second wraps in PyFlink)."""
    record = (1, None, 1, True, 32767, -2147483648, 1.23, 1.98932, bytearray(b"flink"), "pyflink",
              datetime.date(2014, 9, 13), datetime.time(12, 0, 0, 123000),
              datetime.datetime(2018, 3, 11, 3, 0, 0, 123000), [1, 2, 3],
              decimal.Decimal("1000000000000000000.05"),
              decimal.Decimal("1000000000000000000.05999999999999999899999999999"))
    type_info = Types.ROW([Types.LONG(), Types.LONG(), Types.SHORT(), Types.BOOLEAN(), Types.SHORT(), Types.INT(),
                           Types.FLOAT(), Types.DOUBLE(), Types.PICKLED_BYTE_ARRAY(), Types.STRING(),
                           Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(), Types.BASIC_ARRAY(Types.LONG()),
                           Types.BIG_DEC(), Types.BIG_DEC()])
    (row,) = env.from_collection([record], type_info=type_info).execute_and_collect()
    assert list(row) == list(record) and row._fields == [f"f{i}" for i in range(16)]


@pytest.mark.parametrize("value,type_info", [(43878, Types.SHORT()), (9147483648, Types.INT()), (200, Types.BYTE())])
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_an_integer_too_wide_for_its_type_is_refused_where_pyflink_wraps_it(
        env: StreamExecutionEnvironment, value: int, type_info: Any) -> None:
    """PyFlink turns 43878 declared SHORT into -21658 and 9147483648 declared INT into 557549056."""
    with pytest.raises(InvalidProgramError, match=f"element 0 .* does not fit the declared type.*got {value}"):
        env.from_collection([(2, value)], type_info=Types.ROW([Types.INT(), type_info]))


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_function_returning_a_too_wide_integer_for_its_row_type_fails_naming_it(
        env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([1]).map(lambda v: (v, 2**40), output_type=Types.ROW([Types.INT(), Types.INT()]))
    with pytest.raises(UserFunctionError, match="does not match the declared type"):
        list(stream.execute_and_collect())


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_record_of_the_wrong_shape_later_in_a_batch_is_refused(env: StreamExecutionEnvironment) -> None:
    """Every record of a row type is shaped, so a short record is caught wherever it is in its batch."""
    stream = env.from_collection(["ab", "cd", "e"]) \
        .map(lambda s: (s, len(s)) if len(s) == 2 else (s,), output_type=PAIR).name("split")
    with pytest.raises(UserFunctionError, match=r"operator 'split'.*expected 2 field\(s\)") as raised:
        list(stream.execute_and_collect())
    assert raised.value.record == ("e",)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_process_functions_value_prints_as_in_pyflink(env: StreamExecutionEnvironment) -> None:
    """Flink's ``test_process_function``: the Row of an unnamed ROW prints with f-names."""
    class TimestampSecond(TimestampAssigner):
        def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
            return int(value[1])

    class Describe(ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield f"current timestamp: {ctx.timestamp()}, current_value: {value}"

    stream = env.from_collection([(1, "1603708211000"), (2, "1603708224000")],
                                 type_info=Types.ROW([Types.INT(), Types.STRING()]))
    out = stream.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(TimestampSecond())) \
        .process(Describe(), output_type=Types.STRING()).execute_and_collect()
    assert list(out) == ["current timestamp: 1603708211000, current_value: Row(f0=1, f1='1603708211000')",
                         "current timestamp: 1603708224000, current_value: Row(f0=2, f1='1603708224000')"]


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_nested_rows_and_tuples_are_shaped_too(env: StreamExecutionEnvironment) -> None:
    nested = Types.TUPLE([Types.STRING(), Types.ROW([Types.STRING(), Types.BIG_DEC()])])
    (value,) = env.from_collection([1]).map(lambda _: ["ab", ("a", decimal.Decimal(1))], output_type=nested) \
        .execute_and_collect()
    assert value == ("ab", Row("f0", "f1")("a", decimal.Decimal(1)))
    listed = Types.LIST(Types.ROW_NAMED(["x"], [Types.INT()]))
    (rows,) = env.from_collection([1]).map(lambda _: [(1,), (2,)], output_type=listed).execute_and_collect()
    assert rows == [Row("x")(1), Row("x")(2)]

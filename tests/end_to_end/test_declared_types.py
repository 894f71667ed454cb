"""A declared output type is checked where records are made, and a mismatch names the operator,
the record and the type (the first record of each batch is checked)."""

from __future__ import annotations

from typing import Any

import pytest

from slipstream.common import Row, Types
from slipstream.datastream import (
    EndOfStreamWindows,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from slipstream.datastream.connectors.iterator import CollectionSource
from slipstream.errors import InvalidProgramError, UserFunctionError

PAIR = Types.ROW_NAMED(["name", "count"], [Types.STRING(), Types.INT()])


def env() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().configure(batch_size=4)


def test_a_map_returning_strings_for_a_row_type_fails_naming_operator_record_and_type() -> None:
    stream = env().from_collection(["a", "b"]).map(lambda s: s.upper(), output_type=PAIR).name("shout")
    with pytest.raises(UserFunctionError) as raised:
        list(stream.execute_and_collect())
    message = str(raised.value)
    assert "operator 'shout'" in message and "'A'" in message and repr(PAIR) in message
    assert raised.value.record == "A"


def test_values_that_fit_a_declared_row_type_become_rows_with_its_field_names() -> None:
    out = env().from_collection(["a", "bb"]).map(lambda s: (s, len(s)), output_type=PAIR).execute_and_collect()
    assert sorted(out, key=tuple) == [Row("name", "count")("a", 1), Row("name", "count")("bb", 2)]


def test_an_int_beyond_the_declared_width_is_refused() -> None:
    stream = env().from_collection([1, 2]).map(lambda v: v << 40, output_type=Types.INT())
    with pytest.raises(UserFunctionError, match="does not match the declared type"):
        list(stream.execute_and_collect())


def test_flat_map_process_window_and_source_outputs_are_checked() -> None:
    e = env()
    with pytest.raises(UserFunctionError, match="flat"):
        list(e.from_collection([1]).flat_map(lambda v: ["x"], output_type=Types.LONG()).name("flat")
             .execute_and_collect())

    class Emit(ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield {"not": "a row"}

    with pytest.raises(UserFunctionError, match="proc"):
        list(env().from_collection([1]).process(Emit(), output_type=PAIR).name("proc").execute_and_collect())

    windowed = env().from_collection([("a", 1)]).key_by(lambda r: r[0]).window(EndOfStreamWindows.get()) \
        .apply(lambda key, window, rows: [key], output_type=PAIR).name("win")
    with pytest.raises(UserFunctionError, match="win"):
        list(windowed.execute_and_collect())

    with pytest.raises(UserFunctionError, match="does not match the declared type"):
        list(env().from_source(CollectionSource(["x"]), None, "strings", Types.INT()).execute_and_collect())
    with pytest.raises(InvalidProgramError, match=r"element 0 \('x'\) does not fit the declared type Integer"):
        env().from_collection(["x"], type_info=Types.INT())  # converted, and refused, at once


def test_side_outputs_are_checked_against_their_tag_type() -> None:
    tag = OutputTag("lengths", Types.INT())

    class Split(ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield value
            yield tag, value  # a string where the tag says INT

    main = env().from_collection(["a"]).process(Split(), output_type=Types.STRING()).name("split")
    with pytest.raises(UserFunctionError, match="side output record for 'lengths'"):
        list(main.get_side_output(tag).execute_and_collect())

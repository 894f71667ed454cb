"""Row (as pyflink.common.Row) and Types: Arrow types, value checks, columnar round trips."""

from __future__ import annotations

import datetime
import decimal
import pickle
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.datastream.columnar import PackedRows, packed_rows, rows_from_columns
from slipstream.datastream.typeinfo import Row, RowKind, TypeInformation, Types
from slipstream.errors import InvalidProgramError
from slipstream.operators.elements import RecordBatch

# -- Row --------------------------------------------------------------------------------------


def test_row_fields_by_index_name_attribute_and_unpacking() -> None:
    row = Row(name="Alice", age=11)
    assert row._fields == ["age", "name"]          # keyword fields are sorted, as in PyFlink
    assert (row[0], row[1], row["name"], row.age) == (11, "Alice", "Alice", 11)
    age, name = row
    assert (age, name, len(row)) == (11, "Alice", 2)
    assert list(Row(1, "a")) == [1, "a"]


def test_a_field_read_as_an_attribute_gets_an_attribute_on_row_that_other_rows_answer_rightly() -> None:
    """Reading ``row.<name>`` installs ``Row.<name>`` (no failed lookup the next time); rows
    without the field, or without names, still raise AttributeError saying why; Row's own
    methods are never shadowed by a field of the same name."""
    assert Row(flagship_tier="gold", age=3).flagship_tier == "gold"
    assert isinstance(Row.__dict__["flagship_tier"], property)
    assert Row(flagship_tier="silver").flagship_tier == "silver"
    assert Row("flagship_tier", "x")(1, 2).flagship_tier == 1  # another position, other names
    with pytest.raises(AttributeError, match="no field 'flagship_tier'; its fields are \\['age'\\]"):
        Row(age=1).flagship_tier
    with pytest.raises(AttributeError, match="has no field names"):
        Row(1, 2).flagship_tier
    assert not hasattr(Row(age=1), "flagship_tier")
    assert pickle.loads(pickle.dumps(Row(flagship_tier=7))).flagship_tier == 7
    shadowing = Row(as_dict=1, set_row_kind=2)
    assert shadowing["as_dict"] == 1 and callable(shadowing.as_dict)
    assert not isinstance(Row.__dict__["as_dict"], property)
    assert shadowing.as_dict() == {"as_dict": 1, "set_row_kind": 2}


def test_row_repr_follows_pyflink() -> None:
    assert repr(Row(name="Alice", age=11)) == "Row(age=11, name='Alice')"
    assert repr(Row(1, "a")) == "<Row(1, 'a')>"
    assert repr(Row("name", "age")) == "<Row('name', 'age')>"


def test_a_row_of_names_is_a_row_factory() -> None:
    Person = Row("name", "age")
    alice = Person("Alice", 11)
    assert alice._fields == ["name", "age"] and alice.name == "Alice" and alice[1] == 11
    with pytest.raises(InvalidProgramError, match="takes 2 value"):
        Person("Bob")


def test_as_dict_plain_and_recursive() -> None:
    row = Row(key=1, value=Row(name="a", age=2))
    assert row.as_dict() == {"key": 1, "value": Row(age=2, name="a")}
    assert row.as_dict(True) == {"key": 1, "value": {"age": 2, "name": "a"}}
    nested = Row(items=[Row(x=1)], by_name={"k": Row(y=2)})
    assert nested.as_dict(recursive=True) == {"items": [{"x": 1}], "by_name": {"k": {"y": 2}}}
    with pytest.raises(TypeError, match="no field names"):
        Row(1, 2).as_dict()


def test_set_field_names_and_row_kind() -> None:
    row = Row(1, "a")
    row.set_field_names(["id", "label"])
    assert row.label == "a" and row.as_dict() == {"id": 1, "label": "a"}
    assert row.get_row_kind() is RowKind.INSERT
    row.set_row_kind(RowKind.DELETE)
    assert row.get_row_kind() is RowKind.DELETE


def test_row_equality_covers_names_kind_and_values() -> None:
    assert Row(1, "a") == Row(1, "a")
    assert Row(1, "a") != Row(1, "b")
    assert Row(a=1) != Row(1)                        # named vs unnamed
    assert Row(a=1) != Row(b=1)
    assert Row(1) != (1,)
    deleted = Row(1)
    deleted.set_row_kind(RowKind.DELETE)
    assert deleted != Row(1)


def test_rows_are_hashable_keys_and_picklable() -> None:
    counts = {Row("k", 1): 1}
    counts[Row("k", 1)] += 1
    assert counts == {Row("k", 1): 2}
    assert hash(Row(a=1, b="x")) == hash(Row(a=1, b="x"))
    row = Row(name="Alice", age=11)
    row.set_row_kind(RowKind.UPDATE_AFTER)
    copy = pickle.loads(pickle.dumps(row))
    assert copy == row and copy._fields == ["age", "name"]
    assert copy.get_row_kind() is RowKind.UPDATE_AFTER
    assert pickle.loads(pickle.dumps(Row(1, 2))) == Row(1, 2)


def test_rows_sharing_names_and_kind_pickle_packed_into_rows_of_their_own() -> None:
    rows = rows_from_columns(["id", "name"], [[1, 2, 3], ["a", "b", "c"]])
    packed = packed_rows(rows)
    assert isinstance(packed, PackedRows)
    back = pickle.loads(pickle.dumps(packed))
    assert back == rows and all(type(row) is Row for row in back)
    assert back[0]._fields is back[2]._fields == ["id", "name"]
    back[0]["name"] = "changed"
    assert back[1]["name"] == "b" and rows[0]["name"] == "a"
    from_two_batches = rows + rows_from_columns(["id", "name"], [[4], ["d"]])  # equal names, two lists
    assert isinstance(packed_rows(from_two_batches), PackedRows)
    assert pickle.loads(pickle.dumps(packed_rows(from_two_batches))) == from_two_batches
    assert pickle.loads(pickle.dumps(RecordBatch(rows, [5, 6, 7]))) == RecordBatch(rows, [5, 6, 7])


class Point(Row):
    """A subclass of Row, at module level so pickle finds it."""


@pytest.mark.parametrize("odd_one", ["other names", "no names", "another kind", "a subclass", "a tuple"])
def test_rows_that_differ_from_the_first_are_pickled_one_by_one(odd_one: str) -> None:
    rows = rows_from_columns(["id", "name"], [[1, 2], ["a", "b"]])
    odd = {"other names": Row(id=3, nome="c"), "no names": Row(3, "c"), "a subclass": Point(3, "c"),
           "a tuple": (3, "c"), "another kind": Row.of_kind(RowKind.DELETE, id=3, name="c")}[odd_one]
    values = [*rows, odd]
    assert packed_rows(values) is values
    back = pickle.loads(pickle.dumps(values))
    assert back == values and type(back[2]) is type(odd)
    if isinstance(odd, Row):
        assert back[2].get_row_kind() is odd.get_row_kind()


def test_unnamed_rows_pack_only_when_equally_wide_and_not_empty() -> None:
    assert isinstance(packed_rows([Row(1, "a"), Row(2, "b")]), PackedRows)
    for values in ([Row(1, "a"), Row(2)], [Row(1), Row(2, "b")], [Row(), Row()]):
        assert packed_rows(values) is values
        assert pickle.loads(pickle.dumps(values)) == values
    wide = [Row(i, str(i), float(i)) for i in range(50)]
    assert pickle.loads(pickle.dumps(packed_rows(wide))) == wide


def test_a_subclass_of_row_pickles_as_itself_with_its_own_attributes() -> None:
    point = Point(x=1, y=2)
    point.subclass_test_note = "origin-ish"  # a name no row field has
    back = pickle.loads(pickle.dumps(point))
    assert type(back) is Point and back == point and back.subclass_test_note == "origin-ish" and back.x == 1


def test_row_set_items_and_membership() -> None:
    row = Row(a=1, b=2)
    row[0] = 10
    row["b"] = 20
    assert row == Row(a=10, b=20)
    assert 20 in row and "b" not in row              # like PyFlink, `in` looks at the values


def test_unknown_fields_fail_clearly() -> None:
    row = Row(name="Alice", age=11)
    with pytest.raises(KeyError, match="no field 'nmae'.*'age', 'name'"):
        row["nmae"]
    with pytest.raises(AttributeError, match="nmae"):
        row.nmae
    with pytest.raises(KeyError, match="no field names"):
        Row(1)["x"]
    with pytest.raises(AttributeError):
        row.other = 1                                # fields are not set as attributes
    with pytest.raises(InvalidProgramError, match="not both"):
        Row(1, a=2)


# -- Types ------------------------------------------------------------------------------------

ARROW_TYPES = [
    (Types.STRING(), pa.string()), (Types.BYTE(), pa.int8()), (Types.BOOLEAN(), pa.bool_()),
    (Types.SHORT(), pa.int16()), (Types.INT(), pa.int32()), (Types.LONG(), pa.int64()),
    (Types.FLOAT(), pa.float32()), (Types.DOUBLE(), pa.float64()), (Types.CHAR(), pa.string()),
    (Types.BIG_INT(), pa.decimal128(38, 0)), (Types.BIG_DEC(), pa.decimal128(38, 18)),
    (Types.INSTANT(), pa.timestamp("us", tz="UTC")), (Types.SQL_DATE(), pa.date32()),
    (Types.SQL_TIME(), pa.time64("us")), (Types.SQL_TIMESTAMP(), pa.timestamp("us")),
    (Types.PICKLED_BYTE_ARRAY(), pa.binary()),
    (Types.ROW([Types.INT(), Types.STRING()]),
     pa.struct([("f0", pa.int32()), ("f1", pa.string())])),
    (Types.ROW_NAMED(["id", "name"], [Types.LONG(), Types.STRING()]),
     pa.struct([("id", pa.int64()), ("name", pa.string())])),
    (Types.TUPLE([Types.STRING(), Types.DOUBLE()]),
     pa.struct([("f0", pa.string()), ("f1", pa.float64())])),
    (Types.PRIMITIVE_ARRAY(Types.INT()), pa.list_(pa.int32())),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), pa.binary()),
    (Types.BASIC_ARRAY(Types.STRING()), pa.list_(pa.string())),
    (Types.OBJECT_ARRAY(Types.ROW([Types.INT()])), pa.list_(pa.struct([("f0", pa.int32())]))),
    (Types.LIST(Types.DOUBLE()), pa.list_(pa.float64())),
    (Types.MAP(Types.STRING(), Types.LONG()), pa.map_(pa.string(), pa.int64())),
]


@pytest.mark.parametrize("type_info, arrow_type", ARROW_TYPES, ids=lambda x: repr(x))
def test_each_type_knows_its_arrow_type(type_info: TypeInformation, arrow_type: pa.DataType) -> None:
    assert type_info.to_arrow_type() == arrow_type


def test_reprs_follow_pyflink() -> None:
    assert repr(Types.INT()) == "Integer"
    assert repr(Types.ROW_NAMED(["a", "b"], [Types.STRING(), Types.LONG()])) == \
        "RowTypeInfo(a: String, b: Long)"
    assert repr(Types.ROW([Types.STRING()])) == "RowTypeInfo(String)"
    assert repr(Types.LIST(Types.INT())) == "ListTypeInfo<Integer>"
    assert repr(Types.MAP(Types.STRING(), Types.INT())) == "MapTypeInfo<String, Integer>"
    assert repr(Types.PICKLED_BYTE_ARRAY()) == "PickledByteArrayTypeInfo"


def test_type_equality_and_hashing() -> None:
    assert Types.INT() == Types.INT() and Types.INT() != Types.LONG()
    assert len({Types.INT(), Types.INT(), Types.LIST(Types.INT()), Types.LIST(Types.INT())}) == 2
    assert Types.ROW([Types.INT()]) == Types.ROW([Types.INT()])
    assert Types.ROW_NAMED(["a"], [Types.INT()]) != Types.ROW_NAMED(["b"], [Types.INT()])
    assert Types.TUPLE([Types.INT()]) != Types.ROW([Types.INT()])
    assert Types.PRIMITIVE_ARRAY(Types.INT()) != Types.BASIC_ARRAY(Types.INT())


@pytest.mark.parametrize("type_info, value, expected", [
    (Types.INT(), 2**31 - 1, 2**31 - 1),
    (Types.BYTE(), -128, -128),
    (Types.DOUBLE(), 3, 3.0),
    (Types.FLOAT(), 1.5, 1.5),
    (Types.CHAR(), "x", "x"),
    (Types.BIG_INT(), 10**40, 10**40),
    (Types.BIG_DEC(), 7, decimal.Decimal(7)),
    (Types.SQL_DATE(), datetime.date(2024, 1, 2), datetime.date(2024, 1, 2)),
    (Types.STRING(), None, None),
    (Types.TUPLE([Types.INT(), Types.DOUBLE()]), [1, 2], (1, 2.0)),
    (Types.LIST(Types.DOUBLE()), (1, 2.5), [1.0, 2.5]),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), bytearray(b"ab"), b"ab"),
    (Types.MAP(Types.STRING(), Types.DOUBLE()), {"a": 1}, {"a": 1.0}),
    (Types.PICKLED_BYTE_ARRAY(), {1, 2}, {1, 2}),
])
def test_from_python_accepts_and_converts(type_info: TypeInformation, value: Any,
                                          expected: Any) -> None:
    result = type_info.from_python(value)
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize("type_info, value", [
    (Types.INT(), 2**31), (Types.BYTE(), 128), (Types.INT(), True), (Types.INT(), 1.0),
    (Types.LONG(), "1"), (Types.DOUBLE(), True), (Types.BOOLEAN(), 1), (Types.CHAR(), "ab"),
    (Types.STRING(), b"x"), (Types.SQL_DATE(), datetime.datetime(2024, 1, 2)),
    (Types.INSTANT(), datetime.datetime(2024, 1, 2)), (Types.SQL_TIME(), "12:00"),
    (Types.TUPLE([Types.INT()]), (1, 2)), (Types.LIST(Types.INT()), "123"),
    (Types.PRIMITIVE_ARRAY(Types.INT()), [1, None]), (Types.MAP(Types.STRING(), Types.INT()), [1]),
])
def test_from_python_refuses_values_that_do_not_fit(type_info: TypeInformation, value: Any) -> None:
    with pytest.raises(TypeError):
        type_info.from_python(value)


def test_row_values_are_checked_field_by_field_and_ordered_by_name() -> None:
    person = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    converted = person.from_python(Row(age=3, name="x"))   # sorted keyword row, reordered by name
    assert converted._fields == ["name", "age"] and list(converted) == ["x", 3]
    assert person.from_python(("y", 4)) == Row("name", "age")("y", 4)
    assert person.from_python({"age": 5, "name": "z"}).as_dict() == {"name": "z", "age": 5}
    with pytest.raises(TypeError, match="field 'age'.*Integer.*'old'"):
        person.from_python(("x", "old"))
    with pytest.raises(TypeError, match="do not match"):
        person.from_python(Row(name="x", years=3))
    with pytest.raises(TypeError, match="expected 2 field"):
        person.from_python(("x",))
    deleted = Row("a")
    deleted.set_row_kind(RowKind.DELETE)
    assert Types.ROW([Types.STRING()]).from_python(deleted).get_row_kind() is RowKind.DELETE


def test_row_type_lookups() -> None:
    person = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    assert person.get_field_names() == ["name", "age"]
    assert person.get_field_types() == [Types.STRING(), Types.INT()]
    assert (person.get_field_index("age"), person.get_field_index("nope")) == (1, -1)
    assert Types.ROW([Types.INT(), Types.INT()]).get_field_names() == ["f0", "f1"]


def test_bad_type_declarations_fail_when_the_job_is_built() -> None:
    with pytest.raises(InvalidProgramError, match="field 1"):
        Types.ROW([Types.INT(), int])  # type: ignore[list-item]
    with pytest.raises(InvalidProgramError, match="2 name"):
        Types.ROW_NAMED(["a", "b"], [Types.INT()])
    with pytest.raises(InvalidProgramError, match="duplicate"):
        Types.ROW_NAMED(["a", "a"], [Types.INT(), Types.INT()])
    with pytest.raises(InvalidProgramError, match="PRIMITIVE_ARRAY"):
        Types.PRIMITIVE_ARRAY(Types.STRING())
    with pytest.raises(InvalidProgramError, match="BASIC_ARRAY"):
        Types.BASIC_ARRAY(Types.LIST(Types.INT()))
    with pytest.raises(InvalidProgramError, match="element type"):
        Types.LIST("int")  # type: ignore[arg-type]


# -- columnar round trips ---------------------------------------------------------------------

NESTED = Types.ROW_NAMED(
    ["id", "name", "scores", "attrs", "raw", "big", "when", "pair", "blob"],
    [Types.LONG(), Types.STRING(), Types.LIST(Types.DOUBLE()), Types.MAP(Types.STRING(), Types.INT()),
     Types.PRIMITIVE_ARRAY(Types.BYTE()), Types.BIG_INT(), Types.SQL_TIMESTAMP(),
     Types.TUPLE([Types.STRING(), Types.ROW([Types.INT()])]), Types.PICKLED_BYTE_ARRAY()])


def test_nested_rows_round_trip_through_arrow() -> None:
    values = [
        Row("id", "name", "scores", "attrs", "raw", "big", "when", "pair", "blob")(
            1, "a", [1.0, None], {"k": 2}, b"\x00\x01", 10**30, datetime.datetime(2024, 5, 6, 7, 8, 9),
            ("p", Row("f0")(5)), {"any": {1, 2}}),
        None,
        Row("id", "name", "scores", "attrs", "raw", "big", "when", "pair", "blob")(
            2, None, [], {}, b"", None, None, ("q", None), None),
    ]
    array = NESTED.to_arrow_array(values)
    assert array.type == NESTED.to_arrow_type() and array.null_count == 1
    assert NESTED.from_arrow_array(array) == values


def test_a_columnar_row_array_reaches_polars_as_a_struct() -> None:
    person = Types.ROW_NAMED(["name", "age"], [Types.STRING(), Types.INT()])
    array = person.to_arrow_array([Row(name="x", age=3), Row(name="y", age=4)])
    frame = pl.from_arrow(pa.table({"person": array})).unnest("person")
    assert frame.rows() == [("x", 3), ("y", 4)]


def test_only_insert_rows_are_kept_columnar() -> None:
    row = Row(1)
    row.set_row_kind(RowKind.UPDATE_BEFORE)
    with pytest.raises(ValueError, match="UPDATE_BEFORE"):
        Types.ROW([Types.INT()]).to_arrow_array([row])


@given(st.lists(st.one_of(st.none(), st.tuples(
    st.integers(-2**63, 2**63 - 1), st.text(), st.floats(allow_nan=False),
    st.lists(st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)))))))
def test_row_columns_round_trip(rows: list[Any]) -> None:
    type_info = Types.ROW([Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.LIST(Types.INT())])
    values = [None if r is None else Row("f0", "f1", "f2", "f3")(*r) for r in rows]  # a ROW's rows carry f-names
    assert type_info.from_arrow_array(type_info.to_arrow_array(values)) == values


@given(st.lists(st.one_of(st.none(), st.integers(), st.text(), st.tuples(st.integers(), st.text()))))
def test_pickled_columns_round_trip_any_object(values: list[Any]) -> None:
    type_info = Types.PICKLED_BYTE_ARRAY()
    assert type_info.from_arrow_array(type_info.to_arrow_array(values)) == values


def test_a_copied_row_has_its_own_values_and_the_same_names_and_kind() -> None:
    import copy

    from slipstream.datastream.fields import replace_field
    from slipstream.datastream.typeinfo import RowKind
    row = Row(a=1, b=2)
    row.set_row_kind(RowKind.UPDATE_AFTER)
    changed = replace_field(row, "b", 7)
    assert changed.get_row_kind() is RowKind.UPDATE_AFTER and changed.as_dict() == {"a": 1, "b": 7}
    assert row.as_dict() == {"a": 1, "b": 2} and copy.copy(row) == row

"""CSV and JSON lines are parsed a block at a time by pyarrow; the records, the bad records (with
file, line, offset and field), the errors and the positions are those of the line-by-line readers,
which serve as the oracle here over generated files (quotes, embedded newlines, CRLF, empty
fields, nulls, unicode, bad lines), with blocks small enough that records straddle them."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from slipstream.datastream.connectors.errors import SourceFormatError
from slipstream.datastream.formats import blocks
from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema, _CsvBlockReader, _CsvRecordReader
from slipstream.datastream.formats.json import (
    JsonLinesReaderFormat,
    JsonRowDeserializationSchema,
    _JsonLinesBlockReader,
    _JsonLinesReader,
    _JsonRowsBlockReader,
)
from slipstream.datastream.typeinfo import Types


def _comparable(value):
    """Values as a plain structure in which NaN equals NaN and types count (1 is not 1.0 nor True)."""
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_comparable(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, _comparable(v)) for k, v in value.items()])
    if hasattr(value, "as_dict"):
        return ("row", [(k, _comparable(v)) for k, v in value.as_dict().items()])
    return (type(value).__name__, value)


def _read(reader_class, path, schema, sizes, route_bad=True, position=None):
    """What a ``reader_class`` reader yields in batches of the given sizes (cycled): per batch, its
    values and bad records (then the error it fails with, if it does), and its position after each."""
    batches, positions = [], []
    index = 0
    try:
        reader = reader_class(str(path), schema, position)
        reader.bad_records = [] if route_bad else None
        while (batch := reader.read_batch(sizes[index % len(sizes)])) is not None:
            index += 1
            bad = [(b.raw, b.error, b.line, b.offset, b.field) for b in reader.bad_records or ()]
            reader.bad_records = [] if route_bad else None
            batches.append(([_comparable(v) for v in batch.values], bad))
            positions.append(reader.position())
    except SourceFormatError as error:
        batches.append(("error", str(error)))
    return batches, positions


def _same_as_lines(bulk_class, line_class, path, schema, sizes, route_bad):
    """The bulk reader yields the line reader's batches, and the line reader resumed at each of
    the bulk reader's positions reads exactly the records after it (a position may differ from
    the line reader's only by lines holding no record)."""
    batches, positions = _read(bulk_class, path, schema, sizes, route_bad)
    assert batches == _read(line_class, path, schema, sizes, route_bad)[0]
    if route_bad:
        for index, position in enumerate(positions):
            rest = _read(line_class, path, schema, [7], True, json.loads(json.dumps(position)))[0]
            for kind in (0, 1):  # the records, the bad records
                assert [item for batch in rest for item in batch[kind]] == \
                    [item for batch in batches[index + 1:] for item in batch[kind]]


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 64)


_FIELD_TEXT = st.sampled_from(["", "x", "abc", "é", "日本", "-7", "42", "007", "1.5", "-2e3", "inf", "nan",
                               "true", "FALSE", " 1", "0x10", "1_0", "NULL", "a;b", "a;;1", "300", "99999999999",
                               "3.", ".5", "\u3000"])


@st.composite
def _csv_field(draw):
    text = draw(_FIELD_TEXT | st.text(alphabet="ab,\"\n\r 1;", max_size=5))
    style = draw(st.sampled_from(["plain", "quoted", "quoted", "broken"]))
    if style == "quoted":
        return '"' + text.replace('"', '""') + '"'
    if style == "broken":
        return draw(st.sampled_from(['"a"b', 'a"b', '"a" ', '"x""', 'x\ry']))
    return text.replace('"', "").replace("\n", "").replace("\r", "").replace(",", "")


@st.composite
def _csv_file(draw, width):
    lines = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["record"] * 8 + ["short", "long", "empty"]))
        count = {"record": width, "short": width - 1, "long": width + 1, "empty": 0}[kind]
        lines.append(",".join(draw(_csv_field()) for _ in range(count)))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    ending = draw(st.sampled_from(["", newline]))
    return (newline.join(lines) + ending).encode("utf-8")


_CSV_SCHEMAS = {
    "typed": (CsvSchema.builder().add_number_column("i", Types.INT()).add_string_column("s")
              .add_number_column("d", Types.DOUBLE()).add_boolean_column("b").add_number_column("y", Types.BYTE())
              .set_null_value("NULL").build()),
    "exotic": (CsvSchema.builder().add_number_column("l", Types.LONG()).add_array_column("a", element_type=Types.INT())
               .add_number_column("big", Types.BIG_INT()).add_number_column("dec", Types.BIG_DEC())
               .add_number_column("f", Types.FLOAT()).build()),
    "header": CsvSchema.builder().set_use_header().build(),
    "unquoted": (CsvSchema.builder().add_string_column("a").add_string_column("b").add_string_column("c")
                 .add_string_column("d").add_string_column("e").disable_quote_char().build()),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(_CSV_SCHEMAS)), data=st.data(),
       sizes=st.lists(st.integers(1, 9), min_size=1, max_size=3), route_bad=st.booleans())
def test_csv_blocks_read_the_same_records_bad_records_errors_and_positions_as_lines(
        tmp_path_factory, small_blocks, name, data, sizes, route_bad):
    schema = _CSV_SCHEMAS[name]
    content = data.draw(_csv_file(5))
    path = tmp_path_factory.mktemp("csv") / "f.csv"
    path.write_bytes(content)
    _same_as_lines(_CsvBlockReader, _CsvRecordReader, path, schema, sizes, route_bad)


@st.composite
def _json_line(draw):
    kind = draw(st.sampled_from(["object"] * 6 + ["blank", "garbage", "two", "array", "surrogate", "dup"]))
    if kind == "object":
        document = {}
        for key in draw(st.lists(st.sampled_from(["id", "name", "score", "ok", "other"]), unique=True)):
            document[key] = draw(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.sampled_from([
                1.0, 1e300, -0.0, 2**70, "x", "日本", "", [1], {"a": 1}, float("nan")]) | st.floats(allow_nan=False))
        return json.dumps(document, ensure_ascii=draw(st.booleans()))
    return {"blank": draw(st.sampled_from(["", "  ", "\t", "\x0c"])), "garbage": '{"id": 1', "two": '{"id":1} {"id":2}',
            "array": "[1, 2]", "surrogate": '{"name": "\\ud800"}', "dup": '{"id": 1, "id": 2}'}[kind]


_JSON_SCHEMAS = {
    "rows": Types.ROW_NAMED(["id", "name", "score", "ok"], [Types.INT(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN()]),
    "narrow": Types.ROW_NAMED(["id", "score"], [Types.BYTE(), Types.FLOAT()]),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from([None, "rows", "narrow", "strict", "lenient"]),
       lines=st.lists(_json_line(), max_size=30), newline=st.sampled_from(["\n", "\r\n"]),
       sizes=st.lists(st.integers(1, 9), min_size=1, max_size=3), route_bad=st.booleans())
def test_json_blocks_read_the_same_records_bad_records_errors_and_positions_as_lines(
        tmp_path_factory, small_blocks, name, lines, newline, sizes, route_bad):
    path = tmp_path_factory.mktemp("json") / "f.jsonl"
    path.write_bytes((newline.join(lines) + newline).encode("utf-8", "surrogatepass"))
    builder = JsonRowDeserializationSchema.builder().type_info(_JSON_SCHEMAS.get(name, _JSON_SCHEMAS["rows"]))
    schema = {None: None, "rows": builder.build(), "narrow": builder.build(),
              "strict": builder.fail_on_missing_field().build(),
              "lenient": JsonRowDeserializationSchema(_JSON_SCHEMAS["rows"], ignore_parse_errors=True)}[name]
    reader = _JsonLinesBlockReader if schema is None else _JsonRowsBlockReader
    _same_as_lines(reader, _JsonLinesReader, path, schema, sizes, route_bad)


def _big_csv(tmp_path, rows, bad_row=None):
    """A CSV file of ``rows`` records, a third of them quoted over two lines, the one at ``bad_row``
    with a bad id; and the byte offset and line number of that one."""
    path = tmp_path / "big.csv"
    lines = ["id,name"] + [f'{i},"n{i}, ""q""\nsecond line"' if i % 3 else f"{i},plain" for i in range(rows)]
    if bad_row is None:
        path.write_text("\n".join(lines) + "\n")
        return path, None, None
    lines[bad_row + 1] = "12x,oops"
    path.write_text("\n".join(lines) + "\n")
    offset = len("\n".join(lines[:bad_row + 1]).encode()) + 1
    line = 1 + sum(1 + line.count("\n") for line in lines[1:bad_row + 1]) + 1
    return path, offset, line


def _csv_schema():
    return CsvSchema.builder().add_number_column("id", Types.INT()).add_string_column("name").set_use_header().build()


def test_a_bad_csv_line_deep_in_a_file_is_named_by_file_line_offset_and_field(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 1 << 16)
    path, offset, line = _big_csv(tmp_path, 30_000, 23_456)
    reader = CsvReaderFormat.for_schema(_csv_schema()).create_reader(str(path), None, None)
    assert isinstance(reader, _CsvBlockReader)
    read = 0
    with pytest.raises(SourceFormatError) as caught:
        while (batch := reader.read_batch(1000)) is not None:
            read += len(batch.values)
    assert 20_000 <= read <= 23_456  # the records of the blocks before the bad line's came through
    assert (caught.value.path, caught.value.line_number, caught.value.offset) == (str(path), line, offset)
    assert caught.value.field == "'id' (column 1)" and caught.value.got == "12x"


def test_a_bad_csv_line_goes_to_the_bad_records_and_the_rest_of_its_block_is_read(tmp_path):
    path, offset, line = _big_csv(tmp_path, 30_000, 23_456)
    reader = CsvReaderFormat.for_schema(_csv_schema()).create_reader(str(path), None, None)
    reader.bad_records = []
    ids = []
    while (batch := reader.read_batch(4096)) is not None:
        ids.extend(row.id for row in batch.values)
    assert ids == [i for i in range(30_000) if i != 23_456]
    [bad] = reader.bad_records
    assert (bad.raw, bad.line, bad.offset, bad.field) == ("12x,oops", line, offset, "'id' (column 1)")


@pytest.mark.parametrize("stop", [1, 999, 5000, 12_345])
def test_a_position_taken_mid_block_resumes_at_the_next_record(tmp_path, stop):
    path, _, _ = _big_csv(tmp_path, 20_000)
    reader_format = CsvReaderFormat.for_schema(_csv_schema())
    reader = reader_format.create_reader(str(path), None, None)
    first = reader.read_batch(stop).values
    position = json.loads(json.dumps(reader.position()))
    restored = reader_format.create_reader(str(path), None, position)
    rest = []
    while (batch := restored.read_batch(777)) is not None:
        rest.extend(batch.values)
    expected = [f"n{i}, \"q\"\nsecond line" if i % 3 else "plain" for i in range(20_000)]
    assert [row.name for row in first + rest] == expected


def test_schemas_the_bulk_path_cannot_match_use_the_line_reader(tmp_path):
    path = tmp_path / "f.csv"
    path.write_text("a\n")
    escaped = CsvSchema.builder().add_string_column("a").set_escape_char("\\").build()
    commented = CsvSchema.builder().add_string_column("a").set_allow_comments().build()
    for schema in (escaped, commented):
        assert type(CsvReaderFormat.for_schema(schema).create_reader(str(path), None, None)) is _CsvRecordReader
    nested = JsonRowDeserializationSchema(Types.ROW_NAMED(["a"], [Types.LIST(Types.INT())]))
    assert type(JsonLinesReaderFormat(nested).create_reader(str(path), None, None)) is _JsonLinesReader

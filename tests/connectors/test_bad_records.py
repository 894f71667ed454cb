"""Bad input routed to a side output: ``FileSourceBuilder.with_bad_record_output(tag)`` turns each
record that does not parse into a ``BadRecord`` on the source stream's side output, and the good
records flow on; without it the job fails naming file, line, offset, field and what was expected."""

from __future__ import annotations

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.errors import BadRecord, SourceFormatError
from slipstream.datastream.connectors.file_system import FileSource, StreamFormat
from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema
from slipstream.datastream.formats.json import JsonLinesReaderFormat, JsonRowDeserializationSchema
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.typeinfo import Types
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.errors import InvalidProgramError

BAD = OutputTag("bad")


def run(source, watermarks=None):
    env = StreamExecutionEnvironment.get_execution_environment()
    good, bad = [], []
    stream = env.from_source(source, watermarks, "in")
    stream.add_sink(good.append)
    stream.get_side_output(BAD).add_sink(bad.append)
    env.execute("bad records")
    return good, bad


def csv_format():
    schema = (CsvSchema.builder().add_number_column("id", number_type=Types.INT()).add_string_column("name")
              .set_use_header().build())
    return CsvReaderFormat.for_schema(schema)


@pytest.mark.parametrize("watermarks", [None, WatermarkStrategy.for_monotonous_timestamps()])
def test_csv_lines_that_do_not_parse_go_to_the_side_output_with_where_and_why(tmp_path, watermarks):
    path = tmp_path / "a.csv"
    path.write_text('id,name\n1,a\nx,b\n3,c\n4\n"5,e\n')
    source = FileSource.for_record_stream_format(csv_format(), str(path)).with_bad_record_output(BAD).build()
    good, bad = run(source, watermarks)  # with a watermark strategy the side output still comes from the source
    assert [row.id for row in good] == [1, 3]
    assert [(b.raw, b.line, b.offset) for b in bad] == [("x,b", 3, 12), ("4", 5, 20), ('"5,e', 6, 22)]
    assert all(isinstance(b, BadRecord) and b.path == str(path) for b in bad)
    assert "'id'" in bad[0].field and "Integer" in bad[0].error and "line 3" in bad[0].error
    assert "2 fields" in bad[1].error and "closing" in bad[2].error


def test_json_lines_and_undecodable_text_go_to_the_side_output(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"id": 1}\n{"id": "two"}\nnot json\n\xff\xfe\n{"id": 5}\n')
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["id"], [Types.INT()])).build()
    source = (FileSource.for_record_stream_format(JsonLinesReaderFormat(schema), str(path))
              .with_bad_record_output(BAD).build())
    good, bad = run(source)
    assert [row.id for row in good] == [1, 5]
    assert [b.line for b in bad] == [2, 3, 4]
    assert bad[2].raw == b"\xff\xfe\n" and bad[2].as_dict()["raw"] == "\\xff\\xfe\n"


def test_a_batch_of_only_bad_lines_does_not_end_the_file(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id,name\n" + "".join(f"x{i},n\n" for i in range(50)) + "7,ok\n")
    source = FileSource.for_record_stream_format(csv_format(), str(path)).with_bad_record_output(BAD).build()
    good, bad = run(source)
    assert [row.id for row in good] == [7] and len(bad) == 50


def test_without_a_bad_record_output_the_job_fails_naming_file_line_and_field(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id,name\n1,a\nx,b\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(FileSource.for_record_stream_format(csv_format(), str(path)).build(), None, "in") \
        .add_sink(lambda row: None)
    with pytest.raises(SourceFormatError, match=r"line 3 \(byte offset 12\), field 'id'.*Integer"):
        env.execute("fails")


def test_with_bad_record_output_is_checked_when_the_source_is_built(tmp_path):
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
    with pytest.raises(InvalidProgramError, match="OutputTag"):
        builder.with_bad_record_output("bad")
    bulk = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(), str(tmp_path))
    with pytest.raises(InvalidProgramError, match="record formats"):
        bulk.with_bad_record_output(BAD)

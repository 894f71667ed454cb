"""``pyflink.common.serialization``'s names: the schemas, ``Encoder`` (also from ``pyflink.common``,
as PyFlink's word count imports it) and ``BulkWriterFactory``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from slipstream.common import Encoder, Types, WatermarkStrategy
from slipstream.common.serialization import (
    BulkWriterFactory,
    ByteArraySchema,
    DeserializationSchema,
    SerializationSchema,
    SimpleStringSchema,
)
from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import (
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from slipstream.datastream.formats.base import BulkWriterFactory as FormatsBulkWriterFactory
from slipstream.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema
from slipstream.errors import InvalidProgramError


def test_simple_string_schema_round_trips_in_its_charset() -> None:
    assert SimpleStringSchema().serialize("straße") == "straße".encode()
    latin = SimpleStringSchema("ISO-8859-1")
    assert latin.serialize("é") == b"\xe9"
    assert latin.deserialize(b"\xe9") == "é"
    assert SimpleStringSchema().get_produced_type() == Types.STRING()


def test_simple_string_schema_names_what_it_cannot_take() -> None:
    with pytest.raises(InvalidProgramError, match="unknown charset 'no-such-charset'"):
        SimpleStringSchema("no-such-charset")
    with pytest.raises(TypeError, match=r"str records, got int: 42"):
        SimpleStringSchema().serialize(42)


def test_byte_array_schema_passes_bytes_through() -> None:
    schema = ByteArraySchema()
    assert schema.serialize(bytearray(b"\x00\x01")) == b"\x00\x01"
    assert schema.deserialize(memoryview(b"ab")) == b"ab"
    with pytest.raises(TypeError, match="bytes records, got str"):
        schema.serialize("text")


def test_a_users_schema_subclasses_the_bases_as_in_pyflink() -> None:
    class Upper(SerializationSchema, DeserializationSchema):
        def serialize(self, element: str) -> bytes:
            return element.upper().encode()

        def deserialize(self, message: bytes) -> str:
            return message.decode().lower()

    schema = Upper()
    assert schema.deserialize(schema.serialize("abc")) == "abc"
    assert not schema.is_end_of_stream("abc")
    with pytest.raises(TypeError, match="abstract"):
        SerializationSchema()  # type: ignore[abstract]


def test_the_json_row_schemas_are_schemas() -> None:
    row_type = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    reader = JsonRowDeserializationSchema.builder().type_info(row_type).build()
    writer = JsonRowSerializationSchema.builder().with_type_info(row_type).build()
    assert isinstance(reader, DeserializationSchema) and isinstance(writer, SerializationSchema)
    assert reader.get_produced_type() is row_type
    assert reader.deserialize(writer.serialize((7, "x"))).as_dict() == {"id": 7, "name": "x"}
    assert BulkWriterFactory is FormatsBulkWriterFactory


def test_pyflinks_word_count_runs_with_encoder_from_common(tmp_path: Path) -> None:
    lines = ["to be or not to be", "that is the question", "to sleep perchance to dream"]
    source_file = tmp_path / "words.txt"
    source_file.write_text("\n".join(lines) + "\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.set_parallelism(1)
    ds = env.from_source(
        source=FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(source_file))
        .process_static_file_set().build(),
        watermark_strategy=WatermarkStrategy.for_monotonous_timestamps(), source_name="file_source")
    counts = (ds.flat_map(lambda line: line.split())
              .map(lambda word: (word, 1), output_type=Types.TUPLE([Types.STRING(), Types.INT()]))
              .key_by(lambda pair: pair[0])
              .reduce(lambda a, b: (a[0], a[1] + b[1])))
    out = tmp_path / "out"
    counts.sink_to(FileSink.for_row_format(base_path=str(out), encoder=Encoder.simple_string_encoder())
                   .with_output_file_config(OutputFileConfig.builder().with_part_prefix("prefix")
                                            .with_part_suffix(".ext").build())
                   .with_rolling_policy(RollingPolicy.default_rolling_policy()).build())
    env.execute()
    parts = sorted(out.rglob("prefix-*.ext"))
    assert parts, "no part file written"
    written = [line for part in parts for line in part.read_text().splitlines()]
    expected = Counter(word for line in lines for word in line.split())
    assert sorted(written) == sorted(f"({word},{count})" for word, count in expected.items())

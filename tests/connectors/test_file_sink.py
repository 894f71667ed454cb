import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipstream.datastream.connectors.base import RecordWriteError
from slipstream.datastream.connectors.errors import SinkFormatError
from slipstream.datastream.connectors.file_system import (
    Encoder,
    FileSink,
    FileSource,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from slipstream.datastream.formats.csv import CsvBulkWriters, CsvEncoder, CsvReaderFormat, CsvSchema
from slipstream.datastream.formats.json import JsonLinesEncoder, JsonLinesReaderFormat
from slipstream.datastream.formats.parquet import ParquetBulkWriters, ParquetColumnarRowInputFormat
from slipstream.datastream.typeinfo import Row, Types

from connector_harness import read_subtasks


def _write(sink, batches_per_subtask: list[list[list]]):
    for index, batches in enumerate(batches_per_subtask):
        writer = sink.create_writer()
        writer.open(index, len(batches_per_subtask))
        for batch in batches:
            writer.write(batch, None)
        writer.flush()
        writer.close()


def _visible(path):
    return sorted(name for name in os.listdir(path) if not name.startswith("."))


def test_row_format_part_names_and_content(tmp_path):
    config = OutputFileConfig.builder().with_part_prefix("out").with_part_suffix(".txt").build()
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()) \
        .with_output_file_config(config).build()
    _write(sink, [[[1, 2], [3]], [["x"]]])
    assert _visible(tmp_path) == ["out-0-0.txt", "out-1-0.txt"]
    assert (tmp_path / "out-0-0.txt").read_text() == "1\n2\n3\n"
    assert sorted(os.listdir(tmp_path)) == _visible(tmp_path)  # no in-progress file left behind


def test_part_is_in_progress_until_flush(tmp_path):
    writer = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build().create_writer()
    writer.open(0, 1)
    writer.write(["a", "b"], None)
    names = os.listdir(tmp_path)
    assert _visible(tmp_path) == [] and len(names) == 1 and ".inprogress." in names[0]
    writer.flush()
    assert _visible(tmp_path) == ["part-0-0"] and len(os.listdir(tmp_path)) == 1
    writer.write(["c"], None)  # the next part gets the next counter
    writer.flush()
    assert _visible(tmp_path) == ["part-0-0", "part-0-1"]


def test_close_without_flush_commits_nothing(tmp_path):
    """A writer closed on a failure path leaves its open part hidden, never half-committed."""
    writer = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build().create_writer()
    writer.open(0, 1)
    writer.write(["a"], None)
    writer.close()
    assert _visible(tmp_path) == []


def test_second_run_adds_parts_instead_of_replacing(tmp_path):
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build()
    _write(sink, [[["first"]]])
    _write(sink, [[["second"]]])
    assert [(tmp_path / n).read_text() for n in _visible(tmp_path)] == ["first\n", "second\n"]


def test_rolling_by_size(tmp_path):
    policy = RollingPolicy.default_rolling_policy(part_size=10)
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).with_rolling_policy(policy).build()
    _write(sink, [[[f"line{i}" for i in range(5)]]])
    names = _visible(tmp_path)
    assert len(names) == 3  # 6 bytes a line: two lines fill a part
    assert "".join((tmp_path / n).read_text() for n in sorted(names, key=lambda n: int(n.split("-")[-1]))) \
        == "".join(f"line{i}\n" for i in range(5))


def test_csv_and_json_encoders_round_trip_through_file_source(tmp_path):
    schema = (CsvSchema.builder().add_number_column("id", Types.INT()).add_string_column("name")
              .add_boolean_column("ok").build())
    records = [Row(1, "a, b", True), {"name": 'q"uote', "id": 2, "ok": False}, (3, "multi\nline", None)]
    _write(FileSink.for_row_format(str(tmp_path / "csv"), CsvEncoder(schema)).build(), [[records]])
    [rows] = read_subtasks(
        FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(tmp_path / "csv")).build(), 1)
    assert [tuple(r) for r in rows] == [(1, "a, b", True), (2, 'q"uote', False), (3, "multi\nline", None)]

    documents = [{"k": 1, "v": [1, 2]}, {"k": 2, "v": None}]
    _write(FileSink.for_row_format(str(tmp_path / "json"), JsonLinesEncoder()).build(), [[documents]])
    [read] = read_subtasks(FileSource.for_record_stream_format(JsonLinesReaderFormat(), str(tmp_path / "json")).build(), 1)
    assert read == documents


def test_csv_encoder_refuses_a_record_missing_a_column():
    schema = CsvSchema.builder().add_string_column("a").add_string_column("b").build()
    with pytest.raises(SinkFormatError, match=r"lacks column\(s\) \['b'\]"):
        CsvEncoder(schema).encode({"a": 1})


def test_csv_bulk_writer_writes_a_header_per_part(tmp_path):
    schema = CsvSchema.builder().add_string_column("w").add_number_column("n").set_use_header().build()
    _write(FileSink.for_bulk_format(str(tmp_path), CsvBulkWriters.for_schema(schema)).build(), [[[("a", 1), ("b", 2)]]])
    assert (tmp_path / "part-0-0").read_text() == "w,n\na,1\nb,2\n"


def test_parquet_bulk_sink_round_trip(tmp_path):
    schema = pa.schema([("word", pa.string()), ("n", pa.int64())])
    sink = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_schema(schema, row_group_size=4)).build()
    subtask_records = [[[("a", 1), Row(word="b", n=2)], [{"word": "c", "n": 3}]], [[("d", 4)] * 9]]
    _write(sink, subtask_records)
    assert _visible(tmp_path) == ["part-0-0", "part-1-0"]
    assert pq.ParquetFile(tmp_path / "part-1-0").num_row_groups == 3
    source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(), str(tmp_path)).build()
    read = [tuple(r) for part in read_subtasks(source, 2) for r in part]
    assert sorted(read) == sorted([("a", 1), ("b", 2), ("c", 3)] + [("d", 4)] * 9)


def test_parquet_writer_names_a_record_it_cannot_write(tmp_path):
    writer = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_schema()).build().create_writer()
    writer.open(0, 1)
    with pytest.raises(RecordWriteError, match="expected a dict or a named Row") as raised:
        writer.write([("no", "names")], None)
    assert raised.value.record == ("no", "names") and isinstance(raised.value.cause, SinkFormatError)


def test_text_sink_output_read_back_by_source(tmp_path):
    lines = [f"row {i}" for i in range(30)]
    _write(FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build(),
           [[lines[:10]], [lines[10:25]], [lines[25:]]])
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    for parallelism in (1, 2, 3):
        read = [line for part in read_subtasks(source, parallelism) for line in part]
        assert sorted(read) == sorted(lines)


# -- bucket assigners ---------------------------------------------------------------------------------
def test_a_date_time_bucket_assigner_writes_each_hours_parts_into_its_own_directory(tmp_path, monkeypatch):
    """Flink's DateTimeBucketAssigner: the processing time a record is written at, formatted, names its
    part's directory; a new bucket closes the previous one's part. Counters run on across buckets."""
    import slipstream.datastream.connectors.file_system as file_system
    from slipstream.datastream.connectors.file_system import BucketAssigner

    clock = [1_764_543_600_000.0]  # 2025-11-30 23:00 UTC, in ms
    monkeypatch.setattr(file_system.time, "time", lambda: clock[0] / 1000)
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()) \
        .with_bucket_assigner(BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC")) \
        .with_bucket_check_interval(1000).build()
    writer = sink.create_writer()
    writer.open(0, 1)
    writer.write(["a", "b"], None)
    clock[0] += 3_600_000  # the next hour
    writer.write(["c"], None)
    writer.flush()
    writer.close()
    assert sorted(os.listdir(tmp_path)) == ["2025-11-30--23", "2025-12-01--00"]
    assert (tmp_path / "2025-11-30--23" / "part-0-0").read_text() == "a\nb\n"
    assert (tmp_path / "2025-12-01--00" / "part-0-1").read_text() == "c\n"
    again = sink.create_writer()  # a second run numbers its parts after every bucket's
    again.open(0, 1)
    again.write(["d"], None)
    again.flush()
    assert (tmp_path / "2025-12-01--00" / "part-0-2").read_text() == "d\n"


def test_bucket_patterns_and_refusals() -> None:
    from slipstream.datastream.connectors.file_system import BucketAssigner
    from slipstream.errors import InvalidProgramError

    assert BucketAssigner.base_path_bucket_assigner().bucket_id(0) == ""
    nested = BucketAssigner.date_time_bucket_assigner("yyyy/MM/dd/'hour='HH", "UTC")
    assert nested.bucket_id(0) == "1970/01/01/hour=00"
    with pytest.raises(InvalidProgramError, match="pattern letter 'Q' is not supported"):
        BucketAssigner.date_time_bucket_assigner("yyyy-QQ")
    with pytest.raises(InvalidProgramError, match="unknown time zone"):
        BucketAssigner.date_time_bucket_assigner("yyyy", "Mars/Olympus")
    with pytest.raises(InvalidProgramError, match="needs a BucketAssigner"):
        FileSink.for_row_format("/tmp/x", Encoder.simple_string_encoder()).with_bucket_assigner("hourly")


def test_a_bucketed_sink_commits_exactly_once_across_a_restart(tmp_path):
    """Pending parts in bucket directories are listed in a checkpoint by their path under the base
    path; a restore commits them and removes what was written after it, in every bucket."""
    from slipstream.datastream.connectors.file_system import BucketAssigner

    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()) \
        .with_bucket_assigner(BucketAssigner.date_time_bucket_assigner("'day'", "UTC")).build()
    writer = sink.create_writer()
    writer.open(0, 1)
    writer.begin_two_phase_commit()  # as the sink operator does when the job checkpoints
    writer.write(["one", "two"], None)
    state = writer.prepare_commit(1)
    writer.write(["after the checkpoint"], None)
    writer.prepare_commit(2)  # closed, pending, never committed: the job died before checkpoint 2 completed
    assert state["pending"][0][1] == os.path.join("day", "part-0-0")
    restored = sink.create_writer()
    restored.open(0, 1)
    restored.check_commit_state([state])
    restored.restore_commit_state([state])
    assert sorted(os.listdir(tmp_path / "day")) == ["part-0-0"]
    assert (tmp_path / "day" / "part-0-0").read_text() == "one\ntwo\n"


def test_streaming_file_sink_is_the_older_name_and_compaction_is_kept_not_applied(tmp_path):
    from slipstream.datastream import StreamExecutionEnvironment
    from slipstream.datastream.connectors.file_system import FileCompactor, FileCompactStrategy, StreamingFileSink

    strategy = FileCompactStrategy.builder().set_size_threshold(1024).enable_compaction_on_checkpoint(2) \
        .set_num_compact_threads(2).build()
    assert (strategy.size_threshold, strategy.checkpoints_before_compaction, strategy.num_compact_threads) == (1024, 2, 2)
    builder = StreamingFileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder())
    with pytest.warns(UserWarning, match="committed part files are not merged"):
        builder.enable_compact(strategy, FileCompactor.concat_file_compactor(b"\n"))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection(["a", "b"]).add_sink(builder.disable_compact().build())
    env.execute()
    assert _visible(tmp_path) == ["part-0-0"] and (tmp_path / "part-0-0").read_text() == "a\nb\n"


def test_parquet_writers_for_a_row_type_as_pyflinks(tmp_path):
    from slipstream.datastream import StreamExecutionEnvironment
    from slipstream.errors import InvalidProgramError

    row_type = Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.LONG()])
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([("a", 1), ("b", 2)], type_info=row_type) \
        .sink_to(FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_row_type(row_type)).build())
    env.execute()
    table = pq.read_table(tmp_path / "part-0-0")
    assert table.schema.names == ["word", "n"] and table.to_pylist() == [{"word": "a", "n": 1}, {"word": "b", "n": 2}]
    with pytest.raises(InvalidProgramError, match="needs a Types.ROW_NAMED"):
        ParquetBulkWriters.for_row_type(Types.STRING())

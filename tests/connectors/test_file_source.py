import json
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from slipstream.attributes import Boundedness
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.base import END_OF_INPUT, NOTHING_AVAILABLE, SourceReaderContext
from slipstream.datastream.connectors.columnar import ArrowSourceBatch
from slipstream.datastream.connectors.errors import SourceFormatError, SourcePathNotFoundError, SourceRestoreError
from slipstream.datastream.connectors.file_system import FileSource, StreamFormat
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import CollectionSource
from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema
from slipstream.datastream.formats.json import JsonLinesReaderFormat, JsonRowDeserializationSchema
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
from slipstream.datastream.time import Duration
from slipstream.datastream.typeinfo import Types
from slipstream.errors import SlipstreamError

from connector_harness import drain, read_subtasks


def _write_text_files(directory, files: dict[str, list[str]]):
    for name, lines in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))


def _text_source(*paths, monitor=None):
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), *map(str, paths))
    if monitor is not None:
        builder = builder.monitor_continuously(monitor)
    return builder.build()


def test_text_lines_of_a_directory_tree(tmp_path):
    files = {"a.txt": ["alpha", "", "gamma"], "sub/b.txt": ["x\r", "y"], ".hidden": ["no"], "_tmp": ["no"]}
    _write_text_files(tmp_path, files)
    source = _text_source(tmp_path)
    assert source.get_boundedness() is Boundedness.BOUNDED
    [lines] = read_subtasks(source, 1)
    assert lines == ["alpha", "", "gamma", "x", "y"]  # '\r\n' endings are stripped too


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counts=st.lists(st.integers(0, 30), min_size=1, max_size=6), parallelism=st.integers(1, 3),
       max_records=st.integers(1, 8))
def test_subtasks_read_every_line_exactly_once(tmp_path_factory, counts, parallelism, max_records):
    directory = tmp_path_factory.mktemp("lines")
    files = {f"f{i}.txt": [f"{i}:{j}" for j in range(n)] for i, n in enumerate(counts)}
    _write_text_files(directory, files)
    parts = read_subtasks(_text_source(directory), parallelism, max_records)
    read = [line for part in parts for line in part]
    assert sorted(read) == sorted(line for lines in files.values() for line in lines)
    for part in parts:  # each file is read by one subtask, in order
        for i in range(len(counts)):
            mine = [line for line in part if line.startswith(f"{i}:")]
            assert mine in ([], files[f"f{i}.txt"])


def test_missing_path_is_named(tmp_path):
    reader = _text_source(tmp_path / "nope").create_reader(0, 1)
    with pytest.raises(SourcePathNotFoundError, match="nope"):
        reader.open(SourceReaderContext(0, 1))


def test_restore_mid_file_resumes_without_loss_or_duplicates(tmp_path):
    files = {f"f{i}.txt": [f"{i}-{j}" for j in range(25)] for i in range(3)}
    _write_text_files(tmp_path, files)
    source = _text_source(tmp_path)
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    before = []
    for _ in range(5):  # stop in the middle of the second file
        before.extend(reader.poll(7).values)
    position = json.loads(json.dumps(reader.snapshot_position()))  # positions survive JSON
    reader.poll(7)  # records after the snapshot are lost with the failed reader
    reader.close()
    restored = source.create_reader(0, 1)
    restored.restore_position(position)
    restored.open(SourceReaderContext(0, 1))
    assert before + drain(restored) == [line for name in sorted(files) for line in files[name]]


def test_csv_with_schema_yields_typed_rows(tmp_path):
    (tmp_path / "people.csv").write_text(
        'id,name,score,active,tags\n1,"Smith, Jo",1.5,true,a;b\n2,"multi\nline",,false,\n\n3,plain,-2,TRUE,c\n')
    schema = (CsvSchema.builder()
              .add_number_column("id", number_type=Types.INT())
              .add_string_column("name")
              .add_number_column("score", number_type=Types.DOUBLE())
              .add_boolean_column("active")
              .add_array_column("tags")
              .set_use_header()
              .set_strict_headers()
              .build())
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(tmp_path)).build()
    [rows] = read_subtasks(source, 1)
    assert [tuple(r) for r in rows] == [(1, "Smith, Jo", 1.5, True, ["a", "b"]),
                                       (2, "multi\nline", None, False, []),
                                       (3, "plain", -2.0, True, ["c"])]
    assert rows[0].name == "Smith, Jo" and rows[2].as_dict()["id"] == 3


def test_csv_header_names_columns_and_restore_rereads_header(tmp_path):
    (tmp_path / "w.csv").write_text("word,count\n" + "".join(f"w{i},{i}\n" for i in range(10)))
    schema = CsvSchema.builder().set_use_header().build()
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(tmp_path)).build()
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    first = reader.poll(4).values
    restored = source.create_reader(0, 1)
    restored.restore_position(reader.snapshot_position())
    restored.open(SourceReaderContext(0, 1))
    rows = first + drain(restored)
    assert [r.as_dict() for r in rows] == [{"word": f"w{i}", "count": str(i)} for i in range(10)]


def test_bad_csv_field_names_file_line_field_and_type(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("1,a\n2,b\nthree,c\n")
    schema = CsvSchema.builder().add_number_column("id", Types.INT()).add_string_column("name").build()
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(path)).build()
    with pytest.raises(SourceFormatError) as caught:
        read_subtasks(source, 1)
    message = str(caught.value)
    assert str(path) in message and "line 3" in message and "byte offset 8" in message
    assert "'id' (column 1)" in message and "Integer" in message and "'three'" in message
    assert isinstance(caught.value, SlipstreamError)


def test_csv_wrong_field_count_and_unclosed_quote(tmp_path):
    schema = CsvSchema.builder().add_string_column("a").add_string_column("b").build()
    (tmp_path / "x.csv").write_text("1,2\n1,2,3\n")
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(tmp_path / "x.csv"))
    with pytest.raises(SourceFormatError, match=r"line 2.*2 fields \['a', 'b'\], found 3"):
        read_subtasks(source.build(), 1)
    (tmp_path / "y.csv").write_text('1,"open\n')
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(tmp_path / "y.csv"))
    with pytest.raises(SourceFormatError, match="closing"):
        read_subtasks(source.build(), 1)


def test_json_lines_as_dicts_and_as_rows(tmp_path):
    records = [{"id": i, "name": f"n{i}", "extra": [i]} for i in range(5)]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    [dicts] = read_subtasks(FileSource.for_record_stream_format(JsonLinesReaderFormat(), str(tmp_path)).build(), 1)
    assert dicts == records
    schema = (JsonRowDeserializationSchema.builder()
              .type_info(Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])).build())
    source = FileSource.for_record_stream_format(JsonLinesReaderFormat(schema), str(tmp_path)).build()
    [rows] = read_subtasks(source, 1)
    assert [(r.id, r.name) for r in rows] == [(i, f"n{i}") for i in range(5)]


def test_bad_json_line_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1}\n{"id": 2\n')
    with pytest.raises(SourceFormatError, match=r"bad.jsonl', line 2 \(byte offset 10\): expected a JSON document"):
        read_subtasks(FileSource.for_record_stream_format(JsonLinesReaderFormat(), str(path)).build(), 1)
    path.write_text('{"id": 1}\n{"id": "two"}\n')
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["id"], [Types.INT()])).build()
    with pytest.raises(SourceFormatError, match=r"line 2.*field 'id': expected a value of type Integer, got 'two'"):
        read_subtasks(FileSource.for_record_stream_format(JsonLinesReaderFormat(schema), str(path)).build(), 1)


def _write_parquet(tmp_path, files=3, rows=50, row_group_size=16):
    expected = []
    for f in range(files):
        table = pa.table({"file": [f] * rows, "n": list(range(rows)), "s": [f"v{f}-{i}" for i in range(rows)]})
        pq.write_table(table, tmp_path / f"p{f}.parquet", row_group_size=row_group_size)
        expected.extend(table.to_pylist())
    return expected


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_parquet_row_groups_split_across_subtasks(tmp_path, parallelism):
    expected = _write_parquet(tmp_path)
    source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(batch_size=10), str(tmp_path)).build()
    parts = read_subtasks(source, parallelism, max_records=6)
    read = [r.as_dict() for part in parts for r in part]
    key = lambda r: (r["file"], r["n"])  # noqa: E731
    assert sorted(read, key=key) == sorted(expected, key=key)


def test_parquet_batches_stay_columnar_and_restore(tmp_path):
    expected = _write_parquet(tmp_path, files=1, rows=40, row_group_size=40)
    source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(columns=["n", "s"]), str(tmp_path)).build()
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    batch = reader.poll(15)
    assert isinstance(batch, ArrowSourceBatch)
    assert batch.record_batch.num_rows == 15 and batch.record_batch.schema.names == ["n", "s"]
    assert [tuple(r) for r in batch.values] == [(e["n"], e["s"]) for e in expected[:15]]
    restored = source.create_reader(0, 1)
    restored.restore_position(reader.snapshot_position())
    restored.open(SourceReaderContext(0, 1))
    assert [r.n for r in batch.values + drain(restored)] == list(range(40))


def _poll_until(reader, wake, predicate, timeout=5.0):
    values = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = reader.poll(100)
        assert batch is not END_OF_INPUT
        if batch is NOTHING_AVAILABLE:
            if predicate(values):
                return values
            wake.wait(0.05)
            wake.clear()
        else:
            values.extend(batch.values)
    raise AssertionError(f"timed out with {values}")


def test_monitoring_reads_initial_files_as_backlog_then_new_files(tmp_path):
    _write_text_files(tmp_path, {"a.txt": ["a1", "a2"], "b.txt": ["b1"]})
    source = _text_source(tmp_path, monitor=Duration.of_millis(20))
    assert source.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    wake = threading.Event()
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1, notify_available=wake.set))
    assert reader.is_backlog() is True
    assert _poll_until(reader, wake, lambda v: len(v) == 3) == ["a1", "a2", "b1"]
    assert reader.is_backlog() is False
    position = reader.snapshot_position()
    # A file appears whole: written under a hidden name, then moved in.
    (tmp_path / ".c.txt").write_text("c1\nc2\n")
    (tmp_path / ".c.txt").rename(tmp_path / "c.txt")
    assert wake.wait(2.0), "discovery wakes the reader"
    assert _poll_until(reader, wake, lambda v: len(v) == 2) == ["c1", "c2"]
    reader.close()
    # Restored from before c.txt was read: only c.txt is read again.
    restored = source.create_reader(0, 1)
    restored.restore_position(position)
    restored.open(SourceReaderContext(0, 1, notify_available=wake.set))
    assert _poll_until(restored, wake, lambda v: len(v) == 2) == ["c1", "c2"]
    restored.close()


def test_monitoring_splits_new_files_across_subtasks(tmp_path):
    source = _text_source(tmp_path, monitor=Duration.of_millis(10))
    wake = threading.Event()
    readers = [source.create_reader(i, 3) for i in range(3)]
    for i, reader in enumerate(readers):
        reader.open(SourceReaderContext(i, 3, notify_available=wake.set))
    _write_text_files(tmp_path, {f"f{i}.txt": [f"{i}"] for i in range(12)})
    seen = []
    deadline = time.monotonic() + 5
    while len(seen) < 12 and time.monotonic() < deadline:
        for reader in readers:
            batch = reader.poll(100)
            if batch is not NOTHING_AVAILABLE:
                seen.extend(batch.values)
        time.sleep(0.01)
    for reader in readers:
        reader.close()
    assert sorted(seen, key=int) == [str(i) for i in range(12)]


# -- positions are relative to the source's paths: moved input ---------------------------------------------
def _read_some(source, parallelism: int, polls: int) -> tuple[list[list[str]], list]:
    """What each subtask's reader of ``source`` reads in ``polls`` polls, and its position after."""
    read, positions = [], []
    for index in range(parallelism):
        reader = source.create_reader(index, parallelism)
        reader.open(SourceReaderContext(index, parallelism))
        values = []
        for _ in range(polls):
            batch = reader.poll(7)
            if batch is END_OF_INPUT or batch is NOTHING_AVAILABLE:
                break
            values.extend(batch.values)
        read.append(values)
        positions.append(json.loads(json.dumps(reader.snapshot_position())))
        reader.close()
    return read, positions


def _resume(source, parallelism: int, positions: list) -> list[list[str]]:
    """What each subtask's reader of ``source`` reads to the end, restored at ``positions``."""
    read = []
    for index, position in enumerate(positions):
        reader = source.create_reader(index, parallelism)
        reader.restore_position(position)
        reader.open(SourceReaderContext(index, parallelism))
        read.append(drain(reader, switches=True))
        reader.close()
    return read


def _many_files(directory) -> list[str]:
    files = {f"d{d}/f{i}.txt": [f"{d}.{i}.{j}" for j in range(9)] for d in range(2) for i in range(4)}
    _write_text_files(directory, files)
    return sorted(line for lines in files.values() for line in lines)


@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("polls", [0, 3, 1000])  # from the start, mid-file, every file read
def test_a_position_resumes_where_it_was_after_the_input_directory_moved(tmp_path, parallelism, polls):
    """Regression: positions held absolute paths, so a source given the moved directory read
    every file again (or failed on the one it was in the middle of)."""
    lines = _many_files(tmp_path / "before")
    before, positions = _read_some(_text_source(tmp_path / "before"), parallelism, polls)
    (tmp_path / "before").rename(tmp_path / "after")
    after = _resume(_text_source(tmp_path / "after"), parallelism, positions)
    assert sorted(line for part in before + after for line in part) == lines


@pytest.mark.parametrize("polls", [0, 3])
def test_a_hybrid_source_in_its_file_phase_resumes_after_its_directory_moved(tmp_path, polls):
    lines = _many_files(tmp_path / "before")

    def hybrid(directory):
        return HybridSource.builder(_text_source(directory)).add_source(CollectionSource(["live"])).build()

    before, positions = _read_some(hybrid(tmp_path / "before"), 2, polls)
    assert all(position["source"] == 0 for position in positions), "still reading the files"
    (tmp_path / "before").rename(tmp_path / "after")
    after = _resume(hybrid(tmp_path / "after"), 2, positions)
    assert sorted(line for part in before + after for line in part) == sorted(lines + ["live"])  # the collection is read once


@pytest.mark.parametrize("how", ["read", "partly read"])
@pytest.mark.parametrize("hybrid", [False, True])
def test_a_position_naming_a_file_that_is_gone_is_refused_naming_it(tmp_path, how, hybrid):
    _write_text_files(tmp_path, {"a.txt": ["a1", "a2"], "b.txt": [f"b{i}" for i in range(20)]})
    source = _text_source(tmp_path)
    if hybrid:
        source = HybridSource.builder(source).add_source(CollectionSource(["live"])).build()
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    assert reader.poll(5).values == ["a1", "a2"] and reader.poll(3).values == ["b0", "b1", "b2"]
    position = reader.snapshot_position()
    reader.close()
    gone = tmp_path / ("a.txt" if how == "read" else "b.txt")
    gone.unlink()
    with pytest.raises(SourceRestoreError) as caught:
        source.check_position(position)
    assert f"'{gone}' does not exist" in str(caught.value) and f") was {how}, but" in str(caught.value)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_job_reading_a_bad_line_fails_naming_the_source_subtask_and_the_line(tmp_path, parallelism):
    """The reader knows the file, line and field; the job's error names the source subtask too."""
    (tmp_path / "a.csv").write_text("1,a\n2,b\n")
    (tmp_path / "b.csv").write_text("3,c\nfour,d\n")
    schema = CsvSchema.builder().add_number_column("id", Types.INT()).add_string_column("name").build()
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(tmp_path)).build()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.from_source(source, None, "people").add_sink(lambda _: None)
    with pytest.raises(SourceFormatError, match=rf"^operator 'people' \(uid 'source-1'\), subtask \d/{parallelism}: "
                                                r"file '.*b.csv', line 2 \(byte offset 4\), field 'id'") as caught:
        env.execute("bad input")
    assert caught.value.line_number == 2 and caught.value.source.startswith("operator 'people'")


def test_a_non_splittable_enumerator_reads_each_file_whole_in_one_subtask(tmp_path):
    """Flink's enumerators: by default a Parquet file's row groups are splits read by different
    subtasks; with the non-splittable one a file is one split, every row group read by one subtask."""
    from slipstream.datastream.connectors.file_system import FileEnumeratorProvider, FileSplitAssignerProvider

    pq.write_table(pa.table({"n": list(range(40))}), tmp_path / "a.parquet", row_group_size=10)
    def subtask_counts(enumerator):
        source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(batch_size=100), str(tmp_path)) \
            .set_file_enumerator(enumerator) \
            .set_split_assigner(FileSplitAssignerProvider.locality_aware_split_assigner()).build()
        batches = read_subtasks(source, 4)
        return sorted(len(rows) for rows in batches), sorted(row.n for rows in batches for row in rows)

    split, values = subtask_counts(FileEnumeratorProvider.default_splittable_file_enumerator())
    assert values == list(range(40)) and split.count(0) < 3  # row groups spread over subtasks
    whole, values = subtask_counts(FileEnumeratorProvider.default_non_splittable_file_enumerator())
    assert values == list(range(40)) and whole == [0, 0, 0, 40]

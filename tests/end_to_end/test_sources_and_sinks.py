"""Sources and sinks end to end: whole jobs through ``StreamExecutionEnvironment``.

Each job reads real input (a number range, Python iterators, files under
``tmp_path``) and its output is compared with an oracle computed independently:
plain Python over the same values, or the ``csv``/``json`` modules and pyarrow
reading the same files. File sinks are read back from their committed part
files; no hidden in-progress file may be left behind by a job that ended.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import queue
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipstream.attributes import Boundedness
from slipstream.datastream import Duration, ProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.connectors.base import (
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
)
from slipstream.datastream.connectors.errors import SourceFormatError
from slipstream.datastream.connectors.file_system import (
    Encoder,
    FileSink,
    FileSource,
    StreamFormat,
)
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.csv import CsvBulkWriters, CsvReaderFormat, CsvSchema
from slipstream.datastream.formats.json import (
    JsonLinesEncoder,
    JsonLinesReaderFormat,
    JsonRowDeserializationSchema,
)
from slipstream.datastream.formats.parquet import (
    ParquetBulkWriters,
    ParquetColumnarRowInputFormat,
)
from slipstream.datastream.typeinfo import Row, Types
from slipstream.errors import JobExecutionError

PARALLELISMS = [1, 2, 4]
BACKLOG_SORTING = [False, True]
"""``False``: record by record. ``True`` (FLIP-327): bounded input is backlog, sorted by key and
reduced as batch work at its end. In STREAMING mode both emit every rolling update."""


pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING),
              pytest.mark.configure(batch_size=16, channel_capacity=2)]


def expected_keyed_updates(counts: dict[Any, int]) -> list[tuple[Any, int]]:
    """(key, n-th record of the key) for each update a keyed reduce emits over bounded input."""
    return sorted((key, k) for key, n in counts.items() for k in range(1, n + 1))


def committed_parts(directory: Path) -> list[Path]:
    """The visible part files of a sink directory; fails if an in-progress file was left behind."""
    names = sorted(os.listdir(directory))
    hidden = [n for n in names if n.startswith((".", "_"))]
    assert hidden == [], f"in-progress files left behind: {hidden}"
    return [directory / n for n in names]


def within(seconds: float, job: Callable[[], Any]) -> Any:
    """Run ``job`` (which drives an unbounded job) in a thread; fail instead of hanging if it takes too long."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = job()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the job did not finish within {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def assert_part_names(parts: list[Path], parallelism: int, prefix: str = "part", suffix: str = "") -> None:
    pattern = re.compile(rf"{re.escape(prefix)}-(\d+)-(\d+){re.escape(suffix)}")
    for part in parts:
        match = pattern.fullmatch(part.name)
        assert match, f"unexpected part file name {part.name}"
        assert int(match.group(1)) < parallelism


# -- NumberSequenceSource ------------------------------------------------------------------------


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(0)
@pytest.mark.configure(batch_size=64)
def test_number_sequence_every_number_exactly_once(env: StreamExecutionEnvironment) -> None:
    n = 5_000
    out = list(env.from_source(NumberSequenceSource(1, n), None, "seq")
               .map(lambda x: x * 3)
               .execute_and_collect())
    assert len(out) == n
    assert sorted(out) == [3 * i for i in range(1, n + 1)]


@pytest.mark.parallelisms(4)
@pytest.mark.seeds(0)
def test_number_sequence_single_number_with_more_subtasks_than_numbers(env: StreamExecutionEnvironment) -> None:
    assert list(env.from_source(NumberSequenceSource(7, 7), None, "seq").execute_and_collect()) == [7]


# -- IteratorSource --------------------------------------------------------------------------------


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(0)
def test_bounded_iterator_source_from_a_generator_factory(env: StreamExecutionEnvironment) -> None:
    calls = []

    def squares():
        calls.append(1)
        for i in range(700):
            yield i * i

    source = IteratorSource(squares)
    assert source.get_boundedness() is Boundedness.BOUNDED
    parallelism = env.get_parallelism()
    stream = env.from_source(source, None, "squares")
    assert stream.get_parallelism() == 1  # one iterator, one subtask, whatever the job's parallelism
    out = list(stream.map(lambda v: v + 1).execute_and_collect())
    oracle = [i * i + 1 for i in range(700)]
    assert sorted(out) == oracle
    if parallelism == 1:
        assert out == oracle  # one chain end to end keeps the iterator's order
    assert len(calls) == 1


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(0)
def test_unbounded_iterator_source_fed_by_a_thread_stops_at_limit(env: StreamExecutionEnvironment) -> None:
    feed: queue.Queue = queue.Queue()
    stop_feeding = threading.Event()

    def feeder() -> None:
        for i in itertools.count():
            if stop_feeding.is_set():
                return
            feed.put(i)
            if i % 50 == 0:
                time.sleep(0.001)

    def from_queue():
        while True:
            yield feed.get()

    source = IteratorSource(from_queue, bounded=False)
    assert source.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    thread = threading.Thread(target=feeder, daemon=True)
    thread.start()
    parallelism = env.get_parallelism()
    try:
        stream = env.from_source(source, None, "queue").map(lambda v: ("n", v))
        out = within(5, lambda: stream.execute_and_collect(limit=300))
    finally:
        stop_feeding.set()
        thread.join(timeout=2)
    assert len(out) == 300
    values = [v for _, v in out]
    assert len(set(values)) == 300, "no record twice"
    if parallelism == 1:
        assert values == list(range(300))
    # With more map subtasks the first 300 collected need not be the first 300 fed.


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_unbounded_iterator_that_ends_ends_the_job(env: StreamExecutionEnvironment) -> None:
    out = list(env.from_source(IteratorSource(lambda: iter(range(50)), bounded=False), None, "finite")
               .map(lambda v: -v)
               .execute_and_collect())
    assert sorted(out) == sorted(-v for v in range(50))


# -- text files → word count → row-format FileSink ---------------------------------------------------


def write_text_inputs(root: Path) -> list[Path]:
    """Several visible text files (one nested), plus hidden ones a FileSource must skip."""
    texts = {
        "a.txt": "the quick brown fox\njumps over the lazy dog\n",
        "b.txt": "the dog barks\n\nthe fox runs\r\nquick quick\n",
        "c.txt": "no trailing newline the end",
        "sub/d.txt": "über straße the\nfox\n",
        "sub/deeper/e.txt": "\n".join(f"w{i % 13} the" for i in range(200)) + "\n",
    }
    for name, text in texts.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    (root / ".hidden.txt").write_text("hidden words never counted\n")
    (root / "_SUCCESS").write_text("marker words never counted\n")
    (root / ".hidden_dir").mkdir()
    (root / ".hidden_dir" / "x.txt").write_text("hidden words never counted\n")
    return [root / name for name in texts]


def read_lines_oracle(paths: list[Path]) -> list[str]:
    lines = []
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            lines.extend(line.rstrip("\n").rstrip("\r") for line in f)
    return lines


@pytest.mark.parametrize("backlog_sorting", BACKLOG_SORTING)
@pytest.mark.zipped(parallelisms=PARALLELISMS, seeds=PARALLELISMS)
@pytest.mark.configure(batch_size=5)
@pytest.mark.workers(1, 2)
def test_text_files_word_count_to_row_format_file_sink(env: StreamExecutionEnvironment, tmp_path: Path,
                                                        backlog_sorting: bool) -> None:
    inputs = write_text_inputs(tmp_path / "in")
    out_dir = tmp_path / "out"
    env.configure(backlog_sorting=backlog_sorting)
    parallelism = env.get_parallelism()
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "in")).build()
    (env.from_source(source, None, "text")
     .flat_map(lambda line: line.split())
     .map(lambda w: (w, 1))
     .key_by(lambda pair: pair[0])
     .reduce(lambda a, b: (a[0], a[1] + b[1]))
     .map(lambda pair: f"{pair[0]}\t{pair[1]}")
     .sink_to(FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder()).build()))
    env.execute("word count to files")

    parts = committed_parts(out_dir)
    assert parts
    assert_part_names(parts, parallelism)
    written = [line for part in parts for line in part.read_text(encoding="utf-8").splitlines()]
    oracle = Counter(w for line in read_lines_oracle(inputs) for w in line.split())
    assert "hidden" not in oracle and "marker" not in oracle
    # The rolling count emits 1, 2, ..., n for a word seen n times, each exactly once.
    expected = [f"{w}\t{k}" for w, k in expected_keyed_updates(oracle)]
    assert sorted(written) == sorted(expected)


@pytest.mark.parallelisms(4)
@pytest.mark.seeds(0)
@pytest.mark.configure(batch_size=3)
def test_text_lines_arrive_exactly_once_with_line_terminators_stripped(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    inputs = write_text_inputs(tmp_path)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    out = list(env.from_source(source, None, "text").execute_and_collect())
    assert sorted(out) == sorted(read_lines_oracle(inputs))


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.configure(batch_size=7)
def test_row_format_sink_rolls_parts_by_size_and_second_run_adds_parts(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    from slipstream.datastream.connectors.file_system import (
        OutputFileConfig,
        RollingPolicy,
    )
    out_dir = tmp_path / "out"

    def run(values: list[int]) -> None:
        sink = (FileSink.for_row_format(str(out_dir), Encoder.simple_string_encoder())
                .with_output_file_config(OutputFileConfig.builder().with_part_prefix("nums")
                                         .with_part_suffix(".txt").build())
                .with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=100))
                .build())
        env.from_collection(values).sink_to(sink)
        env.execute()

    run(list(range(200)))
    first = committed_parts(out_dir)
    assert len(first) > 4, "parts roll at 100 bytes"
    assert_part_names(first, 2, "nums", ".txt")
    run(list(range(1000, 1100)))
    parts = committed_parts(out_dir)
    assert set(first) < set(parts)
    numbers = [int(line) for part in parts for line in part.read_text().splitlines()]
    assert sorted(numbers) == list(range(200)) + list(range(1000, 1100))


# -- CSV → Rows → filter → CSV and JSON-lines sinks ---------------------------------------------------

CSV_SCHEMA = (CsvSchema.builder()
              .add_number_column("id", number_type=Types.INT())
              .add_string_column("name")
              .add_number_column("score", number_type=Types.DOUBLE())
              .add_boolean_column("active")
              .set_use_header()
              .build())


def write_csv_inputs(root: Path, files: int = 4, rows_per_file: int = 60) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    next_id = 0
    for f in range(files):
        path = root / f"people-{f}.csv"
        with open(path, "w", encoding="utf-8", newline="") as out:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(["id", "name", "score", "active"])
            for _ in range(rows_per_file):
                i = next_id
                next_id += 1
                name = f"name {i}"
                if i % 7 == 0:
                    name = f'Doe, "J" {i}'          # a quoted field with a separator and quotes
                if i % 11 == 0:
                    name = f"multi\nline {i}"       # a quoted field spanning two lines
                writer.writerow([i, name, f"{(i * 37) % 100 + 0.5}", "true" if i % 3 else "false"])
        paths.append(path)
    return paths


def csv_oracle(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            for record in csv.DictReader(f):
                rows.append({"id": int(record["id"]), "name": record["name"],
                             "score": float(record["score"]), "active": record["active"] == "true"})
    return rows


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(3)
@pytest.mark.configure(batch_size=8)
def test_csv_rows_filtered_to_csv_and_json_lines_sinks(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    inputs = write_csv_inputs(tmp_path / "in")
    csv_out, json_out = tmp_path / "csv-out", tmp_path / "json-out"
    parallelism = env.get_parallelism()
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV_SCHEMA), str(tmp_path / "in")).build()
    kept = (env.from_source(source, None, "csv")
            .filter(lambda row: row.active and row["score"] >= 40.0))
    kept.sink_to(FileSink.for_bulk_format(str(csv_out), CsvBulkWriters.for_schema(CSV_SCHEMA)).build())
    kept.sink_to(FileSink.for_row_format(str(json_out), JsonLinesEncoder()).build())
    env.execute("csv filter")

    expected = sorted((r for r in csv_oracle(inputs) if r["active"] and r["score"] >= 40.0),
                      key=lambda r: r["id"])
    assert expected and any("\n" in r["name"] for r in expected) and any('"' in r["name"] for r in expected)

    csv_rows = []
    csv_parts = committed_parts(csv_out)
    assert_part_names(csv_parts, parallelism)
    for part in csv_parts:
        text = part.read_text(encoding="utf-8")
        assert text.startswith("id,name,score,active\n"), "every bulk CSV part has a header"
        csv_rows.extend(csv_oracle([part]))
    assert sorted(csv_rows, key=lambda r: r["id"]) == expected

    json_rows = []
    for part in committed_parts(json_out):
        json_rows.extend(json.loads(line) for line in part.read_text(encoding="utf-8").splitlines())
    assert sorted(json_rows, key=lambda r: r["id"]) == expected
    assert all(list(r) == ["id", "name", "score", "active"] for r in json_rows), "named rows keep column order"


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_csv_rows_are_named_and_typed(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    inputs = write_csv_inputs(tmp_path, files=1, rows_per_file=12)
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV_SCHEMA), str(inputs[0])).build()
    rows = list(env.from_source(source, None, "csv").execute_and_collect())
    assert [row.as_dict() for row in rows] == csv_oracle(inputs)
    assert all(isinstance(row, Row) and isinstance(row.id, int) and isinstance(row.score, float) for row in rows)


# -- JSON lines ----------------------------------------------------------------------------------------


def write_json_inputs(root: Path) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(3):
        path = root / f"events-{f}.jsonl"
        lines = []
        for i in range(80):
            lines.append(json.dumps({"user": f"u{(i * (f + 1)) % 9}", "amount": i % 17, "tag": ["x", f"f{f}"]}))
            if i % 20 == 0:
                lines.append("")  # empty lines are skipped
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def json_oracle(paths: list[Path]) -> list[dict]:
    return [json.loads(line) for path in paths for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


@pytest.mark.parametrize("backlog_sorting", BACKLOG_SORTING)
@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(5)
@pytest.mark.configure(batch_size=6)
def test_json_lines_as_dicts_keyed_sum(env: StreamExecutionEnvironment, tmp_path: Path, backlog_sorting: bool) -> None:
    inputs = write_json_inputs(tmp_path)
    env.configure(backlog_sorting=backlog_sorting)
    source = FileSource.for_record_stream_format(JsonLinesReaderFormat(), str(tmp_path)).build()
    updates = list(env.from_source(source, None, "json")
                   .map(lambda d: (d["user"], d["amount"]))
                   .key_by(lambda pair: pair[0])
                   .sum(1)
                   .execute_and_collect())
    oracle_totals: dict[str, int] = defaultdict(int)
    oracle_counts: Counter = Counter()
    for record in json_oracle(inputs):
        oracle_totals[record["user"]] += record["amount"]
        oracle_counts[record["user"]] += 1
    assert Counter(user for user, _ in updates) == oracle_counts
    finals = {user: max(total for u, total in updates if u == user) for user in oracle_counts}
    assert finals == dict(oracle_totals)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_json_lines_as_typed_rows(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    inputs = write_json_inputs(tmp_path)
    schema = (JsonRowDeserializationSchema.builder()
              .type_info(Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.INT()]))
              .build())
    source = FileSource.for_record_stream_format(JsonLinesReaderFormat(schema), str(tmp_path)).build()
    rows = list(env.from_source(source, None, "json rows").execute_and_collect())
    expected = sorted((r["user"], r["amount"]) for r in json_oracle(inputs))
    assert sorted((row.user, row.amount) for row in rows) == expected
    assert all(isinstance(row, Row) and row.as_dict().keys() == {"user", "amount"} for row in rows)


# -- Parquet → keyed sum → Parquet ---------------------------------------------------------------------


def write_parquet_inputs(root: Path) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(3):
        n = 500 + 137 * f
        table = pa.table({
            "key": [f"k{(i * 7 + f) % 23}" for i in range(n)],
            "value": [(i * 31 + f) % 101 + 1 for i in range(n)],   # positive, so a running sum only grows
            "ignored": [f"pad{i}" for i in range(n)],
        })
        path = root / f"data-{f}.parquet"
        pq.write_table(table, path, row_group_size=120)
        assert pq.ParquetFile(path).num_row_groups > 3
        paths.append(path)
    return paths


@pytest.mark.parametrize("backlog_sorting", BACKLOG_SORTING)
@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(11)
@pytest.mark.configure(batch_size=50)
def test_parquet_row_groups_keyed_sum_to_parquet_sink(env: StreamExecutionEnvironment, tmp_path: Path,
                                                      backlog_sorting: bool) -> None:
    inputs = write_parquet_inputs(tmp_path / "in")
    out_dir = tmp_path / "out"
    out_schema = pa.schema([("key", pa.string()), ("total", pa.int64()), ("count", pa.int64())])
    env.configure(backlog_sorting=backlog_sorting)
    parallelism = env.get_parallelism()
    source = FileSource.for_bulk_file_format(
        ParquetColumnarRowInputFormat(columns=["key", "value"], batch_size=64), str(tmp_path / "in")).build()
    (env.from_source(source, None, "parquet")
     .map(lambda row: (row.key, row.value, 1))
     .key_by(lambda t: t[0])
     .reduce(lambda a, b: (a[0], a[1] + b[1], a[2] + b[2]))
     .sink_to(FileSink.for_bulk_format(str(out_dir), ParquetBulkWriters.for_schema(out_schema)).build()))
    env.execute("parquet sum")

    table = pa.concat_tables([pq.read_table(inputs_path) for inputs_path in inputs])
    totals: dict[str, int] = defaultdict(int)
    counts: Counter = Counter()
    for key, value in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
        totals[key] += value
        counts[key] += 1

    parts = committed_parts(out_dir)
    assert_part_names(parts, parallelism)
    written = pa.concat_tables([pq.read_table(part) for part in parts])
    assert written.schema.equals(out_schema)
    rows = written.to_pylist()
    # One rolling update per input row: each key's counts run 1..n, and the total at count n
    # is the key's sum.
    by_key: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_key[row["key"]].append(row)
    assert sorted((k, r["count"]) for k, v in by_key.items() for r in v) == \
        expected_keyed_updates(counts)
    assert {k: max(v, key=lambda r: r["count"])["total"] for k, v in by_key.items()} == dict(totals)


# -- a watched directory -------------------------------------------------------------------------------


class _RecordingReader(SourceReader):
    """Delegates to a real reader and records, for each poll, is_backlog before and after it and what it read."""

    def __init__(self, inner: SourceReader, log: list) -> None:
        self._inner = inner
        self._log = log

    def open(self, context: SourceReaderContext) -> None:
        self._inner.open(context)

    def poll(self, max_records: int) -> Any:
        before = self._inner.is_backlog()
        result = self._inner.poll(max_records)
        if isinstance(result, SourceBatch):
            self._log.append((before, list(result.values), self._inner.is_backlog()))
        return result

    def is_backlog(self) -> bool | None:
        return self._inner.is_backlog()

    def snapshot_position(self) -> Any:
        return self._inner.snapshot_position()

    def restore_position(self, position: Any) -> None:
        self._inner.restore_position(position)

    def close(self) -> None:
        self._inner.close()


class _RecordingSource(Source):
    def __init__(self, inner: Source) -> None:
        self._inner = inner
        self.logs: list[list] = []

    def get_boundedness(self) -> Boundedness:
        return self._inner.get_boundedness()

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        log: list = []
        self.logs.append(log)
        return _RecordingReader(self._inner.create_reader(subtask_index, parallelism), log)


class TagBacklog(ProcessFunction):
    """Pairs each record with whether the runtime says it is backlog."""

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Any:
        yield value, ctx.is_backlog()


def write_whole(path: Path, lines: list[str]) -> None:
    """Write a file under a hidden name, then move it in, so it appears whole."""
    hidden = path.parent / f".{path.name}.tmp"
    hidden.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    hidden.rename(path)


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(0)
@pytest.mark.configure(batch_size=8)
def test_watched_directory_reads_initial_then_new_files_exactly_once(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    initial = {f"init-{f}.txt": [f"init-{f}-{i}" for i in range(40)] for f in range(5)}
    later = {f"later-{f}.txt": [f"later-{f}-{i}" for i in range(25)] for f in range(3)}
    for name, lines in initial.items():
        write_whole(tmp_path / name, lines)
    initial_lines = {line for lines in initial.values() for line in lines}
    later_lines = {line for lines in later.values() for line in lines}

    file_source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
                   .monitor_continuously(Duration.of_millis(50)).build())
    assert file_source.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    source = _RecordingSource(file_source)
    parallelism = env.get_parallelism()

    def write_later_files() -> None:
        for name, lines in later.items():
            write_whole(tmp_path / name, lines)
            time.sleep(0.02)

    writer = threading.Thread(target=write_later_files, daemon=True)
    received: list[str] = []
    backlog_of: dict[str, bool] = {}
    stream = env.from_source(source, None, "watched").process(TagBacklog())

    def consume() -> None:
        with stream.execute_and_collect() as records:
            for line, backlog in records:
                received.append(line)
                backlog_of[line] = backlog
                if len(received) == len(initial_lines):
                    # Everything present at start has arrived; the later files appear while the job runs.
                    assert set(received) == initial_lines
                    writer.start()
                if len(received) == len(initial_lines) + len(later_lines):
                    writer.join()
                    # A sentinel file written last: anything read twice would come before it.
                    write_whole(tmp_path / "zz-sentinel.txt", ["sentinel"])
                if line == "sentinel":
                    break

    within(10, consume)
    assert received[-1] == "sentinel"
    body = received[:-1]
    assert len(body) == len(set(body)), f"lines read twice: {[l for l, n in Counter(body).items() if n > 1]}"
    assert set(body) == initial_lines | later_lines

    # End to end (FLIP-327): a function chained to the source sees the initial files as backlog.
    assert {line for line in initial_lines if not backlog_of[line]} == set()
    assert {line for line in later_lines | {"sentinel"} if backlog_of[line]} == set()

    # Reader level: the files present at start are backlog, the later ones are not.
    assert len(source.logs) == parallelism
    for log in source.logs:
        for before, values, after in log:
            if any(v.startswith("init-") for v in values):
                assert before is True, f"initial lines {values[:2]}... read outside backlog"
            if any(v.startswith("later-") or v == "sentinel" for v in values):
                assert after is False, f"later lines {values[:2]}... reported as backlog"
    owners_of_initial = [log for log in source.logs if any(v.startswith("init-") for _, vs, _ in log for v in vs)]
    assert owners_of_initial, "some subtask read the initial files"


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(0, 1)
def test_watched_directory_ends_its_backlog_once_the_files_present_at_start_are_read(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    """Regression: the backlog ended only when a new file appeared, so a keyed reduce (which
    sorts its backlog and emits at its end) emitted nothing while the directory stayed as it was."""
    lines = ["apple", "pear", "apple"]
    write_whole(tmp_path / "fruit.txt", lines)
    source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path))
              .monitor_continuously(Duration.of_millis(20)).build())
    stream = (env.from_source(source, None, "watched")
              .map(lambda word: (word, 1)).key_by(lambda pair: pair[0])
              .reduce(lambda a, b: (a[0], a[1] + b[1])))
    received: list[tuple[str, int]] = []

    def consume() -> None:
        with stream.execute_and_collect() as records:
            for record in records:
                received.append(record)
                if len(received) == len(lines):
                    return  # closing the iterator cancels the job, as no new file will ever come

    within(10, consume)
    assert sorted(received) == expected_keyed_updates(Counter(lines))
    assert sorted(os.listdir(tmp_path)) == ["fruit.txt"], "no other file appeared meanwhile"


# -- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_corrupt_parquet_file_appearing_in_a_watched_directory_fails_the_job(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    # Regression: the discovery thread died on the file and the job waited forever, reading nothing more.
    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "a.parquet")
    source = (FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(), str(tmp_path))
              .monitor_continuously(Duration.of_millis(20)).build())
    stream = env.from_source(source, None, "watched parquet")
    received = []

    def consume() -> None:
        with stream.execute_and_collect() as records:
            for row in records:
                received.append(row.a)
                if len(received) == 2:
                    write_whole(tmp_path / "b.parquet", ["not a parquet file"])

    with pytest.raises(SourceFormatError) as info:
        within(5, consume)
    assert received == [1, 2]
    assert info.value.path == str(tmp_path / "b.parquet")
    assert "Parquet" in str(info.value)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_unbounded_iterator_that_raises_fails_the_job_naming_the_position(env: StreamExecutionEnvironment) -> None:
    def numbers():
        yield from range(5)
        raise ConnectionError("socket closed")

    with pytest.raises(JobExecutionError, match=r"after record 5: ConnectionError: socket closed") as info:
        list(env.from_source(IteratorSource(numbers, bounded=False), None, "socket").execute_and_collect())
    assert isinstance(info.value.__cause__, ConnectionError)



@pytest.mark.parallelisms(1, 2)
@pytest.mark.seeds(0)
@pytest.mark.workers(1, 2)
def test_malformed_csv_line_fails_the_job_naming_file_and_line(
        env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    inputs = write_csv_inputs(tmp_path / "in", files=2, rows_per_file=10)
    bad = tmp_path / "in" / "people-bad.csv"
    bad.write_text("id,name,score,active\n1,ok,1.5,true\n2,not a number,high,true\n3,fine,2.0,false\n",
                   encoding="utf-8")
    out_dir = tmp_path / "out"
    parallelism = env.get_parallelism()
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV_SCHEMA), str(tmp_path / "in")).build()
    (env.from_source(source, None, "csv")
     .map(lambda row: row.as_dict())
     .sink_to(FileSink.for_row_format(str(out_dir), JsonLinesEncoder()).build()))
    with pytest.raises(SourceFormatError) as info:
        env.execute("bad csv")
    error = info.value
    assert error.path == str(bad)
    assert error.line_number == 3
    assert error.field == "'score' (column 3)"
    message = str(error)
    assert f"file '{bad}'" in message and "line 3" in message and "'high'" in message
    assert "Double" in message or "DOUBLE" in message.upper()
    assert inputs  # the good files were there too
    if parallelism == 1:
        # The sink never flushed: nothing was committed, only hidden in-progress files may remain.
        assert [n for n in os.listdir(out_dir) if not n.startswith(".")] == []


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_csv_line_with_too_few_fields_fails_collect(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    path.write_text("id,name,score,active\n1,a,1.0,true\n2,b\n", encoding="utf-8")
    source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(CSV_SCHEMA), str(path)).build()
    with pytest.raises(SourceFormatError, match=r"line 3.*expected 4 fields") as info:
        list(env.from_source(source, None, "csv").execute_and_collect())
    assert info.value.path == str(path)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_malformed_json_line_fails_the_job(env: StreamExecutionEnvironment, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"a": 1}\n{"a": 2\n', encoding="utf-8")
    source = FileSource.for_record_stream_format(JsonLinesReaderFormat(), str(tmp_path)).build()
    with pytest.raises(SourceFormatError) as info:
        list(env.from_source(source, None, "json").execute_and_collect())
    assert info.value.path == str(path) and info.value.line_number == 2
    assert "line 2" in str(info.value)


# -- print() -------------------------------------------------------------------------------------------------


def printed(capsys: pytest.CaptureFixture) -> list[tuple[str, str]]:
    """(prefix, text) of each printed line."""
    lines = capsys.readouterr().out.splitlines()
    result = []
    for line in lines:
        prefix, sep, text = line.partition("> ")
        assert sep, f"unprefixed line {line!r}"
        result.append((prefix, text))
    return result


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.configure(batch_size=2)
def test_print_rows_and_dicts_at_parallelism_two(
        env: StreamExecutionEnvironment, capsys: pytest.CaptureFixture) -> None:
    rows = [Row(id=i, name=f"n{i}") for i in range(6)] + [Row(i, "positional") for i in range(2)]
    env.from_collection(rows).print()
    env.execute()
    lines = printed(capsys)
    assert sorted(text for _, text in lines) == sorted(str(row) for row in rows)
    assert {prefix for prefix, _ in lines} == {"1", "2"}
    assert "Row(id=0, name='n0')" in [text for _, text in lines]

    dicts = [{"id": i, "tags": ["a", i]} for i in range(6)]
    env.from_collection(dicts).print("dicts")
    env.execute()
    lines = printed(capsys)
    assert sorted(text for _, text in lines) == sorted(str(d) for d in dicts)
    assert {prefix for prefix, _ in lines} == {"dicts:1", "dicts:2"}


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_print_at_parallelism_one_has_no_subtask_prefix(
        env: StreamExecutionEnvironment, capsys: pytest.CaptureFixture) -> None:
    env.from_collection([{"k": 1}, Row(a=1)]).print()
    env.execute()
    assert capsys.readouterr().out.splitlines() == ["{'k': 1}", "Row(a=1)"]


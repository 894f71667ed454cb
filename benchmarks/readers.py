"""File readers: rows/s of slipstream's CSV and JSON-lines FileSource against pyarrow's own streaming readers.

Generates a CSV file and a JSON-lines file of N rows (an int id, a string with commas and
quotes in every tenth row, a double, a boolean) and, in the same run, reads each with:
pyarrow's streaming reader (``pyarrow.csv.open_csv`` / ``pyarrow.json.open_json``), slipstream's
reader alone (``FileSource`` reader polled directly), the line-by-line reader it replaced (the
"before" figure, read through the same reader interface), and a job reading the file into a
counting sink. JSON lines are read both into typed rows (a ``JsonRowDeserializationSchema``)
and as plain dicts. Run: `python benchmarks/readers.py [--rows N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from typing import Callable

import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.base import END_OF_INPUT, SourceReaderContext
from slipstream.datastream.connectors.file_system import FileSource
from slipstream.datastream.connectors.sinks import FunctionSink
from slipstream.datastream.formats.base import ReaderFormat
from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema, _CsvRecordReader
from slipstream.datastream.formats.json import JsonLinesReaderFormat, JsonRowDeserializationSchema, _JsonLinesReader
from slipstream.datastream.typeinfo import Types

POLL = 4096
CSV_SCHEMA = (CsvSchema.builder().add_number_column("id", Types.LONG()).add_string_column("name")
              .add_number_column("score", Types.DOUBLE()).add_boolean_column("active").set_use_header().build())
JSON_SCHEMA = JsonRowDeserializationSchema(
    Types.ROW_NAMED(["id", "name", "score", "active"], [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.BOOLEAN()]))


def write_files(directory: str, rows: int) -> tuple[str, str]:
    csv_path, json_path = os.path.join(directory, "in.csv"), os.path.join(directory, "in.jsonl")
    with open(csv_path, "w") as csv_file, open(json_path, "w") as json_file:
        csv_file.write("id,name,score,active\n")
        for i in range(rows):
            name = f'user {i}, "the {i % 7}th"' if i % 10 == 0 else f"user{i}"
            score, active = i * 0.25, i % 3 == 0
            quoted = '"' + name.replace('"', '""') + '"' if i % 10 == 0 else name
            csv_file.write(f"{i},{quoted},{score},{'true' if active else 'false'}\n")
            json_file.write(json.dumps({"id": i, "name": name, "score": score, "active": active}) + "\n")
    return csv_path, json_path


def timed(read: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    rows = read()
    return rows, time.perf_counter() - start


def arrow_csv(path: str) -> int:
    return sum(batch.num_rows for batch in pa_csv.open_csv(path))


def arrow_json(path: str) -> int:
    return sum(batch.num_rows for batch in pa_json.open_json(path))


def reader_alone(reader_format: ReaderFormat, path: str) -> int:
    reader = FileSource.for_record_stream_format(reader_format, path).build().create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    rows = 0
    while (batch := reader.poll(POLL)) is not END_OF_INPUT:
        rows += len(batch.values)
    reader.close()
    return rows


def line_reader(make: Callable[[], object]) -> int:
    reader = make()
    rows = 0
    while (batch := reader.read_batch(POLL)) is not None:
        rows += len(batch.values)
    reader.close()
    return rows


def job(reader_format: ReaderFormat, path: str) -> int:
    count = [0]

    def counter(_: object) -> None:
        count[0] += 1

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(FileSource.for_record_stream_format(reader_format, path).build(), None, "file") \
        .add_sink(FunctionSink(counter))
    env.execute("readers")
    return count[0]


def report(name: str, baseline: tuple[int, float], runs: dict[str, tuple[int, float]]) -> None:
    base_rate = baseline[0] / baseline[1]
    print(f"{name}: pyarrow streaming reader {base_rate / 1e6:.2f} M rows/s")
    for label, (rows, seconds) in runs.items():
        assert rows == baseline[0], f"{label} read {rows} rows, pyarrow {baseline[0]}"
        rate = rows / seconds
        print(f"  {label:<28} {rate / 1e6:6.3f} M rows/s  ({base_rate / rate:5.1f}x slower than pyarrow)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    rows = parser.parse_args().rows
    print(f"{rows} rows; Python {platform.python_version()}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as directory:
        csv_path, json_path = write_files(directory, rows)
        csv_format = CsvReaderFormat.for_schema(CSV_SCHEMA)
        report("CSV", timed(lambda: arrow_csv(csv_path)), {
            "reader (bulk)": timed(lambda: reader_alone(csv_format, csv_path)),
            "line reader (before)": timed(lambda: line_reader(lambda: _CsvRecordReader(csv_path, CSV_SCHEMA, None))),
            "job into a counting sink": timed(lambda: job(csv_format, csv_path))})
        row_format, dict_format = JsonLinesReaderFormat(JSON_SCHEMA), JsonLinesReaderFormat()
        report("JSON lines", timed(lambda: arrow_json(json_path)), {
            "rows reader (bulk)": timed(lambda: reader_alone(row_format, json_path)),
            "rows line reader (before)": timed(lambda: line_reader(
                lambda: _JsonLinesReader(json_path, JSON_SCHEMA, None))),
            "rows job into a counting sink": timed(lambda: job(row_format, json_path)),
            "dicts reader (block scan)": timed(lambda: reader_alone(dict_format, json_path)),
            "dicts line reader (before)": timed(lambda: line_reader(lambda: _JsonLinesReader(json_path, None, None))),
            "dicts job into a counting sink": timed(lambda: job(dict_format, json_path))})


if __name__ == "__main__":
    main()

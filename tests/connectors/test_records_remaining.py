"""Sources that know their size say how many records they have left, for the backlog's progress and
ETA: Parquet files from their metadata, Arrow tables and DataFrames from their rows."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.base import END_OF_INPUT, SourceReaderContext
from slipstream.datastream.connectors.file_system import FileSource, StreamFormat
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat


def remaining_while_read(reader, batch: int) -> list[int | None]:
    """records_remaining before each poll and at the end."""
    reader.open(SourceReaderContext(0, 1))
    seen = [reader.records_remaining()]
    while reader.poll(batch) is not END_OF_INPUT:
        seen.append(reader.records_remaining())
    seen.append(reader.records_remaining())
    reader.close()
    return seen


@pytest.mark.parametrize("parallelism", [1, 2])
def test_parquet_files_count_down_their_rows_from_the_metadata(tmp_path, parallelism) -> None:
    for name, rows in (("a.parquet", 250), ("b.parquet", 120)):
        pq.write_table(pa.table({"x": list(range(rows))}), tmp_path / name, row_group_size=100)
    source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(batch_size=30), str(tmp_path)).build()
    total = 0
    for subtask in range(parallelism):
        reader = source.create_reader(subtask, parallelism)
        seen = remaining_while_read(reader, 30)
        assert seen[-1] == 0 and seen == sorted(seen, reverse=True)
        total += seen[0]
    assert total == 370


def test_line_files_cannot_tell(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("1\n2\n3\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path)).build()
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    assert reader.records_remaining() is None
    reader.close()


def test_an_arrow_table_counts_down_its_rows() -> None:
    reader = ArrowSource(pa.table({"x": list(range(1000))}), batch_size=300).create_reader(0, 1)
    assert remaining_while_read(reader, 300) == [1000, 700, 400, 100, 0, 0]

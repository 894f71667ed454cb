"""Parquet through pyarrow: ``ParquetColumnarRowInputFormat`` (read) and ``ParquetBulkWriters`` (write).

Reading splits each file by row group, so subtasks share even a single large
file, and returns :class:`~slipstream.datastream.connectors.columnar.ArrowSourceBatch`
batches: the Arrow record batch as read, and the same records as named ``Row``
values for Python functions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from slipstream.datastream.columnar import unfit_field
from slipstream.datastream.connectors.base import RecordWriteError
from slipstream.datastream.connectors.columnar import ArrowSourceBatch
from slipstream.datastream.connectors.errors import SinkFormatError, SourceFormatError
from slipstream.datastream.formats.base import (
    BulkFormat,
    BulkWriter,
    BulkWriterFactory,
    FileRecordReader,
)
from slipstream.datastream.typeinfo import Row, RowTypeInfo
from slipstream.errors import InvalidProgramError
from slipstream.filesystem import filesystem_of


class ParquetColumnarRowInputFormat(BulkFormat):
    """Reads Parquet files in Arrow record batches of up to ``batch_size`` rows, one row group per split.

    Args (PyFlink's, then slipstream's ``columns``):
        row_type: the columns to read, by the field names of a ``Types.ROW_NAMED`` (PyFlink's takes
            the Table API's row type, which slipstream does not have); all of them when None.
        hadoop_config: refused when given: files are read by Arrow, there is no Hadoop.
        batch_size: the most rows per batch (a poll may ask for fewer).
        is_utc_timestamp: accepted; Arrow reads a timestamp as stored, without converting it to the
            local zone (what Flink does when it is True).
        is_case_sensitive: whether column names must match in case (False: ``ID`` reads ``id``).
        columns: the columns to read, by name, in this order (instead of ``row_type``).
    """

    def __init__(self, row_type: RowTypeInfo | None = None, hadoop_config: Any = None, batch_size: int = 2048,
                 is_utc_timestamp: bool = False, is_case_sensitive: bool = True,
                 columns: list[str] | None = None) -> None:
        if batch_size < 1:
            raise InvalidProgramError(f"ParquetColumnarRowInputFormat: batch_size must be positive, got {batch_size}")
        if hadoop_config is not None:
            raise InvalidProgramError("ParquetColumnarRowInputFormat: hadoop_config does not apply, files are read "
                                      "by Arrow (a remote path's file system is fsspec's)")
        if row_type is not None and columns is not None:
            raise InvalidProgramError("ParquetColumnarRowInputFormat: give row_type or columns, not both")
        if row_type is not None and not isinstance(row_type, RowTypeInfo):
            raise InvalidProgramError("ParquetColumnarRowInputFormat: row_type must be a Types.ROW_NAMED(...) naming "
                                      f"the columns to read, got {row_type!r}")
        names = row_type.get_field_names() if row_type is not None else columns
        self._columns = None if names is None else list(names)
        self._case_sensitive = is_case_sensitive
        self._batch_size = batch_size

    def split_file(self, path: str) -> list[int | None]:
        return [part for part, _ in self.split_file_counted(path)]

    def split_file_counted(self, path: str) -> list[tuple[int | None, int | None]]:
        parquet = _open_parquet(path)
        try:
            metadata = parquet.metadata
            return [(group, metadata.row_group(group).num_rows) for group in range(parquet.num_row_groups)]
        finally:
            parquet.close(force=True)

    def create_reader(self, path: str, part: int | None, position: Any | None) -> FileRecordReader:
        return _RowGroupReader(path, part, self._columns, self._batch_size, position, self._case_sensitive)


def _open_parquet(path: str) -> pq.ParquetFile:
    """``path`` as a Parquet file, read natively when local and through fsspec otherwise;
    ``close(force=True)`` releases the file."""
    fs = filesystem_of(path)
    try:
        source = pa.OSFile(path) if fs.local else pa.PythonFile(fs.open_input(path), mode="r")
        return pq.ParquetFile(source)
    except (pa.ArrowInvalid, OSError) as error:
        raise SourceFormatError(path, None, None, f"a Parquet file ({error})", path) from None


class _RowGroupReader(FileRecordReader):
    """Reads one row group (every one for ``None``: the whole file); its position is the number of
    its rows already returned."""

    def __init__(self, path: str, row_group: int | None, columns: list[str] | None, batch_size: int,
                 position: Any | None, case_sensitive: bool = True) -> None:
        self._file = _open_parquet(path)
        names = self._file.schema_arrow.names
        if columns is not None and not case_sensitive:
            by_lower = {name.lower(): name for name in names}
            columns = [by_lower.get(column.lower(), column) for column in columns]
        missing = [c for c in columns or [] if c not in names]
        if missing:
            raise SourceFormatError(path, None, None, f"columns {missing} among the file's columns", names)
        self._batches: Iterator[pa.RecordBatch] = self._file.iter_batches(
            batch_size=batch_size, row_groups=None if row_group is None else [row_group], columns=columns)
        self._pending: pa.RecordBatch | None = None
        self._rows_read = 0
        if position is not None:
            self._skip(int(position))

    def _skip(self, rows: int) -> None:
        while self._rows_read < rows:
            batch = self._next(rows - self._rows_read)
            if batch is None:
                break
            self._rows_read += batch.num_rows

    def _next(self, max_records: int) -> pa.RecordBatch | None:
        batch = self._pending
        self._pending = None
        while batch is None or batch.num_rows == 0:
            batch = next(self._batches, None)
            if batch is None:
                return None
        if batch.num_rows > max_records:
            self._pending = batch.slice(max_records)
            batch = batch.slice(0, max_records)
        return batch

    def read_batch(self, max_records: int) -> ArrowSourceBatch | None:
        batch = self._next(max_records)
        if batch is None:
            return None
        self._rows_read += batch.num_rows
        return ArrowSourceBatch(batch)

    def position(self) -> int:
        return self._rows_read

    def close(self) -> None:
        self._file.close(force=True)


def parquet_row(element: Any, schema: pa.Schema | None) -> Mapping[Any, Any]:
    """``element`` as one Parquet row: a dict, a named Row, or (with a schema) a tuple in the
    schema's order; else a :class:`RecordWriteError` naming it."""
    if isinstance(element, Mapping):
        return element
    if isinstance(element, Row) and element._fields is not None:
        return element.as_dict()
    if isinstance(element, (Row, tuple, list)) and schema is not None:
        if len(element) != len(schema.names):
            raise RecordWriteError(element, SinkFormatError(
                f"Parquet: the record has {len(element)} field(s), the schema has "
                f"{len(schema.names)}: {schema.names}"))
        return dict(zip(schema.names, element))
    raise RecordWriteError(element, SinkFormatError(
        "Parquet: expected a dict or a named Row"
        + ("" if schema is not None else ", or a schema to name positional fields")))


class _ParquetBulkWriter(BulkWriter):
    """Buffers records and writes them as row groups of up to ``row_group_size`` rows.

    A record that does not fit the schema fails with a :class:`RecordWriteError` naming the
    record and the field: the first record of every batch is checked as it arrives, and a row
    group Arrow refuses is searched for the record at fault.
    """

    def __init__(self, stream: BinaryIO, schema: pa.Schema | None, row_group_size: int) -> None:
        self._stream = stream
        self._schema = schema
        self._row_group_size = row_group_size
        self._rows: list[Mapping[Any, Any]] = []
        self._records: list[Any] = []  # as given, parallel to _rows, to name one that does not fit
        self._writer: pq.ParquetWriter | None = None

    def _as_dict(self, element: Any) -> Mapping[Any, Any]:
        return parquet_row(element, self._schema)

    def add_element(self, element: Any) -> None:
        self.add_elements([element])

    def add_elements(self, elements: list[Any]) -> None:
        if not elements:
            return
        if self._schema is not None:
            first = self._as_dict(elements[0])
            _check_fits(self._schema, first, elements[0])
        for element in elements:
            self._rows.append(self._as_dict(element))
            self._records.append(element)
            if len(self._rows) >= self._row_group_size:
                self._write_rows()

    def _write_rows(self) -> None:
        if not self._rows:
            return
        try:
            table = pa.Table.from_pylist(self._rows, schema=self._schema)
        except (pa.ArrowException, TypeError, ValueError) as error:
            schema = self._schema or pa.Table.from_pylist(self._rows[:1]).schema
            for row, record in zip(self._rows, self._records):
                _check_fits(schema, row, record)
            raise SinkFormatError(f"Parquet: records do not fit the schema {schema}: {error}") from None
        if self._writer is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self._stream, table.schema)
        self._writer.write_table(table, row_group_size=self._row_group_size)
        self._rows = []
        self._records = []

    def finish(self) -> None:
        self._write_rows()
        if self._writer is None:
            if self._schema is None:
                raise SinkFormatError("Parquet: cannot write a file with no records and no schema")
            self._writer = pq.ParquetWriter(self._stream, self._schema)
        self._writer.close()


def _check_fits(schema: pa.Schema, row: Mapping[Any, Any], record: Any) -> None:
    """Raise :class:`RecordWriteError` naming ``record`` when ``row`` does not fit ``schema``."""
    problem = unfit_field(schema, row)
    if problem is not None:
        raise RecordWriteError(record, SinkFormatError(f"Parquet: {problem} (schema {schema})"))


class ParquetBulkWriterFactory(BulkWriterFactory):
    def __init__(self, schema: pa.Schema | None, row_group_size: int) -> None:
        self._schema = schema
        self._row_group_size = row_group_size

    @property
    def schema(self) -> pa.Schema | None:
        """The schema every part file is written with, None when each infers its own."""
        return self._schema

    def create(self, stream: BinaryIO) -> BulkWriter:
        return _ParquetBulkWriter(stream, self._schema, self._row_group_size)


class ParquetBulkWriters:
    """Creates bulk writers of Parquet part files for ``FileSink.for_bulk_format``.

    Examples:
        >>> factory = ParquetBulkWriters.for_schema(pa.schema([('word', pa.string()), ('n', pa.int64())]))
    """

    @staticmethod
    def for_schema(schema: pa.Schema | None = None, row_group_size: int = 64 * 1024) -> BulkWriterFactory:
        """Write records (dicts, named rows, or tuples in the schema's order) with ``schema``.

        Without a schema, each part file takes the schema Arrow infers from its first row group.
        """
        if schema is not None and not isinstance(schema, pa.Schema):
            raise InvalidProgramError(f"ParquetBulkWriters.for_schema needs a pyarrow.Schema, got {schema!r}")
        if row_group_size < 1:
            raise InvalidProgramError(f"ParquetBulkWriters: row_group_size must be positive, got {row_group_size}")
        return ParquetBulkWriterFactory(schema, row_group_size)

    @staticmethod
    def for_row_type(row_type: RowTypeInfo, hadoop_config: Any = None, utc_timestamp: bool = False
                     ) -> BulkWriterFactory:
        """PyFlink's form: the columns of a ``Types.ROW_NAMED(...)`` (PyFlink's takes the Table API's
        row type, which slipstream does not have); ``hadoop_config`` does not apply, timestamps are
        written as they are (``utc_timestamp`` is accepted)."""
        if not isinstance(row_type, RowTypeInfo):
            raise InvalidProgramError(f"ParquetBulkWriters.for_row_type needs a Types.ROW_NAMED(...), got {row_type!r}")
        if hadoop_config is not None:
            raise InvalidProgramError("ParquetBulkWriters.for_row_type: hadoop_config does not apply, files are "
                                      "written by Arrow")
        arrow_type = row_type.to_arrow_type()
        return ParquetBulkWriters.for_schema(pa.schema([arrow_type.field(i) for i in range(arrow_type.num_fields)]))

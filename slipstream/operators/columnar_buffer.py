"""``ColumnarBuffer``: one operator input's backlog kept as Arrow batches, never as Python rows.

The columnar counterpart of :class:`~slipstream.operators.sort_buffer.SortBuffer`, for
inputs that arrive as Arrow record batches (``RecordBatch(arrow=...)``, e.g. from an
``ArrowSource``) and are keyed by a field (``where('f0')``, ``key_by(0)``): the key is
read from its column, so buffering costs nothing per record.

How records are held:

* the batches as they arrived, in arrival order, plus — once any record came with a
  timestamp — a timestamp column (:data:`TS_COLUMN`, int64, null for records without one);
* past ``memory_budget`` bytes the in-memory batches are first given to ``compact`` when the
  owner set one (a combiner: fewer records that stand for them), and kept if that brought them
  within half the budget; otherwise they are *spilled*: split by a hash of
  the key into :data:`SPILL_PARTITIONS` partitions, each part written as an Arrow IPC file
  of its own (in a private directory, mode 0700, that :meth:`ColumnarBuffer.close` removes;
  a spilled file never changes, so a checkpoint stores it once: :meth:`ColumnarBuffer.snapshot`).
  Records keep their arrival order within a partition, and all records of a
  key are in one partition — the same one in every buffer, since the hash depends only
  on the key's value (integers hash as int64, strings as strings) — so two buffers can
  be read back partition by partition and joined by key with one partition in memory.
  A buffer made with ``partitioned=False`` is read back whole, in arrival order (one query over
  all of it): its spills are written as they are, one file each, and never split.

What a buffer accepts (:meth:`ColumnarBuffer.add` returns False otherwise, and the
operator goes on with rows): batches of one schema whose key column is a signed integer
(or uint8/16/32), a string or a boolean column without nulls; and, once it spilled
without timestamps, no batch with timestamps.

>>> import pyarrow as pa
>>> buffer = ColumnarBuffer("k", memory_budget=1)
>>> buffer.add(pa.record_batch({"k": [3, 1, 3], "v": ["a", "b", "c"]}), [5, 6, 7])
True
>>> buffer.add(pa.record_batch({"k": [1], "v": ["d"]}), None)
True
>>> buffer.spilled_bytes > 0, len(buffer)
(True, 4)
>>> sorted(row for part in buffer.partition_tables(SPILL_PARTITIONS)
...        for row in zip(*[c.to_pylist() for c in without_stamps(part).columns]))
[(1, 'b'), (1, 'd'), (3, 'a'), (3, 'c')]
>>> buffer.close()
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from slipstream.errors import SlipstreamError
from slipstream.operators.spill_file import SpilledFile, TailSegments, private_directory, write_restored

TS_COLUMN = "__slipstream_ts"
"""The timestamp column a buffer adds to every batch it holds (int64, null: no timestamp)."""

SPILL_PARTITIONS = 32
"""Hash partitions of a spilled buffer: reading back holds one partition of each buffer in memory."""

BYTES_PER_RECORD = 256
"""What a buffered Python record costs, roughly: a record budget (``sort_memory_budget``)
becomes ``budget * BYTES_PER_RECORD`` bytes of Arrow data, the same memory as that many rows."""

_HASH_SEED = 0x51_1957


def key_kind(data_type: pa.DataType) -> str | None:
    """The family a key column hashes and compares in ("int", "str", "bool"), None: not columnar."""
    if pa.types.is_signed_integer(data_type) or data_type in (pa.uint8(), pa.uint16(), pa.uint32()):
        return "int"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type) or \
            getattr(pa.types, "is_string_view", lambda _: False)(data_type):
        return "str"
    if pa.types.is_boolean(data_type):
        return "bool"
    return None


def canonical_keys(column: Any, kind: str) -> Any:
    """A key column as a polars Series of one type per family (Int64, String, Boolean)."""
    import polars as pl
    series = pl.Series(column) if not isinstance(column, pl.Series) else column
    target = {"int": pl.Int64, "str": pl.String, "bool": pl.Boolean}[kind]
    return series.cast(target) if series.dtype != target else series


def partition_ids(column: Any, kind: str, count: int) -> Any:
    """The partition (0 ≤ id < count) of each key: a numpy array of the narrowest unsigned type that
    holds ``count`` values (numpy sorts 8- and 16-bit integers stably by radix, ten times faster than
    64-bit ones); equal keys, equal ids."""
    import polars as pl
    keys = canonical_keys(column, kind)
    narrow = pl.UInt8 if count <= 1 << 8 else pl.UInt16 if count <= 1 << 16 else pl.UInt32
    return (keys.hash(seed=_HASH_SEED) % count).cast(narrow).to_numpy()


def split_by_partition(table: pa.Table, key_name: str, kind: str, count: int) -> list[pa.Table]:
    """``table`` split into ``count`` tables by the partition of its key, arrival order kept in each."""
    import numpy as np
    if count == 1 or table.num_rows == 0:
        return [table] + [table.slice(0, 0)] * (count - 1)
    ids = partition_ids(table.column(key_name), kind, count)
    order = np.argsort(ids, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ids, minlength=count))])
    ordered = table.take(pa.array(order))
    return [ordered.slice(int(bounds[p]), int(bounds[p + 1] - bounds[p])) for p in range(count)]


def _with_stamps(batch: pa.RecordBatch, stamps: pa.Array | None) -> pa.RecordBatch:
    """``batch`` with a :data:`TS_COLUMN` (all null when ``stamps`` is None)."""
    column = pa.nulls(batch.num_rows, pa.int64()) if stamps is None else stamps
    return pa.RecordBatch.from_arrays([*batch.columns, column], names=[*batch.schema.names, TS_COLUMN])


def without_stamps(table: pa.Table) -> pa.Table:
    """A buffered table without its :data:`TS_COLUMN` (if it has one): the records as they arrived."""
    return table.drop_columns([TS_COLUMN]) if TS_COLUMN in table.schema.names else table


def _drain(pieces: list[pa.Table], like: pa.Table) -> pa.Table:
    """The concatenation of ``pieces`` (empty: an empty table like ``like``), emptying the list."""
    table = like.slice(0, 0) if not pieces else pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
    pieces.clear()
    return table


class ColumnarBuffer:
    """The backlog of one operator input as Arrow batches (see the module docstring).

    Args:
        key_field: the key's field: a column name, or a position in the schema.
        memory_budget: bytes of Arrow data held in memory before spilling.
        partitioned: spills are split by key partition, read back a partition at a time (False: the
            buffer is read back whole, so splitting would only cost a hash and a copy of every row).
        spill_dir: where the private spill directory is made (None: the system temp dir).
        metrics: an operator's metrics dict (``backlog_records``, ``spilled_bytes`` kept up to date).
        name: the operator's name, for error messages.
    """

    def __init__(self, key_field: int | str, *, memory_budget: int = 256_000_000, spill_dir: str | None = None,
                 metrics: dict[str, Any] | None = None, name: str = "operator", partitioned: bool = True) -> None:
        self.key_field = key_field
        self.partitioned = partitioned
        self.memory_budget = max(0, int(memory_budget))
        self.spill_root = spill_dir
        self.metrics = metrics if metrics is not None else {}
        self.metrics.setdefault("backlog_records", 0)
        self.metrics.setdefault("spilled_bytes", 0)
        self.name = name
        self.schema: pa.Schema | None = None  # of the batches as they arrive (without TS_COLUMN)
        self.key_name: str | None = None
        self.kind: str | None = None
        self.has_timestamps = False
        self.spilled_bytes = 0
        self._batches: list[pa.RecordBatch] = []
        self._bytes = 0
        self._count = 0
        self._dir: str | None = None
        self._parts: list[list[SpilledFile]] = [[] for _ in range(SPILL_PARTITIONS)]  # per partition, in spill order
        self._spills = 0
        self._segments = TailSegments(self._spill_directory)
        self._closed = False
        self.compact: Callable[[pa.Table], pa.Table | None] | None = None
        """Folds the in-memory records, in arrival order, into fewer in the same schema (None: cannot)."""

    def __len__(self) -> int:
        return self._count

    @property
    def spilled(self) -> bool:
        return self._spills > 0

    @property
    def partition_count(self) -> int:
        """How many tables :meth:`partition_tables` gives: the key partitions of a partitioned buffer
        that spilled, else 1."""
        return SPILL_PARTITIONS if self.spilled and self.partitioned else 1

    # -- filling ------------------------------------------------------------------------------------
    def _resolve(self, schema: pa.Schema) -> bool:
        field = self.key_field
        if isinstance(field, int):
            if not 0 <= field < len(schema.names):
                return False
            name = schema.names[field]
        else:
            if schema.get_field_index(field) < 0:
                return False
            name = field
        kind = key_kind(schema.field(name).type)
        if kind is None or TS_COLUMN in schema.names:
            return False
        self.schema, self.key_name, self.kind = schema, name, kind
        return True

    def add(self, batch: pa.RecordBatch | pa.Table, timestamps: list[Any] | pa.Array | None) -> bool:
        """Buffer ``batch`` (its records' ``timestamps`` parallel, a list or an int64 array, or None);
        False when it cannot be held columnar (another schema, a key column that is missing, of another
        type, or has nulls)."""
        if self._closed:
            raise SlipstreamError(f"operator '{self.name}': the columnar buffer is closed")
        if self.schema is None:
            if not self._resolve(batch.schema):
                return False
        elif not batch.schema.equals(self.schema):
            return False
        if batch.column(self.key_name).null_count:
            return False
        rows = batch.num_rows
        if not rows:
            return True
        if timestamps is not None and not self.has_timestamps:
            if self.spilled:
                return False  # spilled without timestamps: the rows take it from here
            self.has_timestamps = True
            self._batches = [_with_stamps(piece, None) for piece in self._batches]
            self._segments.clear()  # their columns changed: the next checkpoint writes them anew
        stamps = pa.array(timestamps, pa.int64()) if isinstance(timestamps, list) else timestamps
        pieces = batch.combine_chunks().to_batches() if isinstance(batch, pa.Table) else [batch]
        offset = 0
        for piece in pieces:
            length = piece.num_rows
            self._bytes += piece.nbytes
            stamped = piece
            if self.has_timestamps:
                stamped = _with_stamps(piece, None if stamps is None else stamps.slice(offset, length))
            self._batches.append(stamped)
            offset += length
        self._count += rows
        self.metrics["backlog_records"] += rows
        if self._bytes > self.memory_budget and not self._compacted():
            self._spill()
        return True

    def _compacted(self) -> bool:
        """Whether :attr:`compact` brought the in-memory records within half the budget (then nothing
        spills). Once it cannot (too many keys, a field it does not fold), it is not tried again."""
        if self.compact is None or self.spilled:
            return False
        table = self.compact(self._memory_table())
        if table is None or table.nbytes > self.memory_budget // 2:
            self.compact = None
            return False
        self._batches, self._bytes = table.to_batches(), table.nbytes
        self._segments.clear()  # other batches now: the next checkpoint writes them anew
        return True

    def _memory_table(self) -> pa.Table:
        if self.schema is None:
            return pa.table({})
        schema = self.schema.append(pa.field(TS_COLUMN, pa.int64())) if self.has_timestamps else self.schema
        return pa.Table.from_batches(self._batches, schema=schema)

    # -- spilling -----------------------------------------------------------------------------------
    def _spill(self) -> None:
        """Split the in-memory batches by key partition and write each part as a file of its own (an
        unpartitioned buffer's: all of them as one file)."""
        if not self._batches:
            return
        table = self._memory_table()
        directory = self._spill_directory()
        parts = split_by_partition(table, *self.partitioning(), SPILL_PARTITIONS) if self.partitioned else [table]
        try:
            for number, part in enumerate(parts):
                if part.num_rows:
                    path = os.path.join(directory, f"part-{number:03d}-{self._spills:06d}.arrow")
                    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, part.schema) as writer:
                        writer.write_table(part)
                    self._add_part(number, path)
        except OSError as exc:
            raise SlipstreamError(f"operator '{self.name}' cannot spill its backlog to {directory}: {exc}") from exc
        self._spills += 1
        self._batches, self._bytes = [], 0
        self._segments.clear()

    def _spill_directory(self) -> str:
        if self._dir is None:
            self._dir = private_directory(self.spill_root, "columnar")
        return self._dir

    def _add_part(self, number: int, path: str) -> None:
        self._parts[number].append(SpilledFile(path))
        size = os.path.getsize(path)
        self.spilled_bytes += size
        self.metrics["spilled_bytes"] += size

    # -- reading back -------------------------------------------------------------------------------
    def table(self) -> pa.Table:
        """Everything buffered, in arrival order (not for a partitioned buffer that spilled)."""
        if not self.spilled:
            return self._memory_table()
        if self.partitioned:
            raise SlipstreamError("a spilled columnar buffer is read partition by partition")
        memory = self._memory_table()
        return _drain([*self._read_part(0), memory], memory)

    def _read_part(self, number: int) -> list[pa.Table]:
        """The spilled files of partition ``number``, in the order they were written (memory-mapped)."""
        pieces = []
        for spilled in self._parts[number]:
            with pa.memory_map(spilled.path) as source:
                pieces.append(pa.ipc.open_file(source).read_all())
        return pieces

    def partitioning(self) -> tuple[str, str]:
        """The key column and its kind, which the first batch set (only a buffer holding rows splits)."""
        assert self.key_name is not None and self.kind is not None
        return self.key_name, self.kind

    def _take_table(self) -> pa.Table:
        table = self.table()
        self._batches, self._bytes = [], 0
        self._segments.clear()
        return table

    def partition_tables(self, count: int) -> Iterator[pa.Table]:
        """``count`` tables (1, or :data:`SPILL_PARTITIONS`): the records of each key partition,
        in arrival order, with a :data:`TS_COLUMN` column when :attr:`has_timestamps`. Spilled partitions are read one
        at a time."""
        if count == 1:
            yield self._take_table()  # handed over: the buffer keeps no reference (memory)
            return
        if count != SPILL_PARTITIONS or not self.partitioned:
            counts = f"1 or {SPILL_PARTITIONS} partitions" if self.partitioned else "1 table (unpartitioned)"
            raise ValueError(f"a columnar buffer is read as {counts}, not {count}")
        memory = self._memory_table()
        parts = split_by_partition(memory, *self.partitioning(), count) if memory.num_rows else None
        for number in range(count):
            pieces = self._read_part(number)
            if parts is not None and parts[number].num_rows:
                pieces.append(parts[number])
            yield _drain(pieces, memory)  # the generator keeps no reference to what it handed over

    # -- checkpoints --------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The buffer for a checkpoint: its spilled files as they are, its in-memory batches as Arrow
        IPC segments (only those added since the last checkpoint are written, see
        :class:`~slipstream.operators.spill_file.TailSegments`), and what it learnt of its input."""
        rows = sum(batch.num_rows for batch in self._batches)
        tail = self._segments.checkpoint_files(rows, lambda start, stop: self._memory_table().slice(start,
                                                                                                   stop - start))
        return {"schema": self.schema, "key_name": self.key_name, "kind": self.kind,
                "has_timestamps": self.has_timestamps, "count": self._count, "spills": self._spills,
                "parts": [[spilled.checkpoint_file() for spilled in files] for files in self._parts], "tail": tail}

    def restore(self, state: dict[str, Any]) -> None:
        """Fill this new, empty buffer with a checkpoint's :meth:`snapshot` (each file as its bytes)."""
        self.schema, self.key_name, self.kind = state["schema"], state["key_name"], state["kind"]
        self.has_timestamps, self._count, self._spills = state["has_timestamps"], state["count"], state["spills"]
        self.metrics["backlog_records"] += self._count
        for number, files in enumerate(state["parts"]):
            for index, data in enumerate(files):
                path = os.path.join(self._spill_directory(), f"part-{number:03d}-r{index:06d}.arrow")
                write_restored(path, data)
                self._add_part(number, path)
        for table in self._segments.restore(state["tail"]):
            self._batches.extend(table.to_batches())
            self._bytes += table.nbytes

    # -- clean-up ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Drop the records and delete the spill files; the buffer cannot be filled again."""
        self._closed = True
        self._batches = []
        self._segments.clear()
        self._parts = [[] for _ in range(SPILL_PARTITIONS)]
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def restore_columnar_buffers(buffers: list[ColumnarBuffer | None], states: list[Any]) -> list[ColumnarBuffer | None]:
    """Buffers made anew for a restored backlog, filled with a checkpoint's snapshots of them
    (a snapshot None: that input had moved on to rows, so its new buffer is closed)."""
    restored: list[ColumnarBuffer | None] = []
    for buffer, state in zip(buffers, states, strict=True):
        if state is not None and buffer is None:
            raise SlipstreamError("a checkpoint's columnar backlog buffer has no counterpart in this run "
                                  "(its batch engine or key differs from the run that took the checkpoint)")
        if buffer is not None and state is None:
            buffer.close()
        elif buffer is not None:
            buffer.restore(state)
        restored.append(None if state is None else buffer)
    return restored


__all__ = [
    "BYTES_PER_RECORD",
    "SPILL_PARTITIONS",
    "TS_COLUMN",
    "ColumnarBuffer",
    "canonical_keys",
    "key_kind",
    "partition_ids",
    "split_by_partition",
    "without_stamps",
]

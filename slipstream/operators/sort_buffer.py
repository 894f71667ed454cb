"""``SortBuffer``: one operator input's backlog, buffered columnar and returned grouped by key.

A sorting operator (``has_internal_sorter``, FLIP-327) puts every backlog record
here instead of processing it, and when the backlog ends reads the records back in the
buffer's :class:`BufferOrder`: grouped by key, each key's records in timestamp order
(then arrival order) — BATCH semantics —, or in arrival order; or watermark interval by
interval, each interval's records key by key in arrival order (what a STREAMING replay
needs: see :mod:`slipstream.operators.backlog`). The ordering is done by the
:class:`~slipstream.operators.batch_engine.BatchEngine`.

How records are held:

* keys become dense integer ids (:class:`KeyDictionary`, in first-seen order), so the
  key column is Arrow ``int64`` whatever the keys are, and ids never collide (no hash);
  the distinct keys stay in memory, as the keyed state they turn into will;
* timestamps are an Arrow ``int64`` column (null for records without one); so are the
  *interval* the operator puts each batch in (the number of watermarks its input had
  passed when the batch arrived) and the batch's *arrival* number (counted over every
  buffer of the operator, so that two inputs' records can be merged in arrival order);
* values stay Python objects in memory until more than ``memory_budget`` records are
  held; then the in-memory records are sorted and spilled as one *run*: an Arrow IPC
  file whose ``values`` column holds the records pickled a chunk at a time
  (:data:`VALUE_CHUNK`). Runs go to a private directory (mode 0700) under ``spill_dir``
  that :meth:`SortBuffer.close` removes;
* reading back merges the runs and the in-memory records: the engine sorts the
  order's columns of all of them together (values stay on disk), and the
  resulting order of run numbers says which run's next record comes next, so every
  run is read front to back once.

Use (one buffer per operator input; buffers that must agree on keys, like the two
inputs of a co-group, share a :class:`KeyDictionary`):

>>> from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
>>> buffer = SortBuffer(PolarsBatchEngine(), memory_budget=2)
>>> buffer.add(["b", "a", "b"], ["b@3", "a@2", "b@1"], [3, 2, 1])
>>> buffer.add(["a"], ["a@1"], [1])
>>> list(buffer.records())
[('b', 1, 'b@1'), ('b', 3, 'b@3'), ('a', 1, 'a@1'), ('a', 2, 'a@2')]
>>> [(key, values) for key, _, values in buffer.groups()]
[('b', ['b@1', 'b@3']), ('a', ['a@1', 'a@2'])]
>>> buffer.spilled_bytes > 0
True
>>> buffer.close()

Keys come back in the order they were first seen; with a shared dictionary,
:func:`co_grouped` walks several buffers key by key, and :func:`interval_batches`
interval by interval.

Checkpoints: :meth:`SortBuffer.snapshot` refers to the spilled runs as they are (immutable
files: a checkpoint stores each once, shared with the later ones) and writes the in-memory
records that arrived since the last checkpoint as an Arrow IPC segment of the same columns
(values pickled); :meth:`SortBuffer.restore`
puts both back into a new buffer, which then goes on filling as the old one would have.
"""

from __future__ import annotations

import array
import heapq
import itertools
import math
import os
import pickle
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from operator import itemgetter
from typing import Any, Self, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slipstream.datastream.columnar import column_values, packed_rows
from slipstream.errors import SlipstreamError, unhashable_key
from slipstream.operators.batch_engine import BatchEngine
from slipstream.operators.elements import RecordBatch
from slipstream.operators.spill_file import (
    CheckpointFile,
    SpilledFile,
    StoredContents,
    TailSegments,
    private_directory,
    write_restored,
)


class BufferOrder(Enum):
    """The order a :class:`SortBuffer` gives its records back in, as the columns it sorts by."""

    TIME = ("key", "ts", "seq")
    """Key by key (first seen first), each key's records by timestamp (nulls first), then arrival."""
    ARRIVAL = ("key", "seq")
    """Key by key, each key's records in arrival order."""
    INTERVAL = ("interval", "key", "seq")
    """Watermark interval by interval, each interval's records key by key in arrival order."""


_Record = tuple[int, int, int, "int | None", Any]
"""A buffered record as read back: key id, interval, arrival, timestamp, value."""

KEY_RUN_BLOCK = 65_536
"""Records :meth:`SortBuffer.key_runs` reads back at a time (whole keys: more when one key has more)."""

RUN_CHUNK_ROWS = 8192
"""Rows per record batch in a spilled run, and records per pickled chunk of values."""

VALUE_CHUNK = "values"
"""The column of a spilled run (or a checkpoint's tail segment) that holds its records: every
:data:`RUN_CHUNK_ROWS` of them pickled as one list, in the first row of their chunk (a multiple of
:data:`RUN_CHUNK_ROWS` from the table's start), null in the chunk's other rows. One pickle per chunk
costs about a quarter of one per record, and what records share (a ``Row``'s field names) is
written once per chunk."""

_INT64_LIMIT = 2 ** 63


class KeyDictionary:
    """Dense ids for keys, in first-seen order (keys equal as dict keys share an id)."""

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}
        self.keys: list[Any] = []
        self._segments: TailSegments | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def ids_of(self, keys: Sequence[Any]) -> list[int]:
        ids = self._ids
        get = ids.get
        known = self.keys
        out: list[int] = []
        append = out.append
        key: Any = None
        try:
            for key in keys:
                index = get(key)
                if index is None:
                    index = ids[key] = len(known)
                    known.append(key)
                append(index)
        except TypeError:
            raise unhashable_key(key) from None
        return out

    def key_of(self, key_id: int) -> Any:
        return self.keys[key_id]

    def checkpoint_files(self, directory: Callable[[], str]) -> list[CheckpointFile]:
        """The keys for a checkpoint, as Arrow IPC segments of pickled keys in ``directory()``: each
        checkpoint writes only the keys first seen since the previous one (ids only grow)."""
        if self._segments is None:
            self._segments = TailSegments(directory)
        return self._segments.checkpoint_files(len(self.keys), self._key_table)

    def _key_table(self, start: int, stop: int) -> pa.Table:
        dumps = pickle.dumps
        return pa.table({"key": pa.array([dumps(key, protocol=pickle.HIGHEST_PROTOCOL)
                                          for key in self.keys[start:stop]], pa.large_binary())})

    def restore(self, files: list[bytes | StoredContents], directory: Callable[[], str]) -> None:
        """Start from a checkpoint's :meth:`checkpoint_files` (this dictionary must be new)."""
        self._segments = TailSegments(directory)
        for table in self._segments.restore(files):
            self.keys.extend(map(pickle.loads, table.column("key").to_pylist()))
        self._ids = {key: index for index, key in enumerate(self.keys)}


@dataclass
class _Run:
    """One spilled, sorted run: an Arrow IPC file of ``rows`` records with seqs from ``first_seq``."""

    path: str
    rows: int
    first_seq: int
    size: int

    def __post_init__(self) -> None:
        self.file = SpilledFile(self.path)

    def _read(self, columns: list[str] | None = None) -> pa.Table:
        with pa.memory_map(self.path) as source:
            table = pa.ipc.open_file(source).read_all()
        return table if columns is None else table.select(columns)

    def columns(self, names: list[str]) -> pa.Table:
        return self._read(names)

    def records(self) -> Iterator[_Record]:
        with pa.memory_map(self.path) as source:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(index) for index in range(reader.num_record_batches)]
            values = _unpickled_chunks(batch.column(VALUE_CHUNK) for batch in batches)
            for batch in batches:
                columns = [batch.column(name).to_pylist() for name in ("key", "interval", "arrival", "ts")]
                yield from zip(*columns, values)  # zip stops at the batch's end before taking a value

    def values(self) -> Iterator[Any]:
        """The run's values in its order, unpickled a chunk at a time."""
        with pa.memory_map(self.path) as source:
            reader = pa.ipc.open_file(source)
            yield from _unpickled_chunks(reader.get_batch(index).column(VALUE_CHUNK)
                                         for index in range(reader.num_record_batches))

    def values_at(self, seqs: list[int]) -> dict[int, Any]:
        table = self._read(["seq", VALUE_CHUNK]).combine_chunks()
        positions = pc.indices_nonzero(pc.is_in(table.column("seq"), value_set=pa.array(seqs, pa.int64())))
        blobs = table.column(VALUE_CHUNK)
        chunks: dict[int, list[Any]] = {}
        found: dict[int, Any] = {}
        for position, seq in zip(positions.to_pylist(), table.column("seq").take(positions).to_pylist()):
            start = position - position % RUN_CHUNK_ROWS
            if start not in chunks:
                chunks[start] = pickle.loads(blobs[start].as_py())
            found[seq] = chunks[start][position - start]
        return found


class SortBuffer:
    """The backlog records of one operator input, returned grouped by key in timestamp order.

    Args:
        engine: sorts the key/timestamp/sequence columns (and merges spilled runs).
        memory_budget: records held as Python objects before they are spilled to disk.
        spill_dir: where the private spill directory is made (None: the system temp dir).
        key_dictionary: share one between buffers whose keys must line up (co-group).
        metrics: an operator's metrics dict; ``backlog_records`` and ``spilled_bytes``
            are kept up to date in it as records arrive and runs are written.
        field: optional ``value -> number``; when every value's field is a plain ``int``
            (summing safely in int64) or every one a ``float`` (not NaN, not -0.0), the buffer keeps it
            as a ``field`` column for vectorised aggregation (see :meth:`field_table`).
        name: the operator's name, for error messages.
        order: the order records come back in.
    """

    def __init__(self, engine: BatchEngine, *, memory_budget: int = 1_000_000, spill_dir: str | None = None,
                 key_dictionary: KeyDictionary | None = None, metrics: dict[str, Any] | None = None,
                 field: Callable[[Any], Any] | None = None, name: str = "operator",
                 order: BufferOrder = BufferOrder.TIME) -> None:
        self.engine = engine
        self.order = order
        self._sort_columns = list(order.value)
        self.memory_budget = max(0, int(memory_budget))
        self.spill_root = spill_dir
        self.key_dictionary = key_dictionary if key_dictionary is not None else KeyDictionary()
        self.metrics = metrics if metrics is not None else {}
        self.metrics.setdefault("backlog_records", 0)
        self.metrics.setdefault("spilled_bytes", 0)
        self.name = name
        self.has_timestamps = False
        self.spilled_bytes = 0
        self._count = 0
        self._runs: list[_Run] = []
        self._dir: str | None = None
        self._keys = _int64s()
        self._intervals = _int64s()
        self._arrivals = _int64s()
        self._stamps: list[int | None] = []
        self._stamps_without_nulls = True
        self._values: list[Any] = []
        self._batches_added = 0
        self._base_seq = 0
        self._field = field
        self._field_values: list[Any] = []
        self._field_type: type | None = None
        self._field_abs_total = 0
        self._field_ok = field is not None
        self._segments = TailSegments(self.spill_directory)
        self._closed = False

    def __len__(self) -> int:
        return self._count

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def num_runs(self) -> int:
        """Spilled runs written so far."""
        return len(self._runs)

    # -- filling ------------------------------------------------------------------------------------
    def add(self, keys: Sequence[Any], values: Sequence[Any], timestamps: Sequence[int | None] | None = None,
            *, interval: int = 0, arrival: int | None = None) -> None:
        """Buffer records; ``keys`` and ``timestamps`` (None: no timestamps) are parallel to ``values``.

        ``interval`` is the watermark interval the batch arrived in (for :attr:`BufferOrder.INTERVAL`),
        ``arrival`` its number in arrival order (None: this buffer's count of batches before it).
        """
        if self._closed:
            raise SlipstreamError(f"operator '{self.name}': the sort buffer is closed")
        count = len(values)
        if len(keys) != count or (timestamps is not None and len(timestamps) != count):
            raise ValueError("keys, values and timestamps must be parallel lists")
        if not count:
            return
        self._keys.extend(self.key_dictionary.ids_of(keys))
        self._intervals.extend(_int64s([interval]) * count)
        self._arrivals.extend(_int64s([self._batches_added if arrival is None else arrival]) * count)
        self._batches_added += 1
        if timestamps is None:
            self._stamps.extend([None] * count)
            self._stamps_without_nulls = False
        else:
            self.has_timestamps = True
            self._stamps.extend(timestamps)
            if self._stamps_without_nulls and None in timestamps:
                self._stamps_without_nulls = False
        self._values.extend(values)
        if self._field_ok:
            self._track_field(values)
        self._count += count
        self.metrics["backlog_records"] += count
        if len(self._values) > self.memory_budget:
            self._spill()

    def _track_field(self, values: Sequence[Any]) -> None:
        try:
            column = [self._field(value) for value in values]  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - a record without the field: the Python path reports it
            self._drop_field()
            return
        kinds = set(map(type, column))
        if kinds == {int} and self._field_type in (None, int):
            self._field_abs_total += sum(map(abs, column))
            if self._field_abs_total >= _INT64_LIMIT:
                self._drop_field()
                return
            self._field_type = int
        elif kinds == {float} and self._field_type in (None, float):
            # NaN and -0.0 compare unlike Python's <=/>= in an engine's sort: keep them in Python
            if any(math.isnan(x) or (x == 0.0 and math.copysign(1.0, x) < 0) for x in column):
                self._drop_field()
                return
            self._field_type = float
        else:
            self._drop_field()
            return
        self._field_values.extend(column)

    def _drop_field(self) -> None:
        self._field_ok = False
        self._field_values = []

    # -- spilling -----------------------------------------------------------------------------------
    def _memory_table(self, with_field: bool = False) -> pa.Table:
        count = len(self._keys)
        columns = {
            "key": _arrow_int64s(self._keys),
            "interval": _arrow_int64s(self._intervals),
            "arrival": _arrow_int64s(self._arrivals),
            "ts": self._stamp_column(count),
            "seq": _arrow_int64s(_int64s(range(self._base_seq, self._base_seq + count))),
        }
        if with_field:
            columns["field"] = pa.array(self._field_values, _arrow_type(self._field_type))
        return pa.table(columns)

    def _stamp_column(self, count: int) -> pa.Array:
        if not self.has_timestamps:
            return pa.nulls(count, pa.int64())
        if self._stamps_without_nulls:
            return _arrow_int64s(_int64s(cast(list[int], self._stamps)))  # no None among them
        return pa.array(self._stamps, pa.int64())

    def _sorted_memory_order(self) -> list[int]:
        """Positions of the in-memory records in the buffer's order."""
        table = self.engine.sort(self._memory_table().select(self._sort_columns), self._sort_columns)
        base = self._base_seq
        return [seq - base for seq in table.column("seq").to_pylist()]

    def spill_directory(self) -> str:
        """The buffer's private spill directory (made on first use; removed by :meth:`close`)."""
        if self._dir is None:
            self._dir = private_directory(self.spill_root, "sort")
        return self._dir

    def _spill(self) -> None:
        """Sort the in-memory records and write them as one run."""
        if not self._values:
            return
        with_field = self._field_ok
        table = self.engine.sort(self._memory_table(with_field), self._sort_columns)
        base = self._base_seq
        values = list(map(self._values.__getitem__, pc.subtract(table.column("seq"), base).to_pylist()))
        table = table.combine_chunks().append_column(VALUE_CHUNK, self._pickled(values, "spill its backlog to disk"))
        path = os.path.join(self.spill_directory(), f"run-{len(self._runs):06d}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=RUN_CHUNK_ROWS)
        size = os.path.getsize(path)
        self._runs.append(_Run(path, table.num_rows, base, size))
        self.spilled_bytes += size
        self.metrics["spilled_bytes"] += size
        self._base_seq += len(self._values)
        self._drop_memory_records()

    def _pickled(self, values: list[Any], doing: str) -> pa.Array:
        """``values`` as a :data:`VALUE_CHUNK` column (``doing``: what for, should one not pickle)."""
        dumps = pickle.dumps
        blobs: list[bytes | None] = []
        for start in range(0, len(values), RUN_CHUNK_ROWS):
            chunk = values[start:start + RUN_CHUNK_ROWS]
            try:
                blobs.append(dumps(packed_rows(chunk), protocol=pickle.HIGHEST_PROTOCOL))
            except Exception:  # noqa: BLE001 - name the record that does not pickle
                self._refuse_unpicklable(chunk, doing)
                raise
            blobs.extend([None] * (len(chunk) - 1))
        return pa.array(blobs, pa.large_binary())

    def _refuse_unpicklable(self, values: list[Any], doing: str) -> None:
        """Raise an error naming the first of ``values`` that cannot be pickled, if one cannot."""
        for value in values:
            try:
                pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise SlipstreamError(
                    f"operator '{self.name}' cannot {doing}: the record {value!r} "
                    f"cannot be pickled ({type(exc).__name__}: {exc}); raise sort_memory_budget or run "
                    "without backlog sorting (env.configure(backlog_sorting=False))") from exc

    def _drop_memory_records(self) -> None:
        self._segments.clear()
        self._keys, self._intervals, self._arrivals = _int64s(), _int64s(), _int64s()
        self._stamps, self._stamps_without_nulls = [], True
        self._values, self._field_values = [], []

    # -- reading back -------------------------------------------------------------------------------
    def _memory_records(self) -> Iterator[_Record]:
        keys, intervals, arrivals = self._keys, self._intervals, self._arrivals
        stamps, values = self._stamps, self._values
        for position in self._sorted_memory_order():
            yield keys[position], intervals[position], arrivals[position], stamps[position], values[position]

    def _records_by_id(self) -> Iterator[_Record]:
        """Every record as ``(key id, interval, arrival, timestamp, value)`` in the buffer's order."""
        if not self._runs:
            if self._values:
                yield from self._memory_records()
            return
        sources: list[Iterator[_Record]] = [run.records() for run in self._runs]
        tables = []
        for number, run in enumerate(self._runs):
            table = run.columns(self._sort_columns)
            tables.append(table.append_column("run", pa.repeat(pa.scalar(number, pa.int32()), table.num_rows)))
        if self._values:
            table = self._memory_table().select(self._sort_columns)
            number = len(sources)
            tables.append(table.append_column("run", pa.repeat(pa.scalar(number, pa.int32()), table.num_rows)))
            sources.append(self._memory_records())
        merged = self.engine.sort(pa.concat_tables(tables), self._sort_columns)
        try:
            for number in merged.column("run").to_pylist():
                yield next(sources[number])
        finally:
            for source in sources:
                source.close()  # type: ignore[attr-defined]

    def records(self) -> Iterator[tuple[Any, int | None, Any]]:
        """Every record as ``(key, timestamp, value)``, in the buffer's order (by default grouped by
        key in first-seen order of keys, each key's records by timestamp — records without one
        first —, then arrival)."""
        key_of = self.key_dictionary.keys
        for key_id, _interval, _arrival, stamp, value in self._records_by_id():
            yield key_of[key_id], stamp, value

    def _groups_by_id(self) -> Iterator[tuple[int, list[int | None], list[Any]]]:
        for key_id, _intervals, stamps, values in self._key_runs_by_id():
            yield key_id, stamps, values

    def _key_runs_by_id(self) -> Iterator[tuple[int, list[int], list[int | None], list[Any]]]:
        """Per key id, in the buffer's order: its records' intervals, timestamps and values.

        The engine sorts the columns of the runs and the in-memory records together; then, a block
        of whole keys at a time (about :data:`KEY_RUN_BLOCK` records), each run's next values are
        unpickled in their order, the in-memory ones picked by position, and the block's values put
        in the merged order by one C-level gather, so no Python code runs per record."""
        if self.order is BufferOrder.INTERVAL:
            raise ValueError(f"operator '{self.name}': a buffer in interval order has no groups by key")
        if not self._runs and not self._values:
            return
        names = list(dict.fromkeys([*self._sort_columns, "interval", "ts"]))
        tables = [run.columns(names) for run in self._runs]
        if self._values:
            tables.append(self._memory_table().select(names))
        for number, table in enumerate(tables):
            tables[number] = table.append_column("run", pa.repeat(pa.scalar(number, pa.int32()), table.num_rows))
        merged = self.engine.sort(pa.concat_tables(tables), self._sort_columns).combine_chunks()
        keys = merged.column("key").to_numpy()
        starts = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1, [len(keys)]))
        key_ids = keys[starts[:-1]].tolist()
        starts_list = starts.tolist()
        runs = merged.column("run").to_numpy()
        seqs = merged.column("seq").to_numpy()
        sources = [run.values() for run in self._runs]
        try:
            first = 0
            while first < len(key_ids):
                stop = max(first + 1, int(np.searchsorted(starts, starts_list[first] + KEY_RUN_BLOCK, "right")) - 1)
                low, high = starts_list[first], starts_list[stop]
                values = self._block_values(runs[low:high], seqs[low:high], sources)
                intervals = column_values(merged.column("interval").slice(low, high - low))
                stamps = column_values(merged.column("ts").slice(low, high - low))
                for index in range(first, stop):
                    begin, end = starts_list[index] - low, starts_list[index + 1] - low
                    yield key_ids[index], intervals[begin:end], stamps[begin:end], values[begin:end]
                first = stop
        finally:
            for source in sources:
                source.close()  # type: ignore[attr-defined]

    def _block_values(self, runs: np.ndarray, seqs: np.ndarray, sources: list[Iterator[Any]]) -> list[Any]:
        """The values of a block of the merged order, given each record's run number (the in-memory
        records' is ``len(sources)``) and seq: each run's next ones, the in-memory ones by seq."""
        pool: list[Any] = []
        gather = np.empty(len(runs), np.int64)
        for number in range(len(sources) + (1 if self._values else 0)):
            where = np.flatnonzero(runs == number)
            if not len(where):
                continue
            if len(where) == len(runs):
                return list(itertools.islice(sources[number], len(where))) if number < len(sources) else \
                    list(map(self._values.__getitem__, (seqs - self._base_seq).tolist()))
            gather[where] = np.arange(len(pool), len(pool) + len(where))
            if number < len(sources):
                pool.extend(itertools.islice(sources[number], len(where)))
            else:
                pool.extend(map(self._values.__getitem__, (seqs[where] - self._base_seq).tolist()))
        return list(map(pool.__getitem__, gather.tolist()))

    def key_runs(self) -> Iterator[tuple[Any, list[int], list[int | None], list[Any]]]:
        """Per key, in the order of :meth:`records` (not for :attr:`BufferOrder.INTERVAL`):
        ``(key, intervals, timestamps, values)`` of its records, the interval each arrived in too."""
        key_of = self.key_dictionary.keys
        for key_id, intervals, stamps, values in self._key_runs_by_id():
            yield key_of[key_id], intervals, stamps, values

    def groups(self) -> Iterator[tuple[Any, list[int | None], list[Any]]]:
        """Per key, in the order of :meth:`records`: ``(key, timestamps, values)``."""
        key_of = self.key_dictionary.keys
        for key_id, stamps, values in self._groups_by_id():
            yield key_of[key_id], stamps, values

    def batches(self, size: int = 1024) -> Iterator[RecordBatch]:
        """The records of :meth:`records` as record batches of up to ``size`` (timestamps None
        when no record was added with timestamps)."""
        rows = ((0, 0, stamp, value) for _key_id, _interval, _arrival, stamp, value in self._records_by_id())
        for _, _, batch in _batched(rows, size, [self.has_timestamps]):
            yield batch

    # -- columnar access (vectorised aggregation) ----------------------------------------------------
    def field_table(self) -> pa.Table | None:
        """All records' ``key`` (id), ``interval``, ``ts``, ``seq`` and ``field`` columns, or None when
        the field is not vectorisable (no ``field`` given, or a value not a plain number)."""
        if not self._field_ok:
            return None
        columns = ["key", "interval", "ts", "seq", "field"]
        tables = [run.columns(columns) for run in self._runs]
        if self._values or not tables:
            tables.append(self._memory_table(with_field=True).select(columns))
        return pa.concat_tables(tables)

    def values_at(self, seqs: Sequence[int]) -> dict[int, Any]:
        """The values with arrival sequence numbers ``seqs`` (as in :meth:`field_table`)."""
        wanted = sorted(set(seqs))
        found: dict[int, Any] = {}
        base = self._base_seq
        in_memory = [seq for seq in wanted if seq >= base]
        for seq in in_memory:
            found[seq] = self._values[seq - base]
        for run in self._runs:
            low, high = run.first_seq, run.first_seq + run.rows
            chosen = [seq for seq in wanted if low <= seq < high]
            if chosen:
                found.update(run.values_at(chosen))
        return found

    def key_of(self, key_id: int) -> Any:
        return self.key_dictionary.keys[key_id]

    # -- checkpoints --------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The buffer for a checkpoint: its runs as they are on disk, its in-memory records as Arrow
        IPC segments (in arrival order, values pickled; only those added since the last checkpoint
        are written, see :class:`~slipstream.operators.spill_file.TailSegments`), and its counters.
        The key dictionary is its owner's to snapshot (buffers may share one)."""
        return {"runs": [(run.file.checkpoint_file(), run.rows, run.first_seq) for run in self._runs],
                "tail": self._segments.checkpoint_files(len(self._values), self._tail_table),
                "count": self._count, "base_seq": self._base_seq, "batches_added": self._batches_added,
                "has_timestamps": self.has_timestamps,
                "field": (self._field_ok, self._field_type, self._field_abs_total)}

    def restore(self, state: dict[str, Any]) -> None:
        """Fill this new, empty buffer with a checkpoint's :meth:`snapshot` (each file as its bytes)."""
        for number, (data, rows, first_seq) in enumerate(state["runs"]):
            path = os.path.join(self.spill_directory(), f"run-{number:06d}.arrow")
            size = write_restored(path, data)
            self._runs.append(_Run(path, rows, first_seq, size))
            self.spilled_bytes += size
        self.metrics["spilled_bytes"] += self.spilled_bytes
        self._base_seq, self._batches_added = state["base_seq"], state["batches_added"]
        self.has_timestamps = state["has_timestamps"]
        self._field_ok, self._field_type, self._field_abs_total = state["field"]
        for table in self._segments.restore(state["tail"]):
            self._restore_tail(table)
        self._count = state["count"]
        self.metrics["backlog_records"] += self._count

    def _tail_table(self, start: int, stop: int) -> pa.Table:
        """In-memory records ``start`` to ``stop`` as a tail segment: their columns, values pickled."""
        table = self._memory_table(self._field_ok).slice(start, stop - start)
        return table.append_column(VALUE_CHUNK, self._pickled(self._values[start:stop], "checkpoint its backlog"))

    def _restore_tail(self, table: pa.Table) -> None:
        """Append a checkpoint's tail segment to the in-memory records."""
        self._keys.extend(table.column("key").to_pylist())
        self._intervals.extend(table.column("interval").to_pylist())
        self._arrivals.extend(table.column("arrival").to_pylist())
        stamps = table.column("ts").to_pylist()
        self._stamps.extend(stamps)
        self._stamps_without_nulls = self._stamps_without_nulls and None not in stamps
        self._values.extend(_unpickled_chunks(table.column(VALUE_CHUNK).chunks))
        if self._field_ok:
            self._field_values.extend(table.column("field").to_pylist())

    # -- clean-up ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Drop the records and delete the spill directory; the buffer cannot be filled again."""
        self._closed = True
        self._drop_memory_records()
        self._runs = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _unpickled_chunks(columns: Iterable[pa.Array]) -> Iterator[Any]:
    """The values of consecutive pieces of a :data:`VALUE_CHUNK` column, each chunk unpickled when
    its first value is wanted (a value's chunk begins at or before it, so in an earlier or the same piece)."""
    loads = pickle.loads
    for column in columns:
        for blob in column.drop_null().to_pylist():
            yield from loads(blob)


def _int64s(values: Iterable[int] = ()) -> array.array[int]:
    """A packed int64 column being filled: far cheaper to extend and to hand to Arrow than a list."""
    return array.array("q", values)


def _arrow_int64s(values: array.array[int]) -> pa.Array:
    """``values`` as an Arrow int64 array, without a per-element conversion."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _arrow_type(kind: type | None) -> pa.DataType:
    return pa.float64() if kind is float else pa.int64()


def interval_batches(buffers: Sequence[SortBuffer], size: int) -> Iterator[tuple[int, int, RecordBatch]]:
    """The records of buffers in :attr:`BufferOrder.INTERVAL` (sharing a :class:`KeyDictionary`
    and one count of arrivals) as ``(interval, buffer index, batch)``: interval by interval, each
    interval's records key by key, each key's records of all buffers in arrival order; a batch
    holds up to ``size`` records of one interval and one buffer."""
    if any(buffer.order is not BufferOrder.INTERVAL for buffer in buffers):
        raise ValueError("interval_batches needs buffers in interval order")
    streams = [_interval_rows(buffer, index) for index, buffer in enumerate(buffers) if len(buffer)]
    if not streams:
        return
    merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=itemgetter(0, 1, 2))
    rows = ((interval, index, stamp, value) for interval, _key, _arrival, index, stamp, value in merged)
    yield from _batched(rows, size, [buffer.has_timestamps for buffer in buffers])


def _interval_rows(buffer: SortBuffer, index: int) -> Iterator[tuple[int, int, int, int, int | None, Any]]:
    """The buffer's records as ``(interval, key id, arrival, buffer index, timestamp, value)``."""
    for key, interval, arrival, stamp, value in buffer._records_by_id():
        yield interval, key, arrival, index, stamp, value


def _batched(rows: Iterator[tuple[int, int, int | None, Any]], size: int,
             with_stamps: Sequence[bool]) -> Iterator[tuple[int, int, RecordBatch]]:
    """``(interval, buffer index, timestamp, value)`` rows as ``(interval, buffer index, batch)``:
    a batch holds up to ``size`` consecutive rows of one interval and buffer; its timestamps are
    None when that buffer's ``with_stamps`` is False."""
    interval = index = -1
    values: list[Any] = []
    stamps: list[int | None] = []
    for row_interval, row_index, stamp, value in rows:
        if row_interval != interval or row_index != index or len(values) >= size:
            if values:
                yield interval, index, RecordBatch(values, stamps if with_stamps[index] else None)
            interval, index, values, stamps = row_interval, row_index, [], []
        values.append(value)
        stamps.append(stamp)
    if values:
        yield interval, index, RecordBatch(values, stamps if with_stamps[index] else None)


def co_grouped(*buffers: SortBuffer) -> Iterator[tuple[Any, list[tuple[list[int | None], list[Any]]]]]:
    """Walk buffers that share a :class:`KeyDictionary` key by key (in first-seen order of keys).

    Yields ``(key, [(timestamps, values) per buffer])``; a buffer without records for the
    key contributes ``([], [])``. This is the per-key input of a co-group or join.
    """
    if not buffers:
        return
    dictionary = buffers[0].key_dictionary
    if any(buffer.key_dictionary is not dictionary for buffer in buffers):
        raise ValueError("co_grouped needs buffers that share one KeyDictionary")
    heads: list[tuple[int, int, list[int | None], list[Any]]] = []
    iterators = [buffer._groups_by_id() for buffer in buffers]
    for index, iterator in enumerate(iterators):
        first = next(iterator, None)
        if first is not None:
            heapq.heappush(heads, (first[0], index, first[1], first[2]))
    while heads:
        key_id = heads[0][0]
        groups: list[tuple[list[int | None], list[Any]]] = [([], []) for _ in buffers]
        while heads and heads[0][0] == key_id:
            _, index, stamps, values = heapq.heappop(heads)
            groups[index] = (stamps, values)
            following = next(iterators[index], None)
            if following is not None:
                heapq.heappush(heads, (following[0], index, following[1], following[2]))
        yield dictionary.keys[key_id], groups

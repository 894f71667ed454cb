"""Keyed state in an embedded RocksDB (through ``rocksdict``): state bounded by disk, not memory.

Each state is a column family (``state/<name>``) of one RocksDB per operator subtask, in a fresh directory
of the task's local working directory. An entry's RocksDB key is its key group (two bytes,
big-endian), then the record key and, for namespaced state (windows), the namespace, in
the order-preserving layout of :mod:`~slipstream.runtime.state.encoding`; its value is the
state's value in the same layout (a list state's list, a map state's dict, a TTL entry
with its timestamp). Plain keys and values are never pickled. Key groups lead, so a
restore at another parallelism drops the groups it does not own with two range deletions.

The state handles are the heap backend's (and TTL's, over them): each state's table is a
:class:`_Column`, which acts as a dict. Values read or written are kept as objects in a
small write-back cache, encoded and written in one ``WriteBatch`` once the cache holds
``FLUSH_ENTRIES`` entries (within a memory budget, its write-back share) at the next record
(so a value read from state may be changed in place right away, as on the heap backend,
never later through a reference kept from an earlier call).

Checkpoints are asynchronous and incremental. :meth:`RocksDBKeyedStateBackend.freeze`
writes the cache and from then on, until :meth:`~RocksDBKeyedStateBackend.release`, keeps
the database as it is: writes go to a delta per column family (encoded bytes; a removal is
None), which reads consult first. The checkpoint writer reads the unchanged database in its
own thread and writes one RocksDB table file (SST) per state: every entry, or only those
changed since the previous freeze (a removed one as a deletion), which restoring ingests
in order. The files are the checkpoint's content-addressed shared files, so unchanged ones
are shared with earlier checkpoints. After the release the deltas are written back into the
database a bounded number at a time (:meth:`~RocksDBKeyedStateBackend.merge_some`). (A
RocksDB snapshot would do without the delta, but rocksdict's snapshot iterators read the
live database, and a RocksDB checkpoint flushes the memtable on the task's turn.)
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from rocksdict import (
    BlockBasedOptions,
    Cache,
    IngestExternalFileOptions,
    Options,
    Rdict,
    SstFileWriter,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from slipstream.datastream.state import StateDescriptor
from slipstream.errors import SlipstreamError
from slipstream.operators.memory import SAMPLE_ENTRIES, MemoryBudget, entry_bytes
from slipstream.operators.timers import InternalTimer
from slipstream.runtime.checkpoint.state_files import SST, SstFile
from slipstream.runtime.key_groups import assign_to_key_group
from slipstream.runtime.state.encoding import decode, decode_prefix, encode, encode_into
from slipstream.runtime.state.heap_backend import (
    _ATOMS,
    _UNTRACKED,
    FrozenView,
    KeyedBackendBase,
    _HeapState,
    _NamespacedKey,
)
from slipstream.runtime.state.ttl import unexpired

STATES, TIMERS = "state/", "timers/"
"""The prefixes of the column families of states (then the state's name) and of timers (the time domain)."""

FLUSH_ENTRIES = 4096
"""Cached entries (values read or written) past which the next record writes them into RocksDB."""

CLEANUP_PAGE = 256
"""Entry keys TTL's incremental cleanup reads from the database at a time."""

_REMOVED = object()
"""In the cache: the entry was removed."""

_GROUP_BYTES = 2

WRITE_BUFFER_RATIO = 0.5
"""The share of RocksDB's memory its write buffers may take (``state.backend.rocksdb.memory.write-buffer-ratio``)."""
WRITE_BACK_SHARE = 0.125
"""The share of a subtask's memory budget its write-back cache of decoded values may take before it is written."""
MAX_WRITE_BUFFER = 64 << 20
"""A column family's write buffer (memtable) at most: RocksDB's default, kept when the budget allows."""


def _options(memory: BoundedMemory | None = None) -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    if memory is not None:
        memory.configure(options)
    return options


class BoundedMemory:
    """RocksDB's memory held to a subtask's share of managed memory, as Flink's
    ``state.backend.rocksdb.memory.managed`` does: one LRU block cache for every column family
    of the database, and a write buffer manager that charges their write buffers to that cache
    and flushes the largest into a table file on disk once they fill their share. Flink's split:
    of a budget of ``B`` bytes the cache holds ``(3 - r) / 3 * B`` and the write buffers
    ``2 * r / 3 * B`` of it (``r``: :data:`WRITE_BUFFER_RATIO`), leaving the cache room for
    memtables past the manager's limit while they are flushed. A slice of the budget
    (:data:`WRITE_BACK_SHARE`) is the write-back cache's, not RocksDB's. The budget's share
    shrinks as later consumers take theirs: :meth:`fit` resizes both to it."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.limit = budget.limit
        self.cache = Cache(self._cache_capacity())
        self.write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            self._write_buffer_capacity(), False, self.cache)

    @property
    def native(self) -> int:
        """The bytes of the budget RocksDB's own memory gets (the rest is the write-back cache's)."""
        return max(1, self.limit - self.write_back)

    @property
    def write_back(self) -> int:
        """The bytes of decoded values the write-back cache may hold before it is written."""
        return int(self.limit * WRITE_BACK_SHARE)

    def _cache_capacity(self) -> int:
        return max(1, int((3 - WRITE_BUFFER_RATIO) * self.native / 3))

    def _write_buffer_capacity(self) -> int:
        return max(1, int(2 * self.native * WRITE_BUFFER_RATIO / 3))

    def configure(self, options: Options) -> None:
        """Tables read through the shared cache (their index and filter blocks too, so they count),
        write buffers under the manager, each column family's no larger than half its capacity."""
        table = BlockBasedOptions()
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_top_level_index_and_filter(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(self.write_buffers)
        options.set_write_buffer_size(max(64 << 10, min(MAX_WRITE_BUFFER, self._write_buffer_capacity() // 2)))

    def fit(self) -> None:
        """Resize the cache and the write buffers to the budget's share now."""
        if self.budget.limit != self.limit:
            self.limit = self.budget.limit
            self.cache.set_capacity(self._cache_capacity())
            self.write_buffers.set_buffer_size(self._write_buffer_capacity())

    @property
    def used(self) -> int:
        """The bytes the cache holds now: table blocks and the write buffers charged to it."""
        return self.cache.get_usage()


def _group_prefix(group: int) -> bytes:
    return group.to_bytes(_GROUP_BYTES, "big")


def entry_key(entry: Any, max_parallelism: int) -> bytes:
    """The RocksDB key of a table entry: key group, record key and (namespaced) namespace."""
    if type(entry) is _NamespacedKey:
        key, namespace = entry
        out = bytearray(_group_prefix(assign_to_key_group(key, max_parallelism)))
        encode_into(key, out)
        encode_into(namespace, out)
        return bytes(out)
    return _group_prefix(assign_to_key_group(entry, max_parallelism)) + encode(entry)


def entry_of(raw: bytes) -> Any:
    """The table entry a RocksDB key stands for (the inverse of :func:`entry_key`)."""
    key, position = decode_prefix(raw, _GROUP_BYTES)
    if position == len(raw):
        return key
    return _NamespacedKey((key, decode_prefix(raw, position)[0]))


def key_group_of(raw: bytes) -> int:
    return int.from_bytes(raw[:_GROUP_BYTES], "big")


class _Column:
    """One state's column family, as the dict a heap state handle takes for its table."""

    def __init__(self, backend: RocksDBKeyedStateBackend, name: str, family: Rdict) -> None:
        self.backend, self.name, self.family = backend, name, family
        self.handle = backend._db.get_column_family_handle(STATES + name)
        self.cache: dict[bytes, Any] = {}  # objects read or written since the last flush (_REMOVED: removed)
        self.delta: dict[bytes, bytes | None] | None = None  # frozen or merging: changes not in the family yet
        self.dirty: set[bytes] | None = None  # from the first freeze on: keys changed since the last one

    def raw(self, entry: Any) -> bytes:
        backend = self.backend
        if entry is backend.current_key:
            prefix = backend._current_raw
            if prefix is None:
                prefix = backend._current_raw = entry_key(entry, backend.max_parallelism)
            return prefix
        return entry_key(entry, backend.max_parallelism)

    def stored(self, raw: bytes) -> bytes | None:
        """The entry's bytes in the database (after the changes a checkpoint holds back)."""
        delta = self.delta
        if delta is not None:
            data = delta.get(raw, _REMOVED)
            if data is not _REMOVED:
                return data  # type: ignore[return-value]
        return self.family.get(raw)

    def get(self, entry: Any, default: Any = None) -> Any:
        raw = self.raw(entry)
        value = self.cache.get(raw, _REMOVED)
        if value is not _REMOVED:
            return value
        if raw in self.cache:
            return default
        data = self.stored(raw)
        if data is None:
            return default
        value = decode(data)
        if type(value) not in _ATOMS:  # the caller may change it in place: written back at the flush
            self._cache(raw, value)
        return value

    def __getitem__(self, entry: Any) -> Any:
        value = self.get(entry, _REMOVED)
        if value is _REMOVED:
            raise KeyError(entry)
        return value

    def __setitem__(self, entry: Any, value: Any) -> None:
        self._cache(self.raw(entry), value)

    def pop(self, entry: Any, default: Any = None) -> Any:
        self._cache(self.raw(entry), _REMOVED)
        return default

    def _cache(self, raw: bytes, value: Any) -> None:
        if raw not in self.cache:
            self.backend._cached += 1
        self.cache[raw] = value

    def flush(self) -> None:
        """Write the cached entries: into the database, or while frozen into the delta."""
        cache, self.cache = self.cache, {}
        if not cache:
            return
        if self.dirty is not None:
            self.dirty.update(cache)
        encoded = {raw: None if value is _REMOVED else encode(value) for raw, value in cache.items()}
        if self.backend._frozen:
            self.delta.update(encoded)  # type: ignore[union-attr]
            return
        if self.delta is not None:  # merging: the database holds the newest value from now on
            for raw in encoded:
                self.delta.pop(raw, None)
        self.write(encoded.items())

    def write(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        batch = WriteBatch(raw_mode=True)
        for raw, data in entries:
            if data is None:
                batch.delete(raw, self.handle)
            else:
                batch.put(raw, data, self.handle)
        self.backend._db.write(batch)

    def raw_keys(self) -> Iterator[bytes]:
        """The keys of the entries in the database and the delta (after a flush)."""
        delta = self.delta or {}
        for raw, _ in _items(self.family):
            if raw not in delta:
                yield raw
        for raw, data in delta.items():
            if data is not None:
                yield raw

    def clip(self, key_groups: range) -> None:
        """Remove the entries of key groups outside ``key_groups``."""
        self.family.delete_range(_group_prefix(0), _group_prefix(key_groups.start))
        self.family.delete_range(_group_prefix(key_groups.stop), b"\xff" * (_GROUP_BYTES + 1))


class RocksDBKeyedStateBackend(KeyedBackendBase):
    """Keyed state of one operator subtask in a RocksDB under ``local_dir`` (a fresh directory
    there, removed when the backend goes; the system's temporary directory when None);
    ``now`` is the processing-time clock state time-to-live expires by (epoch ms)."""

    def __init__(self, max_parallelism: int, now: Callable[[], int] | None = None,
                 local_dir: str | None = None, budget: MemoryBudget | None = None) -> None:
        super().__init__(max_parallelism, now, budget)
        if local_dir is not None:
            os.makedirs(local_dir, exist_ok=True)
        self._local_dir = local_dir
        self.directory = tempfile.mkdtemp(prefix="slipstream-rocksdb-", dir=local_dir)
        self._memory = None if budget is None else BoundedMemory(budget)
        self._options = _options(self._memory)
        self._db = Rdict(os.path.join(self.directory, "db"), self._options)
        writes = WriteOptions()
        # the database is rebuilt from a checkpoint after any failure: no log needed (a property, which
        # rocksdict's stub calls a method)
        writes.disable_wal = True  # type: ignore[method-assign, assignment]
        self._db.set_write_options(writes)
        self._families: list[Rdict] = []  # every column family's handle, closed before the database
        self._finalizer = weakref.finalize(self, _dispose, self._db, self._families, self.directory)
        self._columns: dict[str, _Column] = {}
        self._cached = 0  # entries in the columns' caches
        # cached entries past which the next record writes them: within a memory budget, as many as
        # fit in its write-back share (at a kilobyte each until a flush measures them)
        self._flush_entries = FLUSH_ENTRIES if self._memory is None else \
            _entries_within(self._memory.write_back, 1024)
        self._current_raw: bytes | None = None  # the RocksDB key of the current key, once asked for
        self._tracking = False  # whether columns track their changed keys (from the first freeze on)
        self._files = 0  # table files written, for unique names

    # -- tables -------------------------------------------------------------------------------------
    def _column(self, name: str) -> _Column:
        column = self._columns.get(name)
        if column is None:
            family = self._new_family(STATES + name)
            column = self._columns[name] = _Column(self, name, family)
            column.dirty = set() if self._tracking else None
            column.delta = {} if self._frozen else None
        return column

    def fresh(self) -> RocksDBKeyedStateBackend:
        """An empty database in a fresh directory beside this one's, with the same memory budget."""
        return RocksDBKeyedStateBackend(self.max_parallelism, self._now, self._local_dir, self.memory_budget)

    def _new_family(self, name: str) -> Rdict:
        """A new column family, its write buffer sized to the memory budget's share now."""
        if self._memory is not None:
            self._memory.fit()
        family = self._db.create_column_family(name, _options(self._memory))
        self._families.append(family)
        return family

    def _table_for(self, name: str) -> _Column:
        return self._column(name)

    def _attach(self, handle: _HeapState, name: str) -> None:
        handle._delta, handle._dirty = None, _UNTRACKED  # the column keeps both

    def set_current_key(self, key: Any) -> None:
        if self._cached > self._flush_entries:
            self.flush()
        self._current_raw = None
        super().set_current_key(key)

    def unset_current_key(self, reason: str) -> None:
        self._current_raw = None
        super().unset_current_key(reason)

    def flush(self) -> None:
        """Write every cached entry (see the module docstring); within a memory budget, first measure
        them, so the next flush comes when the cache holds the budget's write-back share."""
        if self._memory is not None and self._cached:
            held = self._held_bytes(deltas=False)
            if held:
                self._flush_entries = _entries_within(self._memory.write_back, held / self._cached)
        for column in self._columns.values():
            column.flush()
        self._cached = 0

    def account_memory(self) -> None:
        """Within its share of managed memory the state never fails: RocksDB's cache and write
        buffers are sized to it (:class:`BoundedMemory`), and the write-back cache is written once
        its values take more than :data:`WRITE_BACK_SHARE` of it. What RocksDB's cache and the
        decoded values hold is the usage recorded."""
        memory = self._memory
        if memory is None:
            return
        memory.fit()
        held = self._held_bytes()
        if held > memory.write_back:
            self.flush()
            held = self._held_bytes()
        memory.budget.set_usage(memory.used + held)

    def _held_bytes(self, deltas: bool = True) -> int:
        """Roughly the memory of the decoded values cached and (``deltas``) of the changes held
        while a checkpoint is written: their count times the mean size of a few."""
        total = 0.0
        for column in self._columns.values():
            for held in (column.cache, column.delta if deltas else None):
                if held:
                    total += len(held) * entry_bytes(itertools.islice(held.items(), SAMPLE_ENTRIES))
        return int(total)

    def value_accessors(
        self, descriptor: StateDescriptor[Any]
    ) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]:
        """``get(key)`` and ``put(key, value)`` of a value state by record key, for built-in operators."""
        self.get_state(descriptor)
        column = self._columns[descriptor.name]

        def put(key: Any, value: Any) -> None:
            column._cache(entry_key(key, self.max_parallelism), value)
            if self._cached > self._flush_entries:
                self.flush()
        return column.get, put

    def keys(self, state_name: str) -> Iterable[Any]:
        """The keys that have an entry in ``state_name`` (for batch export and tests)."""
        column = self._columns.get(state_name)
        if column is None:
            return []
        self.flush()
        return [entry_of(raw) for raw in column.raw_keys()]

    def _cleanup_pass(self, name: str) -> Iterator[Any]:
        """The entry keys in the database, read :data:`CLEANUP_PAGE` at a time from where the last
        page ended (no iterator is held between pages, and a pass never holds every key); the
        cached entries are written first, so the pass sees them."""
        self.flush()
        family, after = self._columns[name].family, b""
        while True:
            page = []
            for raw in cast(Iterator[bytes], iter(family.keys(from_key=after))):
                if raw != after:
                    page.append(raw)
                    if len(page) == CLEANUP_PAGE:
                        break
            if not page:
                return
            after = page[-1]
            yield from map(entry_of, page)

    def timer_queue(self, domain: str) -> RocksDBTimerQueue:
        """The timers of time domain ``domain`` (``event`` or ``processing``), on disk."""
        return RocksDBTimerQueue(self, domain)

    def bulk_load(self, descriptor: StateDescriptor[Any], keys: Iterable[Any], values: Iterable[Any]) -> None:
        """Install the final value of a value state for many keys at once (a sorted backlog's
        result; a None value leaves its key as it is): encoded, sorted and ingested as one table file."""
        self.get_state(descriptor)
        column = self._columns[descriptor.name]
        self.flush()
        entries = sorted((entry_key(key, self.max_parallelism), encode(value))
                         for key, value in zip(keys, values) if value is not None)
        if not entries:
            return
        if column.dirty is not None:
            column.dirty.update(raw for raw, _ in entries)
        if self._frozen:  # the database stays as frozen: the entries wait in the delta
            column.delta.update(entries)  # type: ignore[union-attr]
            return
        self.merge_some(1 << 62)
        path = self._table_path()
        _write_table(self._options, path, entries)
        self._ingest(column, path)

    # -- checkpoints --------------------------------------------------------------------------------
    def freeze(self) -> RocksDBStateView:
        """The database as it is now, for a checkpoint writer to read while the job goes on;
        until :meth:`release` it does not change (see the module docstring)."""
        if self._frozen:
            raise SlipstreamError("keyed state is already frozen for a checkpoint being written")
        self.flush()
        self.merge_some(1 << 62)
        dirty = {name: column.dirty or set() for name, column in self._columns.items()}
        self._tracking, self._frozen = True, True
        for column in self._columns.values():
            column.delta, column.dirty = {}, set()
        expiring = self._expiring()
        self._view = RocksDBStateView(self, dirty, self._base, expiring, self._now() if expiring else 0)
        return self._view

    def _keep_changes(self, dirty: dict[str, set[bytes]]) -> None:
        for name, keys in dirty.items():
            self._columns[name].dirty.update(keys)  # type: ignore[union-attr]

    @property
    def merging(self) -> bool:
        """Whether released changes still wait to be written back (:meth:`merge_some`)."""
        return not self._frozen and any(column.delta is not None for column in self._columns.values())

    def merge_some(self, budget: int) -> bool:
        """Write up to ``budget`` released changes into the database; whether all are."""
        if self._frozen:
            return False
        for column in self._columns.values():
            delta = column.delta
            if delta is None:
                continue
            if len(delta) > budget:
                column.write(delta.popitem() for _ in range(budget))
                return False
            budget -= len(delta)
            column.write(delta.items())
            column.delta = None
        return True

    def snapshot(self) -> dict[str, dict[int, list[tuple[Any, Any]]]]:
        """Entries grouped by state name and key group, decoded now; as in a checkpoint, states with
        TTL's full-snapshot cleanup leave out what has expired."""
        self.flush()
        self.merge_some(1 << 62)
        expiring = self._expiring()
        now = self._now() if expiring else 0
        result: dict[str, dict[int, list[tuple[Any, Any]]]] = {}
        for name, column in self._columns.items():
            groups = result.setdefault(name, {})
            entries: Iterable[tuple[bytes, bytes | None]] = _items(column.family)
            if name in expiring:
                entries = _unexpired(entries, now, expiring[name])
            for raw, data in entries:
                if data is not None:
                    groups.setdefault(key_group_of(raw), []).append((entry_of(raw), decode(data)))
        return result

    def restore(self, snapshot: dict[str, Any], key_groups: range | None = None) -> None:
        """Load the entries of ``key_groups`` (all when None) from one layer of a checkpoint: a
        table file per state (ingested) or, from a heap backend's checkpoint, entries by key
        group (an entry whose value is None was removed)."""
        self.flush()
        for name, state in snapshot.items():
            column = self._column(name)
            if isinstance(state, SstFile):
                path = self._table_path()
                with open(path, "wb") as file:
                    file.write(state.data)
                self._ingest(column, path)
                if key_groups is not None:
                    column.clip(key_groups)
                continue
            column.write((entry_key(key, self.max_parallelism), None if value is None else encode(value))
                         for group, entries in state.items() if key_groups is None or group in key_groups
                         for key, value in entries)

    def _table_path(self) -> str:
        self._files += 1
        return os.path.join(self.directory, f"table-{self._files}.sst")

    def _ingest(self, column: _Column, path: str) -> None:
        options = IngestExternalFileOptions()
        options.set_move_files(True)
        column.family.ingest_external_file([path], options)
        if os.path.exists(path):
            os.remove(path)

    def dispose(self) -> None:
        """Close the database and delete its directory."""
        self._finalizer()


def _entries_within(size: int, entry_size: float) -> int:
    """How many cached entries of ``entry_size`` bytes fit in ``size`` (16 to ``FLUSH_ENTRIES``)."""
    return max(16, min(FLUSH_ENTRIES, int(size / max(1.0, entry_size))))


def _items(family: Rdict, from_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """A column family's entries in key order (from ``from_key``); bytes, as the database is in raw mode."""
    items = family.items() if from_key is None else family.items(from_key=from_key)
    return cast(Iterator[tuple[bytes, bytes]], iter(items))


def _dispose(db: Rdict, families: list[Rdict], directory: str) -> None:
    """Close the database, then remove its directory. Each column family's handle holds the
    database open: closed after them, the database closes here, flushing its memtables while its
    directory is there (else the last handle, collected later, flushes into a removed directory,
    and RocksDB's error recovery waits a second before giving up)."""
    try:
        for family in families:
            family.close()
        db.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _write_table(options: Options, path: str, entries: Iterable[tuple[bytes, bytes | None]]) -> int:
    """Write ``entries`` (in key order; None: a deletion) as a table file; how many there were
    (none: no file is written)."""
    writer: SstFileWriter | None = None
    count = 0
    for raw, data in entries:
        if writer is None:
            writer = SstFileWriter(options)
            writer.open(path)
        if data is None:
            del writer[raw]
        else:
            writer[raw] = data
        count += 1
    if writer is not None:
        writer.finish()
    return count


class RocksDBTimerQueue:
    """Timers of one time domain on disk, in two column families beside the states' (so no
    checkpoint layer holds them: the timer service checkpoints them as operator state): one
    by firing order, keyed by timestamp and registration number in the order-preserving layout,
    so iterating it from its start pops them in order; one by ``(timestamp, key, namespace)``,
    which finds a duplicate or a deleted timer's place. Popped timers are behind ``_floor``, so
    finding the next one does not walk over their deletions again."""

    def __init__(self, backend: RocksDBKeyedStateBackend, domain: str) -> None:
        self._order = backend._new_family(f"{TIMERS}{domain}")
        self._ids = backend._new_family(f"{TIMERS}{domain}/ids")
        self._seq = itertools.count()
        self._size = 0
        self._floor = b""  # every timer before it has been popped

    def add(self, timestamp: int, key: Any, namespace: Any) -> bool:
        ident = encode((timestamp, key, namespace))
        if self._ids.get(ident) is not None:
            return False
        order = encode(timestamp) + encode(next(self._seq))
        self._ids[ident] = order
        self._order[order] = encode((key, namespace))
        self._size += 1
        self._floor = min(self._floor, order)
        return True

    def remove(self, timestamp: int, key: Any, namespace: Any) -> None:
        ident = encode((timestamp, key, namespace))
        order = self._ids.get(ident)
        if order is not None:
            del self._ids[ident]
            del self._order[order]
            self._size -= 1

    def _first(self) -> tuple[bytes, bytes] | None:
        for order, value in _items(self._order, self._floor):
            self._floor = order
            return order, value
        return None

    def pop_due(self, up_to: int) -> InternalTimer | None:
        """Remove and return the first timer at or before ``up_to`` (None: none is due)."""
        first = self._first()
        if first is None:
            return None
        timestamp = decode_prefix(first[0], 0)[0]
        if timestamp > up_to:
            return None
        key, namespace = decode(first[1])
        self.remove(timestamp, key, namespace)
        return InternalTimer(timestamp, key, namespace)

    def __len__(self) -> int:
        return self._size

    def snapshot(self) -> list[tuple[int, Any, Any]]:
        """The timers in firing order (registration order among equal timestamps, which
        :meth:`restore` keeps by registering them in this order)."""
        return self.frozen()()

    def frozen(self) -> Callable[[], list[tuple[int, Any, Any]]]:
        """What reads the timers of now into :meth:`snapshot`'s list later, from any thread: a
        RocksDB iterator, made now, which sees the column family as it is now (unlike rocksdict's
        snapshots, whose iterators read the live database); it starts at ``_floor``, so making it
        does not walk over the deletions of the timers popped."""
        iterator = self._order.iter()
        iterator.seek(self._floor)

        def read() -> list[tuple[int, Any, Any]]:
            timers = []
            while iterator.valid():
                timers.append((decode_prefix(iterator.key(), 0)[0], *decode(iterator.value())))
                iterator.next()
            return timers
        return read

    def restore(self, timers: list[tuple[int, Any, Any]]) -> None:
        for timestamp, key, namespace in timers:
            self.add(timestamp, key, namespace)


class RocksDBStateView(FrozenView):
    """A RocksDB backend's database as it was at a checkpoint barrier, read (by the checkpoint
    writer, in its own thread) while the backend is frozen; its tables are the column families."""

    def __init__(self, backend: RocksDBKeyedStateBackend, dirty: dict[str, set[bytes]], base: Any,
                 expiring: dict[str, int], now: int) -> None:
        super().__init__(dict(backend._columns), backend.max_parallelism, dirty, base, expiring, now)
        self._backend = backend
        self._columns: dict[str, _Column] = self._tables

    @property
    def size(self) -> int:
        """Entries over all states, as RocksDB estimates them (it keeps no exact count)."""
        return sum(column.family.property_int_value("rocksdb.estimate-num-keys") or 0
                   for column in self._columns.values())

    def encode_layer(self, incremental: bool) -> tuple[list[tuple[str, str, memoryview]], int]:
        """One table file per state, as ``(state name, format, contents)``, and how many entries
        they hold: every entry, or (``incremental``) those changed since the previous freeze."""
        files, total = [], 0
        for name, column in self._columns.items():
            if incremental and not self.dirty.get(name):
                continue
            entries: Iterable[tuple[bytes, bytes | None]] = self._changes(column, name) if incremental \
                else _items(column.family)
            ttl = self._expiring.get(name)
            if ttl is not None:
                entries = _unexpired(entries, self.now, ttl)
            path = self._backend._table_path()
            count = _write_table(self._backend._options, path, entries)
            if count:
                with open(path, "rb") as file:
                    files.append((name, SST, memoryview(file.read())))
                os.remove(path)
                total += count
        return files, total

    def _changes(self, column: _Column, name: str) -> Iterator[tuple[bytes, bytes | None]]:
        keys = sorted(self.dirty[name])
        for start in range(0, len(keys), 4096):
            chunk = keys[start:start + 4096]
            yield from zip(chunk, cast("list[bytes | None]", column.family.get(chunk)))


def _unexpired(entries: Iterable[tuple[bytes, bytes | None]], now: int, ttl: int
               ) -> Iterator[tuple[bytes, bytes | None]]:
    """TTL's full-snapshot cleanup: expired entries left out, a changed one that expired as removed."""
    for raw, data in entries:
        if data is None:
            yield raw, None
            continue
        stored = decode(data)
        live = unexpired(stored, now, ttl)
        yield raw, None if live is None else (data if live is stored else encode(live))

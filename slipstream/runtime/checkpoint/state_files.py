"""How keyed state becomes checkpoint files: Arrow for columnar state, pickle only for Python objects.

A keyed state backend snapshots each state (by name) as its entries grouped by key
group: ``{key_group: [(key, value), ...]}``. Such a state is written as an Arrow IPC
file with the columns ``key_group`` (int32), ``key`` and ``value`` when both columns
have one of these shapes throughout — it can be read with ``pyarrow.ipc.open_file``
and reading it runs no code:

* a primitive: ``int`` within 64 bits, ``float``, ``str``, ``bytes`` or ``bool``, all
  entries of the same one (value, reducing and aggregating state of plain values);
* a ``list`` of primitives of one type -> ``list<...>`` (list state);
* a ``dict`` whose keys are primitives of one type and whose values are primitives of
  one type -> ``map<..., ...>`` (map state); it comes back as a dict in the same order;
* a ``tuple`` of primitives, of the same length everywhere, each position of one type
  -> ``struct<0, 1, ...>`` (a reducing state of ``(key, count)`` pairs, an aggregating
  state's ``(sum, count)`` accumulator, a key selector returning a tuple);
* a ``Row`` of primitives (kind INSERT), all with the same field names (or none) ->
  ``struct<0, 1, ...>`` with the names in the column's metadata (rows from a columnar
  source kept as state, such as profiles bootstrapped from a backlog).

Values, list and tuple elements and map values may be None; keys and map keys may
not. Types are matched exactly, so a round trip returns the same types: a bool never
turns into an int nor an int into a float (a column of ints and floats, or a list
mixing types, is pickled), and subclasses (namedtuples, ``defaultdict``) are
pickled. Everything else is pickled, the one format that round-trips arbitrary
Python objects: user objects, nested containers, and windows' namespaced entries
(keyed by ``(key, window)``; the window is an object of the job's assigner, and
decoding it here would tie the checkpoint format to every window class). The choice
is made per state, so one operator's checkpoint may hold both.

A state is written by the checkpoint writer's thread while the job goes on (see
:mod:`slipstream.runtime.state.heap_backend`), so no step may hold the interpreter
lock for long, nor build objects by the million (a full garbage collection would walk
them): a state is read ``CHUNK_ROWS`` entries at a time — an Arrow file is one record
batch per chunk, its column types unified over the chunks; a pickled state is one
pickle of ``(key groups, keys, values)`` lists per chunk, each behind its length
(format ``pickle-chunks``; the single pickle of ``{key group: entries}`` that older
checkpoints hold, ``pickle``, is still read). Nor may an Arrow file cost a Python object per
entry: types are checked and columns read by C-level passes over a chunk (``map``,
``list.count``), so writing a million rows starts no garbage collection, where a tuple per
row started hundreds, each run in the writer's thread holding the interpreter lock.

Both kinds are listed in the manifest with their SHA-256 and verified before they are
read; unpickling runs code, which is why a checkpoint directory must be trusted like
the job's code (see :mod:`slipstream.runtime.checkpoint.snapshot`).

Examples:
    >>> parts = encode_keyed_state({"count": {3: [("a", 1), ("b", 2)]}, "seen": {3: [("a", {1, 2})]},
    ...                             "last": {3: [("a", [1, 2])]}, "by": {3: [("a", {"x": 1.5})]}})
    >>> [(name, kind) for name, kind, _ in parts]
    [('count', 'arrow'), ('seen', 'pickle-chunks'), ('last', 'arrow'), ('by', 'arrow')]
    >>> decode_state_file(parts[0][1], parts[0][2])
    {3: [('a', 1), ('b', 2)]}
    >>> decode_state_file(parts[3][1], parts[3][2])
    {3: [('a', {'x': 1.5})]}
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple, Protocol, runtime_checkable

import pyarrow as pa

from slipstream.datastream.typeinfo import Row, RowKind
from slipstream.errors import CheckpointError

ARROW = "arrow"
PICKLE = "pickle-chunks"
LEGACY_PICKLE = "pickle"
SST = "rocksdb-sst"
"""A state of the RocksDB backend: its entries as a RocksDB table file (see
:mod:`slipstream.runtime.state.rocksdb_backend`), key-group-prefixed keys in order."""
EXTENSIONS = {ARROW: "arrow", PICKLE: "pkl", LEGACY_PICKLE: "pkl", SST: "sst"}
CHUNK_ROWS = 4_096
"""Entries converted to Arrow, or pickled, per call (each call holds the interpreter lock throughout)."""

_INT64 = (-(1 << 63), (1 << 63) - 1)
_ARROW_TYPES: dict[type, pa.DataType] = {
    int: pa.int64(), float: pa.float64(), str: pa.string(), bytes: pa.binary(), bool: pa.bool_()}
_COLUMNS = ["key_group", "key", "value"]
_NONE = type(None)
_CONTAINERS = (list, dict, tuple, Row)
_ROW_KIND, _FIELDS, _VALUES = attrgetter("_row_kind"), attrgetter("_fields"), attrgetter("_values")
_ROW = b"slipstream.row_fields"
"""Metadata of a struct column of rows: their field names as JSON (null: positional rows)."""

KeyedEntries = Mapping[int, list[tuple[Any, Any]]]
"""One state's snapshot: its ``(key, value)`` entries by key group."""

@runtime_checkable
class StateChunks(Protocol):
    """A state read in chunks (a frozen state of a backend, while the job goes on)."""

    def chunks(self, size: int) -> Iterator[tuple[list[Any], list[Any]]]:
        """The state's keys and values, ``size`` at a time; every call reads them all again."""
        ...

    def key_groups(self, keys: list[Any]) -> list[int]:
        """The key group of each of ``keys``."""
        ...


class _Snapshot:
    """``{key group: [(key, value), ...]}`` as :class:`StateChunks`."""

    def __init__(self, entries: KeyedEntries) -> None:
        self._keys = [key for pairs in entries.values() for key, _ in pairs]
        self._values = [value for pairs in entries.values() for _, value in pairs]
        self._groups = [group for group, pairs in entries.items() for _ in pairs]
        self._group_of = dict(zip(map(id, self._keys), self._groups))

    def chunks(self, size: int) -> Iterator[tuple[list[Any], list[Any]]]:
        for start in range(0, len(self._keys), size):
            yield self._keys[start:start + size], self._values[start:start + size]

    def key_groups(self, keys: list[Any]) -> list[int]:
        return [self._group_of[id(key)] for key in keys]


def _column_type(values: Sequence[Any], nullable: bool) -> pa.DataType | None:
    """The Arrow type all of ``values`` share exactly, or None when they are not one primitive type."""
    kinds = set(map(type, values))
    has_none = _NONE in kinds
    if nullable:
        kinds.discard(_NONE)
    if not kinds:
        return pa.null() if not values or nullable else None
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is int:
        present = [value for value in values if value is not None] if has_none else values
        if min(present) < _INT64[0] or max(present) > _INT64[1]:
            return None
    return _ARROW_TYPES.get(kind)


def _shape(values: list[Any], nullable: bool) -> pa.DataType | None:
    """The Arrow type of a column holding exactly ``values`` (None allowed when ``nullable``), or
    None when they have no shape that round-trips exactly through Arrow (see the module docstring).
    Types are looked at by C-level passes (``map``, ``chain``, ``list.count``), not a Python step
    per value: the checkpoint writer runs this for every entry while the job waits for the interpreter."""
    kinds = set(map(type, values))
    has_none = _NONE in kinds
    kinds.discard(_NONE)
    if len(kinds) != 1 or (kind := next(iter(kinds))) not in _CONTAINERS:
        return _column_type(values, nullable)
    if has_none and not nullable:
        return None
    present = [value for value in values if value is not None] if has_none else values
    if kind is Row:
        return _row_shape(present)
    if kind is list:
        element = _column_type(list(chain.from_iterable(present)), nullable=True)
        return None if element is None else pa.list_(element)
    if kind is dict:
        keys = list(chain.from_iterable(present))
        item_type = _column_type(list(chain.from_iterable(map(dict.values, present))), nullable=True)
        if not keys:
            return _EmptyMaps(item_type)
        key_type = _column_type(keys, nullable=False)
        return None if key_type is None or item_type is None else pa.map_(key_type, item_type)
    return _struct_of(present)


def _struct_of(present: list[Any]) -> pa.DataType | None:
    """``struct<0, 1, ...>`` of sequences of one length whose every position is of one primitive type."""
    lengths = set(map(len, present))
    if len(lengths) != 1 or not (width := lengths.pop()):
        return None
    fields = []
    for position in range(width):  # not zip(*present): an iterator per value, which the collector counts
        field_type = _column_type(list(map(itemgetter(position), present)), nullable=True)
        if field_type is None:
            return None
        fields.append(pa.field(str(position), field_type))
    return pa.struct(fields)


class _Rows:
    """The shape of rows: a struct of their values, and their field names (None: positional rows)."""

    def __init__(self, struct: pa.DataType, names: tuple[str, ...] | None) -> None:
        self.struct, self.names = struct, names


def _row_shape(rows: list[Row]) -> _Rows | None:
    """Rows of one kind (INSERT), one set of field names and values of primitives, or None."""
    if list(map(_ROW_KIND, rows)).count(RowKind.INSERT) != len(rows):  # count: identity first, in C
        return None
    names = rows[0]._fields  # rows made from one source share the list
    if list(map(_FIELDS, rows)).count(names) != len(rows):  # the same list, or an equal one
        return None
    struct = _struct_of(list(map(_VALUES, rows)))
    return None if struct is None else _Rows(struct, None if names is None else tuple(names))


class _EmptyMaps:
    """The shape of a chunk whose maps are all empty: no key type yet (Arrow has no map of null keys)."""

    def __init__(self, item_type: pa.DataType) -> None:
        self.item_type = item_type


def _unify(a: Any, b: Any) -> Any:
    """The shape of a column holding two chunks of shapes ``a`` and ``b`` (None: no exact shape)."""
    if a is None or b is None:
        return None
    if isinstance(a, _Rows) or isinstance(b, _Rows):
        if not isinstance(a, _Rows) or not isinstance(b, _Rows):
            return b if a == pa.null() else a if b == pa.null() else None
        struct = _unify(a.struct, b.struct)
        return None if struct is None or a.names != b.names else _Rows(struct, a.names)
    if isinstance(a, _EmptyMaps) or isinstance(b, _EmptyMaps):
        if isinstance(a, _EmptyMaps) and isinstance(b, _EmptyMaps):
            item = _unify(a.item_type, b.item_type)
            return None if item is None else _EmptyMaps(item)
        maps, empty = (b, a) if isinstance(a, _EmptyMaps) else (a, b)
        if maps == pa.null():
            return empty
        if not pa.types.is_map(maps):
            return None
        item = _unify(maps.item_type, empty.item_type)
        return None if item is None else pa.map_(maps.key_type, item)
    if a == b:
        return a
    if a == pa.null():
        return b
    if b == pa.null():
        return a
    if pa.types.is_list(a) and pa.types.is_list(b):
        item = _unify(a.value_type, b.value_type)
        return None if item is None else pa.list_(item)
    if pa.types.is_map(a) and pa.types.is_map(b):
        key, item = _unify(a.key_type, b.key_type), _unify(a.item_type, b.item_type)
        return None if key is None or item is None else pa.map_(key, item)
    if pa.types.is_struct(a) and pa.types.is_struct(b) and a.num_fields == b.num_fields:
        fields = [_unify(a.field(i).type, b.field(i).type) for i in range(a.num_fields)]
        return None if any(field is None for field in fields) else \
            pa.struct([pa.field(str(i), field) for i, field in enumerate(fields)])
    return None


def _field(name: str, shape: Any) -> pa.Field:
    """The column of a final shape: maps that were all empty get int64 keys (any key type reads
    back as {}); rows are a struct, their field names in the column's metadata."""
    if isinstance(shape, _EmptyMaps):
        return pa.field(name, pa.map_(pa.int64(), shape.item_type))
    if isinstance(shape, _Rows):
        return pa.field(name, shape.struct, metadata={_ROW: json.dumps(shape.names)})
    return pa.field(name, shape)


def _from_arrow(column: pa.ChunkedArray, field: pa.Field) -> list[Any]:
    """The Python values of a column written by :func:`_to_arrow`, of the types they were written as."""
    values: list[Any] = column.to_pylist()
    if pa.types.is_map(column.type):  # read back as [(key, value), ...] in the written order
        return [None if value is None else dict(value) for value in values]
    if pa.types.is_struct(column.type):  # read back as {"0": ..., "1": ...} in field order
        if field.metadata and _ROW in field.metadata:
            names = json.loads(field.metadata[_ROW])
            return [None if value is None else _row(names, value.values()) for value in values]
        return [None if value is None else tuple(value.values()) for value in values]
    return values


def _row(names: list[str] | None, values: Any) -> Row:
    row = Row(*values)
    row._fields = names  # one list for all rows of the column, as rows made from Arrow have
    return row


def _to_arrow(state: StateChunks) -> memoryview | None:
    """The Arrow IPC file of a state, one record batch per chunk; None when it has no exact Arrow shape.

    Two passes: the shape of every chunk's keys and values, unified; then the batches.
    """
    key_shape = value_shape = pa.null()
    for keys, values in state.chunks(CHUNK_ROWS):
        key_shape = _unify(key_shape, _shape(keys, nullable=False))
        value_shape = _unify(value_shape, _shape(values, nullable=True))
        if key_shape is None or value_shape is None:
            return None
    schema = pa.schema([pa.field("key_group", pa.int32()), _field("key", key_shape), _field("value", value_shape)])
    key_type, value_type = schema.field("key").type, schema.field("value").type
    sink = pa.BufferOutputStream()
    try:
        with pa.ipc.new_file(sink, schema) as writer:
            written = False
            for keys, values in state.chunks(CHUNK_ROWS):
                writer.write_batch(pa.record_batch(
                    [pa.array(state.key_groups(keys), pa.int32()), _array(keys, key_type),
                     _array(values, value_type)], schema=schema))
                written = True
            if not written:
                writer.write_table(schema.empty_table())
    except (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError):
        return None  # e.g. a str with lone surrogates, which UTF-8 cannot hold: pickle keeps it exactly
    return memoryview(sink.getvalue())  # not copied into bytes: that would hold the interpreter for long


def _array(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``arrow_type``. A struct column (tuples, or rows as the tuples
    of their values) is built a field at a time by C-level passes, with no tuple per value: the
    writer would start a garbage collection every 700 of them."""
    if not pa.types.is_struct(arrow_type):
        return pa.array(values, arrow_type)
    kinds = set(map(type, values))
    if kinds <= {_NONE}:
        return pa.array(values, arrow_type)
    fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
    mask = None
    if _NONE in kinds:  # removed entries: null structs over blank fields
        mask = pa.array([value is None for value in values], pa.bool_())
        blank = (None,) * len(fields)
        tuples = [blank if value is None else value._values if type(value) is Row else value for value in values]
    else:
        tuples = list(map(_VALUES, values)) if Row in kinds else values
    return pa.StructArray.from_arrays(
        [pa.array(list(map(itemgetter(i), tuples)), field.type) for i, field in enumerate(fields)],
        fields=fields, mask=mask)


def _to_pickles(state: StateChunks) -> memoryview:
    """Each chunk pickled on its own as ``(key groups, keys, values)``, behind its length (8 bytes,
    little endian): the pickler never holds more than one chunk's objects."""
    out = io.BytesIO()
    for keys, values in state.chunks(CHUNK_ROWS):
        data = pickle.dumps((state.key_groups(keys), keys, values), protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(data).to_bytes(8, "little"))
        out.write(data)
    return out.getbuffer()


def _from_pickles(data: bytes | memoryview) -> KeyedEntries:
    entries: dict[int, list[tuple[Any, Any]]] = {}
    view, offset = memoryview(data), 0
    while offset < len(view):
        size = int.from_bytes(view[offset:offset + 8], "little")
        groups, keys, values = pickle.loads(view[offset + 8:offset + 8 + size])
        for group, key, value in zip(groups, keys, values):
            entries.setdefault(group, []).append((key, value))
        offset += 8 + size
    return entries


def prepare_encoder() -> None:
    """Have pyarrow load now what its first conversion of Python values loads: it looks for pandas
    then and imports it when installed (half a second on a 2.5 GHz Xeon). Called in the job's thread
    as checkpointing starts, so that the first background checkpoint does not import pandas while
    a live stream waits for the interpreter."""
    pa.array([0], pa.int64())


def encode_keyed_state(snapshot: Mapping[str, KeyedEntries | StateChunks]
                       ) -> list[tuple[str, str, memoryview]]:
    """``(state name, ARROW or PICKLE, file contents)`` for every state of a backend snapshot: each
    state's ``{key group: [(key, value), ...]}``, or a frozen state read chunk by chunk."""
    parts = []
    for name, entries in snapshot.items():
        state = entries if isinstance(entries, StateChunks) else _Snapshot(entries)
        data = _to_arrow(state)
        if data is not None:
            parts.append((name, ARROW, data))
        else:
            parts.append((name, PICKLE, _to_pickles(state)))
    return parts


class SstFile(NamedTuple):
    """A state's RocksDB table file (format ``SST``), which only a RocksDB reads: the backend
    restoring it ingests it."""

    data: bytes | memoryview


def decode_state_file(kind: str, data: bytes | memoryview) -> KeyedEntries | SstFile:
    """One state's entries by key group, from a (verified) file written by :func:`encode_keyed_state`
    (or, for ``LEGACY_PICKLE``, by a slipstream that pickled a state's entries as one dict); a
    RocksDB table file as it is."""
    if kind == SST:
        return SstFile(data)
    if kind == PICKLE:
        return _from_pickles(data)
    if kind == LEGACY_PICKLE:
        legacy: KeyedEntries = pickle.loads(data)
        return legacy
    if kind != ARROW:
        raise CheckpointError(f"unknown keyed state file format {kind!r}")
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    if table.column_names != _COLUMNS:
        raise CheckpointError(f"a keyed state file has columns {table.column_names}, expected {_COLUMNS}")
    entries: dict[int, list[tuple[Any, Any]]] = {}
    groups, keys, values = (_from_arrow(table.column(name), table.schema.field(name)) for name in _COLUMNS)
    for group, key, value in zip(groups, keys, values):
        entries.setdefault(group, []).append((key, value))
    return entries


__all__ = ["ARROW", "CHUNK_ROWS", "EXTENSIONS", "LEGACY_PICKLE", "PICKLE", "SST", "SstFile", "StateChunks",
           "decode_state_file",
           "encode_keyed_state", "prepare_encoder"]

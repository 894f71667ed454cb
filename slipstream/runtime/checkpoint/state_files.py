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
  state's ``(sum, count)`` accumulator, a key selector returning a tuple).

Values, list and tuple elements and map values may be None; keys and map keys may
not. Types are matched exactly, so a round trip returns the same types: a bool never
turns into an int nor an int into a float (a column of ints and floats, or a list
mixing types, is pickled), and subclasses (namedtuples, ``Row``, ``defaultdict``)
are pickled. Everything else is pickled, the one format that round-trips arbitrary
Python objects: user objects, nested containers, and windows' namespaced entries
(keyed by ``(key, window)``; the window is an object of the job's assigner, and
decoding it here would tie the checkpoint format to every window class). The choice
is made per state, so one operator's checkpoint may hold both.

A state is written by the checkpoint writer's thread while the job goes on (see
:mod:`slipstream.runtime.state.heap_backend`), so no step may hold the interpreter
lock for long: Arrow columns are converted ``CHUNK_ROWS`` at a time, and a pickled
state is one pickle per key group, each behind its length, so the pickler never holds
more than one group's objects (format ``pickle-by-key-group``; the single pickle of
``{key group: entries}`` that older checkpoints hold, ``pickle``, is still read).

Both kinds are listed in the manifest with their SHA-256 and verified before they are
read; unpickling runs code, which is why a checkpoint directory must be trusted like
the job's code (see :mod:`slipstream.runtime.checkpoint.snapshot`).

Examples:
    >>> parts = encode_keyed_state({"count": {3: [("a", 1), ("b", 2)]}, "seen": {3: [("a", {1, 2})]},
    ...                             "last": {3: [("a", [1, 2])]}, "by": {3: [("a", {"x": 1.5})]}})
    >>> [(name, kind) for name, kind, _ in parts]
    [('count', 'arrow'), ('seen', 'pickle-by-key-group'), ('last', 'arrow'), ('by', 'arrow')]
    >>> decode_state_file(parts[0][1], parts[0][2])
    {3: [('a', 1), ('b', 2)]}
    >>> decode_state_file(parts[3][1], parts[3][2])
    {3: [('a', {'x': 1.5})]}
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from slipstream.errors import CheckpointError

ARROW = "arrow"
PICKLE = "pickle-by-key-group"
LEGACY_PICKLE = "pickle"
EXTENSIONS = {ARROW: "arrow", PICKLE: "pkl", LEGACY_PICKLE: "pkl"}
CHUNK_ROWS = 16_384
"""Rows converted to Arrow per call (each call holds the interpreter lock throughout)."""

_INT64 = (-(1 << 63), (1 << 63) - 1)
_ARROW_TYPES: dict[type, pa.DataType] = {
    int: pa.int64(), float: pa.float64(), str: pa.string(), bytes: pa.binary(), bool: pa.bool_()}
_COLUMNS = ["key_group", "key", "value"]

KeyedEntries = Mapping[int, list[tuple[Any, Any]]]
"""One state's snapshot: its ``(key, value)`` entries by key group."""


def _column_type(values: list[Any], nullable: bool) -> pa.DataType | None:
    """The Arrow type all of ``values`` share exactly, or None when they are not one primitive type."""
    kinds = {type(value) for value in values}
    if nullable:
        kinds.discard(type(None))
    if not kinds:
        return pa.null() if not values or nullable else None
    if len(kinds) != 1:
        return None
    arrow_type = _ARROW_TYPES.get(kinds.pop())
    if arrow_type == pa.int64():
        present = [value for value in values if value is not None]
        if min(present) < _INT64[0] or max(present) > _INT64[1]:
            return None
    return arrow_type


def _shape(values: list[Any], nullable: bool) -> pa.DataType | None:
    """The Arrow type of a column holding exactly ``values`` (None allowed when ``nullable``), or
    None when they have no shape that round-trips exactly through Arrow (see the module docstring)."""
    present = [value for value in values if value is not None]
    kinds = {type(value) for value in present}
    if len(kinds) != 1 or next(iter(kinds)) not in (list, dict, tuple):
        return _column_type(values, nullable)
    if not nullable and len(present) != len(values):
        return None
    kind = kinds.pop()
    if kind is list:
        element = _column_type([item for value in present for item in value], nullable=True)
        return None if element is None else pa.list_(element)
    if kind is dict:
        keys = [key for value in present for key in value]
        # Every map empty: any key type reads back as {} (Arrow has no map of null keys).
        key_type = _column_type(keys, nullable=False) if keys else pa.int64()
        item_type = _column_type([item for value in present for item in value.values()], nullable=True)
        return None if key_type is None or item_type is None else pa.map_(key_type, item_type)
    lengths = {len(value) for value in present}
    if len(lengths) != 1 or not (width := lengths.pop()):
        return None
    fields = []
    for position in range(width):
        field_type = _column_type([value[position] for value in present], nullable=True)
        if field_type is None:
            return None
        fields.append(pa.field(str(position), field_type))
    return pa.struct(fields)


def _from_arrow(column: pa.ChunkedArray) -> list[Any]:
    """The Python values of a column written by :func:`_to_arrow`, of the types they were written as."""
    values = column.to_pylist()
    if pa.types.is_map(column.type):  # read back as [(key, value), ...] in the written order
        return [None if value is None else dict(value) for value in values]
    if pa.types.is_struct(column.type):  # read back as {"0": ..., "1": ...} in field order
        return [None if value is None else tuple(value.values()) for value in values]
    return values


def _to_arrow(entries: KeyedEntries) -> bytes | None:
    groups: list[int] = []
    keys: list[Any] = []
    values: list[Any] = []
    for group, pairs in entries.items():
        for key, value in pairs:
            groups.append(group)
            keys.append(key)
            values.append(value)
    key_type = _shape(keys, nullable=False)
    value_type = _shape(values, nullable=True)
    if key_type is None or value_type is None:
        return None
    schema = pa.schema([("key_group", pa.int32()), ("key", key_type), ("value", value_type)])
    sink = pa.BufferOutputStream()
    try:
        with pa.ipc.new_file(sink, schema) as writer:
            for start in range(0, len(keys), CHUNK_ROWS):  # a short call each: the job's thread gets its turns
                end = start + CHUNK_ROWS
                writer.write_batch(pa.record_batch(
                    [pa.array(groups[start:end], pa.int32()), pa.array(keys[start:end], key_type),
                     pa.array(values[start:end], value_type)], schema=schema))
            if not keys:
                writer.write_table(schema.empty_table())
    except (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError):
        return None  # e.g. a str with lone surrogates, which UTF-8 cannot hold: pickle keeps it exactly
    return sink.getvalue().to_pybytes()


def _to_pickles(entries: KeyedEntries) -> bytes:
    """Each key group's entries pickled on their own, each behind its length (8 bytes, little endian):
    pickling never holds more than one group's objects, nor the interpreter for long."""
    out = io.BytesIO()
    for group, pairs in entries.items():
        data = pickle.dumps((group, pairs), protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(data).to_bytes(8, "little"))
        out.write(data)
    return out.getvalue()


def _from_pickles(data: bytes) -> KeyedEntries:
    entries: KeyedEntries = {}
    view, offset = memoryview(data), 0
    while offset < len(view):
        size = int.from_bytes(view[offset:offset + 8], "little")
        group, pairs = pickle.loads(view[offset + 8:offset + 8 + size])
        entries.setdefault(group, []).extend(pairs)
        offset += 8 + size
    return entries


def encode_keyed_state(snapshot: Mapping[str, KeyedEntries]) -> list[tuple[str, str, bytes]]:
    """``(state name, ARROW or PICKLE, file bytes)`` for every state of a backend snapshot.

    Each state's entries (``{key group: [(key, value), ...]}``, or a view with the same
    ``items()``) may be read more than once.
    """
    parts = []
    for name, entries in snapshot.items():
        data = _to_arrow(entries)
        if data is not None:
            parts.append((name, ARROW, data))
        else:
            parts.append((name, PICKLE, _to_pickles(entries)))
    return parts


def decode_state_file(kind: str, data: bytes) -> KeyedEntries:
    """One state's entries by key group, from a (verified) file written by :func:`encode_keyed_state`
    (or, for ``LEGACY_PICKLE``, by a slipstream that pickled a state's entries as one dict)."""
    if kind == PICKLE:
        return _from_pickles(data)
    if kind == LEGACY_PICKLE:
        return pickle.loads(data)
    if kind != ARROW:
        raise CheckpointError(f"unknown keyed state file format {kind!r}")
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    if table.column_names != _COLUMNS:
        raise CheckpointError(f"a keyed state file has columns {table.column_names}, expected {_COLUMNS}")
    entries: KeyedEntries = {}
    groups, keys, values = (_from_arrow(table.column(name)) for name in _COLUMNS)
    for group, key, value in zip(groups, keys, values):
        entries.setdefault(group, []).append((key, value))
    return entries


__all__ = ["ARROW", "EXTENSIONS", "LEGACY_PICKLE", "PICKLE", "decode_state_file", "encode_keyed_state"]

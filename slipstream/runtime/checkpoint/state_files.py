"""How keyed state becomes checkpoint files: Arrow for columnar state, pickle only for Python objects.

A keyed state backend snapshots each state (by name) as its entries grouped by key
group: ``{key_group: [(key, value), ...]}``. A state whose keys are all of one
primitive type and whose values are all of one primitive type (``int`` within 64
bits, ``float``, ``str``, ``bytes``, ``bool``; values may be None) is written as an
Arrow IPC file with the columns ``key_group`` (int32), ``key`` and ``value`` — it can
be read with ``pyarrow.ipc.open_file`` and reading it runs no code. Any other state
(tuples, lists, maps, windows' namespaced entries, user objects) is pickled, the one
format that round-trips arbitrary Python objects. The choice is made per state, so
one operator's checkpoint may hold both.

Both kinds are listed in the manifest with their SHA-256 and verified before they are
read; unpickling runs code, which is why a checkpoint directory must be trusted like
the job's code (see :mod:`slipstream.runtime.checkpoint.snapshot`).

Example:
    >>> parts = encode_keyed_state({"count": {3: [("a", 1), ("b", 2)]}, "seen": {3: [("a", {1, 2})]}})
    >>> [(name, kind) for name, kind, _ in parts]
    [('count', 'arrow'), ('seen', 'pickle')]
    >>> decode_state_file(parts[0][1], parts[0][2])
    {3: [('a', 1), ('b', 2)]}
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

from slipstream.errors import CheckpointError

ARROW = "arrow"
PICKLE = "pickle"
EXTENSIONS = {ARROW: "arrow", PICKLE: "pkl"}

_INT64 = (-(1 << 63), (1 << 63) - 1)
_ARROW_TYPES: dict[type, pa.DataType] = {
    int: pa.int64(), float: pa.float64(), str: pa.string(), bytes: pa.binary(), bool: pa.bool_()}
_COLUMNS = ["key_group", "key", "value"]

KeyedEntries = dict[int, list[tuple[Any, Any]]]
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


def _to_arrow(entries: KeyedEntries) -> bytes | None:
    groups: list[int] = []
    keys: list[Any] = []
    values: list[Any] = []
    for group, pairs in entries.items():
        for key, value in pairs:
            groups.append(group)
            keys.append(key)
            values.append(value)
    key_type = _column_type(keys, nullable=False)
    value_type = _column_type(values, nullable=True)
    if key_type is None or value_type is None:
        return None
    table = pa.table([pa.array(groups, pa.int32()), pa.array(keys, key_type), pa.array(values, value_type)],
                     names=_COLUMNS)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def encode_keyed_state(snapshot: dict[str, KeyedEntries]) -> list[tuple[str, str, bytes]]:
    """``(state name, ARROW or PICKLE, file bytes)`` for every state of a backend snapshot."""
    parts = []
    for name, entries in snapshot.items():
        data = _to_arrow(entries)
        if data is not None:
            parts.append((name, ARROW, data))
        else:
            parts.append((name, PICKLE, pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)))
    return parts


def decode_state_file(kind: str, data: bytes) -> KeyedEntries:
    """One state's entries by key group, from a (verified) file written by :func:`encode_keyed_state`."""
    if kind == PICKLE:
        return pickle.loads(data)
    if kind != ARROW:
        raise CheckpointError(f"unknown keyed state file format {kind!r}")
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    if table.column_names != _COLUMNS:
        raise CheckpointError(f"a keyed state file has columns {table.column_names}, expected {_COLUMNS}")
    entries: KeyedEntries = {}
    groups, keys, values = (table.column(name).to_pylist() for name in _COLUMNS)
    for group, key, value in zip(groups, keys, values):
        entries.setdefault(group, []).append((key, value))
    return entries


__all__ = ["ARROW", "EXTENSIONS", "PICKLE", "decode_state_file", "encode_keyed_state"]

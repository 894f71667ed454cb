"""Key groups: keys hash to one of ``max_parallelism`` groups, and groups map to subtasks.

State is stored and restored by key group, so a job can be restored at another
parallelism. The hash is stable across processes (Python's ``hash`` of str is not),
which restoring from a checkpoint written by another process requires.
"""

from __future__ import annotations

import datetime
import enum
import zlib
from typing import Any

import numpy as np

from slipstream.datastream.typeinfo import Row

DEFAULT_MAX_PARALLELISM = 128

_MASK64 = (1 << 64) - 1


def _mix(value: int) -> int:
    """Fibonacci hashing: one multiplication spreads regular integers (multiples of 128, say)
    over the key groups; it runs per record on keyed edges, so it stays this cheap."""
    value ^= value >> 32  # fold the high half in: floats and large ints differ mostly up there
    return ((value * 0x9E3779B97F4A7C15) & _MASK64) >> 32


def stable_hash(key: Any) -> int:
    """A hash of ``key`` that is the same in every process.

    Handles the usual key types (int, str, bytes, float, bool, None, enums, dates, datetimes,
    tuples and rows of them); other objects fall back to their own ``__hash__``, which must
    then be stable (Python randomises it for str-like contents, per process).
    """
    kind = type(key)
    if kind is int or kind is bool or kind is float:
        # Python's numeric hash is not randomised, equal for 1 == 1.0 == True, and folds
        # huge values (2**70, 1e300) modulo 2**61 - 1 instead of truncating them to zero.
        return _mix(hash(key) & _MASK64)
    if kind is str:
        return _mix(zlib.crc32(key.encode("utf-8", "surrogatepass")))
    if kind is bytes:
        return _mix(zlib.crc32(key))
    if key is None:
        return 0
    if isinstance(key, (tuple, Row)):
        result = 0x345678
        for item in key:
            result = _mix((result * 1000003) ^ stable_hash(item))
        return result
    # Subclasses (IntEnum, str enums, ...) hash like the value they compare equal to; enums,
    # dates and datetimes have a per-process randomised __hash__, so hash their contents.
    if isinstance(key, int):
        return stable_hash(int(key))
    if isinstance(key, str):
        return stable_hash(str.__str__(key))
    if isinstance(key, float):
        return stable_hash(float(key))
    if isinstance(key, bytes):
        return stable_hash(bytes(key))
    if isinstance(key, enum.Enum):
        return stable_hash((type(key).__qualname__, key.name))
    if isinstance(key, datetime.datetime):
        offset = key.utcoffset()
        naive = key.replace(tzinfo=None, fold=0) - (offset or datetime.timedelta(0))
        return stable_hash((naive.toordinal(), naive.hour * 3600 + naive.minute * 60 + naive.second,
                            naive.microsecond))
    if isinstance(key, datetime.date):
        return stable_hash(key.toordinal())
    return _mix(hash(key) & _MASK64)


def assign_to_key_group(key: Any, max_parallelism: int) -> int:
    return stable_hash(key) % max_parallelism


_NUMBERS = frozenset({int, bool, float})
_GOLDEN, _HALF = np.uint64(0x9E3779B97F4A7C15), np.uint64(32)


def _key_groups_at_once(keys: list[Any], max_parallelism: int) -> np.ndarray | None:
    """The key group of each of ``keys`` as a uint64 array when they are all numbers, all str or
    all bytes (the usual keys), hashed by C functions and mixed in one numpy pass rather than one
    Python call each; None for any other batch (a str that is not UTF-8 text, say)."""
    kinds = set(map(type, keys))
    try:
        if kinds and _NUMBERS.issuperset(kinds):
            hashes = np.fromiter(map(hash, keys), np.int64, len(keys)).view(np.uint64)
        elif kinds == {str}:
            hashes = np.fromiter(map(zlib.crc32, map(str.encode, keys)), np.uint64, len(keys))
        elif kinds == {bytes}:
            hashes = np.fromiter(map(zlib.crc32, keys), np.uint64, len(keys))
        else:
            return None
    except UnicodeEncodeError:  # a lone surrogate: stable_hash encodes it with surrogatepass
        return None
    # numpy's uint64 arithmetic wraps as stable_hash's & _MASK64 does (pyarrow's scalars would import pandas)
    mixed = ((hashes ^ (hashes >> _HALF)) * _GOLDEN) >> _HALF
    return mixed % np.uint64(max_parallelism)


def assign_to_key_groups(keys: list[Any], max_parallelism: int) -> list[int]:
    """The key group of each of ``keys``, as :func:`assign_to_key_group` gives it: a checkpoint
    groups every key of its state, a million of them at 10^6 keys."""
    groups = _key_groups_at_once(keys, max_parallelism)
    if groups is None:
        return [stable_hash(key) % max_parallelism for key in keys]
    key_groups: list[int] = groups.tolist()
    return key_groups


def subtasks_at_once(keys: list[Any], max_parallelism: int, parallelism: int) -> list[int] | None:
    """The subtask of each of ``keys`` (as :func:`subtask_for_key` gives it) in one numpy pass when
    they are all numbers, all str or all bytes; None for any other batch. A hash edge routes a
    batch at once."""
    groups = _key_groups_at_once(keys, max_parallelism)
    if groups is None:
        return None
    subtasks: list[int] = (groups * np.uint64(parallelism) // np.uint64(max_parallelism)).tolist()
    return subtasks


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns ``key_group`` (contiguous ranges, as Flink)."""
    return key_group * parallelism // max_parallelism


def key_group_range(max_parallelism: int, parallelism: int, subtask_index: int) -> range:
    """The key groups owned by ``subtask_index``."""
    start = (subtask_index * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask_index + 1) * max_parallelism + parallelism - 1) // parallelism
    return range(start, end)


def subtask_for_key(key: Any, max_parallelism: int, parallelism: int) -> int:
    return stable_hash(key) % max_parallelism * parallelism // max_parallelism

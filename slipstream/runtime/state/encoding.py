"""A fixed binary layout for keys and values of keyed state kept as bytes (the RocksDB backend).

Plain values — None, bools, ints, floats, strings, bytes, and tuples, lists and dicts of
them — are written without pickle, each behind a one-byte tag; every encoding delimits
itself, so encodings concatenate (an entry key is the record key's encoding followed by the
namespace's). For keys the layout preserves order: two values of the same kind (ints of
64 bits and beyond, floats, strings, bytes, tuples of such) compare as their encodings
do byte by byte, so a range of RocksDB keys iterates in the values' order (timers by
time). Strings and bytes escape each zero byte as ``00 ff`` and end with ``00``, as
FoundationDB's tuple layer does. Anything else (a ``Row``, a user object, a frozenset) is
pickled (cloudpickle when plain pickle cannot: lambdas, local classes), escaped the same way;
such keys keep no order.

Examples:
    >>> decode(encode((1, "a", None)))
    (1, 'a', None)
    >>> encode(-1) < encode(0) < encode(2 ** 70) and encode("a") < encode("a\\x00") < encode("b")
    True
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Callable
from pickle import loads as _unpickled  # bound once: the encoding is no reader of checkpoint files
from typing import Any

from slipstream.runtime.state.ttl import TtlValue

NONE, FALSE, TRUE = 0x01, 0x02, 0x03
NEG_BIG, INT64, POS_BIG = 0x10, 0x11, 0x12
FLOAT = 0x20
STR, BYTES = 0x30, 0x31
TUPLE, LIST, DICT, TTL = 0x40, 0x41, 0x42, 0x43
PICKLED = 0x7F
END = 0x00

_BIAS = 1 << 63
_FLOAT = struct.Struct(">d")
_SIGN = 0x80


def _escaped(data: bytes) -> bytes:
    return data.replace(b"\x00", b"\x00\xff") + b"\x00"


def _int(value: int, out: bytearray) -> None:
    if -_BIAS <= value < _BIAS:
        out.append(INT64)
        out += (value + _BIAS).to_bytes(8, "big")
        return
    magnitude = abs(value)
    length = (magnitude.bit_length() + 7) // 8
    if length > 255:
        _pickled(value, out)
    elif value > 0:
        out += bytes((POS_BIG, length))
        out += magnitude.to_bytes(length, "big")
    else:  # longer is smaller, and within one length a larger magnitude is smaller
        out += bytes((NEG_BIG, 255 - length))
        out += ((1 << (8 * length)) - 1 - magnitude).to_bytes(length, "big")


def _float(value: float, out: bytearray) -> None:
    bits = bytearray(_FLOAT.pack(value))
    if bits[0] & _SIGN:  # negative: invert every bit, so larger magnitudes sort lower
        bits = bytearray(b ^ 0xFF for b in bits)
    else:
        bits[0] |= _SIGN
    out.append(FLOAT)
    out += bits


def _str(value: str, out: bytearray) -> None:
    out.append(STR)
    out += _escaped(value.encode("utf-8", "surrogatepass"))


def _bytes(value: bytes, out: bytearray) -> None:
    out.append(BYTES)
    out += _escaped(value)


def _sequence(tag: int) -> Callable[[Any, bytearray], None]:
    def write(value: Any, out: bytearray) -> None:
        out.append(tag)
        for item in value:
            _write(item, out)
        out.append(END)
    return write


def _dict(value: dict[Any, Any], out: bytearray) -> None:
    out.append(DICT)
    for key, item in value.items():
        _write(key, out)
        _write(item, out)
    out.append(END)


def _pickled(value: Any, out: bytearray) -> None:
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - what plain pickle refuses (lambdas, local classes), cloudpickle writes
        import cloudpickle
        data = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    out.append(PICKLED)
    out += _escaped(data)


_WRITERS: dict[type, Callable[[Any, bytearray], None]] = {
    type(None): lambda value, out: out.append(NONE),
    bool: lambda value, out: out.append(TRUE if value else FALSE),
    int: _int,
    float: _float,
    str: _str,
    bytes: _bytes,
    tuple: _sequence(TUPLE),
    list: _sequence(LIST),
    TtlValue: _sequence(TTL),
    dict: _dict,
}


def _write(value: Any, out: bytearray) -> None:
    if type(value) is int and -_BIAS <= value < _BIAS:  # the common case, without the dispatch
        out.append(INT64)
        out += (value + _BIAS).to_bytes(8, "big")
    else:
        _WRITERS.get(type(value), _pickled)(value, out)


def encode(value: Any) -> bytes:
    """The bytes of ``value`` (see the module docstring)."""
    kind = type(value)
    if kind is int and -_BIAS <= value < _BIAS:  # the common case, without the dispatch
        return b"\x11" + int(value + _BIAS).to_bytes(8, "big")
    out = bytearray()
    _WRITERS.get(kind, _pickled)(value, out)
    return bytes(out)


def encode_into(value: Any, out: bytearray) -> None:
    """Append the bytes of ``value`` to ``out``."""
    _write(value, out)


def _unescaped(data: bytes, position: int) -> tuple[bytes, int]:
    """The escaped bytes starting at ``position`` and the position after their end."""
    end = data.index(b"\x00", position)
    if end + 1 >= len(data) or data[end + 1] != 0xFF:
        return data[position:end], end + 1
    parts = []
    while end + 1 < len(data) and data[end + 1] == 0xFF:
        parts.append(data[position:end + 1])
        position = end + 2
        end = data.index(b"\x00", position)
    parts.append(data[position:end])
    return b"".join(parts), end + 1


def _items(data: bytes, position: int) -> tuple[list[Any], int]:
    """The encoded values from ``position`` up to their container's END, and the position after it."""
    items: list[Any] = []
    append = items.append
    while True:
        tag = data[position]
        if tag == INT64:  # inline: containers of ints are the common case
            append(int.from_bytes(data[position + 1:position + 9], "big") - _BIAS)
            position += 9
        elif tag == END:
            return items, position + 1
        else:
            item, position = _read(data, position)
            append(item)


def _read(data: bytes, position: int) -> tuple[Any, int]:
    tag = data[position]
    position += 1
    if tag == INT64:
        return int.from_bytes(data[position:position + 8], "big") - _BIAS, position + 8
    if tag == STR:
        raw, position = _unescaped(data, position)
        return raw.decode("utf-8", "surrogatepass"), position
    if tag == NONE:
        return None, position
    if tag in (FALSE, TRUE):
        return tag == TRUE, position
    if tag == FLOAT:
        bits = bytearray(data[position:position + 8])
        if bits[0] & _SIGN:
            bits[0] &= ~_SIGN & 0xFF
        else:
            bits = bytearray(b ^ 0xFF for b in bits)
        return _FLOAT.unpack(bits)[0], position + 8
    if tag == BYTES:
        return _unescaped(data, position)
    if tag in (TUPLE, LIST, TTL, DICT):
        items, position = _items(data, position)
        if tag == TUPLE:
            return tuple(items), position
        if tag == LIST:
            return items, position
        if tag == TTL:
            return TtlValue(*items), position
        return dict(zip(items[::2], items[1::2])), position
    if tag in (POS_BIG, NEG_BIG):
        length = data[position] if tag == POS_BIG else 255 - data[position]
        magnitude = int.from_bytes(data[position + 1:position + 1 + length], "big")
        if tag == NEG_BIG:
            magnitude = -((1 << (8 * length)) - 1 - magnitude)
        return magnitude, position + 1 + length
    if tag == PICKLED:
        raw, position = _unescaped(data, position)
        return _unpickled(raw), position
    raise ValueError(f"not an encoded value: tag {tag:#x} at byte {position - 1}")


def decode(data: bytes) -> Any:
    """The value :func:`encode` wrote as ``data``."""
    if len(data) == 9 and data[0] == INT64:
        return int.from_bytes(data[1:], "big") - _BIAS
    return _read(data, 0)[0]


def decode_prefix(data: bytes, position: int) -> tuple[Any, int]:
    """The value encoded at ``position`` of ``data``, and the position after it."""
    return _read(data, position)

"""The RocksDB backend's binary layout: plain values round-trip exactly (types included), keys
of one kind sort as their encodings do, encodings concatenate, and other objects are pickled."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream.typeinfo import Row
from slipstream.runtime.state.encoding import decode, decode_prefix, encode, encode_into
from slipstream.runtime.state.ttl import TtlValue

ATOMS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary()
PLAIN = st.recursive(ATOMS, lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
                     | st.dictionaries(st.integers() | st.text(), inner, max_size=4)
                     | st.builds(TtlValue, inner, st.integers(0, 2 ** 62)), max_leaves=12)


def same(a: object, b: object) -> bool:
    """Equal with the same types throughout (1 == 1.0 == True does not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    return a == b


@given(PLAIN)
@settings(max_examples=400, deadline=None)
def test_plain_values_round_trip_with_their_types(value: object) -> None:
    assert same(decode(encode(value)), value)


@given(st.lists(PLAIN, min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_encodings_concatenate(values: list) -> None:
    out = bytearray()
    for value in values:
        encode_into(value, out)
    position, decoded = 0, []
    while position < len(out):
        value, position = decode_prefix(bytes(out), position)
        decoded.append(value)
    assert len(decoded) == len(values) and all(same(a, b) for a, b in zip(decoded, values))


ORDERED = [st.integers(), st.floats(allow_nan=False), st.text(), st.binary(),
           st.tuples(st.integers(-2 ** 70, 2 ** 70), st.text()), st.tuples(st.binary(), st.floats(allow_nan=False)),
           st.lists(st.integers(-5, 5), max_size=4).map(tuple)]


@given(st.data())
@settings(max_examples=600, deadline=None)
def test_keys_of_one_kind_sort_as_their_encodings(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(ORDERED))
    a, b = data.draw(kind), data.draw(kind)
    if a < b:
        assert encode(a) < encode(b)
    elif b < a:
        assert encode(b) < encode(a)


def test_plain_values_are_not_pickled() -> None:
    assert b"\x80" not in encode(("k", 1, 2.5, None, True, b"x"))[:1]
    assert encode(7) == b"\x11" + (7 + 2 ** 63).to_bytes(8, "big")
    assert encode("a\x00b") == b"\x30a\x00\xffb\x00"


@dataclass
class Point:
    x: int
    y: int


def test_objects_and_rows_fall_back_to_pickle_and_lambdas_to_cloudpickle() -> None:
    assert decode(encode(Point(1, 2))) == Point(1, 2)
    row = Row(a=1, b="x")
    assert decode(encode(row)) == row and decode(encode(frozenset({1, 2}))) == frozenset({1, 2})
    assert decode(encode(lambda v: v + 1))(1) == 2
    assert decode(encode(2 ** 3000)) == 2 ** 3000

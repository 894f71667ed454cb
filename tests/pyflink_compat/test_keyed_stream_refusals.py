"""A ``KeyedStream`` refuses what PyFlink's refuses, with a clear error, instead of dropping its partitioning;
what PyFlink allows on it (operators, sinks, union, a second key_by) works on the records themselves."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

import pytest

from slipstream.datastream import SlotSharingGroup, StreamExecutionEnvironment
from slipstream.errors import InvalidProgramError

NOT_AN_OPERATOR: list[tuple[str, Callable[[Any], Any]]] = [
    ("name()", lambda ks: ks.name("keyed stream")),
    ("uid()", lambda ks: ks.uid("keyed")),
    ("set_parallelism()", lambda ks: ks.set_parallelism(2)),
    ("set_max_parallelism()", lambda ks: ks.set_max_parallelism(8)),
    ("force_non_parallel()", lambda ks: ks.force_non_parallel()),
    ("set_buffer_timeout()", lambda ks: ks.set_buffer_timeout(10)),
    ("start_new_chain()", lambda ks: ks.start_new_chain()),
    ("disable_chaining()", lambda ks: ks.disable_chaining()),
    ("slot_sharing_group()", lambda ks: ks.slot_sharing_group(SlotSharingGroup.builder("g").build())),
]
PARTITIONINGS: list[tuple[str, Callable[[Any], Any]]] = [
    ("shuffle()", lambda ks: ks.shuffle()),
    ("rebalance()", lambda ks: ks.rebalance()),
    ("rescale()", lambda ks: ks.rescale()),
    ("forward()", lambda ks: ks.forward()),
    ("broadcast()", lambda ks: ks.broadcast()),
    ("global()", lambda ks: ks.global_()),
    ("global()", lambda ks: getattr(ks, "global")()),
    ("partition_custom()", lambda ks: ks.partition_custom(lambda key, n: 0, lambda r: r)),
]


def keyed() -> Any:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    return env.from_collection([("ab", 1), ("bdc", 2), ("cfgs", 3), ("deeefg", 4)]).key_by(lambda r: r[1])


@pytest.mark.parametrize("call,apply", NOT_AN_OPERATOR, ids=[c for c, _ in NOT_AN_OPERATOR])
def test_operator_settings_are_refused_on_a_keyed_stream(call: str, apply: Callable[[Any], Any]) -> None:
    with pytest.raises(InvalidProgramError, match=f"KeyedStream.{call.replace('(', '[(]').replace(')', '[)]')} is "
                                                  "not supported .* call it on the operator that follows key_by"):
        apply(keyed())


@pytest.mark.parametrize("call,apply", PARTITIONINGS, ids=[c for c, _ in PARTITIONINGS])
def test_re_partitioning_a_keyed_stream_is_refused(call: str, apply: Callable[[Any], Any]) -> None:
    with pytest.raises(InvalidProgramError, match="would drop the key partitioning"):
        apply(keyed())


def test_what_pyflink_allows_on_a_keyed_stream_sees_the_records() -> None:
    stream = keyed()
    env = stream.get_execution_environment()
    other = env.from_collection([("z", 9)])
    union = sorted(stream.union(other).execute_and_collect())
    assert union == [("ab", 1), ("bdc", 2), ("cfgs", 3), ("deeefg", 4), ("z", 9)]
    assert sorted(keyed().key_by(lambda r: r[0]).execute_and_collect()) == \
        [("ab", 1), ("bdc", 2), ("cfgs", 3), ("deeefg", 4)]


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_keyed_stream_collects_its_records_not_key_and_record_rows(parallelism: int) -> None:
    """PyFlink collects a KeyedStream as Row(key, record); slipstream gives the records, as PyFlink's own
    print() and add_sink() on the same stream do."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    data = [(i % 3, i) for i in range(30)]
    got = list(env.from_collection(data).key_by(lambda r: r[0]).execute_and_collect())
    assert Counter(got) == Counter(data)


def test_a_keyed_streams_name_still_reads() -> None:
    assert keyed().get_name() == "KeyBy"

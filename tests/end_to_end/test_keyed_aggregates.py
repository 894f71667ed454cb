"""Keyed rolling aggregations (reduce, sum, min, max, min_by, max_by) end to end.

Every job is checked against an oracle written in plain Python that follows Flink's
semantics: ``sum`` keeps the other fields of the key's first record, ``min``/``max``
keep the other fields of the key's first record with the extreme value, ``min_by``/
``max_by`` return the whole record holding the extreme (the first such record on ties).
Order-sensitive checks read the input through one source subtask, so each key's records
arrive in input order; the keyed operator itself runs at the parametrised parallelism. Tests that
ask for the ``env`` fixture run in STREAMING mode, where every record emits its key's rolling
result, and in BATCH mode, where each key emits only its final one (as Flink's BATCH mode does).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream import ReduceFunction, RuntimeExecutionMode, StreamExecutionEnvironment

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 3, 11]

TUPLES = [("a", 5, "x1"), ("b", 2, "y1"), ("a", 3, "x2"), ("c", 9, "z1"), ("a", 3, "x3"),
          ("b", 7, "y2"), ("a", 8, "x4"), ("c", 1, "z2"), ("b", 2, "y3"), ("a", 1, "x5"),
          ("c", 9, "z3"), ("b", 7, "y4"), ("d", 4, "w1")] * 3


def small_batches(env: StreamExecutionEnvironment) -> StreamExecutionEnvironment:
    """Batches of two records through channels of two batches: many interleavings."""
    return env.configure(batch_size=2, channel_capacity=2)


def in_mode(env: StreamExecutionEnvironment, updates_per_key: dict[Any, list]) -> dict[Any, list]:
    """What a rolling aggregate emits per key in ``env``'s mode: every update while streaming,
    only the last in BATCH mode."""
    if env.get_runtime_mode() is RuntimeExecutionMode.BATCH:
        return {key: updates[-1:] for key, updates in updates_per_key.items()}
    return updates_per_key


def source(env: StreamExecutionEnvironment, data: list, single: bool = True) -> Any:
    stream = env.from_collection(data)
    return stream.set_parallelism(1) if single else stream


# -- oracles -------------------------------------------------------------------------------------
def running(records: list, key: Callable[[Any], Any], step: Callable[[Any, Any], Any]) -> dict[Any, list]:
    """Per key, the sequence of rolling results a keyed reduce must emit."""
    acc: dict[Any, Any] = {}
    out: dict[Any, list] = defaultdict(list)
    for record in records:
        k = key(record)
        acc[k] = record if k not in acc else step(acc[k], record)
        out[k].append(acc[k])
    return dict(out)


def per_key(updates: list, key: Callable[[Any], Any]) -> dict[Any, list]:
    out: dict[Any, list] = defaultdict(list)
    for update in updates:
        out[key(update)].append(update)
    return dict(out)


def tuple_step(kind: str, pos: int) -> Callable[[tuple, tuple], tuple]:
    def with_field(record: tuple, value: Any) -> tuple:
        return record[:pos] + (value,) + record[pos + 1:]

    if kind == "sum":
        return lambda a, b: with_field(a, a[pos] + b[pos])
    if kind == "min":
        return lambda a, b: with_field(a, min(a[pos], b[pos]))
    if kind == "max":
        return lambda a, b: with_field(a, max(a[pos], b[pos]))
    if kind == "min_by":
        return lambda a, b: b if b[pos] < a[pos] else a
    if kind == "max_by":
        return lambda a, b: b if b[pos] > a[pos] else a
    raise AssertionError(kind)


def run_aggregate(stream: Any, kind: str, field: Any) -> list:
    return list(getattr(stream, kind)(field).execute_and_collect())


# -- tuples ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sum", "min", "max", "min_by", "max_by"])
@pytest.mark.seeds(*SEEDS)
def test_tuple_aggregates_follow_flink_semantics(kind: str, env: StreamExecutionEnvironment) -> None:
    updates = run_aggregate(source(small_batches(env), TUPLES).key_by(lambda r: r[0]), kind, 1)
    expected = in_mode(env, running(TUPLES, lambda r: r[0], tuple_step(kind, 1)))
    assert per_key(updates, lambda r: r[0]) == expected
    assert len(updates) == sum(map(len, expected.values()))


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.parallelisms(1)
def test_semantics_on_a_hand_checked_example(env: StreamExecutionEnvironment) -> None:
    """Spelled out, so the oracle itself is checked: first record's fields, first record on ties."""
    data = [("k", 3, "first"), ("k", 1, "second"), ("k", 1, "third"), ("k", 4, "fourth")]

    def last(kind: str) -> tuple:
        return run_aggregate(small_batches(env).from_collection(data).key_by(lambda r: r[0]), kind, 1)[-1]

    assert last("sum") == ("k", 9, "first")
    assert last("min") == ("k", 1, "first")
    assert last("max") == ("k", 4, "first")
    assert last("min_by") == ("k", 1, "second")
    assert last("max_by") == ("k", 4, "fourth")


@pytest.mark.seeds(*SEEDS)
@pytest.mark.workers(1, 2)
def test_sum_is_order_independent_with_a_parallel_source(env: StreamExecutionEnvironment) -> None:
    updates = run_aggregate(source(small_batches(env), TUPLES, single=False).key_by(lambda r: r[0]), "sum", 1)
    totals: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for k, v, _ in TUPLES:
        totals[k] += v
        counts[k] += 1
    grouped = per_key(updates, lambda r: r[0])
    assert {k: max(u[1] for u in us) for k, us in grouped.items()} == dict(totals)
    assert {k: len(us) for k, us in grouped.items()} == \
        {k: len(us) for k, us in in_mode(env, {k: [None] * n for k, n in counts.items()}).items()}
    # the sum only grows (values are positive) and every update of a key is distinct
    for us in grouped.values():
        sums = [u[1] for u in us]
        assert sums == sorted(sums) and len(set(sums)) == len(sums)


# -- dicts by field name ----------------------------------------------------------------------------
DICTS = [{"user": u, "amount": a, "note": n} for u, a, n in TUPLES]


@pytest.mark.parametrize("kind", ["sum", "min", "max", "min_by", "max_by"])
def test_dict_aggregates_by_field_name(kind: str, env: StreamExecutionEnvironment) -> None:
    updates = run_aggregate(source(small_batches(env), DICTS).key_by("user"), kind, "amount")
    step = tuple_step(kind, 1)
    as_tuple = lambda d: (d["user"], d["amount"], d["note"])  # noqa: E731
    expected = in_mode(env, running([as_tuple(d) for d in DICTS], lambda r: r[0], step))
    got = {k: [as_tuple(d) for d in us] for k, us in per_key(updates, lambda d: d["user"]).items()}
    assert got == expected
    assert all(set(d) == {"user", "amount", "note"} for d in updates)


@pytest.mark.parametrize("kind", ["sum", "max_by"])
@pytest.mark.engines("spark")
@pytest.mark.zipped(modes=(RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH), parallelisms=(2, 4))
def test_dict_aggregates_by_field_name_on_spark(kind: str, env: StreamExecutionEnvironment) -> None:
    """The keyed built-ins' backlog as Spark jobs: an aggregate and a by-record one, in each mode
    (a Spark run costs seconds, so not at every parallelism)."""
    test_dict_aggregates_by_field_name(kind, env)


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.parallelisms(1)
def test_dict_input_records_are_not_mutated(env: StreamExecutionEnvironment) -> None:
    data = [{"k": 1, "v": 1}, {"k": 1, "v": 2}, {"k": 1, "v": 3}]
    snapshot = [dict(d) for d in data]
    updates = list(small_batches(env).from_collection(data).key_by("k").sum("v").execute_and_collect())
    assert [u["v"] for u in updates] == [1, 3, 6]
    assert data == snapshot


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.parallelisms(1)
def test_unknown_field_name_fails_naming_the_record(env: StreamExecutionEnvironment) -> None:
    from slipstream.errors import UserFunctionError
    stream = small_batches(env).from_collection([{"k": 1, "v": 1}, {"k": 1, "v": 2}]).key_by("k").sum("amount")
    with pytest.raises(UserFunctionError) as info:
        list(stream.execute_and_collect())
    assert "'amount'" in str(info.value)
    assert "{'k': 1, 'v': 2}" in str(info.value)


# -- scalars ---------------------------------------------------------------------------------------
SCALARS = [7, -3, 12, 5, -8, 3, 14, -1, 10, 6, -9, 11, 2, -4, 13, 0, -3] * 2


def sign(x: int) -> bool:
    """A key every aggregate preserves: sums, minima and maxima of negatives stay negative."""
    return x < 0


@pytest.mark.parametrize("kind", ["sum", "min", "max", "min_by", "max_by"])
def test_scalar_aggregates(kind: str, env: StreamExecutionEnvironment) -> None:
    updates = run_aggregate(source(small_batches(env), SCALARS).key_by(sign), kind, 0)
    ops = {"sum": lambda a, b: a + b, "min": min, "max": max, "min_by": min, "max_by": max}
    expected = in_mode(env, running(SCALARS, sign, ops[kind]))
    assert per_key(updates, sign) == expected


# -- reduce -----------------------------------------------------------------------------------------
class ConcatReduce(ReduceFunction):
    def reduce(self, value1: tuple, value2: tuple) -> tuple:
        return (value1[0], value1[1] + "|" + value2[1])


@pytest.mark.seeds(*SEEDS)
@pytest.mark.parametrize("as_class", [True, False])
def test_reduce_is_a_left_fold_in_arrival_order(as_class: bool, env: StreamExecutionEnvironment) -> None:
    data = [(k, f"{k}{i}") for i, k in enumerate("abcabbacdda" * 3)]
    function = ConcatReduce() if as_class else (lambda a, b: (a[0], a[1] + "|" + b[1]))
    updates = list(source(small_batches(env), data).key_by(lambda r: r[0]).reduce(function).execute_and_collect())
    expected = in_mode(env, running(data, lambda r: r[0], ConcatReduce().reduce))
    assert per_key(updates, lambda r: r[0]) == expected


# -- property tests ---------------------------------------------------------------------------------
pairs = st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(-50, 50)), max_size=60)


@settings(max_examples=40, deadline=None)
@given(data=pairs, parallelism=st.sampled_from(PARALLELISMS), seed=st.integers(0, 2**16),
       batch_size=st.integers(1, 5), capacity=st.integers(1, 3),
       kind=st.sampled_from(["sum", "min", "max", "min_by", "max_by"]))
def test_property_final_result_and_update_count(data: list, parallelism: int, seed: int, batch_size: int,
                                                capacity: int, kind: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(scheduler_seed=seed, batch_size=batch_size,
                                               channel_capacity=capacity)
    updates = run_aggregate(env.from_collection(data).set_parallelism(1).key_by(lambda r: r[0]), kind, 1)
    expected = running(data, lambda r: r[0], tuple_step(kind, 1))
    assert len(updates) == len(data)
    final = {k: us[-1] for k, us in per_key(updates, lambda r: r[0]).items()}
    assert final == {k: us[-1] for k, us in expected.items()}


@settings(max_examples=30, deadline=None)
@given(data=pairs, parallelism=st.sampled_from(PARALLELISMS), seed=st.integers(0, 2**16))
def test_property_parallel_source_sum(data: list, parallelism: int, seed: int) -> None:
    """With a parallel source the per-key order varies, but the final sum and the count do not."""
    env = small_batches(StreamExecutionEnvironment.get_execution_environment()
                        .set_parallelism(parallelism).configure(scheduler_seed=seed))
    updates = list(env.from_collection([(k, v, 1) for k, v in data]).key_by(lambda r: r[0])
                   .reduce(lambda a, b: (a[0], a[1] + b[1], a[2] + b[2])).execute_and_collect())
    totals: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for k, v in data:
        totals[k] += v
        counts[k] += 1
    assert len(updates) == len(data)
    # the update carrying the full count is the final one for its key
    final = {u[0]: u[1] for u in updates if u[2] == counts[u[0]]}
    assert final == dict(totals)
    assert sorted(u[2] for u in updates) == sorted(c for k in counts for c in range(1, counts[k] + 1))

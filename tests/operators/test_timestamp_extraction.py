"""Timestamps extracted a batch at a time for Flink's built-in periodic generators (bounded out-of-
orderness, monotonous): the usual ``lambda r, _: r[c]`` runs as ``operator.itemgetter``, other
assigners in one comprehension, and the generator sees the batch's largest timestamp once — with the
same timestamps, watermarks and errors naming the record as one record at a time."""

from __future__ import annotations

import operator
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from slipstream.datastream import ProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.time import Time
from slipstream.datastream.watermark_strategy import TimestampAssigner, WatermarkStrategy
from slipstream.datastream.window import TumblingEventTimeWindows
from slipstream.errors import UserFunctionError
from slipstream.operators.timestamps import timestamp_item_getter

BOUND_MS = 50
WINDOW_MS = 100


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value[1]


def test_only_an_assigner_that_subscripts_its_record_by_a_constant_becomes_an_item_getter() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps()
    getter = timestamp_item_getter(strategy.with_timestamp_assigner(lambda r, _: r[1]).create_timestamp_assigner())
    assert type(getter) is operator.itemgetter
    assert repr(getter) == "operator.itemgetter(1)"
    kept = [lambda r, ts: ts, lambda r, ts: r[1] + 1, lambda r, ts: r[0][1], SecondField()]
    assert all(timestamp_item_getter(strategy.with_timestamp_assigner(a).create_timestamp_assigner()) is None
               for a in kept)
    assert timestamp_item_getter(strategy.create_timestamp_assigner()) is None  # the record's own timestamp


def records() -> list[tuple[str, int, int]]:
    """(key, event time, value): times out of order within the bound, a few beyond it (late)."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(3_000):
        ts = i - int(rng.integers(0, BOUND_MS))  # within the bound
        if i % 500 == 499:
            ts = i - 10 * BOUND_MS  # late: its window ended before it came
        out.append((f"k{i % 5}", max(ts, 0), i % 11))
    return out


def oracle(rows: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Tumbling sums per key, a record dropped when the watermark (largest time so far - bound - 1,
    renewed after each source batch of 1) had passed its window's end."""
    sums: dict[tuple[str, int], int] = defaultdict(int)
    largest = -(2 ** 63)
    for key, ts, value in rows:
        watermark = largest - BOUND_MS - 1
        start = ts - ts % WINDOW_MS
        if start + WINDOW_MS - 1 > watermark:
            sums[(key, start)] += value
        largest = max(largest, ts)
    return sorted((key, start, total) for (key, start), total in sums.items())


def window_sums(assigner: Any, parallelism: int, rows: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(batch_size=1)  # a watermark after every record, as the oracle has it
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Time.milliseconds(BOUND_MS)) \
        .with_timestamp_assigner(assigner)
    sums = (env.from_collection(rows).set_parallelism(1).assign_timestamps_and_watermarks(strategy)
            .map(lambda r: (r[0], r[1] - r[1] % WINDOW_MS, r[2])).key_by(lambda r: (r[0], r[1]))
            .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
            .reduce(lambda a, b: (a[0], a[1], a[2] + b[2])))
    return sorted(sums.execute_and_collect())


@pytest.mark.parametrize("parallelism", [1, 2])
def test_every_kind_of_assigner_gives_the_oracles_windows(parallelism: int) -> None:
    rows = records()
    expected = oracle(rows)
    for assigner in (lambda r, _: r[1], SecondField(), lambda r, ts: r[1] + 0):
        assert window_sums(assigner, parallelism, rows) == expected


def test_large_batches_give_what_batches_of_one_record_give_without_late_records() -> None:
    rows = [(f"k{i % 3}", i - i % 7, 1) for i in range(5_000)]  # out of order by less than the bound
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Time.milliseconds(BOUND_MS)) \
        .with_timestamp_assigner(lambda r, _: r[1])
    counts = (env.from_collection(rows).assign_timestamps_and_watermarks(strategy)
              .map(lambda r: (r[1] - r[1] % WINDOW_MS, 1)).key_by(lambda r: r[0])
              .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS)))
              .reduce(lambda a, b: (a[0], a[1] + b[1])))
    assert sorted(counts.execute_and_collect()) == oracle_counts(rows)


def oracle_counts(rows: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    counts: dict[int, int] = defaultdict(int)
    for _, ts, _ in rows:
        counts[ts - ts % WINDOW_MS] += 1
    return sorted(counts.items())


def test_a_timestamp_carried_from_an_earlier_assigner_reaches_the_next_one() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    first = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r * 10)
    second = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, ts: ts + r)
    out = (env.from_collection(list(range(50))).assign_timestamps_and_watermarks(first)
           .assign_timestamps_and_watermarks(second).process(_WithTimestamp()))
    assert sorted(out.execute_and_collect()) == [(r, 11 * r) for r in range(50)]


class _WithTimestamp(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value, ctx.timestamp()


def _run_with(assigner: Any, rows: list[Any]) -> list[Any]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(assigner)
    return list(env.from_collection(rows).assign_timestamps_and_watermarks(strategy).execute_and_collect())


def test_a_record_the_getter_cannot_subscript_fails_naming_the_operator_and_the_record() -> None:
    with pytest.raises(UserFunctionError, match=r"Timestamps/Watermarks.*record 7: TypeError: 'int' object is not "
                                                r"subscriptable"):
        _run_with(lambda r, _: r[1], [(0, 1), (0, 2), 7, (0, 3)])


def test_a_failing_assigner_is_named_with_its_record() -> None:
    with pytest.raises(UserFunctionError, match=r"record \(0, 'x'\): ValueError"):
        _run_with(lambda r, ts: int(r[1]), [(0, "1"), (0, "2"), (0, "x")])


def test_a_timestamp_that_is_not_an_integer_is_refused_naming_its_record_and_numpy_integers_pass() -> None:
    with pytest.raises(UserFunctionError, match=r"record \(0, 2\.5\): TypeError: the timestamp assigner returned 2\.5"):
        _run_with(lambda r, _: r[1], [(0, 1), (0, 2.5), (0, 3)])
    with pytest.raises(UserFunctionError, match=r"record \(0, True\).*returned True"):
        _run_with(lambda r, _: r[1], [(0, 1), (0, True)])
    assert _run_with(lambda r, _: r[1], [(0, np.int64(4)), (0, np.int32(5))]) == [(0, 4), (0, 5)]

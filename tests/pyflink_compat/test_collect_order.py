"""A collection source keeps its input order where PyFlink's does: it is one subtask, and the collect sink
of ``execute_and_collect`` is one subtask too, so a collection collected directly (or through operators
chained at parallelism 1) comes back in order at any default parallelism.

Inputs and expected values follow Flink's ``test_execute_and_collect``; the tests are written anew.
"""

from __future__ import annotations

import datetime
import decimal

import pytest

from slipstream.common import Types
from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

SEEDS = [0, 3, 11]


pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING), pytest.mark.configure(batch_size=2)]


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(*SEEDS)
def test_a_limit_takes_the_first_elements_in_order(env: StreamExecutionEnvironment) -> None:
    test_data = ["pyflink", "datastream", "execute", "collect"]
    assert env.from_collection(test_data).execute_and_collect(limit=3) == test_data[:3]
    assert env.from_collection(test_data).execute_and_collect(limit=0) == []
    with env.from_collection(test_data, type_info=Types.STRING()).execute_and_collect() as results:
        assert list(results) == test_data


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(*SEEDS)
def test_many_elements_keep_their_order_through_parallelism_one_operators(env: StreamExecutionEnvironment) -> None:
    data = list(range(1000))
    stream = env.from_collection(data).map(lambda x: x * 2).set_parallelism(1).filter(lambda x: x % 3 != 0) \
        .set_parallelism(1)
    assert list(stream.execute_and_collect()) == [x * 2 for x in data if x * 2 % 3 != 0]


@pytest.mark.parallelisms(2, 4)
@pytest.mark.seeds(5)
def test_a_parallel_operator_keeps_each_elements_values_not_their_order(env: StreamExecutionEnvironment) -> None:
    assert sorted(env.from_collection(list(range(100))).map(lambda x: x + 1).execute_and_collect()) == \
        list(range(1, 101))


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_collection_made_parallel_reads_contiguous_slices_each_in_order(env: StreamExecutionEnvironment) -> None:
    source = env.from_collection(list(range(10))).set_parallelism(2)
    tagged = list(source.map(lambda x: x).set_parallelism(2).execute_and_collect())
    assert sorted(tagged) == list(range(10))
    first, second = [x for x in tagged if x < 5], [x for x in tagged if x >= 5]
    assert first == sorted(first) and second == sorted(second)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_untyped_records_pass_unchanged_however_wide_their_integers(env: StreamExecutionEnvironment) -> None:
    test_data = [(1, None, 1, True, 32767, -2147483648, 1.23, 1.98932, bytearray(b"flink"), "pyflink",
                  datetime.date(2014, 9, 13), datetime.time(hour=12, minute=0, second=0, microsecond=123000),
                  datetime.datetime(2018, 3, 11, 3, 0, 0, 123000), [1, 2, 3],
                  [["pyflink", "datastream"], ["execute", "collect"]], decimal.Decimal("1000000000000000000.05"),
                  decimal.Decimal("1000000000000000000.05999999999999999899999999999")),
                 (2, None, 2, True, 23878, 652516352, 9.87, 2.98936, bytearray(b"flink"), "pyflink",
                  datetime.date(2015, 10, 14), datetime.time(hour=11, minute=2, second=2, microsecond=234500),
                  datetime.datetime(2020, 4, 15, 8, 2, 6, 235000), [2, 4, 6],
                  [["pyflink", "datastream"], ["execute", "collect"]], decimal.Decimal("2000000000000000000.74"),
                  decimal.Decimal("2000000000000000000.06111111111111111111111111111"))]
    with env.from_collection(test_data).map(lambda a: a).execute_and_collect() as results:
        assert sorted(results, key=lambda r: r[0]) == test_data

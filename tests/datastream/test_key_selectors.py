"""A key selector that only subscripts its record (``key_by(lambda x: x[0])``) runs as
``operator.itemgetter``: the same keys and the same errors, without a Python call per record."""

from __future__ import annotations

import operator
from collections import Counter

import pytest

from slipstream.datastream import KeySelector, StreamExecutionEnvironment
from slipstream.datastream.fields import as_item_getter
from slipstream.errors import UserFunctionError

OFFSET = 1


def test_only_a_lambda_that_subscripts_its_one_argument_by_a_constant_becomes_an_item_getter() -> None:
    def by_position(record):
        return record[3]

    assert type(as_item_getter(lambda x: x[0])) is operator.itemgetter
    assert repr(as_item_getter(lambda x: x[0])) == "operator.itemgetter(0)"
    assert repr(as_item_getter(lambda r: r["user"])) == "operator.itemgetter('user')"
    assert repr(as_item_getter(by_position)) == "operator.itemgetter(3)"
    kept = [lambda x: x[OFFSET], lambda x, i=0: x[i], lambda x: x[0:2], lambda x: x[0][1],
            lambda x: abs(x[0]), lambda x: x, lambda *x: x[0], len]
    assert all(as_item_getter(selector) is selector for selector in kept)


class FirstField(KeySelector):
    def get_key(self, value):
        return value[0]


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_subscripting_lambda_keys_records_as_a_key_selector_class_does(parallelism: int) -> None:
    records = [(f"k{i % 7}", i) for i in range(500)] + [{"k": f"d{i % 3}", "v": i} for i in range(30)]
    tuples, dicts = records[:500], records[500:]
    results = {}
    for name, tuple_key, dict_key in (("lambda", lambda r: r[0], lambda r: r["k"]),
                                      ("class", FirstField(), lambda r: r.get("k"))):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        counted = (env.from_collection(tuples).key_by(tuple_key).map(lambda r: (r[0], 1))
                   .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])))
        by_name = env.from_collection(dicts).key_by(dict_key).map(lambda r: (r["k"], 1)) \
            .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
        results[name] = sorted(counted.union(by_name).execute_and_collect())
    expected = Counter(key for key, _ in tuples) + Counter(record["k"] for record in dicts)
    finals = {}
    for key, count in results["lambda"]:
        finals[key] = max(count, finals.get(key, 0))
    assert finals == dict(expected)
    assert results["lambda"] == results["class"]


def test_a_record_the_getter_cannot_subscript_fails_naming_the_key_by_and_the_record() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_collection([(1, "a"), (2, "b"), 7, (3, "c")]).key_by(lambda r: r[0]).map(lambda r: r).print()
    with pytest.raises(UserFunctionError, match=r"key of record 7: TypeError: 'int' object is not subscriptable"):
        env.execute("bad key")

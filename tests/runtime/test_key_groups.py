"""Key groups: a hash stable across processes, contiguous key-group ranges, and an even spread."""

import datetime
import enum
import json
import os
import subprocess
import sys
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.runtime.key_groups import (
    assign_to_key_group,
    assign_to_key_groups,
    key_group_range,
    operator_index_for_key_group,
    stable_hash,
    subtask_for_key,
    subtasks_at_once,
)

PRELUDE = """
import datetime, enum
class Kind(enum.Enum):
    CLICK = 1
class Mood(str, enum.Enum):
    HAPPY = "happy"
UTC2 = datetime.timezone(datetime.timedelta(hours=2))
KEYS = [
    "", "a", "word", "\u00fcn\u00efc\u00f6d\u00e9", "\\ud800", b"bytes", 0, 1, -1, 2**63, 2**70, -2**70,
    0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), float("-inf"), None, True, False,
    ("a", 1), ("a", ("b", None)), (), (1.0, "x", b"y"),
    Kind.CLICK, Mood.HAPPY, datetime.date(2024, 2, 29), datetime.datetime(2024, 2, 29, 13, 5, 7, 11),
    datetime.datetime(2024, 2, 29, 13, 5, tzinfo=UTC2), ("day", datetime.date(2000, 1, 1)),
]
"""


def hashes_in_subprocess(hash_seed: str) -> list[int]:
    script = (PRELUDE + "import json\nfrom slipstream.runtime.key_groups import stable_hash\n"
              "print(json.dumps([stable_hash(k) for k in KEYS]))")
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            check=True, timeout=60)
    return json.loads(result.stdout)


def test_stable_hash_is_the_same_in_processes_with_other_hash_seeds() -> None:
    namespace: dict = {}
    exec(PRELUDE, namespace)  # noqa: S102 - our own literal, shared with the subprocesses
    keys = namespace["KEYS"]
    here = [stable_hash(k) for k in keys]
    assert hashes_in_subprocess("1") == here
    assert hashes_in_subprocess("4242") == here
    # not trivially constant (equal keys share a hash, and so do 0, None, "" and numbers whose
    # low 64 bits are zero, like 2**70)
    assert len(set(here)) >= len(keys) - 10


def test_aware_datetimes_of_the_same_instant_hash_equal() -> None:
    utc = datetime.timezone.utc
    plus2 = datetime.timezone(datetime.timedelta(hours=2))
    a = datetime.datetime(2024, 1, 1, 12, tzinfo=utc)
    b = datetime.datetime(2024, 1, 1, 14, tzinfo=plus2)
    assert a == b and stable_hash(a) == stable_hash(b)
    assert stable_hash(datetime.datetime(2024, 1, 1, 12)) != stable_hash(datetime.datetime(2024, 1, 1, 13))


def test_equal_numbers_hash_equal() -> None:
    assert stable_hash(1) == stable_hash(1.0) == stable_hash(True)
    assert stable_hash(0) == stable_hash(0.0) == stable_hash(-0.0) == stable_hash(False)
    assert stable_hash(-3) == stable_hash(-3.0)
    assert stable_hash((1, "a")) == stable_hash((1.0, "a")) == stable_hash((True, "a"))


@given(st.integers(min_value=-2**53, max_value=2**53))
def test_integral_floats_hash_like_their_int(value: int) -> None:
    assert stable_hash(float(value)) == stable_hash(value)


class Color(enum.IntEnum):
    RED = 1


class Name(str, enum.Enum):
    ALICE = "alice"


def test_int_and_str_subclasses_hash_like_the_values_they_equal() -> None:
    # equal keys must meet in the same key group, whatever their exact type
    assert Color.RED == 1 and stable_hash(Color.RED) == stable_hash(1)
    assert Name.ALICE == "alice" and stable_hash(Name.ALICE) == stable_hash("alice")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(), st.integers(min_value=-2**70, max_value=2**70), st.booleans(),
                          st.floats(allow_nan=False), st.text(max_size=3), st.none()), max_size=50),
       st.sampled_from([1, 7, 128, 32768]))
def test_key_groups_of_many_keys_at_once_are_those_of_each_key(keys: list, max_parallelism: int) -> None:
    """A checkpoint groups its keys all at once (numbers by Arrow): each as one key alone would be."""
    assert assign_to_key_groups(keys, max_parallelism) == [assign_to_key_group(k, max_parallelism) for k in keys]
    numbers = [k for k in keys if type(k) in (int, bool, float)]
    assert assign_to_key_groups(numbers, max_parallelism) == \
        [assign_to_key_group(k, max_parallelism) for k in numbers]


@given(st.one_of(st.lists(st.one_of(st.integers(), st.integers(min_value=-2**70, max_value=2**70), st.booleans(),
                                   st.floats(allow_nan=False)), min_size=1, max_size=50),
                 st.lists(st.text(max_size=4), min_size=1, max_size=50),
                 st.lists(st.binary(max_size=4), min_size=1, max_size=50)),
       st.sampled_from([(1, 1), (128, 2), (128, 3), (32768, 7)]))
def test_subtasks_of_a_batch_at_once_are_those_of_each_key(keys: list, parallelisms: tuple[int, int]) -> None:
    """A hash edge routes a batch of numbers, of str or of bytes in one numpy pass: each key to the
    subtask it alone would go to. A batch of mixed kinds, or with a str that is not UTF-8 text, is
    left to the key-by-key path."""
    max_parallelism, parallelism = parallelisms
    assert subtasks_at_once(keys, max_parallelism, parallelism) == \
        [subtask_for_key(k, max_parallelism, parallelism) for k in keys]
    odd = 1 if isinstance(keys[0], (str, bytes)) else "text"
    assert subtasks_at_once([*keys, odd], max_parallelism, parallelism) is None
    assert subtasks_at_once([*keys, "\ud800"], max_parallelism, parallelism) is None
    assert subtasks_at_once([], max_parallelism, parallelism) is None


def test_key_group_assignment_is_within_range() -> None:
    for key in ["a", 1, (1, 2), None, 2.5]:
        for max_parallelism in (1, 7, 128):
            assert 0 <= assign_to_key_group(key, max_parallelism) < max_parallelism


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=512).flatmap(
    lambda mp: st.tuples(st.just(mp), st.integers(min_value=1, max_value=mp))))
def test_key_group_ranges_partition_all_groups_and_agree_with_the_owner(case: tuple[int, int]) -> None:
    max_parallelism, parallelism = case
    covered: list[int] = []
    for subtask in range(parallelism):
        groups = key_group_range(max_parallelism, parallelism, subtask)
        assert len(groups) >= 1  # parallelism <= max parallelism: nobody is left without groups
        assert groups.step == 1
        for group in groups:
            assert operator_index_for_key_group(max_parallelism, parallelism, group) == subtask
        covered.extend(groups)
    assert covered == list(range(max_parallelism))


@settings(max_examples=100, deadline=None)
@given(key=st.one_of(st.integers(), st.text(), st.tuples(st.text(), st.integers())),
       max_parallelism=st.integers(min_value=1, max_value=512), data=st.data())
def test_subtask_for_key_is_the_owner_of_the_keys_group(key: object, max_parallelism: int,
                                                        data: st.DataObject) -> None:
    parallelism = data.draw(st.integers(min_value=1, max_value=max_parallelism))
    subtask = subtask_for_key(key, max_parallelism, parallelism)
    assert assign_to_key_group(key, max_parallelism) in key_group_range(max_parallelism, parallelism, subtask)


def shares(keys: list, parallelism: int, max_parallelism: int = 128) -> list[float]:
    counts = Counter(subtask_for_key(k, max_parallelism, parallelism) for k in keys)
    return [counts[s] / len(keys) for s in range(parallelism)]


def test_consecutive_int_keys_spread_over_subtasks() -> None:
    for share in shares(list(range(10_000)), 4):
        assert 0.15 <= share <= 0.35


def test_string_keys_spread_over_subtasks() -> None:
    for share in shares([f"user-{i}" for i in range(10_000)], 4):
        assert 0.15 <= share <= 0.35


def test_multiples_of_the_max_parallelism_do_not_collapse_onto_one_group() -> None:
    keys = [i * 128 for i in range(10_000)]
    groups = Counter(assign_to_key_group(k, 128) for k in keys)
    assert len(groups) > 100
    assert max(groups.values()) < 0.05 * len(keys)
    for share in shares(keys, 4):
        assert 0.15 <= share <= 0.35


def test_float_and_tuple_keys_spread_over_subtasks() -> None:
    for share in shares([i / 4 for i in range(10_000)], 4):
        assert 0.15 <= share <= 0.35
    for share in shares([(i % 10, i // 10) for i in range(10_000)], 4):
        assert 0.15 <= share <= 0.35

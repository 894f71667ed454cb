"""Word count end to end, against a plain-Python oracle, across parallelisms and seeds."""

from collections import Counter

import pytest

from slipstream.datastream import StreamExecutionEnvironment

LINES = ["a b c a", "b b d", "", "e a c", "f g h i j k a b"] * 7


def final_counts(updates: list[tuple[str, int]]) -> dict[str, int]:
    """The last running count of each word."""
    result: dict[str, int] = {}
    for word, count in updates:
        result[word] = count
    return result


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_word_count_matches_oracle(parallelism: int, seed: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(scheduler_seed=seed, batch_size=3, channel_capacity=2)
    updates = list(
        env.from_collection(LINES)
        .flat_map(lambda line: line.split())
        .map(lambda word: (word, 1))
        .key_by(lambda pair: pair[0])
        .reduce(lambda a, b: (a[0], a[1] + b[1]))
        .execute_and_collect()
    )
    oracle = Counter(word for line in LINES for word in line.split())
    assert final_counts(updates) == dict(oracle)
    assert len(updates) == sum(oracle.values())
    # Per key, the running counts arrive in order 1, 2, 3, ...
    for word in oracle:
        assert [c for w, c in updates if w == word] == list(range(1, oracle[word] + 1))

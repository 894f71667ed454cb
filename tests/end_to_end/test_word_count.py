"""Word count end to end, against a plain-Python oracle, in every mode, parallelism and seed, with
the job written to the test kit's collecting sink."""

from collections import Counter

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.testing import CollectingSink

LINES = ["a b c a", "b b d", "", "e a c", "f g h i j k a b"] * 7


@pytest.mark.seeds(0, 1, 7)
@pytest.mark.workers(1, 2)
def test_word_count_matches_oracle(env: StreamExecutionEnvironment) -> None:
    env.configure(batch_size=3, channel_capacity=2)
    sink = CollectingSink()
    (env.from_collection(LINES)
     .flat_map(lambda line: line.split())
     .map(lambda word: (word, 1))
     .key_by(lambda pair: pair[0])
     .reduce(lambda a, b: (a[0], a[1] + b[1]))
     .sink_to(sink))
    env.execute()
    oracle = Counter(word for line in LINES for word in line.split())
    # Per word, the running counts arrive in order 1, 2, 3, ... (BATCH mode: the final one only).
    streaming = env.get_runtime_mode() is RuntimeExecutionMode.STREAMING
    for word, total in oracle.items():
        counts = [count for w, count in sink.values if w == word]
        assert counts == (list(range(1, total + 1)) if streaming else [total])
    assert {w for w, _ in sink.values} == set(oracle)

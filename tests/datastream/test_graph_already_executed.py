"""A run takes the graph built so far, as Flink's execute does, and the streams keep their upstream:
a sink added later to a stream that already ran is a new job that runs it again from its sources;
executing with nothing added since is refused, saying so."""

from __future__ import annotations

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.errors import InvalidProgramError

pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING), pytest.mark.parallelisms(2)]


def test_execute_twice_with_nothing_added_says_so(env: StreamExecutionEnvironment) -> None:
    got: list[int] = []
    env.from_collection([1, 2, 3]).map(lambda x: x * 10).add_sink(got.append)
    env.execute()
    with pytest.raises(InvalidProgramError, match=r"nothing to execute: an earlier execute\(\) .* none was added"):
        env.execute()
    assert sorted(got) == [10, 20, 30]  # the refused call ran nothing


def test_collecting_the_same_stream_twice_runs_it_twice(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([1, 2, 3]).map(lambda x: x + 1)
    assert sorted(stream.execute_and_collect()) == [2, 3, 4]
    assert sorted(stream.execute_and_collect()) == [2, 3, 4]
    assert sorted(stream.map(lambda x: -x).execute_and_collect()) == [-4, -3, -2]


def test_a_sink_added_after_execute_is_a_new_job_without_the_first_jobs_sinks(
        env: StreamExecutionEnvironment) -> None:
    first: list[int] = []
    second: list[int] = []
    stream = env.from_collection([1, 2]).map(lambda x: x * 2).name("doubled")
    stream.add_sink(first.append)
    env.execute()
    stream.union(env.from_collection([7])).add_sink(second.append)
    env.execute()
    assert sorted(first) == [2, 4]  # the first job's sink did not run again
    assert sorted(second) == [2, 4, 7]


def test_a_keyed_stream_runs_again_from_its_source_with_fresh_state(env: StreamExecutionEnvironment) -> None:
    sums = env.from_collection([("a", 1), ("b", 2), ("a", 3)]).key_by(lambda p: p[0]) \
        .reduce(lambda x, y: (x[0], x[1] + y[1]))
    assert sorted(sums.execute_and_collect()) == [("a", 1), ("a", 4), ("b", 2)]
    assert sorted(sums.filter(lambda p: p[0] == "a").execute_and_collect()) == [("a", 1), ("a", 4)]


def test_explain_after_a_run_shows_the_next_jobs_whole_graph(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([1, 2]).map(lambda x: x).name("shared")
    stream.print()
    env.execute()
    stream.filter(lambda x: x > 1).name("later").print()
    plan = env.explain()
    assert "shared" in plan and "later" in plan


def test_a_new_job_on_the_same_environment_runs(env: StreamExecutionEnvironment) -> None:
    assert sorted(env.from_collection([1, 2]).execute_and_collect()) == [1, 2]
    got: list[int] = []
    env.from_collection([3, 4]).add_sink(got.append)
    env.execute()
    assert sorted(got) == [3, 4]


def test_a_job_without_a_sink_still_says_so(env: StreamExecutionEnvironment) -> None:
    env.from_collection([1]).map(lambda x: x)
    with pytest.raises(InvalidProgramError, match="the job has no sink"):
        env.execute()

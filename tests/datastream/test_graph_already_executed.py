"""A run takes the graph built so far (as Flink's execute does): executing again, or building on a
stream that already ran, is refused with an error that says so and what to do instead."""

from __future__ import annotations

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.errors import InvalidProgramError, SlipstreamError

pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING), pytest.mark.parallelisms(2)]


def test_execute_twice_says_the_graph_was_already_executed(env: StreamExecutionEnvironment) -> None:
    got: list[int] = []
    env.from_collection([1, 2, 3]).map(lambda x: x * 10).add_sink(got.append)
    env.execute()
    with pytest.raises(InvalidProgramError, match=r"nothing to execute: .* already handed to an earlier "
                                                   r"execute\(\) .* build the job again"):
        env.execute()
    assert sorted(got) == [10, 20, 30]  # the refused call ran nothing


def test_collecting_the_same_stream_twice_names_the_stream_and_what_to_do(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([1, 2, 3]).map(lambda x: x + 1)
    assert sorted(stream.execute_and_collect()) == [2, 3, 4]
    with pytest.raises(InvalidProgramError, match=r"cannot add 'Sink: Collect' after 'Map': 'Map' was already "
                                                   r"handed to an earlier execute\(\) .*build the stream again"):
        stream.execute_and_collect()


def test_a_sink_added_after_execute_is_refused_at_once(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection([1, 2]).map(lambda x: x).name("doubled")
    stream.print()
    env.execute()
    with pytest.raises(SlipstreamError, match="after 'doubled': 'doubled' was already handed"):
        stream.print()
    with pytest.raises(InvalidProgramError, match="'doubled' was already handed"):
        stream.union(env.from_collection([3]))


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

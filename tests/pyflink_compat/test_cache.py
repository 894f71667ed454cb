"""``DataStream.cache()`` (Flink's FLIP-205, PyFlink's ``CachedDataStream``): a bounded stream's
records are kept by the first job that computes them, and later jobs of the environment read them
instead of computing them again, until ``invalidate()`` or the environment's ``close()``."""

from __future__ import annotations

import os

import pytest

from slipstream.common import Types, WatermarkStrategy
from slipstream.datastream import (
    CachedDataStream,
    ProcessWindowFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
)
from slipstream.datastream.time import Time
from slipstream.errors import InvalidProgramError, UserFunctionError


class Counted:
    """A map function counting its calls (in this process: the environment runs in one)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: int) -> int:
        self.calls += 1
        return x * 10


def batch_env(parallelism: int = 2, workers: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.configure(workers=workers)
    return env


def test_a_cached_stream_is_computed_once_and_read_by_later_jobs() -> None:
    env = batch_env()
    expensive = Counted()
    cached = env.from_collection(list(range(100))).map(expensive).cache()
    assert isinstance(cached, CachedDataStream)
    assert sorted(cached.execute_and_collect()) == [x * 10 for x in range(100)]
    assert expensive.calls == 100
    got: list[int] = []
    cached.filter(lambda x: x % 200 == 0).add_sink(got.append)
    env.execute("second")
    assert sorted(got) == [0, 200, 400, 600, 800] and expensive.calls == 100
    plan = cached.key_by(lambda x: x % 3).reduce(lambda a, b: a + b)
    assert "Cache: Map" in env.explain() and "Map" not in env.explain().replace("Cache: Map", "")
    assert sorted(plan.execute_and_collect()) == sorted(
        sum(x * 10 for x in range(100) if x % 3 == k) for k in range(3))
    assert expensive.calls == 100
    env.close()


def test_invalidate_and_close_drop_the_records_and_the_next_job_computes_them_again() -> None:
    env = batch_env()
    expensive = Counted()
    cached = env.from_collection([1, 2, 3]).map(expensive).cache()
    assert sorted(cached.execute_and_collect()) == [10, 20, 30]
    cached.invalidate()
    assert sorted(cached.execute_and_collect()) == [10, 20, 30] and expensive.calls == 6
    directory = cached.get_transformation().directory  # type: ignore[attr-defined]
    assert os.listdir(directory)
    env.close()
    assert not os.path.exists(directory)


def test_records_keep_their_timestamps_through_the_cache() -> None:
    env = batch_env(parallelism=1)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r[1])
    events = env.from_collection([("a", 100), ("a", 900), ("b", 1500), ("a", 2100)]) \
        .assign_timestamps_and_watermarks(strategy).cache()
    assert len(list(events.execute_and_collect())) == 4

    class Count(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield key, context.window().start, len(list(elements))

    windows = events.key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.seconds(1))).process(Count())
    assert sorted(windows.execute_and_collect()) == [("a", 0, 2), ("a", 2000, 1), ("b", 1000, 1)]


def test_a_job_that_failed_leaves_no_cache_the_next_job_would_read() -> None:
    env = batch_env()
    expensive = Counted()
    cached = env.from_collection(list(range(10))).map(expensive).cache()

    def fail_on_fifty(x: int) -> int:
        if x == 50:
            raise ValueError("fifty")
        return x

    cached.map(fail_on_fifty).add_sink(lambda _: None)
    with pytest.raises(UserFunctionError, match="fifty"):
        env.execute("fails")
    computed = expensive.calls
    assert sorted(cached.execute_and_collect()) == [x * 10 for x in range(10)]
    assert expensive.calls == computed + 10  # computed again, not read from a partial cache
    env.close()


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_on_worker_processes_the_cache_is_written_and_read_by_them(parallelism: int) -> None:
    env = batch_env(parallelism, workers=2)
    cached = env.from_collection(list(range(50)), type_info=Types.INT()).map(lambda x: x + 1).cache()
    assert sorted(cached.execute_and_collect()) == list(range(1, 51))
    assert sorted(cached.map(lambda x: -x).execute_and_collect()) == list(range(-50, 0))
    env.close()


def test_caching_needs_batch_mode_and_a_stream_that_is_not_keyed() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    cached = env.from_collection([1]).cache()
    with pytest.raises(InvalidProgramError, match="is cached, which needs BATCH mode"):
        cached.execute_and_collect()
    with pytest.raises(InvalidProgramError, match=r"KeyedStream.cache\(\) is not supported"):
        env.from_collection([1]).key_by(lambda x: x).cache()
    with pytest.raises(InvalidProgramError, match=r"CachedDataStream.set_parallelism\(\) is not supported"):
        cached.set_parallelism(2)
    env.close()

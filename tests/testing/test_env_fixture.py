"""The ``env`` fixture of tests/conftest.py: one run per mode × parallelism × seed, narrowed by markers."""

from __future__ import annotations

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

SEEN: set[tuple[RuntimeExecutionMode, int, int]] = set()


def test_each_run_gets_a_fresh_environment_in_its_mode_and_parallelism(env: StreamExecutionEnvironment) -> None:
    assert env.get_runtime_mode() in (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH)
    assert env.get_parallelism() in (1, 2, 4)
    assert env.runtime_options.scheduler_seed == 0
    assert sorted(env.from_collection(range(10)).map(lambda n: n * n).execute_and_collect()) == \
        [n * n for n in range(10)]
    key = (env.get_runtime_mode(), env.get_parallelism(), env.runtime_options.scheduler_seed)
    assert key not in SEEN
    SEEN.add(key)


@pytest.mark.modes(RuntimeExecutionMode.BATCH)
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(3, 4)
def test_markers_narrow_the_axes(env: StreamExecutionEnvironment, request: pytest.FixtureRequest) -> None:
    assert env.get_runtime_mode() is RuntimeExecutionMode.BATCH and env.get_parallelism() == 2
    assert request.node.callspec.id in ("batch-p2-s3", "batch-p2-s4")
    assert env.runtime_options.scheduler_seed == int(request.node.callspec.id[-1])

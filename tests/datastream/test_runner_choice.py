"""Choosing the runner: set_runner and execute(runner=...) take "embedded", "spark" or a runner
object, refuse anything else at once, and a runner object gets the frozen job."""

from __future__ import annotations

from typing import Any

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.job_spec import JobExecutionResult, JobSpec
from slipstream.errors import InvalidProgramError


class Recording:
    """A runner that records the job it is given instead of running it."""

    name = "recording"

    def __init__(self) -> None:
        self.jobs: list[JobSpec] = []

    def execute(self, spec: JobSpec, restore_from: str | None = None) -> JobExecutionResult:
        self.jobs.append(spec)
        return JobExecutionResult("id", spec.job_name, 0, {})

    def explain(self, spec: JobSpec) -> str:
        return f"{len(spec.transformations)} transformations"


@pytest.mark.parametrize("runner", ["flink", 3, object()])
def test_an_unknown_runner_is_refused_at_once(runner: Any) -> None:
    with pytest.raises(InvalidProgramError, match="set_runner expects"):
        StreamExecutionEnvironment.get_execution_environment().set_runner(runner)


def test_a_runner_object_gets_the_frozen_job_and_explains_it() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    recording = Recording()
    env.from_collection([1, 2]).map(lambda x: x + 1).print()
    env.set_runner(recording)
    assert env.explain() == "3 transformations"
    result = env.execute("recorded")
    assert result.job_name == "recorded" and [spec.job_name for spec in recording.jobs] == ["recorded"]


def test_a_job_on_another_runner_is_not_collected_by_the_embedded_runtime() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_runner(Recording())
    with pytest.raises(InvalidProgramError, match="runs on the embedded runtime"):
        env.from_collection([1, 2]).execute_and_collect()

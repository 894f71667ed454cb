"""The runtime's one entry: what the environment calls, always with a frozen :class:`JobSpec`.

``StreamExecutionEnvironment`` imports nothing else of the runtime (an import-linter contract
in ``pyproject.toml`` holds it), and no runtime module imports the environment: the job
description (:mod:`slipstream.datastream.job_spec`) is the seam between them. Every way of
running a job goes through the one driver (:mod:`slipstream.runtime.driver`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slipstream.datastream.data_stream import CloseableIterator
from slipstream.errors import InvalidProgramError
from slipstream.runtime.driver import JobDriver, collect_job
from slipstream.runtime.job_client import JobClient, submit_job
from slipstream.runtime.job_graph import execution_plan_json
from slipstream.runtime.plan_formats import FORMATS, render_plan
from slipstream.runtime.planner import plan_job
from slipstream.runtime.workers.placement import describe_placement

if TYPE_CHECKING:
    from slipstream.datastream.connectors.sinks import CollectSink
    from slipstream.datastream.job_spec import JobExecutionResult, JobSpec


def other_runner(spec: JobSpec) -> Any:
    """The runner object ``spec`` names when it is not the embedded runtime, else None."""
    runner = spec.runtime_options.runner
    if runner == "embedded":
        return None
    if runner == "spark":
        from slipstream.spark_runner import SparkRunner
        options = spec.runtime_options.engine_options
        return SparkRunner(options.get("session"), master=options.get("master"))
    return runner


def _embedded_only(spec: JobSpec, what: str) -> None:
    runner = other_runner(spec)
    if runner is not None:
        raise InvalidProgramError(f"{what} runs on the embedded runtime; the job's runner is {runner!r}: "
                                  "run it with execute()")


def execute(spec: JobSpec, restore_from: str | None = None) -> JobExecutionResult:
    """Plan and run the job to its end (``env.execute``), on the runner the spec names."""
    runner = other_runner(spec)
    if runner is not None:
        result: JobExecutionResult = runner.execute(spec, restore_from)
        return result
    return JobDriver(spec, restore_from).run()


def execute_async(spec: JobSpec, restore_from: str | None = None) -> JobClient:
    """Plan the job, start it on a thread of its own and return its client (``env.execute_async``)."""
    _embedded_only(spec, "execute_async")
    return submit_job(JobDriver(spec, restore_from))


def execute_and_collect(spec: JobSpec, sink: CollectSink) -> CloseableIterator[Any]:
    """Plan the job and return an iterator over ``sink``'s records that runs it as they are pulled."""
    _embedded_only(spec, "execute_and_collect")
    return collect_job(spec, sink)


def explain(spec: JobSpec, format: str = "text") -> str:
    """The job's plan as ``format`` (see :mod:`slipstream.runtime.plan_formats`); on another
    runner, that runner's plan as text."""
    runner = other_runner(spec)
    if runner is not None:
        if format != "text":
            raise InvalidProgramError(f"the {getattr(runner, 'name', 'other')} runner's plan is text only, "
                                      f"got format {format!r}")
        text: str = runner.explain(spec)
        return text
    if format not in FORMATS:
        raise InvalidProgramError(f"explain's format must be one of {', '.join(FORMATS)}, got {format!r}")
    graph = plan_job(spec)
    plan = render_plan(graph, format)
    return f"{plan}\n{describe_placement(graph, spec)}" if format == "text" else plan


def execution_plan(spec: JobSpec) -> str:
    """The job's plan as Flink's JSON execution plan."""
    return execution_plan_json(plan_job(spec))


def stop_spare_workers() -> None:
    """End the spare worker processes runs left (``configure(worker_spares=N)``): ``env.close()``."""
    from slipstream.runtime.workers import spares
    spares.stop_all()


__all__ = ["JobClient", "execute", "execute_and_collect", "execute_async", "execution_plan", "explain",
           "stop_spare_workers"]

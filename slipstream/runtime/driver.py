"""The driver: the one place that opens, drives and closes the runs of a job.

Every way of running a job is a client of :class:`JobDriver`: ``execute`` drains its
turns (:func:`execute_job`), ``execute_and_collect`` hands out the collect sink's
records between them (:func:`collect_job`), and a failed run restarts inside the same
loop, from the latest checkpoint, while the restart strategy allows
(:class:`~slipstream.runtime.checkpoint.recovery.Recovery`). So checkpoints, restarts
and restores apply to every job alike, and one error path closes every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from slipstream.datastream.data_stream import CloseableIterator
from slipstream.runtime.checkpoint.coordinator import CheckpointCoordinator
from slipstream.runtime.checkpoint.fs import FileSystem
from slipstream.runtime.checkpoint.recovery import Recovery
from slipstream.runtime.executor import JobRun
from slipstream.runtime.planner import plan_job

if TYPE_CHECKING:
    from slipstream.datastream.connectors.sinks import CollectSink
    from slipstream.datastream.environment import JobExecutionResult, StreamExecutionEnvironment
    from slipstream.datastream.transformations import Transformation


class JobDriver:
    """Plans a job once, then runs it: one run, or one per attempt when runs fail and restart.

    Planning happens here, so a wrong program fails when it is submitted; runs start only
    when :meth:`turns` is first advanced.
    """

    def __init__(self, env: StreamExecutionEnvironment, transformations: list[Transformation], job_name: str,
                 restore_from: str | None = None, fs: FileSystem | None = None) -> None:
        self.env = env
        self.job_name = job_name
        self.graph = plan_job(env, transformations)
        self.recovery = Recovery(env, self.graph, job_name, restore_from, fs)
        self.result: JobExecutionResult | None = None

    def turns(self) -> Iterator[None]:
        """Run the job, yielding after every scheduler turn, until it ends (then :attr:`result`
        holds its result) or fails past its restarts (raised). Closing the iterator cancels the job."""
        recovery = self.recovery
        try:
            recovery.open()
            while True:
                run = JobRun(self.env, self.graph, self.job_name)
                try:
                    coordinator = recovery.prepare(run)
                    run.open()
                    yield from _drive(run, coordinator)
                    if coordinator is not None:
                        coordinator.final_checkpoint()
                except BaseException as failure:
                    run.close_quietly()
                    if recovery.restart_after(failure):
                        continue
                    raise
                run.close()
                self.result = recovery.finish(run, coordinator)
                return
        finally:
            recovery.release()

    def run(self) -> JobExecutionResult:
        """Run the job to its end and return its result."""
        for _ in self.turns():
            pass
        assert self.result is not None
        return self.result


def _drive(run: JobRun, coordinator: CheckpointCoordinator | None) -> Iterator[None]:
    """Give ``run``'s tasks their turns until all finished; the coordinator (if any) checkpoints
    between turns."""
    scheduler, clock = run.scheduler, run.clock
    on_turn = coordinator.on_turn if coordinator is not None else None
    while True:
        if on_turn is not None:
            on_turn(clock.now_ms())
        if not scheduler.run_turn():
            return
        yield


def execute_job(env: StreamExecutionEnvironment, transformations: list[Transformation], job_name: str,
                restore_from: str | None = None) -> JobExecutionResult:
    """Plan and run a job to its end (``execute``)."""
    return JobDriver(env, transformations, job_name, restore_from).run()


def collect_job(env: StreamExecutionEnvironment, transformations: list[Transformation], job_name: str,
                sink: CollectSink) -> CloseableIterator:
    """Plan a job and return an iterator that runs it as records are pulled (``execute_and_collect``):
    each record the sink made visible is handed out before the job takes another turn."""
    turns = JobDriver(env, transformations, job_name).turns()

    def records() -> Iterator[Any]:
        buffer = sink.buffer
        for _ in turns:
            while buffer:
                yield buffer.popleft()
        while buffer:
            yield buffer.popleft()

    return CloseableIterator(records(), turns.close)


__all__ = ["JobDriver", "collect_job", "execute_job"]

"""A live job: ``env.execute_async()`` runs the job on a thread and hands back a :class:`JobClient`.

As Flink's ``JobClient``: the job's status, its accumulators (metrics) so far, cancel, stop
with a savepoint, and its result once it ends, each as a :class:`CompletableFuture` (PyFlink's
``client.get_job_execution_result().result()`` waits for the end). The job's tasks run only on the job's own thread,
driven turn by turn by the one :class:`~slipstream.runtime.driver.JobDriver`; the client
only sets flags the driver reads between two turns (cancel, a savepoint request) and reads
the counters the tasks keep. A turn is short (a few batches per task), except during the
sorted batch work of the backlog, which a cancel or a savepoint waits for.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

from slipstream.datastream.completable_future import CompletableFuture
from slipstream.datastream.job_id import JobID
from slipstream.datastream.pipeline_options import SAVEPOINT_DIRECTORY
from slipstream.datastream.progress_listener import JobProgress
from slipstream.errors import InvalidProgramError, JobCancelledError, JobExecutionError
from slipstream.runtime.driver import JobDriver, JobStatus, SavepointRequest
from slipstream.runtime.latency import readable_metrics
from slipstream.runtime.monitor import start_monitor

if TYPE_CHECKING:
    from slipstream.datastream.job_spec import JobExecutionResult


class JobClient:
    """A handle on a job running on a thread of its own (see :func:`submit_job`)."""

    def __init__(self, driver: JobDriver) -> None:
        self._driver = driver
        self._cancel_requested = False
        self._done = threading.Event()
        self._result: CompletableFuture[JobExecutionResult] = CompletableFuture()
        self._thread = threading.Thread(target=self._drive, name=f"slipstream job '{driver.job_name}'",
                                        daemon=True)

    def _start(self) -> None:
        self._driver.monitor = start_monitor(self._driver)  # its servers listen before execute_async returns
        self._thread.start()

    def _drive(self) -> None:
        """The job's thread: run the driver's turns until the job ends or a cancel is seen. How
        it ended (and what it failed with) is the driver's to say, as for every other client."""
        turns = self._driver.turns()
        try:
            for _ in turns:
                if self._cancel_requested:
                    turns.close()
                    return
        except BaseException:  # noqa: BLE001 - kept by the driver, set in the result's future
            pass
        finally:
            self._done.set()
            self._complete_result()

    def _complete_result(self) -> None:
        """The job ended: its result, or what it failed with (:class:`JobCancelledError` when it was
        cancelled), into the future :meth:`get_job_execution_result` hands out."""
        driver = self._driver
        if driver.error is not None:
            self._result.set_exception(driver.error)
        elif driver.status is JobStatus.CANCELED or driver.result is None:
            self._result.set_exception(JobCancelledError(f"job '{driver.job_name}' ({driver.job_id}) was cancelled"))
        else:
            self._result.set_result(driver.result)

    def _status(self) -> JobStatus:
        status = self._driver.status
        if self._cancel_requested and not status.is_globally_terminal_state():
            return JobStatus.CANCELLING
        return status

    # -- Flink's JobClient ------------------------------------------------------------------------
    def get_job_id(self) -> JobID:
        return JobID(self._driver.job_id)

    def get_job_status(self) -> CompletableFuture[JobStatus]:
        """The job's status now (``CANCELLING`` from a cancel until the job stopped)."""
        return CompletableFuture.completed(self._status())

    def get_accumulators(self) -> CompletableFuture[dict[str, dict[str, Any]]]:
        """:meth:`get_metrics`, as Flink's accumulators: while the job runs, or after it ended."""
        return CompletableFuture.completed(self.get_metrics())

    def get_metrics(self) -> dict[str, dict[str, Any]]:
        """Per operator, its counters so far (records in and out, and operator-specific ones, with
        ``latency``: its source-to-operator latency statistics in ms, see
        :mod:`~slipstream.runtime.latency`); once the job finished, its final figures. Copies, read
        without stopping the job."""
        if self._driver.result is not None:
            return self._driver.result.get_all_accumulator_results()
        run = self._driver.current_run
        if run is None:
            return {}
        # list() and dict() copy in one step under the GIL: safe while the job's thread counts on
        return readable_metrics(run.metrics)

    def get_progress(self) -> JobProgress | None:
        """The latest progress sample (as Spark's ``query.lastProgress``); None before the job runs."""
        monitor = self._driver.monitor
        return monitor.latest if monitor is not None else None

    def get_urls(self) -> dict[str, str]:
        """Where the job's web view (``"web view"``) and metrics endpoint (``"metrics"``) listen,
        for those it serves."""
        monitor = self._driver.monitor
        return {name: server.url for name, server in monitor.servers.items()} if monitor is not None else {}

    def cancel(self) -> CompletableFuture[None]:
        """Stop the job after its current turn, without a final checkpoint; the future completes
        once it has stopped. Checkpoints already taken stay, so the job can be restored from the
        latest one."""
        if not self._done.is_set():
            self._cancel_requested = True
        stopped: CompletableFuture[None] = CompletableFuture()
        self._result.add_done_callback(lambda _: stopped.set_result(None))
        return stopped

    def stop_with_savepoint(self, advance_to_end_of_event_time: bool = False,
                            savepoint_directory: str | None = None) -> CompletableFuture[str]:
        """Take a checkpoint now (a savepoint), commit it, and stop; the future holds its directory,
        from which ``execute(restore_from=...)`` (or ``slipstream run --restore``) continues the job.

        The savepoint is taken in the checkpoint storage directory and, with ``savepoint_directory``
        (by default the environment's ``set_default_savepoint_directory``), copied into it. While the
        backlog's sorted batch work runs (FLIP-327) no checkpoint can be taken, so the savepoint
        waits for it to end. A job that ends first gives its final checkpoint. Flink's drain
        (``advance_to_end_of_event_time=True``: fire every event-time timer first) is refused.
        """
        if advance_to_end_of_event_time:
            raise InvalidProgramError("stop_with_savepoint(advance_to_end_of_event_time=True) is not supported: "
                                      "slipstream stops without draining; event-time timers not yet due stay "
                                      "in the savepoint and fire after a restore")
        return self._request_savepoint(savepoint_directory, stop=True)

    def trigger_savepoint(self, savepoint_directory: str | None = None) -> CompletableFuture[str]:
        """Take a savepoint now and go on running; the future holds its directory once it is complete
        and copied into ``savepoint_directory`` (by default the environment's
        ``set_default_savepoint_directory``; one of them is needed, as checkpoints are pruned)."""
        if savepoint_directory is None:
            savepoint_directory = self._driver.spec.configuration.get_string(SAVEPOINT_DIRECTORY, None)
        if savepoint_directory is None:
            raise InvalidProgramError("trigger_savepoint needs a directory to keep the savepoint in: give one, "
                                      "or env.set_default_savepoint_directory(...)")
        return self._request_savepoint(savepoint_directory, stop=False)

    def _request_savepoint(self, path: str | None, stop: bool) -> CompletableFuture[str]:
        """Ask the job's thread for a savepoint into ``path`` (and a stop); the future of its directory
        fails with the job, or if the job ended before the savepoint could be taken."""
        if self._done.is_set():
            raise InvalidProgramError(f"the job has already ended ({self._status().name}): no savepoint to take")
        config = self._driver.spec.checkpoint_config
        if not config.is_checkpointing_enabled():
            raise InvalidProgramError("a savepoint needs checkpointing: env.enable_checkpointing(...)")
        if self._driver.savepoint_request is not None:
            raise InvalidProgramError("a savepoint is under way: wait for its future before asking for another")
        if path is None:
            path = self._driver.spec.configuration.get_string(SAVEPOINT_DIRECTORY, None)
        if path is None and config.get_checkpoint_storage_dir() is None:
            raise InvalidProgramError("the job has no checkpoint storage directory (its checkpoints go to a "
                                      "temporary one, deleted when it stops): give stop_with_savepoint a path, "
                                      "or set_checkpoint_storage_dir(...)")
        request = SavepointRequest(target=path, stop=stop)
        self._driver.savepoint_request = request

        def on_end(result: Future[JobExecutionResult]) -> None:
            if request.placed.done():
                return
            error = result.exception() or JobExecutionError(
                f"job '{self._driver.job_name}' ended before the savepoint was taken")
            with contextlib.suppress(InvalidStateError):  # placed meanwhile by the job's thread
                request.placed.set_exception(error)

        self._result.add_done_callback(on_end)
        return request.placed

    def get_job_execution_result(self) -> CompletableFuture[JobExecutionResult]:
        """The job's result once it ends (``.result()`` waits for it), or the error it failed with
        (:class:`JobCancelledError` when it was cancelled)."""
        return self._result

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: until the end) for the job to end; whether it has."""
        return self._done.wait(timeout)

    def __repr__(self) -> str:
        return f"JobClient(job_id={self._driver.job_id!r}, status={self._status().name})"


def submit_job(driver: JobDriver) -> JobClient:
    """Start ``driver``'s job on a thread of its own and return its client."""
    client = JobClient(driver)
    client._start()
    return client


__all__ = ["JobClient", "JobStatus", "submit_job"]

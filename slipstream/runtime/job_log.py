"""A job's events in the ``logging`` module, for when nobody watches a terminal.

When standard error is not a terminal (a service, a pipe, CI), the live display is off and the
same moments go to the ``slipstream.job`` logger instead: the job started, the switch from
backlog to streaming with the backlog's figures, each completed checkpoint, and how the job
ended. Restores and restarts are logged where they happen, on ``slipstream.checkpoint``.
It is a progress listener, fed by the job monitor's samples on the monitor's thread.
"""

from __future__ import annotations

import logging

from slipstream.datastream.progress_listener import (
    JobProgress,
    JobProgressEvent,
    JobProgressListener,
    JobStartedEvent,
    JobTerminatedEvent,
)

log = logging.getLogger("slipstream.job")


class JobEventLog(JobProgressListener):
    """Logs what changed between two progress samples of one job."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        self._switched = False
        self._last_checkpoint = 0

    def on_job_started(self, event: JobStartedEvent) -> None:
        self._log.info("job '%s' started (id %s)", event.job_name, event.job_id)

    def on_job_progress(self, event: JobProgressEvent) -> None:
        self._report_changes(event.progress)

    def on_job_terminated(self, event: JobTerminatedEvent) -> None:
        progress = event.progress
        self._report_changes(progress)
        read = sum(op.records_out for op in progress.operators if op.is_source)
        if event.status == "FAILED":
            self._log.error("job '%s' failed after %.1f s: %s", event.job_name, progress.elapsed_seconds,
                            event.error)
        else:
            self._log.info("job '%s' %s after %.1f s: %s records read, %d checkpoints completed",
                           event.job_name, event.status.lower(), progress.elapsed_seconds, f"{read:,}",
                           progress.checkpoints_completed)

    def _report_changes(self, progress: JobProgress) -> None:
        switched_after = progress.backlog.switched_after_seconds
        if switched_after is not None and not self._switched:
            self._switched = True
            spilled = sum(op.spilled_bytes for op in progress.operators)
            self._log.info("job '%s' switched to streaming after %.1f s: backlog finished, %s records read, "
                           "%.1f MB spilled", progress.job_name, switched_after,
                           f"{progress.backlog.records_read:,}", spilled / 1e6)
        for checkpoint in progress.checkpoints:
            if checkpoint.checkpoint_id > self._last_checkpoint:
                self._last_checkpoint = checkpoint.checkpoint_id
                self._log.info("job '%s': checkpoint %d completed in %.0f ms, %s bytes", progress.job_name,
                               checkpoint.checkpoint_id, checkpoint.duration_ms, f"{checkpoint.size_bytes:,}")


__all__ = ["JobEventLog"]

"""The job monitor: a thread beside the job that samples its progress and hands it out.

Started by the driver for every job and stopped when it ends. Its samples go to the progress
listeners (``env.add_progress_listener``), the job's own report (a live status on a terminal,
:mod:`~slipstream.runtime.terminal_status`, else events in ``logging``,
:mod:`~slipstream.runtime.job_log`), the web view (``ui_port``) and the Prometheus endpoint
(``metrics_port``). Every ``progress_interval`` seconds it
samples the job (:class:`~slipstream.runtime.progress_sampler.ProgressSampler`), keeps the
sample for the servers, and calls the listeners on its own thread, so nothing it does runs on
the job's thread or costs the job anything per record.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from slipstream.datastream.progress_listener import (
    JobProgress,
    JobProgressEvent,
    JobProgressListener,
    JobStartedEvent,
    JobTerminatedEvent,
)
from slipstream.errors import InvalidProgramError
from slipstream.runtime.job_log import JobEventLog
from slipstream.runtime.plan_formats import plan_document
from slipstream.runtime.progress_sampler import ProgressSampler
from slipstream.runtime.terminal_status import TerminalStatus, is_terminal

if TYPE_CHECKING:
    from slipstream.runtime.driver import JobDriver

log = logging.getLogger("slipstream.monitor")


class Server(Protocol):
    """A server the monitor runs for the job's lifetime (the web view, the metrics endpoint)."""

    url: str

    def close(self) -> None: ...


class JobMonitor:
    """Samples one job every ``interval`` seconds for its listeners and servers."""

    def __init__(self, driver: JobDriver, listeners: list[JobProgressListener], interval: float) -> None:
        self.driver = driver
        self.listeners = list(listeners)
        self.interval = interval
        self.plan = plan_document(driver.graph)
        self.sampler = ProgressSampler(driver.job_id, driver.job_name, time.time())
        self.latest: JobProgress = self.sampler.sample(None, "CREATED")
        self.servers: dict[str, Server] = {}
        self._stop = threading.Event()
        self._end: tuple[str, str | None] = ("CANCELED", None)
        self._thread = threading.Thread(target=self._loop, name=f"slipstream monitor '{driver.job_name}'",
                                        daemon=True)

    def serve(self, name: str, start: Callable[[JobMonitor], Server]) -> None:
        """Run a server (started by ``start`` with this monitor) until the job ends; log its address."""
        server = self.servers[name] = start(self)
        log.warning("%s of job '%s': %s", name, self.driver.job_name, server.url)

    def start(self) -> None:
        self._deliver("on_job_started", JobStartedEvent(self.driver.job_id, self.driver.job_name, time.time()))
        self._thread.start()

    def _loop(self) -> None:
        """The monitor's thread: a report every interval, then, once the job ended, the last one."""
        while not self._stop.wait(self.interval):
            self.latest = self.sampler.sample(self.driver.current_run, "RUNNING")
            self._deliver("on_job_progress", JobProgressEvent(self.latest))
        status, error = self._end
        self.latest = self.sampler.sample(self.driver.current_run, status)
        self._deliver("on_job_terminated", JobTerminatedEvent(self.driver.job_id, self.driver.job_name,
                                                              status, error, self.latest))

    def stop(self, status: str, error: str | None) -> None:
        """The job ended with ``status``: wait for the last sample and the terminated event (delivered
        on the monitor's thread), then close the servers."""
        self._end = (status, error)
        self._stop.set()
        self._thread.join()
        for server in self.servers.values():
            server.close()

    def _deliver(self, method: str, event: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the job or the others
                log.exception("progress listener %r failed in %s", listener, method)


def own_display(show_progress: bool) -> JobProgressListener:
    """The job's own report: the live status when standard error is a terminal and progress is shown,
    else its events in the ``logging`` module."""
    if show_progress and is_terminal(sys.stderr):
        return TerminalStatus()
    return JobEventLog()


def start_monitor(driver: JobDriver) -> JobMonitor:
    """A started monitor for ``driver``'s job: its progress goes to the user's listeners, to the live
    display on a terminal (else to the ``logging`` module), and to the web view and metrics
    endpoint when asked for."""
    options = driver.spec.runtime_options
    monitor = JobMonitor(driver, [*options.progress_listeners, own_display(options.show_progress)],
                         options.progress_interval)
    try:
        metrics_port, ui_port = options.metrics_port, options.ui_port
        if metrics_port is not None:
            from slipstream.runtime.prometheus import serve_metrics
            monitor.serve("metrics", lambda m: serve_metrics(m, metrics_port))
        if ui_port is not None:
            from slipstream.runtime.web_ui import serve_web_ui
            monitor.serve("web view", lambda m: serve_web_ui(m, ui_port))
    except OSError as error:
        for server in monitor.servers.values():
            server.close()
        raise InvalidProgramError(f"job '{driver.job_name}': cannot serve its web view (ui_port "
                                  f"{options.ui_port}) or metrics (metrics_port {options.metrics_port}) "
                                  f"on 127.0.0.1: {error}") from error
    monitor.start()
    return monitor


__all__ = ["JobMonitor", "Server", "start_monitor"]

"""Progress of a long backlog phase, shown live on a terminal (and nowhere else).

While sorting operators buffer their backlog, then run it as batch work, then
switch to streaming, a small table shows per operator its phase, the records
buffered, the bytes spilled and the engine — and, for every operator that has dropped
late records, how many (``num_late_records_dropped``, summed over its subtasks), so a drop
is seen as it happens. A thread of its own redraws it once a second, so it keeps moving
while a long batch step runs; it reads the operators' metrics and never touches the job.

It stays out of the streaming that follows: the table goes away as soon as the job
has no backlog left (the switch; a later late drop is still warned and counted), and it
never captures the job's own output — a ``print`` in a user function or a print sink goes
straight to the terminal instead of making the table redraw (with rich's default
redirection that slowed a printing job 44 times).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from slipstream.operators.window import LATE_DROPPED_METRIC

NUMBERS = ("records buffered", "spilled", "late dropped")


def backlog_table(metrics: dict[str, dict[str, Any]], elapsed: float) -> Table:
    """The progress table for the operators that have a backlog phase or dropped late records."""
    table = Table(title=f"backlog, {elapsed:.1f} s", title_justify="left", expand=False)
    for column in ("operator", "phase", *NUMBERS[:2], "engine", NUMBERS[2]):
        table.add_column(column, justify="right" if column in NUMBERS else "left")
    for name, values in metrics.items():
        phase = values.get("backlog_phase")
        dropped = values.get(LATE_DROPPED_METRIC, 0)
        if phase is None and not dropped:
            continue
        table.add_row(name, phase or "", f"{values.get('backlog_records', 0):,}",
                      f"{values.get('spilled_bytes', 0) / 1e6:,.1f} MB", str(values.get("batch_engine", "")),
                      f"{dropped:,}")
    return table


class BacklogProgress:
    """Live backlog progress on ``stream`` when it is a terminal, while ``in_backlog()``; a no-op otherwise."""

    def __init__(self, metrics: dict[str, dict[str, Any]], in_backlog: Callable[[], bool] = lambda: True,
                 stream: IO[str] | None = None, refresh_per_second: float = 1) -> None:
        self._metrics = metrics
        self._in_backlog = in_backlog
        self._stream = stream if stream is not None else sys.stderr
        self._interval = 1 / refresh_per_second
        self._live: Live | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._started = 0.0

    @property
    def enabled(self) -> bool:
        isatty = getattr(self._stream, "isatty", None)
        return bool(isatty and isatty())

    @property
    def showing(self) -> bool:
        """Whether the table is on the terminal now."""
        return self._thread is not None and self._thread.is_alive()

    def _render(self) -> Table:
        return backlog_table(self._metrics, time.perf_counter() - self._started)

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self._started = time.perf_counter()
            live = self._live = Live(get_renderable=self._render, console=Console(file=self._stream),
                                     auto_refresh=False, transient=True, redirect_stdout=False, redirect_stderr=False)
            live.start(refresh=True)
            self._thread = threading.Thread(target=self._redraw, args=(live,), name="backlog progress", daemon=True)
            self._thread.start()

    def _redraw(self, live: Live) -> None:
        """Redraw every interval until the backlog is over or the job ends; then take the table away."""
        while not self._stopping.wait(self._interval) and self._in_backlog():
            live.refresh()
        live.stop()

    def stop(self) -> None:
        if self._thread is not None:
            self._stopping.set()
            self._thread.join()
            self._thread = None

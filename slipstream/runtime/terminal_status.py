"""A job's progress on a terminal: the backlog as a table, then a one-line live status.

While the job has backlog, a small table shows per operator its phase ("buffering", "batch
work" on polars or Spark, "streaming"), the records it read (of the known total, for a source
that knows it) or buffered, the bytes spilled, the engine and late records dropped; its title
says how much of the backlog is read, at what rate, and the ETA. After the switch the table
gives way to one line: records in and out per second, the least watermark's lag behind the
wall clock, and the last checkpoint.

It is a :class:`~slipstream.datastream.progress_listener.JobProgressListener`: it draws what the
job monitor samples, on the monitor's thread, once per ``progress_interval``, and never touches
the job. It never captures the job's own output — a ``print`` in a user function goes straight to
the terminal instead of making the display redraw (with rich's default redirection that slowed a
printing job 44 times).
"""

from __future__ import annotations

import io
import sys
import threading
from typing import IO, Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from slipstream.datastream.progress_listener import (
    JobProgress,
    JobProgressEvent,
    JobProgressListener,
    JobStartedEvent,
    JobTerminatedEvent,
    OperatorProgress,
)

NUMBERS = ("records", "spilled", "late dropped")


def is_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is an interactive terminal (a display there is seen, not logged)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _records(operator: OperatorProgress) -> str:
    """A source's records read (of its total when known), else the records the operator buffered."""
    if not operator.is_source:
        return _count(operator.backlog_records)
    if operator.records_remaining is None:
        return _count(operator.records_out)
    return f"{_count(operator.records_out)} of {_count(operator.records_out + operator.records_remaining)}"


def backlog_title(progress: JobProgress) -> str:
    """The table's title: elapsed time, records read of the known total, rate and ETA."""
    backlog = progress.backlog
    parts = [f"backlog {progress.elapsed_seconds:.1f} s", f"{_count(backlog.records_read)} records read"]
    if backlog.fraction is not None and backlog.records_remaining is not None:
        total = backlog.records_read + backlog.records_remaining
        parts[-1] = f"{_count(backlog.records_read)} of {_count(total)} records read ({backlog.fraction:.1%})"
    rate = sum(op.records_out_per_second for op in progress.operators if op.is_source)
    if rate > 0:
        parts.append(f"{_count(rate)} records/s")
    if backlog.eta_seconds is not None:
        parts.append(f"ETA {backlog.eta_seconds:.0f} s")
    return " · ".join(parts)


def backlog_table(progress: JobProgress) -> Table:
    """The operators that read or sort backlog, or dropped late records, one row each."""
    table = Table(title=backlog_title(progress), title_justify="left", expand=False)
    for column in ("operator", "phase", *NUMBERS[:2], "engine", NUMBERS[2]):
        table.add_column(column, justify="right" if column in NUMBERS else "left")
    for operator in progress.operators:
        if not (operator.is_source or operator.backlog_phase or operator.late_records_dropped):
            continue
        phase = operator.backlog_phase or ("reading" if operator.is_source else "")
        table.add_row(operator.name, phase, _records(operator), f"{operator.spilled_bytes / 1e6:,.1f} MB",
                      operator.batch_engine or "", _count(operator.late_records_dropped))
    return table


def _watermark(watermark: int, now: float) -> str:
    """The watermark as its lag behind the wall clock when it is a recent wall-clock time, else as is."""
    lag = now - watermark / 1000
    return f"watermark lag {lag:.1f} s" if 0 <= lag < 86_400 else f"watermark {watermark:,}"


def status_line(progress: JobProgress, now: float | None = None) -> str:
    """One line for a streaming job: rates, the watermark, the last checkpoint, late drops; ages are
    taken at ``now`` (the sample's time by default)."""
    now = progress.timestamp if now is None else now
    sources = [op for op in progress.operators if op.is_source]
    sinks = [op for op in progress.operators if op.is_sink] or progress.operators[-1:]
    parts = [f"streaming {progress.elapsed_seconds:.0f} s"]
    if progress.backlog.switched_after_seconds is not None:
        parts.append(f"switched after {progress.backlog.switched_after_seconds:.1f} s")
    parts.append(f"in {_count(sum(op.records_out_per_second for op in sources))}/s")
    parts.append(f"out {_count(sum(op.records_in_per_second for op in sinks))}/s")
    watermarks = [op.watermark for op in sinks if op.watermark is not None]
    if watermarks:
        parts.append(_watermark(min(watermarks), now))
    if progress.checkpoints:
        last = progress.checkpoints[-1]
        parts.append(f"checkpoint {last.checkpoint_id} {max(0.0, now - last.completed_at):.0f} s ago "
                     f"({last.duration_ms:.0f} ms, {last.size_bytes / 1e6:,.1f} MB)")
    dropped = sum(op.late_records_dropped for op in progress.operators)
    if dropped:
        parts.append(f"{_count(dropped)} late dropped")
    if any(op.back_pressured for op in progress.operators):
        parts.append("back-pressured")
    return " · ".join(parts)


def render(progress: JobProgress) -> RenderableType:
    """The backlog table while the job has backlog, then the one-line status."""
    if progress.backlog.active and progress.backlog.switched_after_seconds is None:
        return backlog_table(progress)
    return OneLine(status_line(progress))


class OneLine:
    """A line cut to the terminal's width, so redrawing it never scrolls the job's output."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = Text(self.text)
        line.truncate(options.max_width, overflow="ellipsis")
        yield line


class WriteWatch:
    """Stands in for ``sys.stdout`` while a display is drawn on the same terminal: every write passes
    straight through, and the display learns that the job wrote, so it draws its next picture below
    the job's lines instead of over them. The lock keeps a write from landing mid-drawing."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.wrote = False
        self.line_open = False  # the job's last write did not end its line (print writes the newline apart)
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            if text:
                self.wrote = True
                self.line_open = not text.endswith("\n")
            return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class InPlace:
    """Draws pictures on a terminal one over the other, never over lines someone else wrote."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._height = 0  # lines of the last picture, the cursor on the line below it
        self._watch: WriteWatch | None = None
        if sys.stdout is not None and is_terminal(sys.stdout):
            self._watch = sys.stdout = WriteWatch(sys.stdout)

    def draw(self, renderable: RenderableType | None) -> None:
        """Replace the last picture with ``renderable`` (None: just take it away)."""
        picture = _picture(renderable, self._stream) if renderable is not None else ""
        lock = self._watch.lock if self._watch is not None else threading.Lock()
        with lock:
            if self._watch is not None:
                if self._watch.line_open and renderable is not None:
                    return  # never inside a line of the job's: the next sample draws
                self._watch.stream.flush()
                if self._watch.wrote:
                    self._watch.wrote, self._height = False, 0  # the old picture stays above the job's lines
            erase = f"\x1b[{self._height}F\x1b[J" if self._height else ""
            self._stream.write(erase + picture)
            self._stream.flush()
            self._height = picture.count("\n")

    def close(self) -> None:
        """Take the last picture away and give ``sys.stdout`` back."""
        self.draw(None)
        if self._watch is not None and sys.stdout is self._watch:
            sys.stdout = self._watch.stream


def _picture(renderable: RenderableType, terminal: IO[str]) -> str:
    """``renderable`` as the terminal would show it, with its colours, ending in a newline."""
    width = Console(file=terminal).width
    capture = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="auto")
    with capture.capture() as captured:
        capture.print(renderable)
    return captured.get()


class TerminalStatus(JobProgressListener):
    """Draws each progress sample on ``stream`` (standard error by default), a terminal.

    The drawing is transient: it goes away when the job ends, leaving the terminal as the job's
    own output left it.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._screen: InPlace | None = None

    def on_job_started(self, event: JobStartedEvent) -> None:
        self._screen = InPlace(self._stream)
        self._screen.draw(Text(f"job '{event.job_name}' starting"))

    def on_job_progress(self, event: JobProgressEvent) -> None:
        if self._screen is not None:
            self._screen.draw(render(event.progress))

    def on_job_terminated(self, event: JobTerminatedEvent) -> None:
        if self._screen is not None:
            self._screen.close()
            self._screen = None


__all__ = ["InPlace", "OneLine", "TerminalStatus", "WriteWatch", "backlog_table", "is_terminal", "render",
           "status_line"]

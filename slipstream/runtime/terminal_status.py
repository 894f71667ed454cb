"""A job's progress on a terminal: the backlog as a table, then a one-line live status.

While the job has backlog, a small table shows per operator its phase ("buffering", "batch
work" on polars or Spark, "streaming"), the records it read (of the known total, for a source
that knows it) or buffered, the bytes spilled, the engine and late records dropped; its title
says how much of the backlog is read, at what rate, and the ETA. After the switch the table
gives way to one line: records in and out per second, the least watermark's lag behind the
wall clock, the latency p99 at the sinks (from the latency markers), and the last checkpoint.

It is a :class:`~slipstream.datastream.progress_listener.JobProgressListener`: it draws what the
job monitor samples, on the monitor's thread, once per ``progress_interval``, and never touches
the job. It never captures the job's own output: it draws in the terminal's bottom lines, fenced
off from the job's by a scroll region, so a ``print`` in a user function goes straight to the
terminal (rich's redirection of ``sys.stdout`` slowed a printing job 44 times; a proxy that only
noticed writes, a fifth).
"""

from __future__ import annotations

import io
import os
import sys
from typing import IO

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
    """One line for a streaming job: rates, the watermark, the latency p99 (the sinks' largest, or
    any operator's where no sink has one), the last checkpoint, late drops; ages are taken at
    ``now`` (the sample's time by default)."""
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
    p99s = [op.latency.p99 for op in sinks if op.latency is not None] or \
        [op.latency.p99 for op in progress.operators if op.latency is not None]
    if p99s:
        parts.append(f"latency p99 {max(p99s):,.1f} ms")
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


class Pinned:
    """Draws pictures in the bottom lines of a terminal, below a scroll region that holds everything
    else, as apt's progress bar does.

    The job's own output scrolls in the region above and never meets the picture, so nothing stands
    between a ``print`` and the terminal (a proxy on ``sys.stdout`` cost a printing job a fifth of its
    speed). Each drawing is one write of a few KB, which the kernel keeps whole against the job's
    writes; it saves the cursor, draws, and puts the cursor back where the job left it, mid-line or not.
    """

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._height = 0  # lines reserved at the bottom
        self._rows = 0  # the terminal's height when they were reserved

    def draw(self, renderable: RenderableType | None) -> None:
        """Replace the last picture with ``renderable`` (None: take it away and free its lines)."""
        rows, columns = _size(self._stream)
        lines = _picture(renderable, columns).splitlines() if renderable is not None else []
        lines = lines[-max(0, rows - 2):]  # two rows at least stay the job's
        commands = [self._reserve(len(lines), rows)] if (len(lines), rows) != (self._height, self._rows) else []
        commands.append(SAVE)
        commands.extend(f"\x1b[{row};1H{line}\x1b[0m\x1b[K"
                        for row, line in enumerate(lines, start=rows - len(lines) + 1))
        commands.append(RESTORE)
        self._stream.write("".join(commands))
        self._stream.flush()

    def _reserve(self, height: int, rows: int) -> str:
        """The commands that give the picture ``height`` bottom lines: clear the old ones, scroll the
        job's lines up by what is new (the cursor goes with them, its column kept), and fence the
        rest off as the job's scroll region."""
        old = range(max(1, self._rows - self._height + 1), self._rows + 1)
        clear = "".join(f"\x1b[{row};1H\x1b[2K" for row in old)
        grow = height - self._height if rows == self._rows else height
        scroll = INDEX * grow + f"\x1b[{grow}A" if grow > 0 else ""
        region = f"\x1b[1;{rows - height}r" if height else "\x1b[r"  # setting it homes the cursor
        self._height, self._rows = height, rows
        return f"{SAVE}{clear}{RESTORE}{scroll}{SAVE}{region}{RESTORE}"

    def close(self) -> None:
        """Take the picture away and give the whole terminal back to the job."""
        self.draw(None)


SAVE, RESTORE, INDEX = "\x1b7", "\x1b8", "\x1bD"
"""DECSC, DECRC and IND: save and restore the cursor; move down a line (scrolling at the region's
foot) keeping the column, where a newline would return to column 1 of a line the job left open."""


def _size(stream: IO[str]) -> tuple[int, int]:
    """The terminal's rows and columns (24 × 80 when it does not say)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return 24, 80
    return size.lines or 24, size.columns or 80


def _picture(renderable: RenderableType, width: int) -> str:
    """``renderable`` as a terminal ``width`` columns wide would show it, with its colours."""
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
        self._screen: Pinned | None = None

    def on_job_started(self, event: JobStartedEvent) -> None:
        self._screen = Pinned(self._stream)
        self._screen.draw(Text(f"job '{event.job_name}' starting"))

    def on_job_progress(self, event: JobProgressEvent) -> None:
        if self._screen is not None:
            self._screen.draw(render(event.progress))

    def on_job_terminated(self, event: JobTerminatedEvent) -> None:
        if self._screen is not None:
            self._screen.close()
            self._screen = None


__all__ = ["OneLine", "Pinned", "TerminalStatus", "backlog_table", "is_terminal", "render",
           "status_line"]

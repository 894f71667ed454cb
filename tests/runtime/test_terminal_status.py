"""The job's own report on a terminal: the backlog table with read-of-total, rate and ETA while the
job has backlog, then a one-line live status; drawn by the monitor, never capturing the job's prints."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap

import pyte
from rich.console import Console

from slipstream.datastream.progress_listener import (
    BacklogProgress,
    CheckpointProgress,
    JobProgress,
    JobProgressEvent,
    JobStartedEvent,
    JobTerminatedEvent,
    LatencyStatistics,
    OperatorProgress,
)
from slipstream.runtime.terminal_status import TerminalStatus, backlog_table, render, status_line


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def operator(name: str, **figures) -> OperatorProgress:
    base = dict(name=name, uid=name, parallelism=2, records_in=0, records_out=0, records_in_per_second=0.0,
                records_out_per_second=0.0, watermark=None, back_pressured=False, finished_subtasks=0)
    return OperatorProgress(**{**base, **figures})


def progress(active: bool, switched: float | None = None, checkpoints=()) -> JobProgress:
    operators = [
        operator("profiles", records_out=600_000, records_out_per_second=200_000.0, records_remaining=400_000,
                 is_source=True),
        operator("enrich", backlog_phase="buffering", backlog_records=123_456, spilled_bytes=25_000_000,
                 batch_engine="polars"),
        operator("windows", late_records_dropped=1234),
        operator("quiet"),
        operator("alerts", records_in_per_second=3_990.0, watermark=1_000_000, is_sink=True,
                 latency=LatencyStatistics(count=40, min=1.0, max=30.0, mean=5.0, p50=4.0, p95=9.0, p99=12.34,
                                           p999=29.0)),
    ]
    backlog = BacklogProgress(active=active, records_read=600_000, records_remaining=400_000 if active else 0,
                              fraction=0.6 if active else 1.0, eta_seconds=2.0 if active else None,
                              switched_after_seconds=switched)
    return JobProgress(job_id="j", job_name="job", timestamp=1_000.0, elapsed_seconds=3.0, status="RUNNING",
                       operators=operators, backlog=backlog, checkpoints=list(checkpoints))


def text_of(renderable) -> str:
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_backlog_table_shows_reads_of_the_total_rate_and_eta() -> None:
    text = text_of(backlog_table(progress(active=True)))
    assert "600,000 of 1,000,000 records read (60.0%)" in text
    assert "200,000 records/s" in text and "ETA 2 s" in text
    assert "600,000 of 1,000,000" in text.split("\n", 2)[2]  # the source's own row
    assert "buffering" in text and "123,456" in text and "25.0 MB" in text and "polars" in text
    assert "windows" in text and "1,234" in text
    assert "quiet" not in text and "alerts" not in text


def test_after_the_switch_the_display_is_one_line_of_rates_watermark_and_checkpoint() -> None:
    checkpoint = CheckpointProgress(checkpoint_id=7, duration_ms=35.0, size_bytes=1_200_000, completed_at=998.0)
    done = progress(active=False, switched=1.5, checkpoints=[checkpoint])
    line = status_line(done, now=1_001.0)
    assert "\n" not in line
    assert "switched after 1.5 s" in line and "in 200,000/s" in line and "out 3,990/s" in line
    assert "watermark lag 1.0 s" in line  # watermark 1,000,000 ms against a clock at 1,001 s
    assert "latency p99 12.3 ms" in line
    assert "checkpoint 7 3 s ago (35 ms, 1.2 MB)" in line and "1,234 late dropped" in line
    assert text_of(render(done)).count("\n") == 1


def test_the_display_follows_the_events_and_goes_away_at_the_end() -> None:
    terminal = FakeTerminal()
    status = TerminalStatus(terminal)
    status.on_job_started(JobStartedEvent("j", "job", 0.0))
    status.on_job_progress(JobProgressEvent(progress(active=True)))
    assert "600,000 of 1,000,000 records read" in terminal.getvalue()
    status.on_job_progress(JobProgressEvent(progress(active=False, switched=1.5)))
    assert "switched after 1.5 s" in terminal.getvalue()
    status.on_job_terminated(JobTerminatedEvent("j", "job", "FINISHED", None, progress(False, 1.5)))
    assert status._screen is None


def screen_of(output: str, rows: int = 24, columns: int = 80) -> pyte.Screen:
    """What a terminal of ``rows`` × ``columns`` shows after ``output`` (pyte emulates a VT100)."""
    screen = pyte.Screen(columns, rows)
    pyte.Stream(screen).feed(output)
    return screen


def test_the_picture_stays_in_the_bottom_lines_and_the_jobs_lines_scroll_above_it_whole() -> None:
    terminal = FakeTerminal()  # 24 rows × 80 columns, as a terminal that does not say its size
    job = lambda text: terminal.write(text.replace("\n", "\r\n"))  # noqa: E731 - a tty's newline
    status = TerminalStatus(terminal)
    for n in range(30):
        job(f"line {n}\n")
    status.on_job_started(JobStartedEvent("j", "job", 0.0))
    status.on_job_progress(JobProgressEvent(progress(active=True)))  # the table: several lines
    job("half")  # print writes its text and its newline apart: a picture may come between
    status.on_job_progress(JobProgressEvent(progress(active=True)))
    job(" a line\n")
    screen = screen_of(terminal.getvalue())
    rows = [line.rstrip() for line in screen.display]
    table = next(row for row, line in enumerate(rows) if "records read" in line)
    assert rows[table - 3:table] == ["line 29", "half a line", ""]  # the job's, the cursor on its next line
    assert screen.margins is not None and screen.margins.bottom == table - 1  # the job's lines scroll above it
    status.on_job_progress(JobProgressEvent(progress(active=False, switched=1.5)))  # one line now
    for n in range(30, 60):
        job(f"line {n}\n")
    rows = [line.rstrip() for line in screen_of(terminal.getvalue()).display]
    assert rows[-1].startswith("streaming") and rows[-2] == ""  # the status; the job's cursor above it
    assert rows[:-2] == [f"line {n}" for n in range(38, 60)]  # none lost, none drawn over
    status.on_job_terminated(JobTerminatedEvent("j", "job", "FINISHED", None, progress(False, 1.5)))
    screen = screen_of(terminal.getvalue())
    assert screen.margins is None or (screen.margins.top, screen.margins.bottom) == (0, 23)  # the whole terminal
    assert [line.rstrip() for line in screen.display[-3:]] == ["line 59", "", ""]  # the status line freed


JOB = textwrap.dedent("""
    import time
    from slipstream.datastream import StreamExecutionEnvironment

    def show(n):
        print(f"record {n}")
        if n % 500 == 0:
            time.sleep(0.1)  # long enough for the monitor to draw between the job's lines
        return n

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(progress_interval=0.05, batch_size=100)
    env.from_collection(list(range(1, 3001))).name("numbers").map(show).add_sink(lambda n: None)
    env.execute("printing")
""")


def test_a_job_on_a_terminal_prints_every_line_of_its_own_and_draws_its_status() -> None:
    """Every line the job printed is on the terminal whole and in order, even when a picture was
    drawn between a line's text and its newline (unbuffered output writes them apart)."""
    controller, worker = pty.openpty()
    fcntl.ioctl(worker, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONUNBUFFERED": "1"}  # print's text and newline apart
    child = subprocess.Popen([sys.executable, "-c", JOB], stdin=subprocess.DEVNULL, stdout=worker, stderr=worker,
                             env=env)
    os.close(worker)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert child.wait(timeout=120) == 0
    os.close(controller)
    output = b"".join(chunks).decode(errors="replace")
    assert "numbers" in output  # the display was drawn on the terminal while the job printed
    screen = pyte.HistoryScreen(120, 30, history=4000)
    pyte.Stream(screen).feed(output)
    shown = ["".join(line[column].data for column in range(120)).rstrip() for line in screen.history.top]
    shown += [line.rstrip() for line in screen.display]
    assert [line for line in shown if line] == [f"record {n}" for n in range(1, 3001)]  # whole, in order, alone

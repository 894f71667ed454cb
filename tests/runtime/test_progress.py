"""The backlog progress display: drawn only on a terminal, from the operators' metrics, only
while the job has backlog, and never in the way of the job's own output."""

import io
import sys
import time

from rich.console import Console

from slipstream.runtime.progress import BacklogProgress, backlog_table


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


METRICS = {
    "user profiles": {"backlog_phase": "buffering", "backlog_records": 1_234_567, "spilled_bytes": 25_000_000,
                      "batch_engine": "polars"},
    "enrich": {"records_in": 10},
}


def test_table_lists_only_operators_with_a_backlog_phase() -> None:
    console = Console(file=io.StringIO(), width=120, record=True)
    console.print(backlog_table(METRICS, elapsed=2.0))
    text = console.export_text()
    assert "user profiles" in text and "buffering" in text and "1,234,567" in text and "25.0 MB" in text
    assert "polars" in text and "enrich" not in text


def test_nothing_is_drawn_when_output_is_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = BacklogProgress(METRICS, stream=stream)
    progress.start()
    progress.stop()
    assert not progress.enabled and stream.getvalue() == ""


def test_a_terminal_gets_the_live_table() -> None:
    stream = FakeTerminal()
    progress = BacklogProgress(METRICS, stream=stream, refresh_per_second=50)
    progress.start()
    progress.stop()
    assert progress.enabled and "user profiles" in stream.getvalue()


def test_operators_that_dropped_late_records_are_listed_with_the_count() -> None:
    metrics = {"windows": {"records_in": 5, "num_late_records_dropped": 1234},
               "quiet windows": {"records_in": 5, "num_late_records_dropped": 0}}
    console = Console(file=io.StringIO(), width=140, record=True)
    console.print(backlog_table(metrics, elapsed=1.0))
    text = console.export_text()
    assert "late dropped" in text and "windows" in text and "1,234" in text
    assert "quiet windows" not in text


def test_the_table_goes_away_when_the_backlog_is_over() -> None:
    backlog = [True]
    progress = BacklogProgress(METRICS, lambda: backlog[0], stream=FakeTerminal(), refresh_per_second=100)
    progress.start()
    assert progress.showing
    backlog[0] = False
    deadline = time.monotonic() + 5
    while progress.showing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not progress.showing
    progress.stop()


def test_prints_of_the_job_reach_stdout_and_do_not_redraw_the_table(capsys) -> None:
    stream = FakeTerminal()
    progress = BacklogProgress(METRICS, stream=stream, refresh_per_second=0.01)
    progress.start()
    drawn = stream.getvalue()
    for i in range(100):
        print(f"record {i}")
    assert sys.stdout is not stream and stream.getvalue() == drawn  # not captured, not redrawn
    progress.stop()
    assert capsys.readouterr().out == "".join(f"record {i}\n" for i in range(100))

"""Progress listeners (as Spark's StreamingQueryListener): a job reports its per-operator counts,
rates, watermarks, backlog progress and checkpoints to listeners on a monitor thread, never the job's."""

from __future__ import annotations

import threading

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.progress_listener import JobProgressListener
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.errors import InvalidProgramError, UserFunctionError
from slipstream.runtime.progress_sampler import SubtasksSeen, combined
from slipstream.runtime.workers.run import _merged

N = 20_000


class Recorder(JobProgressListener):
    """Keeps every event and the thread it came on."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object, str]] = []

    def on_job_started(self, event):
        self.events.append(("started", event, threading.current_thread().name))

    def on_job_progress(self, event):
        self.events.append(("progress", event, threading.current_thread().name))

    def on_job_terminated(self, event):
        self.events.append(("terminated", event, threading.current_thread().name))

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.events]


class Slow:
    """An identity map that takes a little time every 1000 records, so the job runs for a while."""

    def __call__(self, x: int) -> int:
        if x % 1000 == 0:
            threading.Event().wait(0.005)
        return x


def job(parallelism: int, seed: int, listener: JobProgressListener, workers: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, batch_size=100, show_progress=False, progress_interval=0.01, workers=workers)
    env.add_progress_listener(listener)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda x, _: x)
    (env.from_source(NumberSequenceSource(1, N), strategy, "numbers").uid("numbers")
     .map(Slow()).name("slow").uid("slow")
     .filter(lambda x: x % 3 == 0).name("thirds").uid("thirds")
     .print().name("out").uid("out"))
    return env


@pytest.mark.parametrize("parallelism, seed, workers", [(1, 0, 1), (2, 1, 1), (4, 2, 1), (4, 2, 2)])
def test_the_last_report_counts_what_each_operator_received_and_emitted(parallelism, seed, workers, capsys):
    """In one process and on two workers (which report their finished subtasks)."""
    listener = Recorder()
    job(parallelism, seed, listener, workers).execute("counted")
    kinds = listener.kinds()
    assert kinds[0] == "started" and kinds[-1] == "terminated" and "progress" in kinds
    final = listener.events[-1][1]
    assert final.status == "FINISHED" and final.error is None
    thirds = sum(1 for x in range(1, N + 1) if x % 3 == 0)
    counts = {op.name: (op.records_in, op.records_out, op.parallelism, op.finished_subtasks)
              for op in final.progress.operators}
    assert counts["numbers"] == (0, N, parallelism, parallelism)
    assert counts["slow"] == (N, N, parallelism, parallelism)
    assert counts["thirds"] == (N, thirds, parallelism, parallelism)
    assert counts["out"][0] == thirds
    assert len(capsys.readouterr().out.splitlines()) == thirds


@pytest.mark.parametrize("workers", [1, 2])
def test_events_come_on_the_monitor_thread_with_rates_backlog_and_watermarks(workers, capsys):
    """In one process and on two workers, whose reports say what they see of their subtasks (the
    watermarks, what the backlog readers have left) every 10 ms here."""
    listener = Recorder()
    job(2, 0, listener, workers).configure(heartbeat_interval_ms=10).execute("watched")
    threads = {name for _, _, name in listener.events}
    assert all(name.startswith("slipstream monitor") for _, _, name in listener.events[1:]), threads
    reports = [event.progress for kind, event, _ in listener.events if kind == "progress"]
    assert any(r.operator("slow").records_out_per_second > 0 for r in reports)
    running = [r for r in reports if r.backlog.records_remaining]
    assert running, "no report saw the backlog being read"
    for report in running:  # the counts are read before what is left, while the job runs on
        assert report.backlog.active
        assert report.backlog.records_read + report.backlog.records_remaining <= N
        assert 0 <= report.backlog.fraction < 1
    fractions = [r.backlog.fraction for r in running]
    assert fractions == sorted(fractions)
    assert any(r.backlog.eta_seconds is not None and r.backlog.eta_seconds > 0 for r in running)
    assert listener.events[-1][1].progress.backlog.records_read == N
    watermarks = [r.operator("thirds").watermark for r in reports if r.operator("thirds").watermark is not None]
    assert watermarks == sorted(watermarks) and watermarks
    capsys.readouterr()


def test_what_workers_see_of_an_operator_combines_as_one_process_would_see_it():
    one = SubtasksSeen(finished=1, watermark=40, back_pressured=False, records_remaining=7)
    other = SubtasksSeen(finished=0, watermark=25, back_pressured=True, records_remaining=5)
    assert combined([one, other]) == SubtasksSeen(1, 25, True, 12)
    unknown = SubtasksSeen(finished=0, watermark=None, back_pressured=False, records_remaining=None)
    assert combined([one, unknown]) == SubtasksSeen(1, None, False, None)  # one without: none known yet
    assert combined([]) == SubtasksSeen(0, None, False, None)
    phases = [_merged("backlog_phase", a, b) for a, b in
              [("streaming", "buffering"), ("batch work", "streaming"), ("streaming", "streaming")]]
    assert phases == ["buffering", "batch work", "streaming"]


def test_checkpoints_are_reported_with_their_durations_and_sizes(tmp_path, capsys):
    listener = Recorder()
    env = job(2, 0, listener)
    env.enable_checkpointing(10)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    result = env.execute("checkpointed")
    final = listener.events[-1][1].progress
    completed = result.get_accumulator_result("checkpoints")["completed"]
    assert final.checkpoints_completed == completed >= 2
    ids = [c.checkpoint_id for c in final.checkpoints]
    assert ids == sorted(ids) and len(ids) == completed
    assert all(c.duration_ms >= 0 and c.size_bytes > 0 for c in final.checkpoints)
    capsys.readouterr()


def test_a_failing_job_reports_its_error_and_a_failing_listener_is_only_logged(caplog, capsys):
    class Broken(JobProgressListener):
        def on_job_progress(self, event):
            raise RuntimeError("listener bug")

    listener = Recorder()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False, progress_interval=0.01, batch_size=10)
    env.add_progress_listener(Broken()).add_progress_listener(listener)

    def explode(x: int) -> int:
        if x == 5_000:
            raise ValueError("bad record")
        return Slow()(x)

    env.from_source(NumberSequenceSource(1, N), None, "numbers").map(explode).name("explode").print()
    with pytest.raises(UserFunctionError):
        env.execute("failing")
    terminated = listener.events[-1][1]
    assert terminated.status == "FAILED" and "bad record" in terminated.error
    assert "progress" in listener.kinds()
    capsys.readouterr()


def test_listeners_and_ports_are_checked_when_given():
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidProgramError, match="JobProgressListener"):
        env.add_progress_listener(lambda event: None)
    with pytest.raises(InvalidProgramError, match="ui_port"):
        env.configure(ui_port=70_000)
    with pytest.raises(InvalidProgramError, match="progress_interval"):
        env.configure(progress_interval=0)

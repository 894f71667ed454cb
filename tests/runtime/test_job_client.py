"""A live job handle: ``env.execute_async()`` runs the job on its own thread; the JobClient reports
status and metrics while it runs, cancels it, and stops it with a savepoint it resumes from."""

from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.base import Encoder
from slipstream.errors import InvalidProgramError, JobCancelledError, UserFunctionError
from slipstream.runtime.job_client import JobStatus

KEYS = 7
N = 60_000


class Gate:
    """An identity map that holds the job's thread at record ``at`` until :meth:`open` (or raises there)."""

    def __init__(self, at: int | None = None, fail: bool = False) -> None:
        self.at, self.fail = at, fail
        self.reached, self.opened = threading.Event(), threading.Event()

    def __call__(self, x: int) -> int:
        if x == self.at:
            if self.fail:
                raise ValueError(f"bad record {x}")
            self.reached.set()
            assert self.opened.wait(30), "the test never opened the gate"
        return x

    def open_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.opened.set).start()


def counting_job(tmp_path, gate: Gate, parallelism: int = 2, checkpoints: bool = True) -> StreamExecutionEnvironment:
    """Numbers 1..N -> gate -> running count per key (x % KEYS) -> lines ``key,count`` in a FileSink."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(batch_size=64, backlog_sorting=False, show_progress=False)
    if checkpoints:
        env.enable_checkpointing(20)
        env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    (env.from_source(NumberSequenceSource(1, N), None, "numbers").uid("numbers")
     .map(gate).name("gate").uid("gate").map(lambda x: (x % KEYS, 1)).uid("pairs")
     .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
     .map(lambda p: f"{p[0]},{p[1]}").uid("format").sink_to(sink).uid("sink"))
    return env


def oracle(n: int) -> Counter:
    per_key = Counter(x % KEYS for x in range(1, n + 1))
    return Counter(f"{k},{i}" for k, count in per_key.items() for i in range(1, count + 1))


def committed(directory) -> Counter:
    lines: Counter = Counter()
    for name in os.listdir(directory):
        if not name.startswith((".", "_")):
            lines.update((directory / name).read_text().splitlines())
    return lines


def test_status_runs_through_created_running_finished_and_metrics_grow(tmp_path):
    gate = Gate(at=N // 2)
    client = counting_job(tmp_path, gate, checkpoints=False).execute_async("count")
    assert client.get_job_status().result() in (JobStatus.CREATED, JobStatus.RUNNING)
    assert gate.reached.wait(30)
    assert client.get_job_status().result() is JobStatus.RUNNING
    held = client.get_metrics()
    assert 0 < held["numbers"]["records_out"] < N
    assert client.get_accumulators().result()["numbers"]["records_out"] >= held["numbers"]["records_out"]
    future = client.get_job_execution_result()
    assert not future.done()  # PyFlink's future: the job has not ended
    gate.opened.set()
    result = future.result(timeout=60)
    assert future.done() and client.get_job_execution_result() is future
    assert client.get_job_status().result() is JobStatus.FINISHED
    assert client.get_job_status().result().is_globally_terminal_state()
    assert result.get_job_id() == client.get_job_id()
    job_id = client.get_job_id()
    assert len(job_id.to_hex_string()) == 32 and str(job_id) == result.get_job_id().to_hex_string()
    final = client.get_metrics()
    assert final["numbers"]["records_out"] == N > held["numbers"]["records_out"]
    assert final["gate"]["records_in"] == N
    assert committed(tmp_path / "out") == oracle(N)


def test_cancel_stops_the_job_and_its_result_raises(tmp_path):
    gate = Gate(at=N // 3)
    client = counting_job(tmp_path, gate).execute_async("count")
    assert gate.reached.wait(30)
    gate.open_after(0.2)
    assert client.cancel().result(timeout=60) is None
    assert client.get_job_status().result() is JobStatus.CANCELED
    assert client.get_metrics()["numbers"]["records_out"] < N
    with pytest.raises(JobCancelledError, match="cancelled"):
        client.get_job_execution_result().result()


def test_a_failing_job_reports_failed_and_its_result_raises_the_error(tmp_path):
    client = counting_job(tmp_path, Gate(at=1000, fail=True), checkpoints=False).execute_async("count")
    with pytest.raises(UserFunctionError, match="bad record 1000"):
        client.get_job_execution_result().result()
    assert isinstance(client.get_job_execution_result().exception(), UserFunctionError)
    assert client.get_job_status().result() is JobStatus.FAILED


@pytest.mark.parametrize("parallelism,into,default", [(1, None, False), (2, None, False), (4, None, False),
                                                      (2, "savepoints", False), (2, "savepoints", True)])
def test_stop_with_savepoint_then_restore_gives_exactly_once_output(tmp_path, parallelism, into, default):
    """Into the checkpoint directory, a path given, or (``default``) the environment's default
    savepoint directory when none is given."""
    gate = Gate(at=N // 3)
    env = counting_job(tmp_path, gate, parallelism)
    if default:
        env.set_default_savepoint_directory(str(tmp_path / into))
    client = env.execute_async("count")
    assert gate.reached.wait(30)
    gate.open_after(0.2)
    savepoint = client.stop_with_savepoint(
        False, None if into is None or default else str(tmp_path / into)).result(timeout=60)
    assert client.get_job_status().result() is JobStatus.FINISHED
    stopped_at = client.get_metrics()["numbers"]["records_out"]
    assert N // 3 <= stopped_at < N
    assert os.path.dirname(savepoint) == str(tmp_path / (into or "chk"))
    assert os.path.basename(savepoint).startswith("chk-")
    partial = committed(tmp_path / "out")
    assert partial and not partial - oracle(N)  # a consistent prefix: no line the full job would not write
    result = counting_job(tmp_path, Gate(), parallelism).execute("count", restore_from=savepoint)
    assert result.get_accumulator_result("checkpoints")["restored_from"] == savepoint
    assert committed(tmp_path / "out") == oracle(N)


def test_stop_with_savepoint_needs_checkpointing(tmp_path):
    gate = Gate(at=100)
    client = counting_job(tmp_path, gate, checkpoints=False).execute_async("count")
    with pytest.raises(InvalidProgramError, match="enable_checkpointing"):
        client.stop_with_savepoint()
    with pytest.raises(InvalidProgramError, match="advance_to_end_of_event_time=True"):
        client.stop_with_savepoint(advance_to_end_of_event_time=True)
    gate.opened.set()
    client.get_job_execution_result().result()
    with pytest.raises(InvalidProgramError, match="already ended"):
        client.stop_with_savepoint()


def listed_counts(tmp_path, gate: Gate, lines: list[str]) -> StreamExecutionEnvironment:
    """The counting job into ``lines`` (a sink without commits, so any checkpoint may be restored)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(batch_size=64, backlog_sorting=False, show_progress=False)
    env.enable_checkpointing(20)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    (env.from_source(NumberSequenceSource(1, N), None, "numbers").uid("numbers")
     .map(gate).name("gate").uid("gate").map(lambda x: (x % KEYS, 1)).uid("pairs")
     .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
     .map(lambda p: f"{p[0]},{p[1]}").uid("format").add_sink(lines.append).uid("sink"))
    return env


def test_trigger_savepoint_keeps_the_job_running_and_the_savepoint_resumes_it(tmp_path):
    gate, lines = Gate(at=N // 3), []
    client = listed_counts(tmp_path, gate, lines).execute_async("count")
    assert gate.reached.wait(30)
    taken = client.trigger_savepoint(str(tmp_path / "savepoints"))
    with pytest.raises(InvalidProgramError, match="under way"):
        client.stop_with_savepoint()
    assert not taken.done()  # the job's thread is held at the gate: no checkpoint yet
    gate.opened.set()
    savepoint = taken.result(timeout=60)
    assert os.path.dirname(savepoint) == str(tmp_path / "savepoints")
    client.get_job_execution_result().result(timeout=120)
    assert Counter(lines) == oracle(N)  # the run went on to its end
    # the savepoint holds each key's count at N // 3 or later: resumed, each key counts on from there
    resumed_lines: list[str] = []
    listed_counts(tmp_path, Gate(), resumed_lines).execute("count", restore_from=savepoint)
    resumed: dict[int, list[int]] = {}
    for line in resumed_lines:
        key, count = map(int, line.split(","))
        resumed.setdefault(key, []).append(count)
    final = Counter(x % KEYS for x in range(1, N + 1))
    for key, counts in resumed.items():
        assert sorted(counts) == list(range(final[key] - len(counts) + 1, final[key] + 1))
    assert N - N // 3 >= len(resumed_lines) > 0


def test_trigger_savepoint_needs_a_directory(tmp_path):
    gate = Gate(at=100)
    client = counting_job(tmp_path, gate).execute_async("count")
    with pytest.raises(InvalidProgramError, match="needs a directory"):
        client.trigger_savepoint()
    gate.opened.set()
    client.get_job_execution_result().result(timeout=60)

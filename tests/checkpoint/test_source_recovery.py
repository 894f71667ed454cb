"""Sources under failure: bad records routed to a side output are exactly-once across SIGKILLs;
a bad line that fails every attempt ends the job after the configured restarts; HybridSource
positions carry the phase, so a job killed before and after the switch resumes where it was; a
watched directory ends its backlog without a new file, also after a restore; a job whose input
moved resumes where it was, and one whose read input is gone is refused naming the file."""

from __future__ import annotations

import logging
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from crash_job import build, file_input, oracle
from test_kill_recovery import JOB, committed_output, kill_rounds
from test_recovery_in_process import FailOnce
from test_refused_restore import directory_contents

from slipstream.datastream import RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.connectors.errors import SourceFormatError, SourceRestoreError
from slipstream.datastream.connectors.file_system import FileSource
from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema
from slipstream.datastream.typeinfo import Types
from slipstream.errors import UserFunctionError
from slipstream.runtime.checkpoint.storage import CheckpointStorage


def test_bad_records_side_output_is_exactly_once_across_kills(tmp_path):
    """The good rows and the bad ones (in a second FileSink on the source's side output) equal
    the oracle after SIGKILLs at random moments (``kill_rounds`` asserts it of every round)."""
    kill_rounds("bad", 60_000, tmp_path, random.Random("kill-bad"), 2)  # rounds until two kills landed


def test_a_bad_line_that_fails_every_attempt_ends_the_job_after_the_configured_restarts(tmp_path, caplog):
    path = tmp_path / "in.csv"
    path.write_text("id\n" + "".join(f"{i}\n" for i in range(1, 500)) + "oops\n" + "7\n")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.get_checkpoint_config().set_checkpoint_interval_records(100)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    schema = CsvSchema.builder().add_number_column("id", number_type=Types.INT()).set_use_header().build()
    env.from_source(FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema), str(path)).build(),
                    None, "csv").add_sink(lambda row: None)
    with caplog.at_level(logging.WARNING, logger="slipstream.checkpoint"), \
            pytest.raises(SourceFormatError) as caught:
        env.execute("poison line")
    message = str(caught.value)
    assert str(path) in message and "line 501" in message and "'id'" in message and "Integer" in message
    assert [r.getMessage() for r in caplog.records if "restart" in r.getMessage()][-1].endswith("restart 2 of 2")


def source_positions(checkpoints: str, uid: str = "numbers") -> list | None:
    """The source readers' positions in the newest complete checkpoint (None if none can be read
    now: the child may be writing or pruning one)."""
    storage = CheckpointStorage(checkpoints)
    try:
        ids = storage.complete_ids()
        if not ids:
            return None
        verified = storage.read_verified(storage.path_of(ids[-1]), None)
    except Exception:  # noqa: BLE001 - a checkpoint pruned or being written under us
        return None
    entry = verified.manifest.operators[uid]
    return [pickle.loads(verified.files[s.operator])["position"] for s in entry.subtasks if s.operator]


def test_hybrid_source_resumes_in_its_phase_when_killed_before_and_after_the_switch(tmp_path):
    """Kill once while every reader is in the history (files), once after a reader switched to
    the live source, once when all have; each restart resumes there (no history read again,
    nothing of the live source lost), and the output equals the oracle."""
    n = 150_000
    out, checkpoints = str(tmp_path / "out"), str(tmp_path / "chk")
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest")
    wanted = [("all in the history", lambda phases: all(p == 0 for p in phases)),
              ("a reader past the switch", lambda phases: any(p == 1 for p in phases)),
              ("all past the switch", lambda phases: all(p == 1 for p in phases))]
    killed_at = []
    for what, condition in wanted + [(None, None)]:
        process = subprocess.Popen([sys.executable, JOB, "hybrid", out, checkpoints, str(n)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while condition is not None and process.poll() is None:
            positions = source_positions(checkpoints)
            if positions and condition([p["source"] for p in positions]):
                process.send_signal(signal.SIGKILL)
                killed_at.append((what, positions))
                break
            time.sleep(0.01)
        _, stderr = process.communicate(timeout=120)
        if condition is None or process.returncode == 0:
            assert process.returncode == 0, stderr.decode()
            break
    assert [what for what, _ in killed_at][:2] == ["all in the history", "a reader past the switch"], killed_at
    got, expected = committed_output(out), oracle("hybrid", n)
    assert not expected - got and not got - expected, (
        f"lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}")


def rolling_counts(words: list[str]) -> Counter:
    """A rolling word count's output: ``word,k`` for the k-th occurrence of each word."""
    return Counter(f"{word},{k}" for word, n in Counter(words).items() for k in range(1, n + 1))


def wait_for_output(out: str, expected: Counter, process: subprocess.Popen, seconds: float = 30) -> None:
    """Until the committed output equals ``expected`` and stays so a moment (nothing duplicated after)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the job ended: {process.communicate()[1].decode()}")
        if committed_output(out) == expected:
            time.sleep(0.3)
            assert committed_output(out) == expected
            return
        time.sleep(0.05)
    raise AssertionError(f"after {seconds} s the committed output is {committed_output(out)}, expected {expected}")


def test_a_watched_directory_ends_its_backlog_without_a_new_file_at_start_and_after_a_restore(tmp_path):
    """Regression: the files present at start (or at a restore) stayed backlog until another file
    appeared, so the keyed reduce, which sorts its backlog, emitted nothing. Each run here sees
    its directory unchanged while it runs: the output must come anyway, and be exactly-once."""
    watched, out, checkpoints = tmp_path / "watched", str(tmp_path / "out"), str(tmp_path / "chk")
    watched.mkdir()
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest")
    files = {"a.txt": ["apple", "pear", "apple"], "b.txt": ["pear", "plum", "apple"]}
    words: list[str] = []
    for name, lines in files.items():  # the second run restores the first's latest checkpoint
        (watched / f".{name}").write_text("".join(f"{line}\n" for line in lines))
        (watched / f".{name}").rename(watched / name)
        words += lines
        process = subprocess.Popen([sys.executable, JOB, "watched", out, checkpoints, "0"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for_output(out, rolling_counts(words), process)
        finally:
            process.kill()
            process.communicate()
    assert CheckpointStorage(checkpoints).complete_ids(), "the second run restored from a checkpoint"


# -- input that moved or went away between runs ---------------------------------------------------
MOVED_INPUT_JOBS = [  # kind, the file source's uid, numbers
    ("hybrid", "numbers", 8_000),  # a HybridSource's file phase: a directory of text files
    ("union", "lines", 8_000),  # a FileSource given one file
    ("bad", "rows", 8_000),  # a FileSource given a directory of CSV files
]


class FailAfter:
    """Raises at the ``records``-th record it sees (in each subtask's copy)."""

    def __init__(self, records: int) -> None:
        self.left = records

    def __call__(self, value) -> None:
        self.left -= 1
        if self.left == 0:
            raise RuntimeError(f"injected failure at {value}")


def fail_midway(run, kind: str, n: int) -> None:
    """Run ``kind`` with its input, output and checkpoints under ``run`` until it fails, about
    halfway through its file input, after some checkpoints."""
    with pytest.raises(UserFunctionError, match="injected failure"):
        build(kind, str(run / "out"), str(run / "chk"), n, interval_ms=None, records=500,
              fail=FailAfter(n // 4)).execute("fails midway")


def has_read_files(position) -> bool:
    """Whether a FileSource position (or a HybridSource's, in its file phase) names files it read."""
    if "source" in position:
        return position["source"] == 0 and has_read_files(position["position"])
    return bool(position["finished"] or position["current"] or position.get("partial"))


def input_files(kind: str, run) -> list[str]:
    """The files job ``kind`` reads (its input is one file, or a directory of them)."""
    path = file_input(kind, str(run / "out"))
    return [path] if os.path.isfile(path) else sorted(os.path.join(path, name) for name in os.listdir(path))


@pytest.mark.one_process("it fails at a count of records its function's copy saw, timed so that one process has "
                         "checkpointed by then (on workers the first checkpoint may not be complete yet)")
@pytest.mark.parametrize("kind,uid,n", MOVED_INPUT_JOBS)
def test_a_job_whose_input_moved_resumes_where_it_was(tmp_path, kind, uid, n):
    """Regression: positions held absolute paths, so the job built with the moved input read it
    all again and reported success with duplicated output."""
    fail_midway(tmp_path / "run", kind, n)
    assert any(has_read_files(p) for p in source_positions(str(tmp_path / "run" / "chk"), uid)), \
        "the checkpoint restored names files already read"
    moved = tmp_path / "moved"
    os.rename(tmp_path / "run", moved)  # input, output and checkpoints, all in a new place
    env = build(kind, str(moved / "out"), str(moved / "chk"), n, interval_ms=None, records=500)
    result = env.execute("moved", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None
    got, expected = committed_output(str(moved / "out")), oracle(kind, n)
    assert not expected - got and not got - expected, (
        f"lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}")


@pytest.mark.one_process("it fails at a count of records its function's copy saw, timed so that one process has "
                         "checkpointed by then (on workers the first checkpoint may not be complete yet)")
@pytest.mark.parametrize("kind,uid,n", MOVED_INPUT_JOBS)
def test_a_restore_whose_read_input_is_gone_fails_naming_a_file_and_changes_nothing(tmp_path, kind, uid, n):
    """The input files are taken away (the directory stays): the restore fails naming a file the
    checkpoint says was read, before any sink commits or deletes a part file."""
    run = tmp_path / "run"
    fail_midway(run, kind, n)
    assert any(has_read_files(p) for p in source_positions(str(run / "chk"), uid))
    env = build(kind, str(run / "out"), str(run / "chk"), n, interval_ms=None, records=500)
    files = input_files(kind, run)
    away = tmp_path / "away"
    away.mkdir()
    for path in files:  # after build, which writes missing input files
        os.rename(path, away / os.path.basename(path))
    before = directory_contents(str(run / "out"))
    with pytest.raises(SourceRestoreError) as caught:
        env.execute("input gone", restore_from="latest")
    assert any(f"'{path}' does not exist" in str(caught.value) for path in files), str(caught.value)
    assert f"(uid '{uid}')" in str(caught.value), "the error names the source operator"
    assert directory_contents(str(run / "out")) == before, "the refused restore changed the sink's files"
    for path in files:  # the files are back: the same checkpoint restores
        os.rename(away / os.path.basename(path), path)
    build(kind, str(run / "out"), str(run / "chk"), n, interval_ms=None, records=500).execute(
        "input back", restore_from="latest")
    assert committed_output(str(run / "out")) == oracle(kind, n)

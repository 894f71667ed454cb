"""The ``slipstream`` command line, run as a user runs it: a subprocess on job files in tmp_path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import Counter

import pytest

from slipstream.cli.control import SAVEPOINT_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = 7
N = 20_000

COUNTING_JOB = '''
import sys
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.base import Encoder

def main(out, n):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(batch_size=64, backlog_sorting=False)
    env.enable_checkpointing(50)
    print("parallelism", env.get_parallelism(), "checkpoints in", env.get_checkpoint_config().get_checkpoint_storage_dir())
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()
    (env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
     .map(lambda x: (x % 7, 1)).name("pairs").uid("pairs")
     .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).name("count").uid("count")
     .map(lambda p: f"{p[0]},{p[1]}").name("format").uid("format").sink_to(sink).uid("sink"))
    result = env.execute("counting")
    print("sink parallelism", [m for m in result.get_all_accumulator_results()])

if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
'''

WORD_COUNT_JOB = '''
import sys
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.formats.base import Encoder, StreamFormat
from slipstream.datastream.time import Duration

watched, out = sys.argv[1], sys.argv[2]
env = StreamExecutionEnvironment.get_execution_environment()
env.configure(batch_size=64, backlog_sorting=False)
env.enable_checkpointing(100)
source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), watched)
          .monitor_continuously(Duration.of_millis(20)).build())
(env.from_source(source, None, "words").uid("words")
 .map(lambda w: (w, 1)).uid("pairs")
 .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
 .map(lambda p: f"{p[0]},{p[1]}").uid("format")
 .sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()).uid("sink"))
env.execute("word count")
'''

SLOW_JOB = '''
import os, sys, time
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.base import Encoder

started = sys.argv[2]

def slow(x):
    if not os.path.exists(started):
        open(started, "w").close()
    time.sleep(0.05)
    return str(x)

env = StreamExecutionEnvironment.get_execution_environment()
env.configure(batch_size=8)
env.enable_checkpointing(2_000)
(env.from_source(NumberSequenceSource(1, 10 ** 9), None, "numbers").uid("numbers").map(slow).uid("slow")
 .sink_to(FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder()).build()).uid("sink"))
env.execute("slow")
'''


def write_job(tmp_path, text: str, name: str = "job.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def slipstream(*args: str, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slipstream", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), cwd=cwd, timeout=timeout)


def start(*args: str, cwd=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "slipstream", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT), cwd=cwd)


def count_lines(counts: Counter) -> Counter:
    """The running-count oracle: ``key,i`` for i in 1..(records of that key)."""
    return Counter(f"{k},{i}" for k, c in counts.items() for i in range(1, c + 1))


def committed(directory) -> Counter:
    lines: Counter = Counter()
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if not name.startswith((".", "_")):
                with open(os.path.join(directory, name)) as handle:
                    lines.update(handle.read().splitlines())
    return lines


def wait_for(condition, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def finished_run(tmp_path):
    """The counting job run to its end with --parallelism 3 and --checkpoint-dir."""
    job, out, chk = write_job(tmp_path, COUNTING_JOB), tmp_path / "out", tmp_path / "chk"
    done = slipstream("run", job, "--parallelism", "3", "--checkpoint-dir", str(chk), "--", str(out), str(N))
    assert done.returncode == 0, done.stderr
    return done, out, chk


# -- run ------------------------------------------------------------------------------------------
def test_run_applies_its_options_to_the_job_and_runs_it_to_its_end(finished_run):
    done, out, chk = finished_run
    assert f"parallelism 3 checkpoints in {chk}" in done.stdout
    assert committed(out) == count_lines(Counter(x % KEYS for x in range(1, N + 1)))
    assert any(name.startswith("chk-") for name in os.listdir(chk))


WHERE_JOB = '''
import os, sys
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.base import Encoder

print("driver", os.getpid())
env = StreamExecutionEnvironment.get_execution_environment()
env.configure(batch_size=64)
env.enable_checkpointing(50)
(env.from_source(NumberSequenceSource(1, int(sys.argv[2])), None, "numbers").uid("numbers")
 .rebalance().map(lambda x: f"{x},{os.getpid()}").uid("where")
 .sink_to(FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder()).build()).uid("sink"))
env.execute("where")
'''


def test_run_with_workers_runs_the_subtasks_on_that_many_worker_processes(tmp_path):
    job, out, n = write_job(tmp_path, WHERE_JOB), tmp_path / "out", 5_000
    done = slipstream("run", job, "--parallelism", "2", "--workers", "2", "--", str(out), str(n), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # no checkpoint directory: the run kept its control file in ./slipstream-savepoints, made for it and
    # removed once the job ended by itself
    assert not (tmp_path / SAVEPOINT_DIR).exists()
    driver = int(re.search(r"driver (\d+)", done.stdout).group(1))
    lines = committed(out)
    assert Counter(int(line.split(",")[0]) for line in lines.elements()) == Counter(range(1, n + 1))
    pids = {int(line.split(",")[1]) for line in lines}
    assert len(pids) == 2 and driver not in pids


def test_run_refuses_a_bad_option_with_a_usage_error(tmp_path):
    done = slipstream("run", write_job(tmp_path, COUNTING_JOB), "--parallelism", "0")
    assert done.returncode == 2 and "--parallelism" in done.stderr and "Traceback" not in done.stderr
    done = slipstream("run", write_job(tmp_path, COUNTING_JOB), "--workers", "0")
    assert done.returncode == 2 and "--workers" in done.stderr and "Traceback" not in done.stderr


# -- explain --------------------------------------------------------------------------------------
def test_explain_shows_the_plan_in_every_format_without_running_the_job(tmp_path):
    job, out = write_job(tmp_path, COUNTING_JOB), tmp_path / "out"
    text = slipstream("explain", job, "--", str(out), str(N))
    assert text.returncode == 0, text.stderr
    assert "== Job graph" in text.stdout and "count" in text.stdout
    assert "sink parallelism" not in text.stdout and not out.exists()  # execute() did not run the job

    document = json.loads(slipstream("explain", job, "--format", "json", "-p", "2", "--", str(out), "9").stdout)
    names = {op["name"] for op in document["operators"]}
    assert {"numbers", "pairs", "count", "format"} <= names
    assert all(op["parallelism"] == 2 for op in document["operators"])
    ids = {op["id"] for op in document["operators"]}
    assert all(edge["source"] in ids and edge["target"] in ids for edge in document["edges"])
    by_name = {op["name"]: op["id"] for op in document["operators"]}
    keyed = [e for e in document["edges"] if e["target"] == by_name["count"]]
    assert [(e["partitioning"], e["kind"]) for e in keyed] == [("HASH", "PIPELINED")]
    assert document["loop_scopes"] == []

    for fmt, opening in (("mermaid", "flowchart LR"), ("dot", "digraph plan {")):
        picture = slipstream("explain", job, "--format", fmt, "--", str(out), "9")
        assert picture.returncode == 0 and picture.stdout.startswith(opening)
        for op in document["operators"]:
            assert f"op{op['id']}" in picture.stdout and op["name"] in picture.stdout
        assert picture.stdout.count("op") >= len(document["operators"]) + 2 * len(document["edges"])


def test_explain_draws_loop_scopes_and_feedback_edges(tmp_path):
    job = write_job(tmp_path, '''
        from slipstream.datastream import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        def body(s):
            stepped = s.map(lambda x: x - 1).name("step")
            return stepped.filter(lambda x: x > 0).name("again"), stepped.filter(lambda x: x <= 0).name("done")
        env.from_collection([3, 5]).iterate(body).print()
        env.execute()
    ''')
    document = json.loads(slipstream("explain", job, "--format", "json").stdout)
    [scope] = document["loop_scopes"]
    inside = {op["name"] for op in document["operators"] if op["id"] in scope["operators"]}
    assert {"step", "again", "done"} <= inside
    assert any(edge["kind"] == "FEEDBACK" for edge in document["edges"])
    mermaid = slipstream("explain", job, "--format", "mermaid").stdout
    assert f'["loop scope {scope["scope"]}"]' in mermaid and "-.->" in mermaid
    dot = slipstream("explain", job, "--format", "dot").stdout
    assert "subgraph cluster_" in dot and "style=dashed" in dot


# -- checkpoints ----------------------------------------------------------------------------------
def test_checkpoints_list_inspect_and_verify_a_real_checkpoint_directory(finished_run):
    _, _, chk = finished_run
    listed = slipstream("checkpoints", "list", str(chk))
    assert listed.returncode == 0
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert rows and all(row[0].startswith("chk-") and row[-1] == "yes" for row in rows)

    inspected = slipstream("checkpoints", "inspect", str(chk))
    assert inspected.returncode == 0, inspected.stderr
    assert "job: counting" in inspected.stdout and "job fingerprint:" in inspected.stdout
    for uid in ("numbers", "count", "sink"):
        assert re.search(rf"^    {uid}  ", inspected.stdout, re.M)
    assert re.search(r"sha256 [0-9a-f]{64}", inspected.stdout)

    verified = slipstream("checkpoints", "verify", str(chk))
    assert verified.returncode == 0 and ": OK" in verified.stdout and "restorable: chk-" in verified.stdout


def test_verify_names_a_corrupted_file_and_fails_when_nothing_can_be_restored(finished_run):
    _, _, chk = finished_run
    [checkpoint] = [chk / name for name in os.listdir(chk) if name.startswith("chk-")]
    victim = sorted(name for name in os.listdir(checkpoint) if not name.startswith("_"))[0]
    data = bytearray((checkpoint / victim).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (checkpoint / victim).write_bytes(bytes(data))
    verified = slipstream("checkpoints", "verify", str(chk))
    assert verified.returncode == 1
    assert f"{checkpoint.name}: DAMAGED" in verified.stdout and victim in verified.stdout
    assert "checksum does not match" in verified.stdout and "can be restored" in verified.stderr


# -- Ctrl-C ---------------------------------------------------------------------------------------
def test_ctrl_c_takes_a_savepoint_that_restore_continues_exactly_once(tmp_path):
    job, watched, out, chk = write_job(tmp_path, WORD_COUNT_JOB), tmp_path / "watched", tmp_path / "out", tmp_path / "chk"
    watched.mkdir()
    words = Counter()

    def add_file(index: int) -> None:
        lines = [f"w{(index * 31 + i) % 11}" for i in range(3000)]
        words.update(lines)
        (watched / f".f{index}.tmp").write_text("\n".join(lines) + "\n")
        os.replace(watched / f".f{index}.tmp", watched / f"f{index}.txt")

    add_file(0)
    first = start("run", job, "--checkpoint-dir", str(chk), "--", str(watched), str(out))
    wait_for(lambda: committed(out), what="the first run's committed output")
    add_file(1)
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 130, stderr
    savepoint = re.search(r"Savepoint written: (\S+)", stderr).group(1)
    assert f"Resume with: slipstream run {job} --checkpoint-dir {chk} --restore {savepoint}" in stderr
    assert "Traceback" not in stderr
    partial = committed(out)
    assert not partial - count_lines(words)  # nothing the full job would not write, nothing twice

    add_file(2)
    second = start("run", job, "--checkpoint-dir", str(chk), "--restore", savepoint, "--", str(watched), str(out))
    wait_for(lambda: committed(out) == count_lines(words), what="the resumed run to catch up")
    second.send_signal(signal.SIGINT)
    _, stderr = second.communicate(timeout=60)
    assert second.returncode == 130 and "Savepoint written" in stderr, stderr
    assert committed(out) == count_lines(words)


def test_restore_latest_without_a_checkpoint_dir_resumes_from_the_savepoint_ctrl_c_took(tmp_path):
    """The newcomer's path: run, Ctrl-C, ``--restore latest``, with no checkpoint directory anywhere."""
    started, out = tmp_path / "started", tmp_path / "out"
    job = write_job(tmp_path, SLOW_JOB)
    for run in range(2):
        process = start("run", job, *(["--restore", "latest"] if run else []), "--", str(out), str(started),
                        cwd=tmp_path)
        before = committed(out)
        wait_for(lambda: len(committed(out)) > len(before) + 5, what=f"run {run + 1}'s committed output")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130 and "Traceback" not in stderr, stderr
        savepoint = re.search(r"Savepoint written: (\S+)", stderr).group(1)
        assert os.path.dirname(savepoint) == str(tmp_path / "slipstream-savepoints")
    lines = committed(out)
    assert max(lines.values()) == 1  # nothing written twice across the stop
    assert set(lines) == {str(x) for x in range(1, len(lines) + 1)}  # and nothing skipped


def test_a_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path):
    started = tmp_path / "started"
    job = write_job(tmp_path, SLOW_JOB)
    process = start("run", job, "--checkpoint-dir", str(tmp_path / "chk"), "--", str(tmp_path / "out"), str(started))
    wait_for(started.exists, what="the job's first record")
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - sent < 5
    assert process.returncode == 130
    assert "stopping at once, without a savepoint" in stderr and "Traceback" not in stderr


# -- slipstream stop, --ui, --metrics-port ---------------------------------------------------------
def test_stop_takes_a_savepoint_prints_how_to_resume_and_the_resumed_run_continues_exactly_once(tmp_path):
    started, out, chk = tmp_path / "started", tmp_path / "out", tmp_path / "chk"
    job = write_job(tmp_path, SLOW_JOB)
    first = start("run", job, "--checkpoint-dir", str(chk), "--ui", "0", "--metrics-port", "0", "--",
                  str(out), str(started))
    wait_for(started.exists, what="the job's first record")
    control = json.loads((chk / "slipstream-run.json").read_text())
    assert control["pid"] == first.pid and control["state"] == "RUNNING"
    for name, needle in (("web view", b"<svg"), ("metrics", b"slipstream_operator_numRecordsIn")):
        url = control["urls"][name]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as response:
            assert needle in response.read()
    time.sleep(0.5)

    stopped = slipstream("stop", str(chk), timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    savepoint = re.search(r"Savepoint written: (\S+)", stopped.stdout).group(1)
    resume = re.search(r"Resume with: (.+)", stopped.stdout).group(1)
    assert resume == f"slipstream run {job} --checkpoint-dir {chk} --restore {savepoint}"
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 130 and "Traceback" not in stderr, stderr
    assert not (chk / "slipstream-run.json").exists()
    assert slipstream("checkpoints", "verify", savepoint).returncode == 0
    before = committed(out)

    second = start(*resume.split()[1:], "--", str(out), str(started))
    wait_for(lambda: len(committed(out)) > len(before), what="the resumed run's output")
    assert slipstream("stop", str(chk), timeout=120).returncode == 0
    second.communicate(timeout=60)
    lines = committed(out)
    assert max(lines.values()) == 1  # nothing written twice across the stop
    assert set(lines) == {str(x) for x in range(1, len(lines) + 1)}  # and nothing skipped


def test_stop_stops_a_run_started_with_ctrl_c_ignored_as_a_shell_starts_a_background_job(tmp_path):
    started, out, chk = tmp_path / "started", tmp_path / "out", tmp_path / "chk"
    job = write_job(tmp_path, SLOW_JOB)
    background = subprocess.Popen(
        [sys.executable, "-m", "slipstream", "run", job, "--checkpoint-dir", str(chk), "--", str(out), str(started)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # what `job &` in a script does
    wait_for(started.exists, what="the job's first record")
    stopped = slipstream("stop", str(chk), timeout=120)
    assert stopped.returncode == 0 and "Savepoint written" in stopped.stdout, stopped.stderr
    _, stderr = background.communicate(timeout=60)
    assert background.returncode == 130 and "Traceback" not in stderr, stderr


def test_stop_says_when_no_job_runs_there(tmp_path):
    stopped = slipstream("stop", str(tmp_path))
    assert stopped.returncode == 1
    assert "no job started by `slipstream run` is known" in stopped.stderr


def test_stop_after_a_run_that_already_stopped_says_so_rather_than_repeating_its_savepoint(tmp_path):
    """A run stopped by Ctrl-C leaves its record (state STOPPED, its savepoint); `stop` then has no
    job to stop, and says so, with that savepoint, instead of printing it as just written."""
    record = {"script": "job.py", "pid": os.getpid(), "state": "STOPPED", "savepoint": "/chk/chk-000007",
              "resume": "slipstream run job.py --restore /chk/chk-000007"}
    (tmp_path / "slipstream-run.json").write_text(json.dumps(record))
    stopped = slipstream("stop", str(tmp_path))
    assert stopped.returncode == 1 and "Savepoint written" not in stopped.stdout
    assert "no job is running there: the run of job.py had already stopped; its savepoint: /chk/chk-000007" \
        in stopped.stderr
    assert not (tmp_path / "slipstream-run.json").exists()

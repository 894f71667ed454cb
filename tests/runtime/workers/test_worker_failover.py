"""A worker that dies, hangs or runs out of memory fails the job over to its last checkpoint, exactly
once; a checkpoint restores at another parallelism and worker count; no worker outlives its job."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from multiprocessing import Pipe

import pytest
from worker_jobs import CountAndSum, Fault, check_keyed, environment, keyed_job, worker_processes, workers_left

from slipstream.datastream import RestartStrategies
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.connectors.errors import SourcePathNotFoundError
from slipstream.datastream.connectors.file_system import FileSource
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.base import StreamFormat
from slipstream.errors import WorkerLostError
from slipstream.runtime.planner import plan_job
from slipstream.runtime.workers.placement import place_subtasks
from slipstream.runtime.workers.run import WorkerProcess, WorkerRun
from slipstream.runtime.workers.wire import FromWorker, ToWorker, dumps
from slipstream.testing import CollectingSink

N = 6000


def checkpointed(env, directory, restarts=2, heartbeat_timeout_ms=None):
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval(20)
    config.set_checkpoint_interval_records(400)
    config.set_checkpoint_storage_dir(str(directory))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0) if restarts
                             else RestartStrategies.no_restart())
    if heartbeat_timeout_ms is not None:
        env.configure(Configuration().set_string("heartbeat.timeout", f"{heartbeat_timeout_ms} ms"))
    return env


@pytest.mark.parametrize("how", ["kill", "memory", "hang"])
def test_a_lost_worker_fails_the_job_over_to_its_last_checkpoint_exactly_once(tmp_path, how):
    sink = CollectingSink()
    env = checkpointed(environment(2, 2), tmp_path / "chk", heartbeat_timeout_ms=3000)
    keyed_job(env, N, sink, hook=Fault(N // 2, str(tmp_path / "fault"), how, str(tmp_path / "chk")))
    result = env.execute(f"worker-{how}")
    stats = result.get_accumulator_result("checkpoints")
    assert (tmp_path / "fault").exists()
    assert stats["restarts"] == 1
    assert stats["restored_from"] is not None  # the run after the fault started from a checkpoint
    check_keyed(sink.values, N)
    assert len(sink.values) == N  # nothing twice
    assert worker_processes() == []


def test_a_job_that_cannot_restart_fails_naming_the_lost_worker_and_leaves_no_process(tmp_path):
    env = checkpointed(environment(2, 2), tmp_path / "chk", restarts=0)
    keyed_job(env, N, CollectingSink(), hook=Fault(N // 2, str(tmp_path / "fault"), "kill"))
    with pytest.raises(WorkerLostError, match="killed by signal SIGKILL"):
        env.execute("worker-killed")
    assert worker_processes() == []


@pytest.mark.parametrize("parallelism,workers", [(4, 2), (3, 3), (2, 1)])
def test_a_checkpoint_of_two_workers_restores_at_another_parallelism_and_worker_count(tmp_path, parallelism,
                                                                                     workers):
    sink = CollectingSink()
    env = checkpointed(environment(2, 2), tmp_path / "chk", restarts=0)
    keyed_job(env, N, sink, hook=Fault(N // 2, str(tmp_path / "fault"), "kill", str(tmp_path / "chk")))
    with pytest.raises(WorkerLostError):
        env.execute("first")
    env = checkpointed(environment(parallelism, workers), tmp_path / "chk", restarts=0)
    keyed_job(env, N, sink, hook=Fault(N // 2, str(tmp_path / "fault"), "kill"))
    result = env.execute("restored", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None
    check_keyed(sink.values, N)
    assert len(sink.values) == N
    assert worker_processes() == []


def test_closing_the_collect_iterator_cancels_the_job_and_ends_its_workers():
    env = environment(2, 2)
    stream = env.from_collection(list(range(100_000))).key_by(lambda x: x % 3).map(lambda x: x)
    results = stream.execute_and_collect()
    assert next(results) is not None
    results.close()
    assert worker_processes() == []




def test_a_failure_that_is_an_os_error_is_reported_as_itself_not_as_a_lost_worker(tmp_path):
    """A worker that fails with an ``OSError`` (here the source's missing path, a FileNotFoundError)
    reports it; the driver took it for the worker dying ("worker 1 exited with code 1")."""
    env = environment(2, 2)
    missing = str(tmp_path / "missing")
    env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), missing).build(),
                    None, "lines").add_sink(CollectingSink())
    with pytest.raises(SourcePathNotFoundError, match="missing' does not exist"):
        env.execute("path-missing")
    assert worker_processes() == []



def test_a_failure_a_worker_reported_before_a_send_to_it_broke_is_the_run_s_failure():
    """The worker failed, said so and exited while the driver wrote a checkpoint; the driver's next
    send to it (the checkpoint's completion) broke before it read the report, and the run failed
    with 'worker 0 exited with code 1' instead of the worker's own error."""

    env = environment(2, 2)
    env.from_collection([1, 2, 3]).key_by(lambda x: x).map(lambda x: x).print()
    spec = env._job_spec(list(env._transformations), "reported")
    graph = plan_job(spec)
    run = WorkerRun(spec, graph, place_subtasks(graph, spec))
    ours, theirs = Pipe()
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    failure = RuntimeError("injected failure at 7")
    theirs.send_bytes(dumps((FromWorker.FAILED, dumps(failure), ("builtins", "RuntimeError"), str(failure))))
    theirs.close()
    process.wait()
    run.workers.append(WorkerProcess(0, process, ours))
    with pytest.raises(RuntimeError, match="injected failure at 7"):
        run.send(run.workers[0], (ToWorker.COMPLETE, 3))


def slowly_none(x: int) -> bool:
    time.sleep(0.002)
    return False


def test_a_task_that_has_not_had_its_first_turn_does_not_stop_checkpoints_on_workers(tmp_path):
    """The keyed tasks after a filter that passes nothing never get a turn of their own; a trigger
    deploys them (their state is the restored one), so a worker must not report them as blocking
    (they did: every checkpoint of this job was skipped as "not deployed yet")."""
    env = environment(2, 2)
    env.get_checkpoint_config().set_checkpoint_interval(30).set_checkpoint_storage_dir(str(tmp_path / "chk"))
    numbers = env.from_source(NumberSequenceSource(1, 600), None, "slow")
    numbers.filter(slowly_none).key_by(lambda x: x % 7).process(CountAndSum()).sink_to(CollectingSink())
    stats = env.execute("never-fed").get_accumulator_result("checkpoints")
    assert stats["completed"] >= 2, stats
    assert not any("not deployed" in reason for reason in stats["skip_reasons"]), stats



def paced_negation(n: int) -> int:
    if n % 100 == 0:
        time.sleep(0.002)
    return -n


def test_a_checkpoint_interval_in_records_is_kept_on_workers(tmp_path):
    """Workers tell the driver how far their sources read as soon as they read their share of the
    interval, not only with each heartbeat: 100,000 records at one checkpoint per 1,000 took 2
    checkpoints on two workers, against 99 in one process. The heartbeat is 10 s here, so that a run
    slowed by a loaded machine cannot reach the count through heartbeats alone; the map sleeps 2 ms
    every 100 records (about 1 s a worker), so a fast run does not end before its checkpoints come."""
    env = environment(2, 2).configure(heartbeat_interval_ms=10_000)
    env.get_checkpoint_config().set_checkpoint_interval_records(1_000).set_checkpoint_storage_dir(str(tmp_path))
    sink = CollectingSink()
    env.from_collection(list(range(100_000))).map(paced_negation).sink_to(sink)
    stats = env.execute("records-interval").get_accumulator_result("checkpoints")
    assert stats["completed"] >= 8, stats  # one at a time, each a few ms: 96 on a quiet machine
    assert sorted(sink.values) == sorted(-n for n in range(100_000))


DRIVER = """
import sys, time
from slipstream.testing import CollectingSink
sys.path.insert(0, {tests!r})
from worker_jobs import environment, keyed_job

def slow(x):
    time.sleep(0.001)
    return x

env = environment(2, 2)
keyed_job(env, 10**7, CollectingSink(), hook=slow)
print("running", flush=True)
env.execute("long")
"""


def test_workers_end_when_their_driver_is_killed(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=os.path.dirname(__file__)))
    marker = f"SLIPSTREAM_TEST_MARKER_{os.getpid()}_{time.monotonic_ns()}"
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              env={**os.environ, marker: "1"})
    try:
        assert driver.stdout.readline() == b"running\n"
        deadline = time.monotonic() + 60
        while len(worker_processes(marker=marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(worker_processes(marker=marker)) == 2
    finally:
        driver.kill()
        driver.wait()
    assert workers_left(marker) == []


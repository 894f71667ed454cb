"""Spare worker processes: by default no worker process outlives its run; with worker_spares a run
leaves ready processes that the next run takes, each running in the driver's directory and
environment as they are when its run starts, and no spare outlives its driver."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from worker_jobs import environment, worker_processes, workers_left

from slipstream.runtime.workers.spares import spare_pids, stop_all
from slipstream.testing import CollectingSink


@pytest.fixture(autouse=True)
def no_spares_left():
    """The other tests count this process's worker processes: the spares started here end here."""
    yield
    stop_all()


def where_it_ran(env, values: int = 64) -> CollectingSink:
    """A job whose records say which process ran them, in which directory, with which SLIPSTREAM_SPARE_TEST."""
    sink = CollectingSink()
    (env.from_collection(list(range(values)))
     .map(lambda _: (os.getpid(), os.getcwd(), os.environ.get("SLIPSTREAM_SPARE_TEST")))
     .sink_to(sink))
    return sink


def test_by_default_no_worker_process_outlives_its_run():
    env = environment(2, 2)
    where_it_ran(env)
    env.execute("default")
    assert worker_processes() == [] and spare_pids() == []


def test_a_run_leaves_spares_that_the_next_run_takes(tmp_path, monkeypatch):
    first = environment(2, 2).configure(worker_spares=2)
    where_it_ran(first)
    first.execute("first")
    waiting = spare_pids()
    assert len(waiting) == 2 and sorted(worker_processes()) == sorted(waiting)
    # the driver moves and changes its environment after the spares started: they follow it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLIPSTREAM_SPARE_TEST", "set after the spares started")
    second = environment(2, 2)
    sink = where_it_ran(second)
    second.execute("second")
    pids = {pid for pid, _, _ in sink.values}
    assert pids == set(waiting[:2])
    assert {(cwd, variable) for _, cwd, variable in sink.values} == \
        {(str(tmp_path), "set after the spares started")}
    # the processes that ran a job are gone; this run asked for no spares, so none were started
    assert spare_pids() == [] and worker_processes() == []


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from worker_jobs import environment
from slipstream.testing import CollectingSink

env = environment(2, 2).configure(worker_spares=2)
env.from_collection(list(range(100))).map(lambda x: x + 1).sink_to(CollectingSink())
env.execute("one job")
from slipstream.runtime.workers.spares import spare_pids
print(len(spare_pids()), flush=True)
"""


def test_spares_end_with_their_driver(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=os.path.dirname(__file__)))
    marker = f"SLIPSTREAM_TEST_MARKER_{os.getpid()}_{time.monotonic_ns()}"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120,
                          env={**os.environ, marker: "1"}, check=True)
    assert done.stdout == b"2\n"  # the job left two spares when it ended
    assert workers_left(marker) == []

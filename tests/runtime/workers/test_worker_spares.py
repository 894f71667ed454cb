"""Spare worker processes: a run leaves as many ready processes as it had workers, the next run
takes them, each runs in the driver's directory and environment as they are when its run starts,
and no spare outlives its driver."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from worker_jobs import environment, worker_processes

from slipstream.runtime.workers.spares import spare_pids
from slipstream.testing import CollectingSink


def where_it_ran(env, values: int = 64) -> CollectingSink:
    """A job whose records say which process ran them, in which directory, with which SLIPSTREAM_SPARE_TEST."""
    sink = CollectingSink()
    (env.from_collection(list(range(values)))
     .map(lambda _: (os.getpid(), os.getcwd(), os.environ.get("SLIPSTREAM_SPARE_TEST")))
     .sink_to(sink))
    return sink


def test_a_run_leaves_spares_that_the_next_run_takes(tmp_path, monkeypatch):
    first = environment(2, 2)
    where_it_ran(first)
    first.execute("first")
    waiting = spare_pids()
    assert len(waiting) >= 2
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
    assert worker_processes() == []  # the processes that ran a job are gone; new spares wait
    assert not pids & set(spare_pids())


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
from worker_jobs import environment
from slipstream.testing import CollectingSink

env = environment(2, 2)
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
    deadline = time.monotonic() + 10
    while worker_processes(marker=marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker_processes(marker=marker) == []

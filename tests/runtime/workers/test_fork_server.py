"""The fork server: it forks worker processes for the driver and reports how each ended, as
subprocess reports the end of a child; a server that died is replaced, and none outlives its driver."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from worker_jobs import worker_processes

from slipstream.runtime.workers.fork_server import _REPORT, PRELOAD_VARIABLE, UNKNOWN_EXIT, ForkServer


def started_here(before: set[int]) -> set[int]:
    """The fork servers and workers of this process that were not there ``before`` (the suite's jobs
    may have started this process's own fork server already)."""
    return set(worker_processes(servers=True)) - before


def test_a_forked_worker_s_end_is_reported_as_subprocess_reports_a_child_s():
    before, server = set(worker_processes(servers=True)), ForkServer()
    try:
        killed, killed_control = server.fork()
        idle, idle_control = server.fork()
        assert killed.poll() is None and idle.poll() is None
        assert {killed.pid, idle.pid} <= started_here(before) and len(started_here(before)) == 3  # and the server
        killed.kill()
        assert killed.wait(timeout=10) == -signal.SIGKILL
        idle_control.close()  # a worker given no run exits once its control socket closes
        assert idle.wait(timeout=10) == 0
        killed_control.close()
    finally:
        server.stop()
    assert started_here(before) == set()


def test_a_fork_server_that_died_is_replaced_and_the_workers_it_forked_still_end():
    before, server = set(worker_processes(servers=True)), ForkServer()
    try:
        orphan, orphan_control = server.fork()
        (first_server,) = started_here(before) - {orphan.pid}
        os.kill(first_server, signal.SIGKILL)
        worker, worker_control = server.fork()
        assert worker.poll() is None and first_server not in started_here(before)
        orphan_control.close()  # its server is gone: that it ended is all that is known
        assert orphan.wait(timeout=10) == UNKNOWN_EXIT
        worker_control.close()
        assert worker.wait(timeout=10) == 0
    finally:
        server.stop()
    assert started_here(before) == set()


DRIVER = """
import sys
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.testing import CollectingSink

env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).configure(workers=2)
sink = CollectingSink()
env.from_collection(list(range(8))).map(lambda _: "colorsys" in sys.modules).sink_to(sink)
env.execute("preloaded?")
print(sorted(set(sink.values)), flush=True)
"""


@pytest.mark.parametrize("preload,found", [("colorsys, no_such_module", "[True]"), ("", "[False]")])
def test_the_modules_named_to_preload_are_imported_once_in_the_server_and_found_by_every_worker(
        tmp_path, preload: str, found: str):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, check=True,
                          env={**os.environ, PRELOAD_VARIABLE: preload})
    assert done.stdout.decode().strip() == found  # a module that does not exist is left out


FORKED_DRIVER = """
import os, sys
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.testing import CollectingSink

def parent_of(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])

def run(name):
    \"\"\"Whether the job ran on workers forked by a server this process started.\"\"\"
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).configure(workers=2)
    sink = CollectingSink()
    env.from_collection(list(range(20))).map(lambda x: (x * 2, os.getppid())).sink_to(sink)
    env.execute(name)
    servers = {server for _, server in sink.values}
    return sorted(x for x, _ in sink.values) == [x * 2 for x in range(20)] and \\
        all(parent_of(server) == os.getpid() for server in servers)

assert run("before the fork")
child = os.fork()
if child == 0:
    os._exit(0 if run("in the child") else 1)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status), run("after the fork"), flush=True)
"""


def test_a_driver_forked_by_its_user_s_code_runs_its_jobs_on_workers_of_a_fork_server_of_its_own(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(FORKED_DRIVER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, check=True)
    assert done.stdout.decode().strip() == "0 True"


SHADOWED_DRIVER = """
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.testing import CollectingSink

env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).configure(workers=2)
sink = CollectingSink()
env.from_collection(list(range(20))).map(lambda x: x * 2).sink_to(sink)
env.execute("shadowed")
print(sorted(sink.values) == [x * 2 for x in range(20)], flush=True)
"""


def test_the_fork_server_imports_the_driver_s_slipstream_not_one_in_the_working_directory(tmp_path):
    """A driver started in a directory holding another ``slipstream`` (a checkout of another version)
    imports its own (its script's directory comes first on its path); ``python -m`` would put the
    working directory first on the server's, and the workers would run the other one."""
    shadow = tmp_path / "slipstream"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the slipstream of the working directory')\n")
    script = tmp_path / "scripts" / "driver.py"
    script.parent.mkdir()
    script.write_text(SHADOWED_DRIVER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip() == "True"


PLANNED_DRIVER = """
import os, sys, time
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.runtime.driver import JobDriver
from slipstream.runtime.workers.fork_server import SERVER_NAME

def children_named(name):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/comm", "rb") as comm:
                named = comm.read().strip() == name
        except OSError:
            continue
        if named and int(fields[1]) == os.getpid():
            found.append(pid)
    return found

def planned(workers):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).configure(workers=workers)
    env.from_collection(list(range(8))).map(lambda x: x).print()
    return JobDriver(env._take_job("planned"))

planned(1)
alone = children_named(b"python") + children_named(SERVER_NAME)  # a job in this process starts none
driver = planned(2)
deadline = time.monotonic() + 60
while not children_named(SERVER_NAME) and time.monotonic() < deadline:
    time.sleep(0.01)
print(alone, driver.current_run is None, len(children_named(SERVER_NAME)), flush=True)
"""


def test_a_job_planned_on_workers_starts_the_fork_server_before_its_run_asks_for_a_worker(tmp_path):
    """The server's imports (most of a second) overlap what the driver does before its first run
    needs a worker (restoring a checkpoint, loading pyarrow's pandas support), so a restart after a
    kill reaches its workers that much sooner; a job in the driver's process starts no server."""
    script = tmp_path / "driver.py"
    script.write_text(PLANNED_DRIVER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120, check=True)
    assert done.stdout.decode().strip() == "[] True 1"


def test_a_worker_s_pid_reused_by_a_later_fork_leaves_each_handle_its_own_end_and_kills_only_the_live_one():
    """A long-lived driver forks thousands of workers and the system reuses their pids (several jobs at
    once in one driver, too): the server numbers each fork and reports each exit with its number, so
    the handle of a worker that ended stays ended — its ``kill()`` (a failing run's) must not reach
    the new worker that has its pid — and the new one reads as running."""
    server, (ours, theirs) = ForkServer(), socket.socketpair()
    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the pid both have
    try:
        server._socket, server._generation = ours, 1
        theirs.sendall(b"P" + _REPORT.pack(reused.pid, 1, 0, 0.0))
        (ended,) = server._take_reports(ours, 5)
        theirs.sendall(b"X" + _REPORT.pack(reused.pid, 1, 0, 0.5) + b"P" + _REPORT.pack(reused.pid, 2, 0, 0.0))
        (live,) = [forked for forked in server._take_reports(ours, 5) + server._take_reports(ours, 0) if forked]
        assert (ended.pid, live.pid) == (reused.pid, reused.pid) and server.cpu_seconds == 0.5
        assert ended.poll() == 0 and live.poll() is None
        ended.kill()
        with pytest.raises(subprocess.TimeoutExpired):
            reused.wait(timeout=0.5)  # not killed
        live.kill()
        assert reused.wait(timeout=10) == -signal.SIGKILL
    finally:
        reused.kill()
        server.stop()
        theirs.close()

"""Spare worker processes: fresh interpreters started ahead, their imports done, waiting for a run.

A worker process spends most of its start importing slipstream and its libraries (0.3–0.5 s
here, longer than a short job runs). A run takes its processes from the spares the runs before
it left, and with ``configure(worker_spares=N)`` leaves N new ones when it ends: the next run —
and the restart after a failure — starts on processes that are ready, as a Flink session
cluster's task managers outlive a job. By default (0) no worker process outlives its run.

A spare holds no job and never ran one: it waits on its control socket for a run to send it
its sockets to the other workers (passed with ``SCM_RIGHTS``), then the driver's working
directory, environment and ``sys.path`` as they are when the run starts, so a spare behaves as
a process started then would. A process that ran a job exits with it; it is never a spare
again. A spare exits when the driver does (its control socket closes), and the driver ends its
spares when it exits.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass

import slipstream

MAX_PEERS = 1024
"""The most sockets to other workers a worker is given (one per other worker)."""


@dataclass
class Spare:
    """An idle worker process and the driver's end of its control socket."""

    process: subprocess.Popen[bytes]
    control: socket.socket


_spares: list[Spare] = []
_lock = threading.Lock()


def start() -> Spare:
    """A fresh interpreter running the worker's entry (never a fork of the driver: see the worker;
    subprocess execs the interpreter in C right after its fork, no Python runs between)."""
    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(slipstream.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        process = subprocess.Popen([sys.executable, "-m", "slipstream.runtime.workers", str(theirs.fileno())],
                                   pass_fds=[theirs.fileno()], env=env)
    finally:
        theirs.close()
    return Spare(process, ours)


def take(count: int) -> list[Spare]:
    """``count`` worker processes for a run: spares still alive first, then new ones."""
    taken: list[Spare] = []
    with _lock:
        while _spares and len(taken) < count:
            spare = _spares.pop(0)
            if spare.process.poll() is None:
                taken.append(spare)
            else:
                spare.control.close()
    return taken + [start() for _ in range(count - len(taken))]


def replenish(count: int) -> None:
    """Start spares until there are ``count`` (a run ended that asked for as many)."""
    with _lock:
        missing = count - len(_spares)
        _spares.extend(start() for _ in range(missing))


def spare_pids() -> list[int]:
    """The process ids of the spares waiting now."""
    with _lock:
        return [spare.process.pid for spare in _spares]


def stop_all() -> None:
    """End every spare (at the driver's exit; a spare would also end on its own once the driver is gone)."""
    with _lock:
        spares, _spares[:] = list(_spares), []
    for spare in spares:
        spare.control.close()  # the spare's wait ends: it exits
    for spare in spares:
        try:
            spare.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            spare.process.kill()
            spare.process.wait()


atexit.register(stop_all)

__all__ = ["MAX_PEERS", "Spare", "replenish", "spare_pids", "start", "stop_all", "take"]

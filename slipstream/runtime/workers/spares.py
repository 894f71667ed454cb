"""Spare worker processes: forked ahead (:mod:`.fork_server`), waiting for a run.

A run takes its processes from the spares the runs before it left, and with
``configure(worker_spares=N)`` leaves N new ones when it ends: the next run — and the restart after
a failure — starts on processes that are there already, as a Flink session cluster's task
managers outlive a job. By default (0) no worker process outlives its run; the fork server makes
a new one in milliseconds.

A spare holds no job and never ran one: it waits on its control socket for a run to send it
its sockets to the other workers (passed with ``SCM_RIGHTS``), then the driver's working
directory, environment and ``sys.path`` as they are when the run starts, so a spare behaves as
a process started then would. A process that ran a job exits with it; it is never a spare
again. A spare exits when the driver does (its control socket closes), and the driver ends its
spares when it exits.
"""

from __future__ import annotations

import atexit
import socket
import subprocess
import threading
from dataclasses import dataclass

from slipstream.runtime.workers.fork_server import ForkedProcess, fork_worker

MAX_PEERS = 1024
"""The most sockets to other workers a worker is given (one per other worker)."""


@dataclass
class Spare:
    """An idle worker process and the driver's end of its control socket."""

    process: ForkedProcess
    control: socket.socket


_spares: list[Spare] = []
_lock = threading.Lock()


def start() -> Spare:
    """A new worker process, waiting on its control socket for a run."""
    return Spare(*fork_worker())


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

"""The fork server: one process per driver that has imported the worker's code and forks a worker in milliseconds.

A fresh interpreter spends 0.2–0.4 s of CPU importing slipstream, pyarrow and numpy before it can
run a subtask, so every run on N workers paid N of those starts (and a restart after a failure
paid them again). The driver starts one fork server when it first plans a job on workers: a fresh
interpreter (``python -m slipstream.runtime.workers --fork-server FD``, never a fork of the
driver, whose threads and locks a fork would copy in whatever state they are) that imports the
worker's code, freezes what it holds for the garbage collector, and then forks each worker the
driver asks for: a child inherits the imports and runs :func:`~slipstream.runtime.workers.worker.main`
on the control socket the driver sent with the request. The server runs no other thread of
its own and never runs polars: polars warns that a fork can deadlock its thread pool, which its
import does not start (:data:`WORKER_IMPORTS`). The threads its imports do start — the allocators'
background threads (which handle a fork themselves), numpy's BLAS pool and polars' out-of-core file
cleaner — are idle when it forks, and a child has none of them.

Its workers are its children, not the driver's: it reaps each one and reports its exit status,
which :class:`ForkedProcess` (the driver's handle, used as a :class:`subprocess.Popen` is) reads.
Each fork has a number of its own, and an exit is reported with it: the system reuses pids, and in
a driver running several jobs a new worker can have the pid of another job's worker that ended,
whose handle must still read as ended (and must never signal the new one).
It ignores Ctrl-C (the driver stops the workers) and exits when the driver's end of its socket
closes; each worker exits by itself when its own control socket does.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import importlib
import itertools
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import NoReturn

import slipstream

WORKER_NAME = b"slipstream-work"
"""A forked worker's process name (what ``ps`` and ``top`` show, ``/proc/PID/comm``)."""
SERVER_NAME = b"slipstream-fork"
"""The fork server's process name."""

PRELOAD_VARIABLE = "SLIPSTREAM_WORKER_PRELOAD"
"""Modules (comma-separated) the fork server imports before it forks, besides the worker's code: the
libraries a job's functions import, paid once per driver instead of once per worker (as
``multiprocessing.set_forkserver_preload``; one that fails to import is left to the workers)."""

WORKER_IMPORTS = ("slipstream.runtime.state.heap_backend", "slipstream.runtime.batch.polars_engine", "polars")
"""What a worker's run imports besides the worker's code (a keyed backend, the batch engine and polars,
which sorted backlogs and columnar operators use): imported once in the server, not once per worker
per run (polars alone takes 0.1 s). Importing polars starts no thread pool: the server never runs it."""

_FORKED = b"P"  # (pid, fork number): the worker a request asked for
_EXITED = b"X"  # (pid, fork number, exit code as Popen gives it: negative for a signal, CPU seconds it used)
_REPORT = struct.Struct("<qqqd")
UNKNOWN_EXIT = 255
"""The exit code of a worker whose fork server died before reporting it (the worker itself ended)."""


def set_process_name(name: bytes) -> None:
    """Name this process (Linux's ``prctl(PR_SET_NAME)``; elsewhere its name stays)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):
        pass


# -- the server process -------------------------------------------------------------------------
def serve(fd: int, run_worker: Callable[[int], None]) -> None:
    """The fork server's loop on the socket ``fd`` to its driver: fork a worker (``run_worker`` on
    the control socket a request brings) per request, report each child's exit, end at EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_process_name(SERVER_NAME)
    driver = socket.socket(fileno=fd)
    reaped_read, reaped_write = os.pipe()
    os.set_blocking(reaped_write, False)
    signal.set_wakeup_fd(reaped_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # its wake-up byte ends the select below
    _preload([*WORKER_IMPORTS, *os.environ.get(PRELOAD_VARIABLE, "").split(",")])
    gc.freeze()  # the imports stay shared with every child: the collector never walks (so writes) them
    children: dict[int, int] = {}  # pid -> fork number, while the child lives
    numbers = itertools.count(1)
    try:
        while True:
            readable, _, _ = select.select([driver.fileno(), reaped_read], [], [])
            if reaped_read in readable:
                os.read(reaped_read, 4096)
                _report_exits(driver, children)
            if driver.fileno() in readable:
                message, fds, _, _ = socket.recv_fds(driver, 1, 1)
                if not message:
                    break  # the driver ended; each worker ends once its control socket closes
                pid = os.fork()
                if pid == 0:
                    _become_worker(fds[0], run_worker, driver, reaped_read, reaped_write)
                os.close(fds[0])
                number = children[pid] = next(numbers)
                driver.sendall(_FORKED + _REPORT.pack(pid, number, 0, 0.0))
    except OSError:  # the driver's end broke: it died
        pass
    os._exit(0)


def _preload(modules: list[str]) -> None:
    for name in filter(None, (module.strip() for module in modules)):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a worker that needs it imports it, and fails there naming it
            continue


def _become_worker(control_fd: int, run_worker: Callable[[int], None], *server_ends: socket.socket | int) -> NoReturn:
    """The forked child: drop the server's sockets and signal handling, run the worker, never return."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for end in server_ends:
            if isinstance(end, socket.socket):
                end.close()
            else:
                os.close(end)
        set_process_name(WORKER_NAME)
        run_worker(control_fd)
    finally:
        os._exit(1)  # a worker ends with os._exit of its own; this only if it failed to start


def _report_exits(driver: socket.socket, children: dict[int, int]) -> None:
    """Reap the children that ended and report each (before any later fork can reuse its pid)."""
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        cpu = usage.ru_utime + usage.ru_stime
        driver.sendall(_EXITED + _REPORT.pack(pid, children.pop(pid, 0), os.waitstatus_to_exitcode(status), cpu))


# -- the driver's side --------------------------------------------------------------------------
class ForkServer:
    """The driver's connection to its fork server, started by :meth:`start_ahead` or on first use (again if
    it died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._buffer = b""
        self._generation = 0  # how many servers were started: a worker's exit is reported by its own
        self._forked: weakref.WeakValueDictionary[tuple[int, int], ForkedProcess] = weakref.WeakValueDictionary()
        """The handles of the workers not reported ended yet, by (server generation, fork number)."""
        self.cpu_seconds = 0.0
        """CPU time the workers that ended used (they are the server's children, not the driver's:
        ``getrusage(RUSAGE_CHILDREN)`` in the driver does not count them)."""

    def fork(self) -> tuple[ForkedProcess, socket.socket]:
        """A new worker process and the driver's end of its control socket."""
        ours, theirs = socket.socketpair()
        try:
            with self._lock:
                try:
                    process = self._fork(theirs)
                except (OSError, EOFError):  # the server died: a new one
                    self._close()
                    process = self._fork(theirs)
        finally:
            theirs.close()
        return process, ours

    def start_ahead(self) -> None:
        """Start the server now if none runs, without waiting for its imports."""
        with self._lock:
            self._connected()

    def _fork(self, control: socket.socket) -> ForkedProcess:
        """A new worker on ``control``."""
        server = self._connected()
        socket.send_fds(server, [b"F"], [control.fileno()])
        while True:
            for forked in self._take_reports(server, None):
                if forked is not None:
                    return forked

    def _connected(self) -> socket.socket:
        if self._socket is None or self._process is None or self._process.poll() is not None:
            self._close()
            self._start()
        assert self._socket is not None
        return self._socket

    def _start(self) -> None:
        """Start a server that imports what this driver imports: this slipstream first, then the
        driver's path (``-P``: not the working directory, where another ``slipstream`` may be)."""
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(slipstream.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, *sys.path]))
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-m", "slipstream.runtime.workers", "--fork-server", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env)
        finally:
            theirs.close()
        self._socket = ours
        self._buffer = b""
        self._generation += 1

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def _take_reports(self, server: socket.socket, timeout: float | None) -> list[ForkedProcess | None]:
        """Take the reports that came within ``timeout``: an exit is noted in its worker's handle; a fork
        gives the new worker's handle (None in the list for an exit). Raises ``EOFError`` when the
        server is gone."""
        ready, _, _ = select.select([server], [], [], timeout)
        if not ready:
            return []
        data = server.recv(65536)
        if not data:
            raise EOFError("the fork server is gone")
        self._buffer += data
        size = 1 + _REPORT.size
        reports: list[ForkedProcess | None] = []
        while len(self._buffer) >= size:
            kind, (pid, number, code, cpu) = self._buffer[:1], _REPORT.unpack_from(self._buffer, 1)
            self._buffer = self._buffer[size:]
            if kind == _FORKED:
                forked = self._forked[self._generation, number] = ForkedProcess(self, pid, number, self._generation)
                reports.append(forked)
                continue
            self.cpu_seconds += cpu
            ended = self._forked.pop((self._generation, number), None)
            if ended is not None:  # else nothing holds its handle any more
                ended.returncode = code
            reports.append(None)
        return reports

    def exit_code(self, process: ForkedProcess, timeout: float) -> int | None:
        """The exit code of worker ``process`` once it ended, waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while process.returncode is None:
                remaining = deadline - time.monotonic()
                if self._socket is None or process.generation != self._generation:
                    process.returncode = _ended_elsewhere(process.pid, remaining)
                    break
                try:
                    self._take_reports(self._socket, max(0.0, remaining))
                except (EOFError, OSError):
                    self._close()
                    process.returncode = _ended_elsewhere(process.pid, remaining)
                    break
                if remaining <= 0:
                    break
            return process.returncode

    def kill(self, process: ForkedProcess) -> None:
        """SIGKILL worker ``process`` unless it ended. The reports that came are taken in first, under
        the lock every fork takes: its pid cannot be another worker's by then (the server reports an
        exit before any later fork)."""
        with self._lock:
            if process.returncode is None and self._socket is not None and process.generation == self._generation:
                try:
                    self._take_reports(self._socket, 0.0)
                except (EOFError, OSError):
                    pass  # the server died; its workers end as their control sockets close
            if process.returncode is not None:
                return
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        """End the fork server (at the driver's exit)."""
        with self._lock:
            self._close()


def _ended_elsewhere(pid: int, timeout: float) -> int | None:
    """The exit of a worker whose fork server died: it was handed to init, which reaps it; only that
    it ended is known."""
    deadline = time.monotonic() + timeout
    while _exists(pid):
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)
    return UNKNOWN_EXIT


def _exists(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not reaped yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc here
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


class ForkedProcess:
    """A worker forked by the fork server, as the driver uses a :class:`subprocess.Popen`: ``number``
    names its fork among those of server ``generation`` (its pid may be reused once it ended)."""

    def __init__(self, server: ForkServer, pid: int, number: int, generation: int) -> None:
        self._server = server
        self.pid = pid
        self.number = number
        self.generation = generation
        self.returncode: int | None = None
        """Its exit code once the server reported it (negative for a signal, as Popen gives it)."""

    def poll(self) -> int | None:
        return self._server.exit_code(self, 0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._server.exit_code(self, 1e9 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return code

    def kill(self) -> None:
        self._server.kill(self)


_server = ForkServer()
atexit.register(_server.stop)


def ended_workers_cpu_seconds() -> float:
    """CPU seconds used by this driver's worker processes that ended (and were reported so far)."""
    return _server.cpu_seconds


def start_fork_server() -> None:
    """Start this driver's fork server now, not at the first worker a run asks for: the server's
    imports (0.8 s on a 2-core EPYC) then overlap the driver's own work before its run starts
    (restoring a checkpoint, loading pyarrow's pandas support), so a job, and each restart of a
    killed one, reaches its workers that much sooner."""
    _server.start_ahead()


def fork_worker() -> tuple[ForkedProcess, socket.socket]:
    """A new worker process, forked by this driver's fork server, and the driver's end of its
    control socket (the worker waits on it for a run, as a spare does)."""
    return _server.fork()


__all__ = ["PRELOAD_VARIABLE", "SERVER_NAME", "UNKNOWN_EXIT", "WORKER_NAME", "ForkServer", "ForkedProcess",
           "ended_workers_cpu_seconds", "fork_worker", "set_process_name", "start_fork_server"]

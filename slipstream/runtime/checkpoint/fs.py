"""The file operations a checkpoint is written with, behind one small interface.

Checkpoint storage never calls ``open``/``os.replace`` directly: it goes through a
:class:`FileSystem`, so tests can swap in :class:`FaultInjectingFileSystem`, which
"crashes" (raises :class:`SimulatedCrash`) after the n-th write, fsync or rename —
the crash-point tests walk n over every operation of one checkpoint.
"""

from __future__ import annotations

import errno
import os
import shutil

from slipstream.errors import DiskFullError


class FileSystem:
    """Local files with the durability steps spelled out (write, fsync, rename, fsync directory)."""

    def makedirs(self, path: str) -> None:
        """Create ``path`` (and parents) private to the user: mode 0700."""
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)

    def write_file(self, path: str, data: bytes, what: str = "checkpoint file") -> None:
        """Write ``data`` to a new file and fsync it; ENOSPC becomes :class:`DiskFullError`."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                self._write_all(fd, data)
                self._fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(path, what, exc) from exc
            raise

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)

    def rename(self, source: str, target: str) -> None:
        """Atomically move ``source`` to ``target`` (replacing it)."""
        os.replace(source, target)

    def fsync_dir(self, path: str) -> None:
        """Make the directory entries of ``path`` (created, renamed, deleted files) durable."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)


class SimulatedCrash(BaseException):
    """Raised by :class:`FaultInjectingFileSystem` at its crash point.

    A BaseException, so no ``except Exception`` on the way up can swallow it, as
    nothing swallows a real power cut.
    """


class FaultInjectingFileSystem(FileSystem):
    """A :class:`FileSystem` that stops after the ``crash_after``-th durable operation.

    The operations counted are every write (a torn write: only the first half of the
    data reaches the file before the crash), every fsync (of a file or a directory)
    and every rename. ``operations`` lists what ran, so a test can count them first
    with ``crash_after=None``. ``disk_full_after`` instead makes that operation fail
    with ENOSPC, as a full disk would.
    """

    def __init__(self, crash_after: int | None = None, disk_full_after: int | None = None) -> None:
        self.crash_after = crash_after
        self.disk_full_after = disk_full_after
        self.operations: list[str] = []

    def _count(self, what: str) -> bool:
        """Record an operation; True when this is the one to crash after."""
        self.operations.append(what)
        count = len(self.operations)
        if self.disk_full_after is not None and count == self.disk_full_after:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return self.crash_after is not None and count == self.crash_after

    def _write_all(self, fd: int, data: bytes) -> None:
        if self._count(f"write {len(data)} bytes"):
            super()._write_all(fd, data[: len(data) // 2])
            raise SimulatedCrash("crashed during a write")
        super()._write_all(fd, data)

    def _fsync(self, fd: int) -> None:
        super()._fsync(fd)
        if self._count("fsync file"):
            raise SimulatedCrash("crashed after an fsync")

    def rename(self, source: str, target: str) -> None:
        super().rename(source, target)
        if self._count(f"rename {os.path.basename(source)} -> {os.path.basename(target)}"):
            raise SimulatedCrash("crashed after a rename")

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        if self._count("fsync directory"):
            raise SimulatedCrash("crashed after a directory fsync")

    def remove(self, path: str) -> None:
        super().remove(path)
        if self._count(f"remove {os.path.basename(path)}"):
            raise SimulatedCrash("crashed after a remove")

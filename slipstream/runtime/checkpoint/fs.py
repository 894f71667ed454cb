"""The file operations a checkpoint is written with, behind one small interface.

Checkpoint storage never calls ``open``/``os.replace`` directly: it goes through a
:class:`~slipstream.filesystem.FileSystem` (local files, or an fsspec URL's store), so
tests can swap in :class:`FaultInjectingFileSystem`, which "crashes" (raises
:class:`SimulatedCrash`) after the n-th write, fsync or rename — the crash-point tests
walk n over every operation of one checkpoint.
"""

from __future__ import annotations

import errno
import os

from slipstream.filesystem import FileSystem

__all__ = ["FaultInjectingFileSystem", "FileSystem", "SimulatedCrash"]


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

    def _write_all(self, fd: int, data: bytes | memoryview) -> None:
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

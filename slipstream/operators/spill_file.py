"""A private file of pickled stream elements, appended in order and read back in order.

What an unbounded-in-records, bounded-in-memory buffer puts on disk past its budget: a
feedback channel (:class:`slipstream.runtime.channels.SpillingChannel`, read once, as a
queue) and an iteration's replay cache (:class:`slipstream.operators.replay_cache.ReplayCache`,
read again every round). The file lives in a fresh directory (mode 0700) under
``spill_dir`` (None: the system temp dir), deleted by :meth:`SpillFile.close`. Elements
are pickled: records are the user's Python values (or Arrow batches), which pickle
round-trips; the file is this process's own and never outlives it.

:class:`CheckpointFile` is how an operator puts an immutable file (a sort buffer's spilled
run, a buffer's in-memory tail written as Arrow IPC) into a checkpoint: its state refers to
the object, and the checkpoint stores the file once, named by its SHA-256, shared by every
checkpoint that refers to it (see :mod:`slipstream.runtime.checkpoint.snapshot`).
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import pickle
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Protocol

import pyarrow as pa

from slipstream.errors import DiskFullError


def private_directory(root: str | None, kind: str) -> str:
    """A new directory only this user can read (mode 0700), ``slipstream-<kind>-*`` under ``root``
    (made if missing; None: the system temp dir), for an operator's spilled data."""
    if root is not None:
        os.makedirs(root, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"slipstream-{kind}-", dir=root)


class SpillFile:
    """Elements appended at the end, read through a cursor (taking them) or all from the start."""

    def __init__(self, owner: str, spill_dir: str | None = None) -> None:
        self.owner = owner
        self._spill_dir = spill_dir
        self._writer: Any = None
        self._reader: Any = None
        self.count = 0  # elements written and not yet taken by the cursor
        self.size_bytes = 0  # the largest the file has been

    @property
    def path(self) -> str | None:
        """The file, once something was spilled."""
        return None if self._writer is None else self._writer.name

    def append(self, element: Any) -> None:
        if self._writer is None:
            directory = private_directory(self._spill_dir, "spill")
            path = os.path.join(directory, "spill.bin")
            self._writer = open(path, "wb")  # noqa: SIM115 - open until close()
            self._reader = open(path, "rb")  # noqa: SIM115 - open until close()
        try:
            pickle.dump(element, self._writer, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(self._writer.name, f"spill file of {self.owner}", exc) from exc
            raise
        self.size_bytes = max(self.size_bytes, self._writer.tell())
        self.count += 1

    def take(self) -> Any:
        """The oldest element not yet taken; once all are, the file starts over empty."""
        self._writer.flush()
        element = pickle.load(self._reader)
        self.count -= 1
        if not self.count:
            self._writer.seek(0)
            self._writer.truncate()
            self._reader.seek(0)
        return element

    def remaining(self) -> Iterator[Any]:
        """The elements not yet taken, oldest first, read through a handle of their own."""
        if not self.count:
            return
        self._writer.flush()
        with open(self._writer.name, "rb") as handle:
            handle.seek(self._reader.tell())
            for _ in range(self.count):
                yield pickle.load(handle)

    def close(self) -> None:
        """Delete the file and its directory."""
        if self._writer is not None:
            path = self._writer.name
            self._writer.close()
            self._reader.close()
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            self._writer = self._reader = None
            self.count = 0


class CheckpointFile:
    """The contents of an immutable file for a checkpoint: bytes, or a file on disk opened now.

    A file on disk is opened when the object is made (in the task's turn at the barrier), so the
    checkpoint writer can still read it after its owner deleted it (a sort buffer closed at the
    switch); :meth:`close` (the writer, when done) lets it go. ``sha256`` may be given when known
    (a run hashed for an earlier checkpoint); otherwise :meth:`digest` computes it once.
    """

    extension = "arrow"

    def __init__(self, *, data: bytes | memoryview | None = None, path: str | None = None,
                 sha256: str | None = None) -> None:
        if (data is None) == (path is None):
            raise ValueError("a CheckpointFile has either data or a path")
        self._data = data
        self._handle: BinaryIO | None = None if path is None else open(path, "rb")  # noqa: SIM115 - see close()
        self._map: mmap.mmap | None = None
        self.sha256 = sha256

    def contents(self) -> memoryview:
        """The file's bytes (a file on disk is mapped, not read into memory)."""
        if self._data is not None:
            return memoryview(self._data)
        if self._map is None:
            assert self._handle is not None
            self._map = mmap.mmap(self._handle.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)

    def digest(self) -> str:
        """The SHA-256 of the contents (hex), computed once."""
        if self.sha256 is None:
            view = self.contents()
            self.sha256 = hashlib.sha256(view).hexdigest()
            view.release()
        return self.sha256

    def close(self) -> None:
        """Release the file (the checkpoint holding it is written or given up)."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still in use: the map goes with the last view
                pass
            self._map = None
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class SpilledFile:
    """A file a buffer spilled and never changes again, as checkpoints take it: each checkpoint gets
    a :class:`CheckpointFile` of it, hashed only for the first (the writer's digest is kept)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._last: CheckpointFile | None = None

    def checkpoint_file(self) -> CheckpointFile:
        known = None if self._last is None else self._last.sha256
        self._last = CheckpointFile(path=self.path, sha256=known)
        return self._last


class StoredContents(Protocol):
    """A checkpoint's file handed to a restore without being read (a spilled run may be larger than memory)."""

    def read(self) -> bytes:
        """The whole file."""
        ...

    def copy_to(self, target: str) -> int:
        """Put the file at the local path ``target`` (a hard link where it can); its size."""
        ...


class TailSegments:
    """A buffer's in-memory records as checkpoints take them, in segments: each checkpoint writes
    only the records added since the previous one, as an Arrow IPC file in the buffer's spill
    directory, and refers to the earlier segments, which never change — so a checkpoint costs what
    arrived since the last one, not the whole tail. A spill (or a change of the records' columns)
    starts them over (:meth:`clear`)."""

    def __init__(self, directory: Callable[[], str]) -> None:
        self._directory = directory
        self._files: list[SpilledFile] = []
        self._covered = 0  # records the segments hold

    def checkpoint_files(self, count: int, table_of: Callable[[int, int], pa.Table]) -> list[CheckpointFile]:
        """The segments of the first ``count`` in-memory records, ``table_of(start, stop)`` giving
        those not in a segment yet."""
        if count > self._covered:
            path = os.path.join(self._directory(), f"tail-{uuid.uuid4().hex}.arrow")
            table = table_of(self._covered, count)
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            self._files.append(SpilledFile(path))
            self._covered = count
        return [segment.checkpoint_file() for segment in self._files]

    def restore(self, files: list[bytes | StoredContents]) -> list[pa.Table]:
        """Take a checkpoint's segments as this buffer's own (linked or written into its directory);
        their tables, in order."""
        tables = []
        for data in files:
            path = os.path.join(self._directory(), f"tail-{uuid.uuid4().hex}.arrow")
            write_restored(path, data)
            self._files.append(SpilledFile(path))
            with pa.memory_map(path) as source:
                tables.append(pa.ipc.open_file(source).read_all())
            self._covered += tables[-1].num_rows
        return tables

    def clear(self) -> None:
        """The in-memory records were spilled or rewritten: delete the segments."""
        for segment in self._files:
            try:
                os.remove(segment.path)
            except OSError:
                pass
        self._files, self._covered = [], 0


def arrow_file_bytes(table: pa.Table) -> bytes:
    """``table`` as the bytes of an Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def read_arrow_file(data: bytes | StoredContents) -> pa.Table:
    """The table of a restored Arrow IPC file."""
    return pa.ipc.open_file(pa.BufferReader(data if isinstance(data, bytes) else data.read())).read_all()


def write_restored(path: str, data: bytes | StoredContents) -> int:
    """Put a file restored from a checkpoint at ``path`` (in a buffer's private spill directory); its size."""
    if not isinstance(data, bytes):
        return data.copy_to(path)
    with open(path, "wb") as handle:
        handle.write(data)
    return len(data)

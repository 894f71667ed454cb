"""A private file of pickled stream elements, appended in order and read back in order.

What an unbounded-in-records, bounded-in-memory buffer puts on disk past its budget: a
feedback channel (:class:`slipstream.runtime.channels.SpillingChannel`, read once, as a
queue) and an iteration's replay cache (:class:`slipstream.operators.replay_cache.ReplayCache`,
read again every round). The file lives in a fresh directory (mode 0700) under
``spill_dir`` (None: the system temp dir), deleted by :meth:`SpillFile.close`. Elements
are pickled: records are the user's Python values (or Arrow batches), which pickle
round-trips; the file is this process's own and never outlives it.
"""

from __future__ import annotations

import errno
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from slipstream.errors import DiskFullError


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
            if self._spill_dir is not None:
                os.makedirs(self._spill_dir, exist_ok=True)
            directory = tempfile.mkdtemp(prefix="slipstream-spill-", dir=self._spill_dir)  # mode 0700
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

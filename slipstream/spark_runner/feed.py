"""An unbounded ``IteratorSource`` on the Spark runner: the driver writes its records into files
that Spark's file stream source reads.

A thread iterates the source (it may block, as a live feed does) and writes what it got every
``flush_seconds`` (or every ``flush_records`` records) as one Arrow IPC file of pickled records,
written under a hidden name and renamed, so Spark lists only whole files. Spark's checkpoint
says which files it has read; the files stay in the checkpoint location, so a restarted driver
counts the records already written and resumes the iteration after them, as the embedded
reader does (the source must be a function returning a fresh iterator, or a collection).
When the iterator ends, the feed ends; the runner then lets the query read what is left and stops it.
"""

from __future__ import annotations

import os
import queue
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from slipstream.spark_runner.records import ORDER, Rows, local_path

PREFIX, SUFFIX = "feed-", ".arrow"
_END = object()


class FeedReading:
    """Reads the feed files Spark found (one path per row); a HybridSource's part number goes
    first in each record's order, after the earlier parts' records."""

    def __init__(self, order_prefix: bytes = b"") -> None:
        self.order_prefix = order_prefix

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for uri in sorted(batch.column("path").to_pylist()):
                with pa.memory_map(local_path(uri)) as file:
                    for records in pa.ipc.open_file(file).read_all().to_batches():
                        yield records if not self.order_prefix else self.prefixed(records)

    def prefixed(self, records: pa.RecordBatch) -> pa.RecordBatch:
        orders = [self.order_prefix + order for order in records.column(ORDER).to_pylist()]
        return records.set_column(records.schema.get_field_index(ORDER), ORDER, pa.array(orders, pa.binary()))


class FeedWriter:
    """Reads ``source`` on threads of the driver into files in ``directory`` (see the module docstring)."""

    def __init__(self, source: Any, directory: str, name: str, *, flush_seconds: float = 0.02,
                 flush_records: int = 4096) -> None:
        self.source = source
        self.directory = directory
        self.name = name
        self.flush_seconds = flush_seconds
        self.flush_records = flush_records
        self.error: BaseException | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=100_000)
        self._stop = threading.Event()
        os.makedirs(directory, exist_ok=True)
        self._files, self._written = self._existing()
        self._writer = threading.Thread(target=self._write, name=f"feed {name}", daemon=True)
        self._reader = threading.Thread(target=self._read, name=f"feed reader {name}", daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    def alive(self) -> bool:
        return self._writer.is_alive()

    def stop(self) -> None:
        self._stop.set()

    def _existing(self) -> tuple[int, int]:
        """How many feed files and records a run before this one wrote."""
        names = [n for n in os.listdir(self.directory) if n.startswith(PREFIX) and n.endswith(SUFFIX)]
        records = 0
        for name in names:
            with pa.memory_map(os.path.join(self.directory, name)) as file:
                records += sum(batch.num_rows for batch in pa.ipc.open_file(file).read_all().to_batches())
        return len(names), records

    def _read(self) -> None:
        try:
            for value in self.source.start_iteration(self._written):
                if self._stop.is_set():
                    break
                self._queue.put(value)
        except BaseException as exc:  # noqa: BLE001 - handed to the runner, raised there
            self.error = exc
        finally:
            self._queue.put(_END)

    def _write(self) -> None:
        rows, deadline = Rows(), None
        sequence = self._written
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                value = self._queue.get(timeout=timeout)
            except queue.Empty:
                value = None
            else:
                if value is _END:
                    break
                rows.add(value, None, struct.pack(">q", sequence))
                sequence += 1
                deadline = deadline or time.monotonic() + self.flush_seconds
                if len(rows.values) < self.flush_records and time.monotonic() < deadline:
                    continue
            self._flush(rows)
            rows, deadline = Rows(), None
        self._flush(rows)

    def _flush(self, rows: Rows) -> None:
        if not rows.values:
            return
        name = f"{PREFIX}{self._files:09d}{SUFFIX}"
        hidden = os.path.join(self.directory, f".{name}.tmp")
        batch = rows.batch()
        with pa.OSFile(hidden, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        os.replace(hidden, os.path.join(self.directory, name))
        self._files += 1

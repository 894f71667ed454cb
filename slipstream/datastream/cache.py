"""``DataStream.cache()``: a bounded stream's records kept after the job that computed them, for
later jobs of the same environment to read instead of computing them again (Flink's FLIP-205).

A cached stream is, in the plan, an edge from the stream it caches (:class:`CacheTransformation`
is a union of one input). The first job that runs it also writes its records, through a
:class:`CacheSink` the environment adds, one file per subtask in the cache's directory; a subtask's
file gets its final name (``part-<i>-of-<n>``) when its input ended, so a cache is complete when
all ``n`` are there. A later job finds it complete and reads the files instead
(:class:`CacheReplaySource`, a bounded source of ``n`` subtasks): the cached stream's input
becomes that source, and nothing upstream of it runs. ``invalidate()`` deletes the files and
the next job computes the stream again; the environment's ``close()`` deletes every cache.

As Flink's, caching is for BATCH mode (the records must all be there before a later job reads
them); the records are pickled, with their timestamps.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    PollResult,
    Sink,
    SinkWriter,
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
)
from slipstream.datastream.transformations import SinkTransformation, SourceTransformation, UnionTransformation

_FRAME = struct.Struct("<Q")
_PART = re.compile(r"part-(\d+)-of-(\d+)")


def part_name(subtask: int, parallelism: int) -> str:
    return f"part-{subtask}-of-{parallelism}"


def complete_parts(directory: str) -> int | None:
    """How many subtasks wrote the cache in ``directory`` when every one's file is final; else None."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    parts = [(int(m.group(1)), int(m.group(2))) for m in map(_PART.fullmatch, names) if m]
    counts = {count for _, count in parts}
    if len(counts) != 1:
        return None
    (count,) = counts
    return count if sorted(index for index, _ in parts) == list(range(count)) else None


class CacheSink(Sink):
    """Writes a cached stream's records, a file per subtask, final once the subtask's input ended."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def default_name(self) -> str:
        return "Cache Sink"

    def create_writer(self) -> SinkWriter:
        return _CacheWriter(self.directory)


class _CacheWriter(SinkWriter):
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._file: BinaryIO | None = None
        self._final = self._partial = ""

    def open(self, subtask_index: int, parallelism: int) -> None:
        """Start this subtask's file afresh (a restarted job writes it again)."""
        os.makedirs(self.directory, exist_ok=True)
        self._final = os.path.join(self.directory, part_name(subtask_index, parallelism))
        self._partial = f"{self._final}.inprogress"
        if os.path.exists(self._final):
            os.remove(self._final)
        self._file = open(self._partial, "wb")  # noqa: SIM115 - held until the input ends

    def write(self, values: list[Any], timestamps: list[Any] | None) -> None:
        assert self._file is not None  # opened first
        frame = pickle.dumps((values, timestamps), protocol=pickle.HIGHEST_PROTOCOL)
        self._file.write(_FRAME.pack(len(frame)))
        self._file.write(frame)

    def flush(self) -> None:
        """The input ended (the sink's ``finish``): the file is complete, and gets its final name."""
        if self._file is not None:
            self._file.close()
            self._file = None
            os.replace(self._partial, self._final)

    def close(self) -> None:
        if self._file is not None:  # a run that failed: its partial file is not the cache
            self._file.close()
            self._file = None


class CacheReplaySource(Source):
    """Reads a complete cache back: subtask ``i`` of ``parallelism`` reads the file subtask ``i`` wrote."""

    def __init__(self, directory: str, parallelism: int) -> None:
        self.directory = directory
        self.parallelism = parallelism

    def default_name(self) -> str:
        return "Cache"

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def max_parallelism(self) -> int:
        return self.parallelism

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        return _CacheReader(os.path.join(self.directory, part_name(subtask_index, self.parallelism)))


class _CacheReader(SourceReader):
    """One cached file's batches, in the order they were written; its position is batches read."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._read = 0
        self._batches: Iterator[tuple[list[Any], list[Any] | None]] | None = None

    def open(self, context: SourceReaderContext) -> None:
        self._batches = self._frames()
        for _ in range(self._read):
            next(self._batches)

    def _frames(self) -> Iterator[tuple[list[Any], list[Any] | None]]:
        with open(self._path, "rb") as file:
            while header := file.read(_FRAME.size):
                (size,) = _FRAME.unpack(header)
                yield pickle.loads(file.read(size))

    def poll(self, max_records: int) -> PollResult:
        assert self._batches is not None  # opened first
        batch = next(self._batches, None)
        if batch is None:
            return END_OF_INPUT
        self._read += 1
        values, timestamps = batch
        return SourceBatch(values, timestamps)

    def snapshot_position(self) -> int:
        return self._read

    def restore_position(self, position: Any) -> None:
        self._read = int(position)


@dataclass(eq=False, repr=False)
class CacheTransformation(UnionTransformation):
    """A cached stream: in the plan, the edge from its one input — the stream it caches while the
    cache is computed, the cache's :class:`CacheReplaySource` once it is complete."""

    directory: str = ""
    upstream: Any = None  # the transformation whose records are cached
    writer: SinkTransformation | None = None  # its CacheSink, added to the jobs that compute it
    replay: SourceTransformation | None = None  # reads the complete cache

    def complete(self) -> int | None:
        """How many files the complete cache has; None while it is not complete."""
        return complete_parts(self.directory)

    def invalidate(self) -> None:
        """Delete the cached records: the next job computes the stream again."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.replay = None
        self.inputs = [self.upstream]


__all__ = ["CacheReplaySource", "CacheSink", "CacheTransformation", "complete_parts", "part_name"]

"""``HybridSource``: read bounded sources one after another, then (usually) an unbounded one.

As Flink's ``HybridSource``: the typical use is history first (files, a table dump),
then the live stream. The records of every source but the last are backlog
(FLIP-327): operators may process them as sorted batch work; when the last source
starts, the stream switches to ``is_backlog=False``.

Example:
    >>> from slipstream.datastream.connectors.iterator import CollectionSource
    >>> source = HybridSource.builder(CollectionSource([1, 2])).add_source(CollectionSource([3])).build()
    >>> source.get_boundedness().name
    'BOUNDED'
"""

from __future__ import annotations

from typing import Any

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
    _Signal,
)
from slipstream.errors import InvalidProgramError


class HybridSource(Source):
    """Sources read in sequence; all but the last must be bounded."""

    def __init__(self, sources: list[Source]) -> None:
        if len(sources) < 2:
            raise InvalidProgramError("a HybridSource needs at least two sources")
        for position, source in enumerate(sources):
            if not isinstance(source, Source):
                raise InvalidProgramError(f"HybridSource part {position} is not a Source: {source!r}")
            if position < len(sources) - 1 and source.get_boundedness() is not Boundedness.BOUNDED:
                raise InvalidProgramError(f"HybridSource part {position} ({source.default_name()}) is "
                                          "unbounded; only the last source may be")
        self.sources = list(sources)

    @staticmethod
    def builder(first_source: Source) -> HybridSourceBuilder:
        return HybridSourceBuilder(first_source)

    def get_boundedness(self) -> Boundedness:
        return self.sources[-1].get_boundedness()

    def default_name(self) -> str:
        return "HybridSource(" + ", ".join(s.default_name() for s in self.sources) + ")"

    def max_parallelism(self) -> int | None:
        limits = [limit for limit in (s.max_parallelism() for s in self.sources) if limit is not None]
        return min(limits) if limits else None

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        return HybridSourceReader(self.sources, subtask_index, parallelism)


class HybridSourceBuilder:
    """``HybridSource.builder(first).add_source(second)...build()``, as in Flink."""

    def __init__(self, first_source: Source) -> None:
        self._sources = [first_source]

    def add_source(self, source: Source) -> HybridSourceBuilder:
        self._sources.append(source)
        return self

    def build(self) -> HybridSource:
        return HybridSource(self._sources)


class HybridSourceReader(SourceReader):
    """Reads the current source's reader; moves on when it ends. Backlog until the last source."""

    def __init__(self, sources: list[Source], subtask_index: int, parallelism: int) -> None:
        self._sources = sources
        self._subtask_index = subtask_index
        self._parallelism = parallelism
        self._index = 0
        self._reader: SourceReader | None = None
        self._context: SourceReaderContext | None = None
        self._restored_position: Any = None

    def open(self, context: SourceReaderContext) -> None:
        self._context = context
        self._open_current()

    def _open_current(self) -> None:
        self._reader = self._sources[self._index].create_reader(self._subtask_index, self._parallelism)
        self._reader.open(self._context)
        if self._restored_position is not None:
            self._reader.restore_position(self._restored_position)
            self._restored_position = None

    def poll(self, max_records: int) -> SourceBatch | _Signal:
        result = self._reader.poll(max_records)
        if result is END_OF_INPUT and self._index < len(self._sources) - 1:
            self._reader.close()
            self._index += 1
            self._open_current()
            return SourceBatch([])
        return result

    def is_backlog(self) -> bool | None:
        if self._index < len(self._sources) - 1:
            return True
        return self._reader.is_backlog()

    def current_source_index(self) -> int:
        """Which source is being read (0-based): the phase, for snapshots and progress."""
        return self._index

    def snapshot_position(self) -> Any:
        return {"source": self._index, "position": self._reader.snapshot_position()}

    def restore_position(self, position: Any) -> None:
        if self._reader is not None:
            self._reader.close()
        self._index = position["source"]
        self._restored_position = position["position"]
        self._open_current()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

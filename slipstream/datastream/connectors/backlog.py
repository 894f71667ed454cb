"""``BacklogSource``: tell the runtime explicitly whether a source's records are backlog.

By default a bounded source is backlog until it ends and an unbounded one is not
(FLIP-327). Wrap a source to say otherwise — for example a live source that first
replays a long retention window (backlog), or a small bounded lookup that should be
processed record by record (not backlog).

Examples:
    >>> from slipstream.datastream.connectors.iterator import IteratorSource
    >>> source = BacklogSource(IteratorSource(range(3), bounded=False), is_backlog=True)
    >>> source.get_boundedness().name
    'CONTINUOUS_UNBOUNDED'
"""

from __future__ import annotations

from typing import Any

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import Source, SourceBatch, SourceReader, SourceReaderContext, _Signal
from slipstream.errors import InvalidProgramError


class BacklogSource(Source):
    """``source`` whose records are backlog exactly when ``is_backlog`` says."""

    def __init__(self, source: Source, is_backlog: bool) -> None:
        if not isinstance(source, Source):
            raise InvalidProgramError(f"BacklogSource wraps a Source, got {source!r}")
        if not isinstance(is_backlog, bool):
            raise InvalidProgramError(f"BacklogSource: is_backlog must be True or False, got {is_backlog!r}")
        self.source = source
        self.backlog = is_backlog

    def get_boundedness(self) -> Boundedness:
        return self.source.get_boundedness()

    def default_name(self) -> str:
        return self.source.default_name()

    def max_parallelism(self) -> int | None:
        return self.source.max_parallelism()

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        return _BacklogReader(self.source.create_reader(subtask_index, parallelism), self.backlog)


class _BacklogReader(SourceReader):
    """Delegates to the wrapped reader; only its answer to ``is_backlog`` is fixed."""

    def __init__(self, reader: SourceReader, backlog: bool) -> None:
        self._reader = reader
        self._backlog = backlog

    def open(self, context: SourceReaderContext) -> None:
        self._reader.open(context)

    def poll(self, max_records: int) -> SourceBatch | _Signal:
        return self._reader.poll(max_records)

    def is_backlog(self) -> bool:
        return self._backlog

    def snapshot_position(self) -> Any:
        return self._reader.snapshot_position()

    def restore_position(self, position: Any) -> None:
        self._reader.restore_position(position)

    def close(self) -> None:
        self._reader.close()

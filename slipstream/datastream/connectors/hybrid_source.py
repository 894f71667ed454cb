"""``HybridSource``: read bounded sources one after another, then (usually) an unbounded one.

As Flink's ``HybridSource``: the typical use is history first (files, a table dump),
then the live stream. The records of every source but the last are backlog
(FLIP-327): operators may process them as sorted batch work; when the last source
starts, the stream switches to ``is_backlog=False``.

Examples:
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
    SHARE_FINISHED,
    PollResult,
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
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

    def check_position(self, position: Any) -> None:
        """The source of the reader's phase checks its position, and each later source the share
        it carries for it (a file phase fails if the files it read are gone)."""
        phases = [(int(position["source"]), position["position"])] + \
            [(int(k), at) for k, at in position.get("later", ())]
        for phase, at in phases:
            if at is not None:
                self.sources[phase].check_position(at)

    def redistribute_positions(self, positions: list[Any], parallelism: int) -> list[Any]:
        """Each subtask switches sources on its own, so old readers may be in different phases.

        Every new reader starts in the earliest phase any old reader was in. For that source
        and each later one an old reader had reached, the source itself redistributes the old
        positions: a reader already past a source counts as having finished its share, one not
        yet at it as not having started (unless it carries a position for it from an earlier
        rescale). The later sources' shares travel in the position until their phase comes.
        """
        phases: list[int] = []
        for position in positions:
            if position is None or position is SHARE_FINISHED:
                phases.append(0 if position is None else len(self.sources))
            else:
                phases.append(int(position["source"]))
        first = min(*phases, len(self.sources) - 1)
        last = max([min(phase, len(self.sources) - 1) for phase in phases] +
                   [int(k) for p in positions if isinstance(p, dict) for k, _ in p.get("later", ())])
        per_source: dict[int, list[Any]] = {}
        for k in range(first, last + 1):
            old: list[Any] = []
            for position, phase in zip(positions, phases):
                if phase > k:
                    old.append(SHARE_FINISHED)
                elif phase == k:
                    old.append(position["position"])
                else:
                    later = dict(position.get("later", ())) if isinstance(position, dict) else {}
                    old.append(later.get(k))
            per_source[k] = self.sources[k].redistribute_positions(old, parallelism)
        return [{"source": first, "position": per_source[first][subtask],
                 "later": [[k, per_source[k][subtask]] for k in range(first + 1, last + 1)]}
                for subtask in range(parallelism)]


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
        self._later: dict[int, Any] = {}  # positions in sources not reached yet (after a rescale)

    def open(self, context: SourceReaderContext) -> None:
        self._context = context
        self._open_current()

    def _open_current(self) -> None:
        assert self._context is not None  # given to open, which opens the first source
        reader = self._reader = self._sources[self._index].create_reader(self._subtask_index, self._parallelism)
        position = self._restored_position
        if position is None:
            position = self._later.pop(self._index, None)
        self._restored_position = None
        if position is not None:
            # Before open, as the source operator does: a file reader lists only unfinished splits.
            reader.restore_position(position)
        reader.open(self._context)

    def _current(self) -> SourceReader:
        """The open source's reader (there is one from open on)."""
        assert self._reader is not None
        return self._reader

    def poll(self, max_records: int) -> PollResult:
        reader = self._current()
        result = reader.poll(max_records)
        if result is END_OF_INPUT and self._index < len(self._sources) - 1:
            reader.close()
            self._index += 1
            self._open_current()
            return SourceBatch([])
        return result

    def is_backlog(self) -> bool | None:
        if self._index < len(self._sources) - 1:
            return True
        return self._current().is_backlog()

    def current_source_index(self) -> int:
        """Which source is being read (0-based): the phase, for snapshots and progress."""
        return self._index

    def snapshot_position(self) -> Any:
        """The phase (which source) and the position in it; shares of later sources, if any."""
        position = {"source": self._index, "position": self._reader.snapshot_position()
                    if self._reader is not None else self._restored_position}
        if self._later:
            position["later"] = [[k, at] for k, at in sorted(self._later.items())]
        return position

    def restore_position(self, position: Any) -> None:
        """Before ``open``: resume in source ``position["source"]`` at its position."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._index = int(position["source"])
        self._restored_position = position["position"]
        self._later = {int(k): at for k, at in position.get("later", ())}
        if self._context is not None:
            self._open_current()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()

"""Records a checkpoint shares with earlier ones: immutable segments, written once, content-addressed.

An iteration's replay cache (:class:`slipstream.operators.replay_cache.ReplayCache`)
keeps every record of a replayed data stream and only ever appends to it, so it is kept
as :class:`Segment` s: consecutive batches that never change once sealed. A checkpoint
writes a segment the first time it holds it, as a shared file named by the SHA-256 of its
pickle (``shared/<sha256>.seg``, listed in the manifest's ``shared`` with its checksum and
size like keyed state files), and every later checkpoint only refers to it by that name:
a checkpoint of an unchanged cache writes no record again (the runtime names and lists the
files: :mod:`slipstream.runtime.checkpoint.snapshot`).

The operator state of a task is pickled by :class:`Sharing`, which writes a segment, and
any batch or large record (:data:`LARGE_RECORD_BYTES`) a segment holds, as a reference to
the segment's digest, wherever it appears: in the cache, in a channel, in a body function's
attributes (KMeans' per-round operator keeps the blocks it was sent). The references are
found by the pickler's ``reducer_override``, which pickle calls only for objects of other
types than its built-in ones (a batch, a segment, an array), so the ints, strings and tuples
of the records in flight pickle at C speed (a ``persistent_id`` would be a Python call per
object). A large record of a built-in type (a long tuple or string) is referenced inside a
batch; held elsewhere, it is written out in full, equal but no longer the same object once
restored. Restoring resolves the references through :class:`SegmentReader`, one decoded
segment per file, so the restored cache and a function's attributes share records again.
Records in a replay cache are replayed as they are every round, so they are treated as
immutable: a record changed in place after it was cached is not seen by checkpoints that
already wrote its segment.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from collections.abc import Callable, Iterable
from typing import Any

from slipstream.operators.elements import RecordBatch, record_bytes

SEGMENT_EXTENSION = "seg"
LARGE_RECORD_BYTES = 1024
"""A record of at least this many bytes (:func:`~slipstream.operators.elements.record_bytes`) is
written by reference to its segment."""

Position = tuple[int, ...]
"""Where an object lies in a segment: ``()`` the segment, ``(b,)`` its batch b, ``(b, r)`` record r of it."""


class Segment:
    """Consecutive batches that never change: in memory (``batches``) or spilled, read through
    ``read`` (a callable returning the segment's encoded bytes). ``digest`` is the SHA-256 of
    its encoding once encoded; the bytes are kept (``_data``) until a checkpoint that wrote them completes."""

    __slots__ = ("_data", "_index", "_read", "batches", "digest", "records", "size")

    def __init__(self, batches: list[RecordBatch] | None, records: int) -> None:
        self.batches = batches
        self.records = records
        self.digest: str | None = None
        self.size = 0
        self._data: memoryview | None = None
        self._read: Callable[[], bytes] | None = None
        self._index: dict[int, Position] | None = None

    @staticmethod
    def encode_batches(batches: list[RecordBatch]) -> bytes:
        return pickle.dumps(batches, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def decode_batches(data: bytes | memoryview) -> list[RecordBatch]:
        batches: list[RecordBatch] = pickle.loads(data)
        return batches

    @classmethod
    def spilled(cls, data: bytes, records: int, read: Callable[[], bytes]) -> Segment:
        """A segment whose encoded bytes ``data`` went to disk, where ``read`` finds them again."""
        segment = cls(None, records)
        segment._named(data)
        segment._data, segment._read = None, read
        return segment

    @classmethod
    def restored(cls, digest: str, data: bytes) -> Segment:
        """A segment read from a checkpoint's (verified) file of SHA-256 ``digest``; its bytes are
        kept until the next checkpoint completes (the storage written to then may not hold the file)."""
        batches = cls.decode_batches(data)
        segment = cls(batches, sum(len(batch) for batch in batches))
        segment.digest, segment.size, segment._data = digest, len(data), memoryview(data)
        return segment

    def _named(self, data: bytes) -> None:
        self.digest, self.size = hashlib.sha256(data).hexdigest(), len(data)
        self._data = memoryview(data)

    def encode(self) -> str:
        """The segment's digest, encoding it the first time."""
        if self.digest is None:
            self._named(self.encode_batches(self.batches))  # type: ignore[arg-type]
        return self.digest  # type: ignore[return-value]

    def unwritten(self) -> memoryview | None:
        """The bytes a checkpoint must write, or None once a completed checkpoint holds them."""
        if self._data is None and self._read is not None:
            return memoryview(self._read())
        return self._data

    def stored(self) -> None:
        """A completed checkpoint holds the segment's file: later ones refer to it only."""
        self._data = self._read = None

    def index(self) -> dict[int, Position]:
        """``id`` of each batch and large record in memory -> its position (built once)."""
        if self._index is None:
            self._index = {}
            for b, batch in enumerate(self.batches or ()):
                self._index[id(batch)] = (b,)
                for r, record in enumerate(batch._values or ()):
                    if record_bytes(record) >= LARGE_RECORD_BYTES:
                        self._index[id(record)] = (b, r)
        return self._index


def _reference(digest: str, position: Position) -> Any:
    """Stands for an object of a segment in a pickle; :class:`SegmentReader` resolves it."""
    raise pickle.UnpicklingError(f"a reference to shared segment {digest} outside a checkpoint's SegmentReader")


class _Reference:
    """A large record of a batch, put in the batch's place in the pickle (see :meth:`Sharing.reduce`)."""

    __slots__ = ("found",)

    def __init__(self, found: tuple[Segment, Position]) -> None:
        self.found = found


class _SharingPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, sharing: Sharing) -> None:
        self.reducer_override = sharing.reduce  # type: ignore[method-assign]  # looked up by __init__
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)


class Sharing:
    """Pickles operator state with references to the segments of ``segments`` (see the module
    docstring); ``used`` collects the segments the pickles refer to, for the manifest."""

    def __init__(self, segments: Iterable[Segment]) -> None:
        self._positions: dict[int, tuple[Segment, Position]] = {}
        for segment in segments:
            for key, position in segment.index().items():
                self._positions[key] = (segment, position)
        self._records = {key for key, (_, position) in self._positions.items() if len(position) == 2}
        self.used: dict[str, tuple[Segment, memoryview | None]] = {}

    @staticmethod
    def of(operators: Iterable[Any]) -> Sharing | None:
        """Sharing over the segments ``operators`` keep (sealing their open ones), or None when they keep none."""
        segments = [segment for operator in operators for segment in operator.shared_segments()]
        return Sharing(segments) if segments else None

    def take_used(self) -> dict[str, tuple[Segment, memoryview | None]]:
        """The segments referred to since the last call, each with the bytes a checkpoint must write
        (read now, on the task's turn: a spilled segment's file changes once the task goes on)."""
        used, self.used = self.used, {}
        return used

    def reduce(self, obj: Any) -> Any:
        """The pickler's ``reducer_override``: a reference for a segment or an object one holds; a
        batch outside the segments with its large records of theirs as references; else pickle's own."""
        kind = type(obj)
        if kind is Segment:
            return self._reference((obj, ()))
        if kind is _Reference:
            return self._reference(obj.found)
        found = self._positions.get(id(obj))
        if found is not None:
            return self._reference(found)
        if kind is RecordBatch and obj._values and self._records and not self._records.isdisjoint(map(id, obj._values)):
            constructor, arguments, state = obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)[:3]
            positions, records = self._positions, self._records
            values = [_Reference(positions[id(value)]) if id(value) in records else value for value in obj._values]
            return constructor, arguments, (values, *state[1:])
        return NotImplemented

    def _reference(self, found: tuple[Segment, Position]) -> tuple[Callable[..., Any], tuple[str, Position]]:
        segment, position = found
        digest = segment.encode()
        if digest not in self.used:
            self.used[digest] = (segment, segment.unwritten())
        return _reference, (digest, position)

    def dumps(self, value: Any) -> bytes:
        out = io.BytesIO()
        _SharingPickler(out, self).dump(value)
        return out.getvalue()


def dumps_plain_or_shared(value: Any, sharing: Sharing | None) -> bytes:
    """``value`` pickled, through ``sharing`` when there is one."""
    if sharing is None:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return sharing.dumps(value)


class SegmentReader:
    """Unpickles what :class:`Sharing` pickled: ``fetch(digest)`` gives a segment file's (verified)
    bytes; ``segments`` keeps each segment decoded once, for every pickle of one checkpoint."""

    def __init__(self, fetch: Callable[[str], bytes], segments: dict[str, Segment] | None = None) -> None:
        self._fetch = fetch
        self.segments: dict[str, Segment] = {} if segments is None else segments

    def segment(self, digest: str) -> Segment:
        segment = self.segments.get(digest)
        if segment is None:
            segment = self.segments[digest] = Segment.restored(digest, self._fetch(digest))
        return segment

    def loads(self, data: bytes) -> Any:
        return _SharingUnpickler(io.BytesIO(data), self).load()


class _SharingUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, reader: SegmentReader) -> None:
        super().__init__(file)
        self._reader = reader

    def find_class(self, module_name: str, global_name: str) -> Any:
        if module_name == __name__ and global_name == _reference.__name__:
            return self._resolve
        return super().find_class(module_name, global_name)

    def persistent_load(self, pid: Any) -> Any:
        """References as checkpoints written before ``reducer_override`` wrote them (persistent ids)."""
        return self._resolve(*pid)

    def _resolve(self, digest: str, position: Position) -> Any:
        segment = self._reader.segment(digest)
        if not position:
            return segment
        batch = segment.batches[position[0]]  # type: ignore[index]
        return batch if len(position) == 1 else batch.values[position[1]]


__all__ = ["LARGE_RECORD_BYTES", "SEGMENT_EXTENSION", "Segment", "SegmentReader", "Sharing",
           "dumps_plain_or_shared"]

"""Record writers: distribute an operator's output over the channels of one edge.

Forward, global and broadcast edges pass whole batches, cut to at most ``batch_size``
records; hash, rebalance, rescale, shuffle and custom edges route record by record
into per-channel buffers that leave as batches when full or when the task's turn ends.
A channel element is what the consuming task takes in one step, so no element is
larger than a batch: a vectorised operator's 65,536-row result held its consumer for a
quarter of a second in one step, while the records of its other inputs waited.

While the producer is backlog (FLIP-327: throughput before latency) an Arrow batch is cut
into pieces :data:`COLUMNAR_BACKLOG_FACTOR` times larger: what a columnar consumer does with a
piece costs about the same for 1,024 rows as for 65,536 (tagging it, buffering it, spilling
it), and at 1,024 rows that per-piece work took four fifths of a vectorised BATCH sum.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from slipstream.datastream.transformations import Partitioning
from slipstream.errors import SlipstreamError, UserFunctionError, key_cause
from slipstream.operators.elements import EndOfInput, RecordBatch
from slipstream.runtime.channels import Channel
from slipstream.runtime.job_graph import StreamEdge
from slipstream.runtime.key_groups import stable_hash, subtasks_at_once

_ROUTED_KEYS_KEPT = 1 << 16
"""Keys whose subtask a hash edge's writer remembers; past them it starts again (hashing a key
in Python costs ten times looking it up)."""

COLUMNAR_BACKLOG_FACTOR = 64
"""An Arrow batch of a producer that is backlog crosses in pieces of up to this many times
``batch_size`` rows (65,536 at the default), Python rows and Arrow after the backlog in pieces of
``batch_size``."""


def target_subtasks(partitioning: Partitioning, subtask_index: int, upstream_parallelism: int,
                    downstream_parallelism: int) -> list[int]:
    """The downstream subtasks an upstream subtask has channels to."""
    if partitioning is Partitioning.FORWARD:
        return [subtask_index]
    if partitioning is Partitioning.RESCALE:
        if downstream_parallelism >= upstream_parallelism:
            return [j for j in range(downstream_parallelism)
                    if j * upstream_parallelism // downstream_parallelism == subtask_index]
        return [subtask_index * downstream_parallelism // upstream_parallelism]
    return list(range(downstream_parallelism))


class RecordWriter:
    """Writes one upstream subtask's output on one edge."""

    def __init__(self, edge: StreamEdge, subtask_index: int, channels: list[Channel],
                 batch_size: int, seed: int) -> None:
        self.edge = edge
        self.subtask_index = subtask_index
        self.channels = channels
        self.batch_size = batch_size
        self.producer_in_backlog: Callable[[], bool] = lambda: False  # set by the job run to its task's
        self._pending: list[list[Any]] = [[] for _ in channels]
        self._pending_ts: list[list[Any] | None] = [None for _ in channels]
        self._next = subtask_index % len(channels)
        self._rng = random.Random(seed * 1_000_003 + subtask_index)
        self._downstream_parallelism = edge.target.parallelism
        self._max_parallelism = edge.target.max_parallelism
        self._targets: dict[Any, int] = {}  # key -> subtask, for the keys routed lately (hash edges)
        partitioning = edge.partitioning
        if partitioning in (Partitioning.FORWARD, Partitioning.GLOBAL) or (len(channels) == 1 and \
                partitioning is not Partitioning.BROADCAST):
            self.emit = self._emit_first  # type: ignore[method-assign]
        elif partitioning is Partitioning.BROADCAST:
            self.emit = self._emit_all  # type: ignore[method-assign]
        elif partitioning is Partitioning.HASH:
            self.emit = self._emit_hash  # type: ignore[method-assign]
        elif partitioning is Partitioning.CUSTOM:
            self.emit = self._emit_custom  # type: ignore[method-assign]
        elif partitioning is Partitioning.SHUFFLE:
            self.emit = self._emit_shuffle  # type: ignore[method-assign]
        else:
            self.emit = self._emit_round_robin  # type: ignore[method-assign]

    def emit(self, batch: RecordBatch) -> None:
        """Route ``batch``; replaced at construction by the edge's partitioning."""
        raise NotImplementedError

    def has_capacity(self) -> bool:
        for channel in self.channels:
            if channel.is_full():  # a SpillingChannel (capacity 0) is never full
                return False
        return True

    # -- whole batches ----------------------------------------------------------------------------
    def _pieces(self, batch: RecordBatch) -> list[RecordBatch]:
        """``batch`` cut to what a consumer takes in one step (larger for Arrow during backlog)."""
        if batch.arrow is not None and self.producer_in_backlog():
            return batch.split(self.batch_size * COLUMNAR_BACKLOG_FACTOR)
        return batch.split(self.batch_size)

    def _emit_first(self, batch: RecordBatch) -> None:
        channel = self.channels[0]
        for piece in self._pieces(batch):
            channel.push(piece)

    def _emit_all(self, batch: RecordBatch) -> None:
        for piece in self._pieces(batch):
            for channel in self.channels:
                channel.push(piece)

    # -- record by record -------------------------------------------------------------------------
    def _route(self, batch: RecordBatch, targets: list[int]) -> None:
        """Append each record to the buffer of its target channel; flush full buffers."""
        pending, pending_ts = self._pending, self._pending_ts
        timestamps = batch.timestamps
        if timestamps is None and not any(pending_ts):
            appends = [buffer.append for buffer in pending]
            for value, target in zip(batch.values, targets):
                appends[target](value)
        else:
            for target, buffer_ts in enumerate(pending_ts):  # timestamps from here on, None for those before
                if buffer_ts is None:
                    pending_ts[target] = [None] * len(pending[target])
            stamps = timestamps if timestamps is not None else [None] * len(targets)
            for value, stamp, target in zip(batch.values, stamps, targets):
                pending[target].append(value)
                pending_ts[target].append(stamp)  # type: ignore[union-attr]  # made a list above
        size = self.batch_size
        for target, buffer in enumerate(pending):
            if len(buffer) >= size:
                self._flush_channel(target)

    def _emit_hash(self, batch: RecordBatch) -> None:
        selector = self.edge.key_selector
        assert selector is not None  # a hash edge has one
        try:
            keys = list(map(selector, batch.values))
            try:
                targets = list(map(self._targets.__getitem__, keys))  # in C: the usual case, keys seen before
            except KeyError:
                targets = self._targets_of(keys)
        except SlipstreamError:
            raise
        except Exception as exc:
            raise self._key_error(batch, selector, exc) from exc
        self._route(batch, targets)

    def _targets_of(self, keys: list[Any]) -> list[int]:
        """The subtask of each key, for a batch with keys not routed lately, remembered while the
        dict kept has room. A batch of numbers, of str or of bytes is hashed at once in numpy
        (past that room too: a dict emptied and refilled by every batch would cost twice as
        much); other keys one by one, the dict emptied when full. Equal keys have equal stable
        hashes (1, 1.0 and True too), so a dict of what keys were routed to answers for them."""
        cache = self._targets
        parallelism, max_parallelism = self._downstream_parallelism, self._max_parallelism
        at_once = subtasks_at_once(keys, max_parallelism, parallelism)
        if at_once is not None:
            if len(cache) + len(keys) <= _ROUTED_KEYS_KEPT:
                cache.update(zip(keys, at_once))
            return at_once
        if len(cache) + len(keys) > _ROUTED_KEYS_KEPT:
            cache.clear()
        targets = []
        for key in keys:
            target = cache.get(key)
            if target is None:
                target = cache[key] = stable_hash(key) % max_parallelism * parallelism // max_parallelism
            targets.append(target)
        return targets

    def _key_error(self, batch: RecordBatch, selector: Any, cause: BaseException) -> UserFunctionError:
        """Find the record whose key failed, to name it (only on the error path)."""
        record = key = None
        for record in batch.values:
            try:
                key = selector(record)
                stable_hash(key)
            except Exception:
                break
        if isinstance(cause, TypeError):
            cause = key_cause(cause, key)
        return UserFunctionError(f"key_by before '{self.edge.target.name}'", self.subtask_index,
                                 self.edge.source.parallelism, record, cause, what="key of record")

    def _emit_custom(self, batch: RecordBatch) -> None:
        selector, partitioner = self.edge.key_selector, self.edge.partitioner
        assert selector is not None and partitioner is not None  # a custom edge has both
        count = len(self.channels)
        targets = []
        for value in batch.values:
            try:
                target = partitioner.partition(selector(value), count)
            except Exception as exc:
                raise UserFunctionError(f"partition_custom before '{self.edge.target.name}'",
                                        self.subtask_index, self.edge.source.parallelism, value,
                                        exc) from exc
            if not isinstance(target, int) or not 0 <= target < count:
                raise UserFunctionError(f"partition_custom before '{self.edge.target.name}'",
                                        self.subtask_index, self.edge.source.parallelism, value,
                                        ValueError(f"partitioner returned {target!r}, expected an int "
                                                   f"in [0, {count})"))
            targets.append(target)
        self._route(batch, targets)

    def _emit_shuffle(self, batch: RecordBatch) -> None:
        randrange, count = self._rng.randrange, len(self.channels)
        self._route(batch, [randrange(count) for _ in batch.values])

    def _emit_round_robin(self, batch: RecordBatch) -> None:
        count, start = len(self.channels), self._next
        targets = [(start + i) % count for i in range(len(batch.values))]
        self._next = (start + len(batch.values)) % count
        self._route(batch, targets)

    # -- checkpoints of iterations -----------------------------------------------------------------
    def snapshot(self) -> tuple[int, Any]:
        """Where round robin and shuffle stand, so a restored iteration routes as the run it continues."""
        return self._next, self._rng.getstate()

    def restore(self, state: tuple[int, Any]) -> None:
        self._next = state[0]
        self._rng.setstate(state[1])

    # -- buffers and events -----------------------------------------------------------------------
    def _flush_channel(self, target: int) -> None:
        values = self._pending[target]
        if values:
            self.channels[target].push(RecordBatch(values, self._pending_ts[target]))
            self._pending[target] = []
            self._pending_ts[target] = None

    def flush(self) -> None:
        for target in range(len(self.channels)):
            self._flush_channel(target)

    def broadcast_event(self, element: Any) -> None:
        """Send a watermark, attributes or end of input to every channel, after buffered records."""
        self.flush()
        for channel in self.channels:
            channel.push(element)

    def send_event(self, element: Any, target: int) -> None:
        """Send an event (a latency marker) to channel ``target`` alone, after its buffered records."""
        self._flush_channel(target)
        self.channels[target].push(element)

    def finish(self) -> None:
        """Send end of input everywhere and mark the channels finished (blocking consumers may start)."""
        self.broadcast_event(EndOfInput())
        for channel in self.channels:
            channel.producer_finished = True

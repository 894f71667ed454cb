"""The co-group's batch work on an engine that runs functions out of process (Spark).

With EndOfStreamWindows whose final watermark has arrived, the co-group operator runs its
function directly over each key's two groups (see :mod:`slipstream.operators.co_group_batch`).
An in-process engine (polars) walks the sort buffers key by key in this process; an engine
whose ``in_process`` is false gets the whole backlog through
:meth:`~slipstream.operators.batch_engine.BatchEngine.co_group` (per-key functions, joins) or
:meth:`~slipstream.operators.batch_engine.BatchEngine.co_group_vectorized` (vectorised
functions) and the function runs in its workers. Outputs come back in the order the
in-process walk produces: keys in first-seen order, each key's outputs as the function
yielded them (for vectorised functions, the rows of every partition of keys).
"""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

from slipstream.datastream.window import Window
from slipstream.errors import user_code
from slipstream.operators.base import split_outputs
from slipstream.operators.batch_engine import KEY_COLUMN, CoGroupFunctionError
from slipstream.operators.co_group_batch import FLUSH_EVERY, CoGroupHost, co_group_cause
from slipstream.operators.co_group_frames import frame_rows
from slipstream.operators.sort_buffer import SortBuffer


def _side_records(buffer: SortBuffer) -> tuple[list[int], list[int | None], list[Any]]:
    """The buffer's key ids, timestamps and records, grouped by key in timestamp order."""
    keys: list[Any] = []
    stamps: list[int | None] = []
    values: list[Any] = []
    for key, stamp, value in buffer.records():
        keys.append(key)
        stamps.append(stamp)
        values.append(value)
    return buffer.key_dictionary.ids_of(keys), stamps, values


def _pickled_side(host: CoGroupHost, input_index: int, buffer: SortBuffer) -> pa.Table:
    key_ids, stamps, values = _side_records(buffer)
    dumps = pickle.dumps
    blobs: list[bytes] = []
    value: Any = None
    with user_code(host, lambda: value, what=f"record of input {input_index + 1}", explain=lambda exc: TypeError(
            f"the record cannot be pickled to go to the {host.ctx.batch_engine.name} engine's workers "
            f"({type(exc).__name__}: {exc}); use the polars batch engine")):
        for value in values:
            blobs.append(dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return pa.table({"key": pa.array(key_ids, pa.int64()), "ts": pa.array(stamps, pa.int64()),
                     "seq": pa.array(range(len(values)), pa.int64()),
                     "value": pa.array(blobs, pa.large_binary())})


class OnEngine:
    """The whole backlog handed to the engine, whose workers run the function."""

    def __init__(self, buffers: list[SortBuffer]) -> None:
        self.buffers = buffers

    def run(self, host: CoGroupHost, window: Window) -> int:
        """Run the co-group function over the whole backlog on the host's engine; collect its
        outputs into the host (as :meth:`CoGroupHost.call` does) and flush them. Returns the
        number of keys evaluated."""
        if host.vectorized:
            self._vectorized(host, window)
        else:
            self._per_key(host, window)
        host.flush()
        return len(self.buffers[0].key_dictionary)

    def _per_key(self, host: CoGroupHost, window: Window) -> None:
        buffers = self.buffers
        sides = [_pickled_side(host, index, buffer) for index, buffer in enumerate(buffers)]
        try:
            result = host.ctx.batch_engine.co_group(sides[0], sides[1], host.function.co_group)
        except CoGroupFunctionError as exc:
            key = buffers[0].key_dictionary.key_of(exc.key_ids[0]) if exc.key_ids else None
            cause = co_group_cause(exc.cause)
            raise host.user_error(window, cause, what=f"key {key!r}, window") from exc.cause
        loads = pickle.loads
        timestamp = window.max_timestamp()
        outputs: list[Any] = []
        current = None
        values, timestamps, side = host.outputs()
        for key_id, blob in zip(result.column("key").to_pylist(), result.column("value").to_pylist()):
            if key_id != current and outputs:
                split_outputs(outputs, timestamp, values, timestamps, side)
                outputs = []
                if len(values) >= FLUSH_EVERY:
                    host.flush()
                    values, timestamps, side = host.outputs()
            current = key_id
            outputs.append(loads(blob))
        split_outputs(outputs, timestamp, values, timestamps, side)

    def _vectorized(self, host: CoGroupHost, window: Window) -> None:
        import polars as pl
        tables = []
        likes = []
        for index, buffer in enumerate(self.buffers):
            key_ids, _, values = _side_records(buffer)
            frame = host.frame(values, index).to_arrow()
            tables.append(frame.append_column(KEY_COLUMN, pa.array(key_ids, pa.int64())))
            likes.extend(values[:1])
        try:
            result = host.ctx.batch_engine.co_group_vectorized(tables[0], tables[1], host.function.co_group)
        except CoGroupFunctionError as exc:
            keys = [self.buffers[0].key_of(key_id) for key_id in exc.key_ids]
            shown = keys if len(keys) <= 5 else [*keys[:5], "…"]
            raise host.user_error(window, exc.cause, what=f"{len(keys)} key(s) {shown}, window") from exc.cause
        if result is None:
            return
        rows = frame_rows(pl.from_arrow(result), likes[0])
        values, timestamps, _ = host.outputs()
        values.extend(rows)
        timestamps.extend([window.max_timestamp()] * len(rows))


__all__ = ["OnEngine"]

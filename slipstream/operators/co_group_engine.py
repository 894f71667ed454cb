"""The co-group's batch work on an engine that runs functions out of process (Spark).

With EndOfStreamWindows whose final watermark has arrived, the co-group operator runs its
function directly over each key's two groups (see :mod:`slipstream.operators.co_group`).
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
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from slipstream.operators.base import split_outputs
from slipstream.operators.batch_engine import KEY_COLUMN, CoGroupFunctionError

if TYPE_CHECKING:
    from slipstream.datastream.window import Window
    from slipstream.operators.co_group import CoGroupOperator
    from slipstream.operators.sort_buffer import SortBuffer

FLUSH_EVERY = 4096


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


def _pickled_side(operator: CoGroupOperator, input_index: int, buffer: SortBuffer) -> pa.Table:
    key_ids, stamps, values = _side_records(buffer)
    dumps = pickle.dumps
    value: Any = None
    try:
        blobs = [dumps(value, protocol=pickle.HIGHEST_PROTOCOL) for value in values]
    except Exception as exc:
        raise operator.user_error(value, TypeError(
            f"the record cannot be pickled to go to the {operator.ctx.batch_engine.name} engine's workers "
            f"({type(exc).__name__}: {exc}); use the polars batch engine"),
            what=f"record of input {input_index + 1}") from exc
    return pa.table({"key": pa.array(key_ids, pa.int64()), "ts": pa.array(stamps, pa.int64()),
                     "seq": pa.array(range(len(values)), pa.int64()),
                     "value": pa.array(blobs, pa.large_binary())})


def evaluate_on_engine(operator: CoGroupOperator, buffers: list[SortBuffer], window: Window) -> int:
    """Run the co-group function over the whole backlog on the operator's engine; collect its
    outputs into the operator (as :meth:`CoGroupOperator._call` does) and flush them.
    Returns the number of keys evaluated."""
    engine = operator.ctx.batch_engine
    dictionary = buffers[0].key_dictionary
    if operator.vectorized:
        _vectorized(operator, buffers, window)
    else:
        sides = [_pickled_side(operator, index, buffer) for index, buffer in enumerate(buffers)]
        try:
            result = engine.co_group(sides[0], sides[1], operator.function.co_group)
        except CoGroupFunctionError as exc:
            key = dictionary.key_of(exc.key_ids[0]) if exc.key_ids else None
            cause = _explained(exc.cause)
            raise operator.user_error(window, cause, what=f"key {key!r}, window") from exc.cause
        loads = pickle.loads
        timestamp = window.max_timestamp()
        outputs: list[Any] = []
        current = None
        for key_id, blob in zip(result.column("key").to_pylist(), result.column("value").to_pylist()):
            if key_id != current and outputs:
                split_outputs(outputs, timestamp, operator._values, operator._timestamps, operator._side)
                outputs = []
                if len(operator._values) >= FLUSH_EVERY:
                    operator._flush()
            current = key_id
            outputs.append(loads(blob))
        split_outputs(outputs, timestamp, operator._values, operator._timestamps, operator._side)
    operator._flush()
    return len(dictionary)


def _vectorized(operator: CoGroupOperator, buffers: list[SortBuffer], window: Window) -> None:
    import polars as pl

    from slipstream.operators.co_group import frame_rows
    tables = []
    likes = []
    for index, buffer in enumerate(buffers):
        key_ids, _, values = _side_records(buffer)
        frame = operator._frame(values, index).to_arrow()
        tables.append(frame.append_column(KEY_COLUMN, pa.array(key_ids, pa.int64())))
        likes.extend(values[:1])
    try:
        result = operator.ctx.batch_engine.co_group_vectorized(tables[0], tables[1], operator.function.co_group)
    except CoGroupFunctionError as exc:
        keys = [buffers[0].key_of(key_id) for key_id in exc.key_ids]
        shown = keys if len(keys) <= 5 else [*keys[:5], "…"]
        raise operator.user_error(window, exc.cause, what=f"{len(keys)} key(s) {shown}, window") from exc.cause
    if result is None:
        return
    rows = frame_rows(pl.from_arrow(result), likes[0])
    operator._values.extend(rows)
    if operator._timestamps is not None:
        operator._timestamps.extend([window.max_timestamp()] * len(rows))


def _explained(cause: BaseException) -> BaseException:
    if isinstance(cause, TypeError) and "not iterable" in str(cause):
        return TypeError(f"a co-group function must yield its outputs (or return an iterable or None): {cause}")
    return cause

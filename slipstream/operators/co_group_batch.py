"""The co-group's batch work: a complete backlog evaluated directly, key by key or over DataFrames.

With EndOfStreamWindows whose final watermark has arrived, every window of the backlog is
complete, so the co-group operator (:mod:`slipstream.operators.co_group`) runs its function over
each key's two groups — or, vectorised, over DataFrames of many keys — with no window state,
timer or trigger. *Whether* the backlog runs so is the operator's decision; *how* is one of the
:class:`CoGroupBatchWork` paths, chosen by :func:`row_batch_work` or :func:`column_batch_work`:

* :class:`RowsPerKey` and :class:`RowsVectorised`: the row sort buffers walked in this process
  (keys in first-seen order, each key's records in arrival order, or timestamp order in BATCH mode);
* :class:`~slipstream.operators.co_group_columns.ColumnsPerKey` and
  :class:`~slipstream.operators.co_group_columns.ColumnsVectorised`: every input buffered as
  Arrow, evaluated partition by partition on its columns;
* :class:`~slipstream.operators.co_group_engine.OnEngine`: an engine whose functions run out of
  process (Spark) gets the whole backlog.

A path sees the operator only through :class:`CoGroupHost`: its function, its current key, the
calls that evaluate one key or many (naming them when the function fails) and its outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from slipstream.datastream.window import Window
from slipstream.errors import NamesUserErrors, UserCode, user_code
from slipstream.operators.base import OperatorContext
from slipstream.operators.columnar_buffer import ColumnarBuffer
from slipstream.operators.sort_buffer import SortBuffer, co_grouped

BATCH_KEYS_METRIC = "backlog_keys_evaluated"
FLUSH_EVERY = 4096
"""Outputs collected during batch work before they are sent on."""


def co_group_cause(exc: BaseException) -> BaseException:
    """What a co-group function's failure is reported as: ``exc``, or for a result it cannot
    iterate, a TypeError that says what the function must return."""
    if isinstance(exc, TypeError) and "not iterable" in str(exc):
        return TypeError(f"a co-group function must yield its outputs (or return an iterable or None): {exc}")
    return exc


def key_guard(host: NamesUserErrors, window: Callable[[], Window], key: Callable[[], Any]) -> UserCode:
    """The guard around calls of a co-group function: a failure names the window and the key
    ``window()`` and ``key()`` give when it fails. Enter it for each key (it is reusable): building
    one costs more than entering it."""
    return user_code(host, window, what=lambda: f"key {key()!r}, window", explain=co_group_cause)


class CoGroupHost(NamesUserErrors, Protocol):
    """What a co-group operator offers the batch work that runs its backlog."""

    vectorized: bool
    function: Any  # the CoGroupFunction (or VectorizedCoGroupFunction)
    ctx: OperatorContext

    def set_current_key(self, key: Any) -> None:
        """Make ``key`` current, so the function's keyed state is the key's."""

    def collect(self, window: Window, first: list[Any], second: list[Any]) -> None:
        """Run the function over one key's groups (the key current) and collect its outputs."""

    def call_vectorized(self, window: Window, keys: list[Any], first: list[Any], second: list[Any]) -> None:
        """Run the vectorised function over DataFrames of the records of ``keys`` (failures name them)."""

    def frame(self, records: list[Any], input_index: int) -> Any:
        """The polars DataFrame of ``records`` of input ``input_index``, typed as the input declares."""

    def outputs(self) -> tuple[list[Any], list[Any], dict[Any, Any]]:
        """The output values, their timestamps and side outputs collected so far (appended to in place)."""

    def flush(self) -> None:
        """Send the collected outputs on."""

    def emit_arrow(self, batch: Any, timestamp: int) -> None:
        """Send an Arrow record batch of results on, after what was collected before."""


class CoGroupBatchWork(Protocol):
    """One way to evaluate a co-group's complete backlog as batch work."""

    def run(self, host: CoGroupHost, window: Window) -> int | None:
        """Evaluate every key of the backlog in ``window``, emit the results through ``host``, and
        return the number of keys evaluated (None: a vectorised path that does not count them)."""


class RowsPerKey:
    """The row buffers walked key by key in this process, the function called once per key."""

    def __init__(self, buffers: list[SortBuffer]) -> None:
        self.buffers = buffers

    def run(self, host: CoGroupHost, window: Window) -> int:
        count = 0
        set_key, collect, flush = host.set_current_key, host.collect, host.flush
        values = host.outputs()[0]
        key = None
        guard = key_guard(host, lambda: window, lambda: key)
        for key, ((_, first), (_, second)) in co_grouped(*self.buffers):
            with guard:
                set_key(key)
                collect(window, first, second)
            count += 1
            if len(values) >= FLUSH_EVERY:
                flush()
                values = host.outputs()[0]
        host.flush()
        return count


class RowsVectorised:
    """The row buffers in this process, the vectorised function called once over all their keys."""

    def __init__(self, buffers: list[SortBuffer]) -> None:
        self.buffers = buffers

    def run(self, host: CoGroupHost, window: Window) -> int:
        first = [value for _, _, value in self.buffers[0].records()]
        second = [value for _, _, value in self.buffers[1].records()]
        keys = list(self.buffers[0].key_dictionary.keys)
        host.call_vectorized(window, keys, first, second)
        host.flush()
        return len(keys)


def columns_ready(buffers: list[SortBuffer], columnar: list[ColumnarBuffer | None]) -> bool:
    """Whether the backlog can run on its columns: every input buffered as Arrow (or empty),
    with keys of one family on both sides (integers never equal strings, so no fallback needed
    for correctness, but the partitions must hash alike)."""
    if any(buffer is None for buffer in columnar) or any(len(buffer) for buffer in buffers):
        return False
    kinds = {buffer.kind for buffer in columnar if buffer is not None and len(buffer)}
    return len(kinds) <= 1


def row_batch_work(host: CoGroupHost, buffers: list[SortBuffer]) -> CoGroupBatchWork:
    """The path for a complete backlog in row buffers: on the engine when it runs functions out of
    process, else walked here, key by key or vectorised."""
    from slipstream.operators.co_group_engine import OnEngine
    if not getattr(host.ctx.batch_engine, "in_process", True):
        return OnEngine(buffers)
    return RowsVectorised(buffers) if host.vectorized else RowsPerKey(buffers)


def column_batch_work(host: CoGroupHost, columnar: list[ColumnarBuffer | None]) -> CoGroupBatchWork:
    """The path for a complete backlog buffered as Arrow (:func:`columns_ready` holds)."""
    from slipstream.operators.co_group_columns import ColumnsPerKey, ColumnsVectorised
    return ColumnsVectorised(columnar) if host.vectorized else ColumnsPerKey(columnar)


__all__ = [
    "BATCH_KEYS_METRIC",
    "CoGroupBatchWork",
    "CoGroupHost",
    "RowsPerKey",
    "RowsVectorised",
    "co_group_cause",
    "column_batch_work",
    "columns_ready",
    "key_guard",
    "row_batch_work",
]

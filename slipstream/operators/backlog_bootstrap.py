"""The operator side of :class:`~slipstream.datastream.bootstrap.KeyedStateBootstrapFunction`.

:class:`BootstrapBacklog` keeps a keyed process operator's backlog as polars frames (Arrow
batches as they are, row batches converted once per batch) and, at the switch, calls the
function's ``process_backlog`` once with all of them and installs the state it returns, column
by column, into the operator's ``ValueState`` tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slipstream.datastream.fields import FieldKey
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.typeinfo import Row
from slipstream.errors import InvalidProgramError, SlipstreamError
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch
from slipstream.operators.spill_file import CheckpointFile, StoredContents, arrow_file_bytes, read_arrow_file

if TYPE_CHECKING:
    import polars as pl


def frame_of(batch: RecordBatch) -> pl.DataFrame:
    """A batch's records as a polars frame: Arrow as it is; named rows and dicts by field name;
    tuples and scalars as ``f0``, ``f1``, …"""
    import polars as pl  # here, not at import: see slipstream.operators.columnar_backlog
    if batch.arrow is not None:
        return pl.DataFrame(pl.from_arrow(batch.arrow))
    values = batch.values
    first = values[0]
    if isinstance(first, Row) and first._fields is not None:
        return pl.DataFrame([row.as_dict() for row in values])
    if isinstance(first, dict):
        return pl.DataFrame(values)
    if isinstance(first, (tuple, list, Row)):
        return pl.DataFrame([tuple(value) for value in values], orient="row",
                            schema=[f"f{index}" for index in range(len(first))])
    return pl.DataFrame({"f0": values})


class BootstrapBacklog:
    """One keyed process operator's backlog, for its function's ``process_backlog``."""

    def __init__(self, operator: StreamOperator, key_selector: Any) -> None:
        if not isinstance(key_selector, FieldKey):
            raise InvalidProgramError(
                f"operator '{operator.ctx.name}': a KeyedStateBootstrapFunction needs a stream keyed by a "
                f"field (key_by('name') or key_by(position)), so its backlog frame has a key column; got "
                f"{key_selector!r}")
        self.operator = operator
        self.field = key_selector.field
        self.frames: list[pl.DataFrame] = []

    def add(self, batch: RecordBatch) -> None:
        if len(batch):
            self.frames.append(frame_of(batch))
            metrics = self.operator.ctx.metrics
            metrics["backlog_records"] = metrics.get("backlog_records", 0) + len(batch)

    def snapshot(self) -> CheckpointFile | None:
        """The frames for a checkpoint taken while buffering: one Arrow IPC file (None: no frames)."""
        if not self.frames:
            return None
        import polars as pl
        self.frames = [pl.concat(self.frames, how="vertical_relaxed")]
        return CheckpointFile(data=arrow_file_bytes(self.frames[0].to_arrow()))

    def restore(self, data: bytes | StoredContents | None) -> None:
        """Start from a checkpoint's :meth:`snapshot` (its file's bytes)."""
        if data is not None:
            import polars as pl
            self.frames = [pl.DataFrame(pl.from_arrow(read_arrow_file(data)))]

    def run(self, process_backlog: Any) -> None:
        """Call ``process_backlog`` with the whole backlog and install the state it returns."""
        import polars as pl
        frames, self.frames = self.frames, []
        if not frames:
            return
        frame = pl.concat(frames, how="vertical_relaxed")
        operator = self.operator
        key = key_column(frame, self.field)
        state = operator.call_user(process_backlog, frame, what="process_backlog()")
        state_keys, columns = checked_state(state, key, frame[key].to_list(), operator.ctx.name)
        backend = operator.keyed_backend()
        for name, values in columns.items():
            backend.bulk_load(ValueStateDescriptor(name), state_keys, values)


def key_column(frame: pl.DataFrame, field: str | int) -> str:
    """The name of the key's column in a backlog frame (a position names its ``f<n>`` column)."""
    return field if isinstance(field, str) else frame.columns[field]


def checked_state(state: Any, key: str, backlog_keys: list[Any], operator_name: str) -> tuple[
        list[Any], dict[str, list[Any]]]:
    """What ``process_backlog`` returned, checked (a polars DataFrame, one row per key of its backlog,
    ``key`` among its columns): the keys, and each ``ValueState``'s values in their order."""
    import polars as pl
    if not isinstance(state, pl.DataFrame) or key not in state.columns:
        raise SlipstreamError(f"operator '{operator_name}': process_backlog must return a polars DataFrame "
                              f"with the key column {key!r} and a column per ValueState, got {state!r}"[:400])
    keys = set(backlog_keys)
    state_keys = state[key].to_list()
    if len(set(state_keys)) != len(state_keys) or not keys.issuperset(state_keys):
        stray = next((k for k in state_keys if k not in keys), None)
        problem = f"state for key {stray!r}, which is not in its backlog" if stray is not None \
            else "more than one row for a key"
        raise SlipstreamError(f"operator '{operator_name}': process_backlog returned {problem}; it returns "
                              "one row per key of the frame it was given")
    return state_keys, {name: state[name].to_list() for name in state.columns if name != key}

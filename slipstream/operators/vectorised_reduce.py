"""The keyed built-in aggregations (``sum``/``min``/``max``/``min_by``/``max_by``) over an Arrow backlog, as polars
queries.

A keyed rolling aggregation whose backlog arrives as Arrow batches (a Parquet or Arrow
source feeding ``key_by(field).sum(field)`` at the same parallelism) keeps it as columns
(:class:`~slipstream.operators.columnar_backlog.IntervalColumns`) and at the switch computes
with one polars query what the rolling reduce would have emitted record by record:

* STREAMING (:func:`rolling_updates`): every record's rolling value — ``cum_sum``/
  ``cum_min``/``cum_max`` over the key in arrival order, the other fields taken from the
  key's first record; for ``min_by``/``max_by`` the record that holds the running extreme
  (the earliest on ties) — ordered as the sorted replay emits them: interval by interval,
  each interval key by key (keys in first-seen order), each key's in arrival order;
* BATCH (:func:`final_values`): each key's final value over its records in timestamp order
  (records without one first, then arrival), carrying its latest timestamp, keys in
  first-seen order. Past its memory budget a BATCH backlog without timestamps is combined
  (:func:`combined_records`) rather than spilled, as a map-side combiner does: each key's
  records fold to the one or two that give the same final value.

Only what polars computes exactly as Python does is taken (:func:`vectorisable_field`):
integer fields (no nulls; a sum that stays within int64 and fits the field's type) and
``float64`` fields (no nulls; for ``min``/``max``/``*_by`` no NaN or -0.0, whose
comparisons differ; a float sum adds in arrival order, as the rolling reduce does). Anything
else goes back to rows and the Python path. Operators import this module (and polars) only when
a columnar backlog is read back.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from slipstream.operators.columnar_backlog import EXTRA_COLUMNS, INTERVAL_COLUMN, RANK_COLUMN, SEQ_COLUMN
from slipstream.operators.columnar_buffer import TS_COLUMN

POSITION_COLUMN = "__slipstream_position"
"""A row's position in the frame (where ``min_by``/``max_by`` find the record they pick)."""

CUMULATIVE = {"sum": "cum_sum", "min": "cum_min", "max": "cum_max", "min_by": "cum_min", "max_by": "cum_max"}
"""The polars scan behind each built-in aggregation."""

INT_TYPES = frozenset({pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32})
INT64_LIMIT = 2 ** 63


def vectorisable_field(column: pl.Series, kind: str) -> bool:
    """Whether polars aggregates ``column`` exactly as the rolling reduce does in Python."""
    if column.null_count():
        return False
    if column.dtype in INT_TYPES:
        return kind != "sum" or float(column.cast(pl.Float64).abs().sum()) < INT64_LIMIT / 2
    if column.dtype != pl.Float64:
        return False
    if kind == "sum":
        return True
    values = column.to_numpy()
    return not (np.isnan(values).any() or np.signbit(values[values == 0.0]).any())


def rolling_updates(frame: pl.DataFrame, key: str, field: str, kind: str, *, in_arrival_order: bool) -> pl.DataFrame:
    """What the rolling reduce emits for each record of ``frame`` (in arrival order per key), in
    the replay's order: by interval, key first seen, arrival. When ``frame`` is in arrival order
    a stable sort by one integer (interval and rank combined) gives it, the cheapest sort there is."""
    rolled = _rolling(frame, key, field, kind)
    span = int(rolled[SEQ_COLUMN].max()) + 1  # type: ignore[arg-type]
    if int(rolled[INTERVAL_COLUMN].max()) * span >= INT64_LIMIT // 2:  # type: ignore[arg-type]
        return rolled.sort([INTERVAL_COLUMN, RANK_COLUMN, SEQ_COLUMN])
    order = pl.col(INTERVAL_COLUMN) * span + pl.col(RANK_COLUMN)
    return rolled.sort([order] if in_arrival_order else [order, pl.col(SEQ_COLUMN)], maintain_order=True)


def final_values(frame: pl.DataFrame, key: str, field: str, kind: str, *,
                 in_arrival_order: bool = False) -> pl.DataFrame:
    """Each key's final value over its records in timestamp order (nulls first, then arrival),
    with the key's latest timestamp in :data:`TS_COLUMN` (when there is one), keys first seen first.
    One ``group_by``; a float sum is the last of a running sum, added in that order. A ``frame``
    in arrival order without timestamps is grouped keeping its keys' order, which is then already
    first seen first (a third cheaper than ranking the keys and sorting by rank)."""
    stamped = TS_COLUMN in frame.columns
    ordered = frame.sort([TS_COLUMN, SEQ_COLUMN], nulls_last=False) if stamped else frame
    records = [name for name in frame.columns if name not in (TS_COLUMN, RANK_COLUMN, *EXTRA_COLUMNS)]
    dtype = frame.schema[field]
    in_order = in_arrival_order and not stamped and not (kind == "sum" and dtype.is_float())
    rank = pl.col(SEQ_COLUMN).first() if in_order else pl.col(SEQ_COLUMN).min()
    extras = [rank.alias(RANK_COLUMN)] + ([pl.col(TS_COLUMN).max()] if stamped else [])
    if kind == "sum" and dtype.is_float():
        folded = _rolling(ordered, key, field, kind).group_by(key).last().select(records)
        final = folded.join(frame.group_by(key).agg(*extras), on=key)
    elif kind in ("sum", "min", "max"):
        value = pl.col(field).cast(pl.Int64).sum() if kind == "sum" else getattr(pl.col(field), kind)()
        final = narrowed(ordered.group_by(key, maintain_order=in_order).agg(
            value, *[pl.col(name).first() for name in records if name not in (key, field)], *extras), field, dtype)
    else:
        pick = pl.col(field).arg_min() if kind == "min_by" else pl.col(field).arg_max()
        final = ordered.group_by(key, maintain_order=in_order).agg(
            *[pl.col(name).get(pick) for name in records if name != key], *extras)
    if not in_order:
        final = final.sort(RANK_COLUMN)
    return final.select(records + [RANK_COLUMN] + ([TS_COLUMN] if stamped else []))


def combined_records(table: pa.Table, key: str, field: str, kind: str) -> pa.Table | None:
    """Buffered records (``table``, in arrival order) replaced by fewer that give every key the same
    final value, first-seen order and other fields in BATCH mode: for ``sum``, ``min`` and ``max`` the
    key's first record carrying the aggregate; for ``min_by`` and ``max_by`` the key's first record and
    the record it picks so far (real records both, so the final pick is the same). In arrival order,
    with the table's schema. None where that would not be exact: records with timestamps (their
    order is not arrival), a float sum (addition order), a field polars does not fold as Python
    (:func:`vectorisable_field`) or a sum outside the field's type."""
    if TS_COLUMN in table.column_names:
        return None
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    dtype = frame.schema[field]
    if (kind == "sum" and dtype.is_float()) or not vectorisable_field(frame[field], kind):
        return None
    if kind in ("sum", "min", "max"):
        value = pl.col(field).cast(pl.Int64).sum() if kind == "sum" else getattr(pl.col(field), kind)()
        others = [pl.col(name).first() for name in frame.columns if name not in (key, field)]
        folded = frame.group_by(key, maintain_order=True).agg(value, *others)  # keys in first-seen order
        try:
            folded = folded.with_columns(pl.col(field).cast(dtype, strict=True))
        except pl.exceptions.InvalidOperationError:
            return None
    else:
        pick = pl.col(field).arg_min() if kind == "min_by" else pl.col(field).arg_max()  # the earliest on ties
        rows = frame.with_row_index(POSITION_COLUMN).group_by(key).agg(
            pl.col(POSITION_COLUMN).first().alias("first"), pl.col(POSITION_COLUMN).get(pick).alias("picked"))
        folded = frame[np.unique(np.concatenate([rows["first"].to_numpy(), rows["picked"].to_numpy()]))]
    return folded.select(frame.columns).to_arrow().cast(table.schema)


def _rolling(frame: pl.DataFrame, key: str, field: str, kind: str) -> pl.DataFrame:
    """``frame`` with its record columns replaced by the rolling value after each record (rows in
    the order the key folds them) and a :data:`RANK_COLUMN`; one pass over the key's groups."""
    running = getattr(pl.col(field), CUMULATIVE[kind])().over(key)
    rank = pl.col(SEQ_COLUMN).min().over(key).alias(RANK_COLUMN)
    records = [name for name in frame.columns if name not in (TS_COLUMN, *EXTRA_COLUMNS)]
    if kind in ("sum", "min", "max"):
        dtype = frame.schema[field]
        if kind == "sum" and dtype in INT_TYPES:
            running = pl.col(field).cast(pl.Int64).cum_sum().over(key)
        firsts = [pl.col(name).first().over(key) for name in records if name not in (key, field)]
        return narrowed(frame.with_columns(running, *firsts, rank), field, dtype)
    previous = getattr(pl.col(field), CUMULATIVE[kind])().shift(1).over(key)
    changed = (running != previous).fill_null(True)  # a strictly new extreme: the earliest wins ties
    positions = pl.Series(POSITION_COLUMN, np.arange(frame.height, dtype=np.int64))
    picked = frame.with_columns(positions).select(
        pl.when(changed).then(pl.col(POSITION_COLUMN)).otherwise(None).forward_fill().over(key), rank)
    return frame.with_columns(*frame.select(records)[picked[POSITION_COLUMN]].get_columns(), picked[RANK_COLUMN])


def narrowed(frame: pl.DataFrame, field: str, dtype: pl.DataType) -> pl.DataFrame:
    """``frame`` with its ``field`` back in ``dtype`` where every value fits (a sum that outgrew it
    stays int64: the records are the same Python ints either way)."""
    try:
        return frame.with_columns(pl.col(field).cast(dtype, strict=True))
    except pl.exceptions.InvalidOperationError:
        return frame


def last_per_key(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """The last row of each key (of a frame in which each key's rows are in arrival order): what
    the key's rolling value ends at."""
    return frame.group_by(key).last()

"""Built-in window aggregations over a sorted backlog, as one polars query.

A keyed event-time window over tumbling, sliding or session windows with the default trigger, no
evictor, no allowed lateness and no late-data side output, reduced by a built-in
:class:`~slipstream.datastream.aggregation.AggregationFunction` (``window(...).sum(f)`` and
friends), does not need its backlog replayed record by record through window state, triggers
and timers: which windows fire at which held watermark, which records are late and what each
window holds follow from the records' timestamps and intervals. :func:`evaluate_windows`
computes them from a frame of key (a rank in first-seen order), interval, timestamp, arrival and
field — a :class:`~slipstream.operators.sort_buffer.SortBuffer`'s field table when the backlog
is rows, or the columns of an Arrow backlog kept in
:class:`~slipstream.operators.vectorised_reduce.IntervalColumns`, whose results are then emitted
as Arrow, never as rows — and returns:

* the windows that fire, each with the held watermark that fires it, in the order the replay's
  timers would fire them (by that watermark, then window end, then the order their first
  records registered their timers: interval, key first seen, arrival);
* the windows still open after the last held watermark, in that registration order, whose
  contents and timers the operator installs;
* how many records were late (in every window they belong to, the watermark had passed the end).

STREAMING mode follows the replay interval by interval: a record is late when the watermark it
arrived at had reached its windows' ends, and a window fires at the first held watermark at or
past its end. BATCH mode follows the key-by-key replay: records fold in timestamp order (then
arrival), only the watermark before the backlog can make them late, and windows fire at the
last held watermark. Each window's value folds its records as the reducing state would: a sum
(sequential for floats), the minimum or maximum with the other fields of the first record, or the
first record holding the extreme.

Count windows (tumbling or sliding, their own purging count trigger) are numbered per key
(:func:`evaluate_count_windows`): a window fires as the record that fills it arrives, and the
open ones keep their contents, their trigger's count and the key's count of records.

Event-time session windows with a fixed gap (:func:`evaluate_sessions`) follow from each key's
records in fold order when their timestamps never go back within the key (always in BATCH mode;
a key whose records arrive out of order sends the backlog to the replay): a record is late when
its own window ``[t, t + gap)`` ended by the watermark it arrived at; otherwise it opens a new
session when it is the key's first, lies beyond the gap after the previous accepted record, or
that record's session had fired by then; a session's end is its last record's time plus the gap.
Its contents live under the window its first record opened (the state window streaming merges
into) and its timer counts as registered by the first record that gave it its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import polars as pl

from slipstream.datastream.aggregation import AggregationFunction
from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.fields import replace_field
from slipstream.datastream.time import MAX_TIMESTAMP
from slipstream.datastream.transformations import WindowTransformation
from slipstream.datastream.window import (
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    EventTimeSessionWindows,
    EventTimeTrigger,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TimeWindow,
    Trigger,
    TumblingEventTimeWindows,
    WindowAssigner,
)
from slipstream.operators.base import count_and_warn
from slipstream.operators.columnar_backlog import (
    INTERVAL_COLUMN,
    SEQ_COLUMN,
    IntervalColumns,
    arrow_batches,
    interval_parts,
    records_of,
    records_of_names,
)
from slipstream.operators.columnar_buffer import TS_COLUMN
from slipstream.operators.elements import RecordBatch
from slipstream.operators.sort_buffer import SortBuffer
from slipstream.operators.vectorised_reduce import INT_TYPES, narrowed, vectorisable_field
from slipstream.operators.window import LATE_DROPPED_METRIC

if TYPE_CHECKING:
    from slipstream.operators.window import WindowOperator

NULL_FIRST = np.iinfo(np.int64).min
"""What a null timestamp sorts as: before every timestamp."""
FIRE_COLUMN = "fire"
"""The index of the held watermark that fires a window."""


INT64_SPAN = 2 ** 62
"""The widest range of integers combined into one int64 column (a sort key, a window id)."""


def window_pairs(frame: pl.DataFrame, seen: np.ndarray, size: int, slide: int, offset: int) -> tuple[pl.DataFrame, int]:
    """``frame`` with one row per (record, window) for the windows whose end the watermark the record
    arrived at (``seen``, per record) had not reached: ``start`` of each, the windows of one record
    latest first (as the assigner lists them); and how many records were late for all of theirs.
    Computed in numpy; a tumbling window's frame is not copied when no record is late."""
    stamps = frame["ts"].to_numpy()
    count = -(-size // slide)
    starts = ((stamps - np.mod(stamps - offset, slide))[:, None] - slide * np.arange(count, dtype=np.int64)).ravel()
    keep = (starts > np.repeat(stamps, count) - size) & (starts + (size - 1) > np.repeat(seen, count))
    if count == 1 and keep.all():
        return frame.with_columns(pl.Series("start", starts, dtype=pl.Int64)), 0
    rows = np.repeat(np.arange(frame.height), count)[keep]
    late = frame.height - (int(np.count_nonzero(np.diff(rows))) + 1 if len(rows) else 0)
    return frame[rows].with_columns(pl.Series("start", starts[keep], dtype=pl.Int64)), late


def evaluate_windows(frame: pl.DataFrame, kind: str, *, size: int, slide: int, offset: int, held: list[int],
                     batch_mode: bool, keys_in_arrival_order: bool = False,
                     ) -> tuple[pl.DataFrame, pl.DataFrame, int] | None:
    """Fired windows, open windows and the count of late records (see the module docstring);
    None when a record has no timestamp (the replay reports it).

    Both frames have ``key`` (id), ``start``, ``value`` (the aggregated field, or null for
    ``min_by``/``max_by``) and ``pick`` (the arrival number of the record the result is based
    on); fired windows also :data:`FIRE_COLUMN`. ``keys_in_arrival_order``: each key's records are in
    arrival order already (see :func:`_in_order`).
    """
    if frame["ts"].null_count():
        return None
    marks = np.asarray(held, dtype=np.int64)
    seen = np.full(frame.height, marks[0]) if batch_mode else marks[frame["interval"].to_numpy()]
    pairs, late = window_pairs(frame, seen, size, slide, offset)
    pairs, by, names = _window_ids(_in_order(pairs, batch_mode, keys_in_arrival_order), slide)
    folded, values = _fold(pairs, kind, by)
    registered = [pl.col("ts").first().alias("first_ts")] if batch_mode else []  # BATCH orders timers by time
    # the first record registered the window's timer; for every kind but min_by/max_by it is the picked one
    picks_first = kind not in ("min_by", "max_by")
    first_seq = [] if picks_first else [pl.col("seq").first().alias("first_seq")]
    windows = folded.group_by(by).agg(*values, *registered, *first_seq,
                                      pl.col("interval").first().alias("first_interval"))
    copied = [pl.col("pick").alias("first_seq")] if picks_first else []
    windows = windows.with_columns(*names, *copied).with_columns(last=pl.col("start") + (size - 1))
    fired, still_open = _fired_and_open(windows, marks, batch_mode, slide)
    return fired, still_open, late


RESULT_COLUMNS = ("key", "start", "value", "pick", "last")
"""What the operator reads of a window: its key, start, aggregate, picked record and timestamp."""


def _fired_and_open(windows: pl.DataFrame, marks: np.ndarray, batch_mode: bool,
                    step: int | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``windows`` (``key``, ``start``, ``last``, and the ``first_interval``, ``first_ts`` and ``first_seq``
    of the record that registered its timer) split into those a held watermark fires, with the index
    of that watermark (:data:`FIRE_COLUMN`) in firing order, and those still open, in the order their
    timers were registered; each with the :data:`RESULT_COLUMNS`. ``step``: the windows' ends are that
    far apart (time windows: the slide), None when they may be anywhere (sessions)."""
    last = windows["last"].to_numpy()
    fire = np.where(last <= marks[-1], len(marks) - 1, len(marks)) if batch_mode \
        else _firing_marks(last, marks, step)
    # The order timers were registered in: the registering record's place in the replay (interval,
    # then key, in STREAMING; key, then time, in BATCH). Windows that fire together are ordered by
    # end, then that; their fire index grows with their end, and two of them never share key and end.
    keys = int(cast(int, windows["key"].max()) or 0) + 1  # the key ids are integers
    # ends a step apart are sorted by their number (a narrower sort key than the end itself)
    end = (pl.col("last") // step).alias("end") if step else pl.col("last").alias("end")
    windows = windows.with_columns(pl.Series(FIRE_COLUMN, fire, dtype=pl.Int64), end,
                                   (pl.col("first_interval") * keys + pl.col("key")).alias("registered"))
    registered = ["key", "first_ts", "first_seq"] if batch_mode else ["registered", "first_seq"]
    fires = fire < len(marks)
    results = windows.select(*RESULT_COLUMNS, FIRE_COLUMN)
    fired = results[_sort_order(windows, ["end", registered[0]], rows=np.flatnonzero(fires))]
    still_open = results[_sort_order(windows, [*registered, "start"], descending="start",
                                     rows=np.flatnonzero(~fires))]
    return fired, still_open


def _firing_marks(last: np.ndarray, marks: np.ndarray, step: int | None) -> np.ndarray:
    """For each window end in ``last``, the index of the first of the sorted watermarks ``marks``
    that reaches it (``len(marks)``: none does). Ends ``step`` apart take few values (a tumbling
    window's end is shared by every key's window of that time): those are looked up once each and
    gathered, ten times faster than a binary search per window at 10^6 windows."""
    if step is not None and len(last):
        lowest = int(last.min())
        slots = (last - lowest) // step
        count = int(slots.max()) + 1
        if count <= len(last):
            ends = lowest + step * np.arange(count, dtype=np.int64)
            found: np.ndarray = np.searchsorted(marks, ends, side="left")[slots]
            return found
    return np.searchsorted(marks, last, side="left")


def evaluate_sessions(frame: pl.DataFrame, kind: str, *, gap: int, held: list[int], batch_mode: bool,
                      keys_in_arrival_order: bool = False) -> tuple[pl.DataFrame, pl.DataFrame, int] | None:
    """Fired sessions, open sessions and the count of late records, as :func:`evaluate_windows` gives
    them (``start`` is the session's first timestamp, ``last`` its ``max_timestamp()``); None when a
    record has no timestamp or a key's records go back in time in fold order (the replay merges those)."""
    if frame["ts"].null_count():
        return None
    frame = _in_order(frame, batch_mode, keys_in_arrival_order).sort("key", maintain_order=True)
    keys, stamps = frame["key"].to_numpy(), frame["ts"].to_numpy()
    if np.any((keys[1:] == keys[:-1]) & (stamps[1:] < stamps[:-1])):
        return None
    marks = np.asarray(held, dtype=np.int64)
    seen = np.full(frame.height, marks[0]) if batch_mode else marks[frame["interval"].to_numpy()]
    on_time = stamps + (gap - 1) > seen  # its own window [t, t + gap) is still open at its watermark
    frame, keys, stamps, seen = frame.filter(pl.Series(on_time)), keys[on_time], stamps[on_time], seen[on_time]
    opens = np.ones(len(stamps), dtype=bool)
    # a new session: another key, beyond the gap, or the previous record's session fired before this arrived
    opens[1:] = (keys[1:] != keys[:-1]) | (stamps[1:] > stamps[:-1] + gap) | (seen[1:] >= stamps[:-1] + (gap - 1))
    sessions = np.cumsum(opens)
    # The first record that reached its session's end registered the session's timer. A session's
    # records are consecutive rows whose times never go back, so those at its end are a suffix of them.
    last_rows = np.flatnonzero(np.append(opens[1:], len(opens) > 0))  # each followed by an opening row, or the end
    at_end = stamps == stamps[last_rows][sessions - 1]
    registered = pl.Series(at_end & (opens | ~np.roll(at_end, 1)))
    frame = frame.with_columns(pl.Series("session", sessions, dtype=pl.Int64),
                               pl.when(registered).then(pl.col("seq")).alias("end_seq"),
                               pl.when(registered).then(pl.col("interval")).alias("end_interval"))
    folded, values = _fold(frame, kind, ["session"])
    windows = folded.group_by("session").agg(  # simple aggregations only: polars' fast path
        *values, pl.col("key").first(), pl.col("ts").first().alias("start"),
        (pl.col("ts").last() + (gap - 1)).alias("last"), pl.col("ts").last().alias("first_ts"),
        pl.col("end_seq").max().alias("first_seq"), pl.col("end_interval").max().alias("first_interval"))
    fired, still_open = _fired_and_open(windows, marks, batch_mode)
    return fired, still_open, len(on_time) - len(stamps)


def evaluate_count_windows(frame: pl.DataFrame, kind: str, *, size: int, slide: int, batch_mode: bool,
                           keys_in_arrival_order: bool = False) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Count windows of each key's records in their fold order (arrival; BATCH: timestamp, then
    arrival): window ``i`` holds records ``i*slide .. i*slide+size-1`` and fires as its last arrives.

    Returns the fired windows (``key``, ``start`` — the window's number —, ``value``, ``pick``,
    :data:`FIRE_COLUMN` — the interval of the record that fills it — and ``last``, the window's
    timestamp) in the replay's order, the open windows (with their ``count``) and each key's
    number of records (``key``, ``count``)."""
    frame = _in_order(frame, batch_mode, keys_in_arrival_order)
    numbers, totals = _numbered_per_key(frame["key"].to_numpy())
    frame = frame.with_columns(pl.Series("n", numbers, dtype=pl.Int64))
    steps = -(-size // slide)
    starts = np.stack([numbers // slide - step for step in range(steps)], axis=1).ravel()
    rows = np.repeat(np.arange(frame.height), steps)
    keep = (starts >= 0) & (starts * slide + size > np.repeat(numbers, steps))
    pairs = frame[rows[keep]] if steps > 1 or not keep.all() else frame
    pairs, by, names = _window_ids(pairs.with_columns(pl.Series("start", starts[keep], dtype=pl.Int64)), 1)
    folded, values = _fold(pairs, kind, by)
    windows = folded.group_by(by).agg(
        *values, pl.len().alias("count"), pl.col("interval").last().alias(FIRE_COLUMN),
        pl.col("ts").last().alias("fire_ts"), pl.col("seq").last().alias("fire_seq")).with_columns(*names)
    windows = windows.with_columns(pl.lit(MAX_TIMESTAMP, dtype=pl.Int64).alias("last"))
    order = ["key", "fire_ts", "fire_seq"] if batch_mode else [FIRE_COLUMN, "key", "fire_seq"]
    fired = _lexsorted(windows.filter(pl.col("count") == size), order)
    if batch_mode:
        fired = fired.with_columns(pl.lit(0, dtype=pl.Int64).alias(FIRE_COLUMN))
    still_open = _lexsorted(windows.filter(pl.col("count") < size), ["key", "start"])
    return fired, still_open, totals


def _numbered_per_key(keys: np.ndarray) -> tuple[np.ndarray, pl.DataFrame]:
    """Each record's number among its key's records (in the order given), and each key's count
    (``key``, ``count``): from one stable sort by key, in numpy (a polars ``int_range().over()`` of
    10^6 records took 70-90 ms, this 15)."""
    keys = keys.astype(np.int64, copy=False)
    if not len(keys):
        return keys, pl.DataFrame({"key": keys, "count": keys})
    low = int(keys.min())
    order = stable_order(keys - low, int(keys.max()) - low + 1)
    ordered = keys[order]
    firsts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(firsts, len(keys)))
    numbers = np.empty(len(keys), dtype=np.int64)
    numbers[order] = np.arange(len(keys), dtype=np.int64) - np.repeat(firsts, counts)
    return numbers, pl.DataFrame({"key": ordered[firsts], "count": counts.astype(np.int64)})


def _lexsorted(frame: pl.DataFrame, by: list[str], descending: str | None = None) -> pl.DataFrame:
    """``frame`` sorted by the integer columns ``by`` (see :func:`_sort_order`)."""
    return frame if frame.height < 2 else frame[_sort_order(frame, by, descending)]


def _sort_order(frame: pl.DataFrame, by: list[str], descending: str | None = None,
                rows: np.ndarray | None = None) -> np.ndarray:
    """The rows of ``frame`` (or of ``rows`` of it) in the order of the integer columns ``by`` (nulls
    first; the column ``descending`` in descending order), stably. Columns whose ranges multiply within
    an int64 are folded into one sort key (:func:`stable_order`), several times faster than a
    multi-column sort or numpy's lexsort (the rest)."""
    if rows is None:
        rows = np.arange(frame.height)
    columns = []
    for name in by:
        values = frame[name].fill_null(NULL_FIRST).to_numpy()[rows]
        columns.append(-values if name == descending else values)
    if len(rows) < 2:
        return rows
    combined, span = np.zeros(len(rows), dtype=np.int64), 1
    for values in columns:
        low = int(values.min())
        width = int(values.max()) - low + 1
        if span * width >= INT64_SPAN:
            ordered: np.ndarray = rows[np.lexsort(columns[::-1])]
            return ordered
        combined, span = combined * width + (values - low), span * width
    return cast(np.ndarray, rows[stable_order(combined, span)])


def stable_order(keys: np.ndarray, span: int) -> np.ndarray:
    """The stable argsort of ``keys`` (non-negative int64 below ``span``). When the keys shifted left
    by the bits of a position still fit an int64, each key carries its position in its low bits and
    the values are sorted, not their indices: numpy's vectorised sort of values is several times
    faster than any argsort here (6 ms against 24 for polars' ``arg_sort`` and 75 for numpy's stable
    one, at 10^6 keys), and equal keys keep their order by position. Otherwise polars sorts the
    indices (any order is the stable one when no two keys are equal, which is checked)."""
    bits = max(len(keys) - 1, 1).bit_length()
    if span << bits < INT64_SPAN:
        packed = (keys << bits) | np.arange(len(keys), dtype=np.int64)
        packed.sort()
        packed &= (1 << bits) - 1
        return packed
    order: np.ndarray = pl.Series(keys).arg_sort().to_numpy()
    ordered = keys[order]
    if np.any(ordered[1:] == ordered[:-1]):  # equal keys: keep their order
        order = np.argsort(keys, kind="stable")
    return order


def _in_order(frame: pl.DataFrame, batch_mode: bool, keys_in_arrival_order: bool) -> pl.DataFrame:
    """``frame`` with each key's records in the order they fold: arrival in STREAMING mode; timestamp
    (records without one first), then arrival, in BATCH mode. Only each key's order matters (windows
    and counts are per key), so in STREAMING mode a frame in arrival order as a whole, or whose keys'
    records are (``keys_in_arrival_order``: a columnar buffer's key partitions one after another),
    is not sorted."""
    if not batch_mode and (keys_in_arrival_order or frame["seq"].is_sorted()):
        return frame
    return frame.sort(["ts", "seq"] if batch_mode else ["seq"], nulls_last=False)


def _fold(frame: pl.DataFrame, kind: str, window: list[str]) -> tuple[pl.DataFrame, list[pl.Expr]]:
    """What each window's records (rows of ``frame`` in the order they fold; a window is a value of the
    columns ``window``) fold into: ``value`` and ``pick``. A float sum adds in that order (a running
    sum over the window, its last value), as the reducing state does; the rest does not depend on how
    polars adds or compares."""
    field, seq = pl.col("field"), pl.col("seq")
    if kind == "sum" and frame.schema["field"].is_float():
        frame = frame.with_columns(field.cum_sum().over(window).alias("running"))
        return frame, [pl.col("running").last().alias("value"), seq.first().alias("pick")]
    if kind in ("sum", "min", "max"):
        return frame, [getattr(field, kind)().alias("value"), seq.first().alias("pick")]
    extreme = field.arg_min() if kind == "min_by" else field.arg_max()
    return frame, [pl.lit(None).alias("value"), seq.get(extreme).alias("pick")]


WINDOW_ID = "window_id"
"""A window's ``key`` and ``start`` as one integer (:func:`_window_ids`)."""


def _window_ids(frame: pl.DataFrame, step: int) -> tuple[pl.DataFrame, list[str], list[pl.Expr]]:
    """``frame`` with a :data:`WINDOW_ID` column, ``key * width + (start - lowest) // step`` (the
    starts of a key's windows are ``step`` apart), the columns that name a window (``[WINDOW_ID]``)
    and the expressions that give ``key`` and ``start`` back from it: grouping by one integer is
    faster than by two. When that does not fit an int64: ``frame`` as it is, ``["key", "start"]``."""
    if frame.height:
        lowest, highest = int(frame["start"].min()), int(frame["start"].max())  # type: ignore[arg-type]
        width = (highest - lowest) // step + 1
        if (int(frame["key"].max()) + 1) * width < INT64_SPAN:  # type: ignore[arg-type]
            window = pl.col("key") * width + (pl.col("start") - lowest) // step
            names = [(pl.col(WINDOW_ID) // width).alias("key"),
                     (pl.col(WINDOW_ID) % width * step + lowest).alias("start")]
            return frame.with_columns(window.alias(WINDOW_ID)), [WINDOW_ID], names
    return frame, ["key", "start"], []


def builtin_aggregation(window: WindowTransformation) -> tuple[str, int | str] | None:
    """The built-in aggregation whose backlog a ``window`` may run as one query; None: replay it."""
    function, assigner = window.function, window.assigner
    trigger = window.trigger or assigner.get_default_trigger()
    if (window.function_kind != "reduce" or not isinstance(function, AggregationFunction)
            or window.window_function is not None or window.evictor is not None or window.late_data_tag is not None
            or not (_time_windows(assigner, trigger, window.allowed_lateness) or _count_windows(assigner, trigger)
                    or _session_windows(assigner, trigger, window.allowed_lateness))):
        return None
    return function.aggregation


def _time_windows(assigner: WindowAssigner[Any, Any], trigger: Trigger[Any, Any], allowed_lateness: int) -> bool:
    """Tumbling or sliding event-time windows with their own trigger and no allowed lateness."""
    return (type(assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
            and type(trigger) is EventTimeTrigger and not allowed_lateness)


def _session_windows(assigner: WindowAssigner[Any, Any], trigger: Trigger[Any, Any], allowed_lateness: int) -> bool:
    """Event-time session windows with a fixed gap, their own trigger and no allowed lateness."""
    return type(assigner) is EventTimeSessionWindows and type(trigger) is EventTimeTrigger and not allowed_lateness


def _count_windows(assigner: WindowAssigner[Any, Any], trigger: Trigger[Any, Any]) -> bool:
    """Tumbling or sliding count windows with their own trigger (purging, at the window's size)."""
    counted: Any = trigger  # its nested trigger and the count are read once the types match
    sized: Any = assigner
    return (type(assigner) in (CountTumblingWindowAssigner, CountSlidingWindowAssigner)
            and type(trigger) is PurgingTrigger and type(counted.nested_trigger) is CountTrigger
            and counted.nested_trigger.count == sized.size)


def run_window_aggregation(operator: WindowOperator, buffer: SortBuffer) -> bool:
    """Run ``operator``'s row backlog as one query (see :func:`_run`); False when the field is not
    one polars computes as Python does (:meth:`SortBuffer.field_table` is None)."""
    table = buffer.field_table() if operator.columnar_aggregation() is not None else None
    if table is None:
        return False
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return _run(operator, frame, _RowResults(buffer, operator), keys_in_arrival_order=False)


def run_columnar_window_aggregation(operator: WindowOperator, columns: IntervalColumns,
                                    frames: list[pl.DataFrame]) -> bool:
    """Run ``operator``'s Arrow backlog as one query, its results emitted as Arrow (see :func:`_run`);
    False when its field is not one polars computes as Python does."""
    frame = pl.concat(frames, rechunk=False)
    key, field = columns.key_name(), columns.field
    if field is None or not vectorisable_field(frame[field], columns.kind):
        return False
    if TS_COLUMN not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(TS_COLUMN))
    table = frame.select(pl.col(SEQ_COLUMN).min().over(key).alias("key"), pl.col(INTERVAL_COLUMN).alias("interval"),
                         pl.col(TS_COLUMN).alias("ts"), pl.col(SEQ_COLUMN).alias("seq"), pl.col(field).alias("field"))
    # each of ``frames`` is a key partition in arrival order (ColumnarBuffer.partition_tables)
    return _run(operator, table, _ColumnResults(frame, key, field, columns.kind), keys_in_arrival_order=True)


def _run(operator: WindowOperator, table: pl.DataFrame, results: _RowResults | _ColumnResults, *,
         keys_in_arrival_order: bool) -> bool:
    """Emit the windows that fire where the replay would, count the late records, install the open
    windows' contents, trigger state and timers. False (nothing done) for a record without a
    timestamp (time windows), or windows, timers or counts the operator already holds.
    ``keys_in_arrival_order``: each key's records in ``table`` are in arrival order."""
    assigner: Any = operator.assigner  # a count or time assigner (_count_windows, _time_windows): its sizes
    kind = operator.columnar_aggregation()[0]  # type: ignore[index]
    batch_mode = operator.ctx.batch_mode
    slide: int = getattr(assigner, "slide", getattr(assigner, "size", 0))  # sessions have neither
    if operator.timers.num_event_time_timers():
        return False
    if _count_windows(operator.assigner, operator.trigger):
        if list(operator.backend.keys(assigner._counter.name)):
            return False
        fired, still_open, totals = evaluate_count_windows(table, kind, size=assigner.size, slide=slide,
                                                           batch_mode=batch_mode,
                                                           keys_in_arrival_order=keys_in_arrival_order)
        operator.backend.bulk_load(assigner._counter, *results.keys_and_values(totals, "count"))
    else:
        if _session_windows(operator.assigner, operator.trigger, operator.allowed_lateness):
            evaluated = evaluate_sessions(table, kind, gap=assigner.gap, held=operator.held_watermarks,
                                          batch_mode=batch_mode, keys_in_arrival_order=keys_in_arrival_order)
        else:
            evaluated = evaluate_windows(table, kind, size=assigner.size, slide=slide, offset=assigner.offset,
                                         held=operator.held_watermarks, batch_mode=batch_mode,
                                         keys_in_arrival_order=keys_in_arrival_order)
        if evaluated is None:
            return False
        fired, still_open, late = evaluated
        _count_late(operator, late)
    operator.count_vectorised(table.height)
    results.read(fired, still_open)
    _emit(operator, fired, results, before_watermark=not _count_windows(operator.assigner, operator.trigger))
    _install(operator, still_open, results)
    return True


def _count_late(operator: WindowOperator, late: int) -> None:
    if late:
        count_and_warn(operator.ctx, LATE_DROPPED_METRIC, late, lambda: (
            f"window operator '{operator.ctx.name}' dropped {late} late record(s) of its backlog; late records "
            f"are counted in {LATE_DROPPED_METRIC} (set allowed_lateness, or side_output_late_data to keep them)"))


def _emit(operator: WindowOperator, fired: pl.DataFrame, results: _RowResults | _ColumnResults, *,
          before_watermark: bool) -> None:
    """Emit fired windows (their ``last`` is the timestamp) group by group of :data:`FIRE_COLUMN`: after
    the held watermarks before it, and before (time windows) or after (count windows) its own."""
    batch_mode = operator.ctx.batch_mode
    if batch_mode:
        operator.apply_held_watermarks_but_the_last()
    for fire, part in interval_parts(fired, FIRE_COLUMN):
        if not batch_mode:
            operator.apply_held_watermarks(fire - 1 if before_watermark else fire)
        for batch in results.batches(part):
            operator.output.collect_batch(batch)


def _install(operator: WindowOperator, still_open: pl.DataFrame, results: _RowResults | _ColumnResults) -> None:
    """Open windows become window contents: with their timer (time windows; a session also in the key's
    merging window set, its contents under the window its first record opened, as streaming keeps
    them), or with their trigger's count (count windows), in the order the replay would have
    registered them."""
    count_windows = _count_windows(operator.assigner, operator.trigger)
    sessions = _session_windows(operator.assigner, operator.trigger, operator.allowed_lateness)
    trigger: Any = operator.trigger  # a PurgingTrigger over a CountTrigger when count_windows
    assigner: Any = operator.assigner  # a count, session or time assigner: its size or gap
    keys, values = results.keys_and_values(still_open, None)
    if count_windows:
        windows = list(map(CountWindow, still_open["start"].to_list()))
        operator.backend.install_namespaced(operator.contents_descriptor, keys, windows, values)
        operator.backend.install_namespaced(trigger.nested_trigger.state_desc, keys, windows,
                                            still_open["count"].to_list())
        return
    size = assigner.gap if sessions else assigner.size
    for key, start, last, value in zip(keys, still_open["start"].to_list(), still_open["last"].to_list(), values):
        operator.backend.set_current_key(key)
        window = state_window = TimeWindow(start, start + size)
        contents = operator.contents
        contents.set_current_namespace(state_window)
        contents.add(value)
        if sessions:
            window = TimeWindow(start, last + 1)
            merging = operator._merging_window_set()  # the key's other open sessions stay in it
            merging.mapping[window] = state_window
            operator._persist(merging)
        operator.timers.register_event_time_timer(window, window.max_timestamp())


class _RowResults:
    """Window results from a sort buffer's records: the picked record, its field replaced by the value."""

    def __init__(self, buffer: SortBuffer, operator: WindowOperator) -> None:
        self.buffer = buffer
        self.kind, self.field = operator.columnar_aggregation()  # type: ignore[misc]
        self.records: dict[int, Any] = {}

    def read(self, fired: pl.DataFrame, still_open: pl.DataFrame) -> None:
        self.records = self.buffer.values_at(fired["pick"].to_list() + still_open["pick"].to_list())

    def values(self, windows: pl.DataFrame) -> list[Any]:
        picks = windows["pick"].to_list()
        if self.kind in ("min_by", "max_by"):
            return [self.records[pick] for pick in picks]
        return [replace_field(self.records[pick], self.field, value)
                for pick, value in zip(picks, windows["value"].to_list())]

    def batches(self, windows: pl.DataFrame) -> Iterator[RecordBatch]:
        yield RecordBatch(self.values(windows), windows["last"].to_list())

    def keys_and_values(self, windows: pl.DataFrame, column: str | None) -> tuple[list[Any], list[Any]]:
        """The windows' keys, and their values (or their ``column``)."""
        keys = [self.buffer.key_of(key_id) for key_id in windows["key"].to_list()]
        return keys, self.values(windows) if column is None else windows[column].to_list()


class _ColumnResults:
    """Window results from an Arrow backlog: the picked rows, their field replaced, as Arrow."""

    def __init__(self, frame: pl.DataFrame, key: str, field: str, kind: str) -> None:
        self.frame, self.key, self.field, self.kind = frame, key, field, kind
        seqs = frame[SEQ_COLUMN].to_numpy()
        self._rows = np.zeros(int(seqs.max()) + 1 if len(seqs) else 0, dtype=np.int64)
        self._rows[seqs] = np.arange(len(seqs), dtype=np.int64)  # a record's row by its arrival number

    def rows_of(self, seqs: pl.Series) -> np.ndarray:
        """The rows of ``frame`` that hold the records of these arrival numbers."""
        rows: np.ndarray = self._rows[seqs.to_numpy()]
        return rows

    def read(self, fired: pl.DataFrame, still_open: pl.DataFrame) -> None:
        """Pick every fired window's record at once; :meth:`batches` hands them out in order."""
        self._fired = self.picked(fired)
        self._handed = 0

    def picked(self, windows: pl.DataFrame) -> pl.DataFrame:
        """The record of each window (in its order), with its field replaced unless the kind picks
        records, and the window's timestamp (its ``last``) in :data:`TS_COLUMN`. Only the columns
        that stay are gathered."""
        names = records_of_names(self.frame.columns)
        replaced = self.kind not in ("min_by", "max_by")
        rows = self.frame.select([name for name in names if not (replaced and name == self.field)])
        rows = rows[self.rows_of(windows["pick"])].with_columns(windows["last"].alias(TS_COLUMN))
        if replaced:
            dtype = self.frame.schema[self.field]
            value = windows["value"].cast(pl.Int64 if dtype in INT_TYPES else dtype).alias(self.field)
            rows = narrowed(rows.with_columns(value), self.field, dtype)
        return rows.select(*names, TS_COLUMN)

    def batches(self, windows: pl.DataFrame) -> Iterator[RecordBatch]:
        """The next ``windows.height`` fired windows' records (``windows`` come in the order read)."""
        part = self._fired.slice(self._handed, windows.height)
        self._handed += windows.height
        for batch, stamps in arrow_batches(part):
            yield RecordBatch(None, stamps, arrow=batch)

    def keys_and_values(self, windows: pl.DataFrame, column: str | None) -> tuple[list[Any], list[Any]]:
        if column is not None:
            return self.frame[self.key].gather(self.rows_of(windows["key"])).to_list(), windows[column].to_list()
        picked = self.picked(windows)
        return picked[self.key].to_list(), rows_from_arrow(records_of(picked))

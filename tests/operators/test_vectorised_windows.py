"""Built-in window aggregations (``window(...).sum(f)`` and friends) over tumbling, sliding and
session event-time windows and count windows run their backlog as one polars query: the switch emits exactly what replaying
the backlog through the window machinery emits (same windows, values, timestamps, order and
watermarks, same late records), what streaming it gives per watermark, and what a plain-Python
oracle gives; windows still open at the switch carry on in the stream."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_backlog_switch import sorting_harness, transformation_of
from test_vectorised_reduce import segments

from slipstream.datastream.aggregation import aggregator
from slipstream.datastream.transformations import Transformation
from slipstream.datastream.window import EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows
from slipstream.operators.backlog import VECTORISED_METRIC
from slipstream.operators.vectorised_windows import WINDOW_ID, _firing_marks, _lexsorted, _window_ids, stable_order
from slipstream.testing import OperatorHarness

KINDS = ["sum", "min", "max", "min_by", "max_by"]
ASSIGNERS = {
    "tumbling": lambda: TumblingEventTimeWindows.of(100),
    "tumbling offset": lambda: TumblingEventTimeWindows.of(100, 30),
    "sliding": lambda: SlidingEventTimeWindows.of(100, 25),
    "sliding uneven": lambda: SlidingEventTimeWindows.of(100, 30, 7),
}


def window_job(kind: str, assigner: str, built_in: bool = True) -> Transformation:
    """``key_by(0).window(...).<kind>(1)``; not built in: the same fold as a plain Python reduce."""
    function = aggregator(kind, 1)
    windowed = lambda env: env.from_collection([]).key_by(lambda r: r[0]).window(ASSIGNERS[assigner]())  # noqa: E731
    if built_in:
        return transformation_of(lambda env: getattr(windowed(env), kind)(1))
    return transformation_of(lambda env: windowed(env).reduce(lambda a, b: function.reduce(a, b)))


def history(seed: int, n: int = 240, value: str = "int") -> list[tuple[tuple, int]]:
    """Records ``(key, value, arrival)`` with timestamps mostly rising, some out of order, a few negative."""
    rng = random.Random(seed)
    draw = {"int": lambda: rng.randint(-9, 9), "float": lambda: rng.choice([0.5, -1.25, 3.0, 2.5, 0.1])}[value]
    return [((rng.choice("abcde"), draw(), i), i * 3 - 60 + rng.randint(-80, 40)) for i in range(n)]


def drive(transformation: Transformation, records: list, *, sorting: bool = True, batch_mode: bool = False,
          watermark_every: int = 16, last_watermark: int | None = None, budget: int = 1_000_000) -> OperatorHarness:
    """Backlog ``records`` with a watermark (the highest timestamp so far minus 50) every few records;
    end the input (final watermark) unless ``last_watermark`` leaves the backlog at that watermark."""
    driver = sorting_harness(transformation, sorting=sorting, batch_mode=batch_mode, budget=budget).set_backlog(True)
    highest = -10**9
    for start in range(0, len(records), watermark_every):
        chunk = records[start:start + watermark_every]
        driver.process_elements(chunk, batch_size=4)
        highest = max([highest] + [ts for _, ts in chunk])
        driver.process_watermark(highest - 50)
    if last_watermark is None:
        return driver.end_input()
    return driver.process_watermark(last_watermark).set_backlog(False)


def python_windows(kind: str, assigner: str, records: list, watermark_every: int = 16) -> list[tuple]:
    """The oracle: windows by hand — assign, drop what is late at its arrival, fold, fire at the end."""
    spec = ASSIGNERS[assigner]()
    size, slide, offset = spec.size, getattr(spec, "slide", spec.size), spec.offset
    function = aggregator(kind, 1)
    contents: dict[tuple, Any] = {}
    watermark, highest = -2**63, -10**9
    for index, (record, ts) in enumerate(records):
        last_start = ts - (ts - offset) % slide
        for start in range(last_start, ts - size, -slide):
            if start + size - 1 > watermark:
                window = (record[0], start)
                contents[window] = record if window not in contents else function.reduce(contents[window], record)
        highest = max(highest, ts)
        if (index + 1) % watermark_every == 0 or index + 1 == len(records):
            watermark = max(watermark, highest - 50)
    return sorted((value, start + size - 1) for (_, start), value in contents.items())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("assigner", list(ASSIGNERS))
@pytest.mark.parametrize("seed", [1, 2])
def test_streaming_backlog_of_built_in_windows_equals_the_replay_streaming_and_an_oracle(kind: str, assigner: str,
                                                                                       seed: int) -> None:
    records = history(seed)
    vectorised = drive(window_job(kind, assigner), records)
    assert vectorised.ctx.metrics[VECTORISED_METRIC] == len(records)
    replayed = drive(window_job(kind, assigner, built_in=False), records)
    assert VECTORISED_METRIC not in replayed.ctx.metrics
    # the Python replay runs key by key: between two watermarks its keys may come in another order
    assert segments(vectorised.output.events) == segments(replayed.output.events)
    late = vectorised.ctx.metrics.get("num_late_records_dropped", 0)
    assert late == replayed.ctx.metrics.get("num_late_records_dropped", 0)
    assert late > 0 or assigner.startswith("sliding")  # a record is late in every tumbling history here
    streamed = drive(window_job(kind, assigner), records, sorting=False)
    assert segments(vectorised.output.events) == segments(streamed.output.events)
    assert sorted(vectorised.output.records) == python_windows(kind, assigner, records)


@pytest.mark.parametrize("kind", ["sum", "min_by"])
@pytest.mark.parametrize("assigner", ["tumbling", "sliding uneven"])
@pytest.mark.parametrize("value", ["int", "float"])
@pytest.mark.parametrize("batch_mode", [True, False])
def test_a_spilled_backlog_of_built_in_windows_equals_the_replay(kind: str, assigner: str, value: str,
                                                                batch_mode: bool) -> None:
    records = history(5, value=value)
    vectorised = drive(window_job(kind, assigner), records, batch_mode=batch_mode, budget=7)
    replayed = drive(window_job(kind, assigner, built_in=False), records, batch_mode=batch_mode)
    assert vectorised.ctx.metrics[VECTORISED_METRIC] == len(records)
    assert vectorised.ctx.metrics["spilled_bytes"] > 0
    # the Python replay runs key by key: between two watermarks its keys may come in another order
    assert segments(vectorised.output.events) == segments(replayed.output.events)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("assigner", ["tumbling", "sliding"])
@pytest.mark.parametrize("batch_mode", [False, True])
def test_windows_open_at_the_switch_fire_in_the_stream_as_after_a_replay(kind: str, assigner: str,
                                                                         batch_mode: bool) -> None:
    records = history(9)
    live = [(("a", 100, 1000), 700), (("b", -7, 1001), 705), (("a", -3, 1002), 720), (("z", 1, 1003), 760)]
    outputs = []
    for built_in in (True, False):
        driver = drive(window_job(kind, assigner, built_in), records, batch_mode=batch_mode, last_watermark=600)
        at_switch = len(driver.output.events)
        driver.process_elements(live, batch_size=1).process_watermark(2_000)
        outputs.append((segments(driver.output.events[:at_switch]), segments(driver.output.events[at_switch:])))
    assert outputs[0] == outputs[1]   # the Python replay runs key by key: keys may interleave otherwise
    assert any(outputs[0][1])  # open windows fired after the switch  # open windows fired after the switch


def test_a_record_without_a_timestamp_goes_back_to_the_replay_which_names_it() -> None:
    driver = sorting_harness(window_job("sum", "tumbling"), batch_mode=False).set_backlog(True)
    driver.process_elements([(("a", 1, 0), 5), (("a", 2, 1), None)], batch_size=4)
    with pytest.raises(Exception, match="timestamp"):
        driver.end_input()


def test_window_sum_is_javas_windowed_stream_sum() -> None:
    transformation = window_job("max_by", "tumbling")
    assert transformation.function_kind == "reduce"
    assert transformation.function.aggregation == ("max_by", 1)
    per_window: dict[int, list] = defaultdict(list)
    for record, ts in drive(transformation, history(3)).output.records:
        per_window[ts].append(record)
    assert all(len({r[0] for r in records}) == len(records) for records in per_window.values())


def count_job(kind: str, size: int, slide: int | None, built_in: bool = True) -> Transformation:
    function = aggregator(kind, 1)
    windowed = lambda env: env.from_collection([]).key_by(lambda r: r[0]).count_window(size, slide)  # noqa: E731
    if built_in:
        return transformation_of(lambda env: getattr(windowed(env), kind)(1))
    return transformation_of(lambda env: windowed(env).reduce(lambda a, b: function.reduce(a, b)))


def python_count_windows(kind: str, records: list, size: int, slide: int) -> list[Any]:
    """The oracle: each key's records numbered in arrival order; window i holds i*slide .. i*slide+size-1."""
    function = aggregator(kind, 1)
    per_key: dict[str, list] = defaultdict(list)
    for record, _ in records:
        per_key[record[0]].append(record)
    fired = []
    for values in per_key.values():
        for start in range(0, len(values) - size + 1, slide):
            window = values[start:start + size]
            result = window[0]
            for value in window[1:]:
                result = function.reduce(result, value)
            fired.append(result)
    return sorted(fired)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size, slide", [(4, None), (5, 2), (3, 5)])
@pytest.mark.parametrize("batch_mode", [False, True])
def test_count_windows_of_a_backlog_equal_the_replay_and_continue_in_the_stream(kind: str, size: int,
                                                                               slide: int | None,
                                                                               batch_mode: bool) -> None:
    records = history(4, n=150)
    live = [((key, n % 7 - 3, 2000 + n), 900 + n) for n, key in enumerate("abcdeaabbz" * 2)]
    runs = []
    for built_in in (True, False):
        driver = drive(count_job(kind, size, slide, built_in), records, batch_mode=batch_mode, last_watermark=500)
        at_switch = len(driver.output.events)
        driver.process_elements(live, batch_size=3)
        runs.append((driver.output.events[:at_switch], driver.output.events[at_switch:], driver.ctx.metrics))
    # per watermark segment: the Python replay may run key by key
    assert [segments(events) for events in runs[0][:2]] == [segments(events) for events in runs[1][:2]]
    assert runs[0][2][VECTORISED_METRIC] == len(records) and VECTORISED_METRIC not in runs[1][2]
    if not batch_mode:
        fired = [event.value for event in runs[0][0] + runs[0][1] if isinstance(event, tuple)]
        assert sorted(fired) == python_count_windows(kind, records + live, size, slide or size)


COLUMNAR_WINDOWS = {
    "tumbling": lambda keyed: keyed.window(TumblingEventTimeWindows.of(100, 30)),
    "sliding": lambda keyed: keyed.window(SlidingEventTimeWindows.of(100, 30, 7)),
    "count": lambda keyed: keyed.count_window(5, 2),
    "session": lambda keyed: keyed.window(EventTimeSessionWindows.with_gap(30)),
}


def columnar_job(kind: str, window: str, built_in: bool = True) -> Transformation:
    function = aggregator(kind, "v")
    windowed = lambda env: COLUMNAR_WINDOWS[window](env.from_collection([]).key_by("k"))  # noqa: E731
    if built_in:
        return transformation_of(lambda env: getattr(windowed(env), kind)("v"))
    return transformation_of(lambda env: windowed(env).reduce(lambda a, b: function.reduce(a, b)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("window", list(COLUMNAR_WINDOWS))
@pytest.mark.parametrize("batch_mode", [False, True])
def test_an_arrow_backlog_runs_on_its_columns_and_its_open_windows_carry_on(kind: str, window: str, batch_mode: bool,
                                                                           monkeypatch: Any) -> None:
    import pyarrow as pa

    from slipstream.operators.elements import RecordBatch
    from slipstream.operators.columnar_backlog import IntervalColumns
    records = session_history(6) if window == "session" else history(6)
    live = [(("a", 9, 1000 + n), 700 + n) for n in range(7)]
    runs = []
    for built_in in (True, False):
        if built_in:  # the columns must not go back to rows
            monkeypatch.setattr(IntervalColumns, "move_to_rows", lambda *args, **kwargs: pytest.fail("rows"))
        driver = sorting_harness(columnar_job(kind, window, built_in), batch_mode=batch_mode).set_backlog(True)
        highest = -10**9
        for start in range(0, len(records), 16):
            chunk = records[start:start + 16]
            table = pa.table({"k": [r[0] for r, _ in chunk], "v": [r[1] for r, _ in chunk],
                              "i": [r[2] for r, _ in chunk]})
            stamps = [ts for _, ts in chunk]
            driver.process_batch(RecordBatch(None, stamps, arrow=table) if built_in
                                          else RecordBatch(RecordBatch(arrow=table).values, stamps))
            highest = max([highest] + stamps)
            driver.process_watermark(highest - 50)
        assert (driver.operator._columns is not None) == built_in  # buffered as Arrow columns
        driver.process_watermark(600).set_backlog(False)
        at_switch = len(driver.output.events)
        driver.process_elements([(RecordBatch(arrow=pa.table({"k": [r[0]], "v": [r[1]], "i": [r[2]]})).values[0], ts)
                     for r, ts in live], batch_size=2).process_watermark(5_000)
        runs.append((segments(driver.output.events[:at_switch]), segments(driver.output.events[at_switch:]), driver.ctx.metrics))
        monkeypatch.undo()
    assert runs[0][:2] == runs[1][:2]   # per watermark segment: the Python replay runs key by key
    assert runs[0][2][VECTORISED_METRIC] == len(records) and VECTORISED_METRIC not in runs[1][2]
    assert runs[0][2].get("num_late_records_dropped", 0) == runs[1][2].get("num_late_records_dropped", 0)


# -- session windows ------------------------------------------------------------------------------------
GAP = 30


def session_job(kind: str, built_in: bool = True) -> Transformation:
    """``key_by(0).window(sessions with a gap of 30).<kind>(1)``; not built in: the same fold as a Python reduce."""
    function = aggregator(kind, 1)
    windowed = lambda env: env.from_collection([]).key_by(lambda r: r[0]) \
        .window(EventTimeSessionWindows.with_gap(GAP))  # noqa: E731
    if built_in:
        return transformation_of(lambda env: getattr(windowed(env), kind)(1))
    return transformation_of(lambda env: windowed(env).reduce(lambda a, b: function.reduce(a, b)))


def session_history(seed: int, n: int = 240, value: str = "int") -> list[tuple[tuple, int]]:
    """Records ``(key, value, arrival)`` whose timestamps rise within each key — by steps that stay in a
    session, touch its end (30) or pass it — while some keys lag far behind the others (late records)."""
    rng = random.Random(seed)
    draw = {"int": lambda: rng.randint(-9, 9), "float": lambda: rng.choice([0.5, -1.25, 3.0, 2.5, 0.1])}[value]
    lags = {"a": 0, "b": 0, "c": 40, "d": 90, "e": 140}
    clocks = dict.fromkeys(lags, -200)
    records = []
    for i in range(n):
        key = rng.choice("abcde")
        clocks[key] = max(clocks[key] + rng.choice([0, 1, 5, 20, 29, 30, 31, 60]), i * 3 - lags[key])
        records.append(((key, draw(), i), clocks[key]))
    return records


def python_sessions(kind: str, records: list, watermark_every: int = 16) -> list[tuple]:
    """The oracle: sessions by hand as streaming forms them — a record joins (and merges) the sessions its
    window [t, t + gap) touches, else opens one unless that window ended by the watermark (late); a
    watermark fires the sessions that ended by it."""
    function = aggregator(kind, 1)
    sessions: dict[str, list[list[Any]]] = defaultdict(list)  # per key: [start, end, value]
    fired: list[tuple] = []
    watermark, highest = -2**63, -10**9
    for index, (record, ts) in enumerate(records):
        per_key = sessions[record[0]]
        touching = sorted((s for s in per_key if ts <= s[1] and ts + GAP >= s[0]), key=lambda s: s[0])
        if touching or ts + GAP - 1 > watermark:
            value = record
            if touching:
                value = touching[0][2]
                for other in [*touching[1:], [0, 0, record]]:
                    value = function.reduce(value, other[2])
            for session in touching:
                per_key.remove(session)
            per_key.append([min([ts] + [s[0] for s in touching]), max([ts + GAP] + [s[1] for s in touching]), value])
        highest = max(highest, ts)
        if (index + 1) % watermark_every == 0:
            watermark = max(watermark, highest - 50)
            for per_key in sessions.values():
                for session in [s for s in per_key if s[1] - 1 <= watermark]:
                    fired.append((session[2], session[1] - 1))
                    per_key.remove(session)
    fired += [(session[2], session[1] - 1) for per_key in sessions.values() for session in per_key]
    return sorted(fired)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_session_windows_of_a_backlog_equal_the_replay_streaming_and_an_oracle(kind: str, seed: int) -> None:
    records = session_history(seed)
    vectorised = drive(session_job(kind), records)
    assert vectorised.ctx.metrics[VECTORISED_METRIC] == len(records)
    replayed = drive(session_job(kind, built_in=False), records)
    assert VECTORISED_METRIC not in replayed.ctx.metrics
    # the Python replay runs key by key: between two watermarks its keys may come in another order
    assert segments(vectorised.output.events) == segments(replayed.output.events)
    late = vectorised.ctx.metrics.get("num_late_records_dropped", 0)
    assert late == replayed.ctx.metrics.get("num_late_records_dropped", 0) > 0
    streamed = drive(session_job(kind), records, sorting=False)
    assert segments(vectorised.output.events) == segments(streamed.output.events)
    assert sorted(vectorised.output.records) == python_sessions(kind, records)


@pytest.mark.parametrize("kind", ["sum", "max_by"])
@pytest.mark.parametrize("value", ["int", "float"])
@pytest.mark.parametrize("batch_mode", [True, False])
def test_a_spilled_backlog_of_session_windows_equals_the_replay(kind: str, value: str, batch_mode: bool) -> None:
    records = session_history(5, value=value)
    vectorised = drive(session_job(kind), records, batch_mode=batch_mode, budget=7)
    replayed = drive(session_job(kind, built_in=False), records, batch_mode=batch_mode)
    assert vectorised.ctx.metrics[VECTORISED_METRIC] == len(records)
    assert vectorised.ctx.metrics["spilled_bytes"] > 0
    assert segments(vectorised.output.events) == segments(replayed.output.events)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_mode", [False, True])
def test_sessions_open_at_the_switch_merge_and_fire_in_the_stream_as_after_a_replay(kind: str,
                                                                                   batch_mode: bool) -> None:
    records = session_history(9)
    highest = max(ts for _, ts in records)
    # live records: one extends a key's open session, one bridges nothing, one opens a session, one is late
    live = [(("a", 100, 1000), highest + 10), (("b", -7, 1001), highest + 25), (("z", 1, 1003), highest + 100),
            (("c", 4, 1004), highest - 500)]
    outputs = []
    for built_in in (True, False):
        driver = drive(session_job(kind, built_in), records, batch_mode=batch_mode, last_watermark=highest - 40)
        at_switch = len(driver.output.events)
        driver.process_elements(live, batch_size=1).process_watermark(highest + 1_000)
        outputs.append((segments(driver.output.events[:at_switch]), segments(driver.output.events[at_switch:]),
                        driver.ctx.metrics.get(VECTORISED_METRIC)))
    assert outputs[0][:2] == outputs[1][:2]  # the Python replay runs key by key: keys may interleave otherwise
    assert outputs[0][2] == len(records) and outputs[1][2] is None
    assert any(outputs[0][1])  # open sessions fired after the switch


def test_a_key_whose_records_go_back_in_time_sends_the_sessions_to_the_replay() -> None:
    records = session_history(4)
    records[10], records[11] = records[11], records[10]
    records += [(("a", 5, 500), records[-1][1] - 20), (("a", 6, 501), records[-1][1] - 25)]
    sorted_run = drive(session_job("sum"), records)
    assert VECTORISED_METRIC not in sorted_run.ctx.metrics
    streamed = drive(session_job("sum"), records, sorting=False)
    assert segments(sorted_run.output.events) == segments(streamed.output.events)
    assert sorted(sorted_run.output.records) == python_sessions("sum", records)


@pytest.mark.parametrize("spread", [10, 2 ** 40, 2 ** 62])
def test_the_window_sort_orders_as_a_stable_python_sort(spread: int) -> None:
    """Columns folded into one sort key when their ranges fit an int64, numpy's lexsort when not:
    either way a stable sort, nulls first, the descending column reversed."""
    rng = random.Random(spread)
    n = 400
    columns: dict[str, list[Any]] = {"a": [rng.randrange(4) for _ in range(n)]}  # many ties
    for name in ("b", "c"):
        columns[name] = [None if rng.random() < 0.05 else rng.randrange(-spread, spread) for _ in range(n)]
    frame = pl.DataFrame({**columns, "row": list(range(n))}, schema=dict.fromkeys(["a", "b", "c", "row"], pl.Int64))

    def oracle(by: list[str], descending: str | None) -> list[int]:
        def part(name: str, value: Any) -> tuple[int, int]:
            return (0, 0) if value is None else (1, -value if name == descending else value)
        return sorted(range(n), key=lambda row: tuple(part(name, columns[name][row]) for name in by))

    for by, descending in [(["a"], None), (["a", "b"], None), (["b", "a"], "a"), (["a", "c", "b"], "c")]:
        assert _lexsorted(frame, by, descending)["row"].to_list() == oracle(by, descending), (by, descending)


@given(st.lists(st.integers(0, 2 ** 62 - 1), max_size=300), st.integers(1, 2 ** 62))
def test_stable_order_is_numpys_stable_argsort(values: list[int], spread: int) -> None:
    """Keys packed with their positions (narrow spans) or polars' arg_sort checked for ties (wide
    ones): the order numpy's stable argsort gives, ties in their original order."""
    keys = np.array([value % spread for value in values], dtype=np.int64)
    assert stable_order(keys, spread).tolist() == np.argsort(keys, kind="stable").tolist()


def test_windows_whose_key_and_start_do_not_fit_one_integer_are_grouped_by_both() -> None:
    frame = pl.DataFrame({"key": [0, 1, 1], "start": [0, 2 ** 61, 0]})
    assert _window_ids(frame, 1)[1] == ["key", "start"]
    ids, by, names = _window_ids(frame.with_columns(pl.col("start") // 2 ** 40), 1)
    assert by == [WINDOW_ID] and ids.select(*names).equals(frame.with_columns(pl.col("start") // 2 ** 40))


@pytest.mark.parametrize("kind", ["sum", "max_by"])
@pytest.mark.parametrize("assigner", ["tumbling", "sliding"])
def test_windows_too_far_apart_for_one_integer_id_equal_the_replay_and_the_oracle(kind: str, assigner: str) -> None:
    records = [(record, ts * 10 ** 16) for record, ts in history(6)]
    vectorised = drive(window_job(kind, assigner), records)
    assert vectorised.ctx.metrics[VECTORISED_METRIC] == len(records)
    replayed = drive(window_job(kind, assigner, built_in=False), records)
    assert segments(vectorised.output.events) == segments(replayed.output.events)
    assert sorted(vectorised.output.records) == python_windows(kind, assigner, records)


@given(step=st.integers(1, 50), offset=st.integers(-1_000, 1_000), slots=st.lists(st.integers(0, 40), max_size=60),
       marks=st.lists(st.integers(-1_500, 3_500), min_size=1, max_size=12))
def test_the_watermark_firing_each_window_is_the_binary_searchs_when_ends_are_a_step_apart(
        step: int, offset: int, slots: list, marks: list) -> None:
    """Ends on a grid of ``step`` are looked up once per grid point and gathered: the same indexes as
    a binary search per end, whether the grid is dense (gathered) or sparser than the ends (searched)."""
    last = np.asarray([offset + slot * step for slot in slots], dtype=np.int64)
    held = np.asarray(sorted(marks), dtype=np.int64)
    want = np.searchsorted(held, last, side="left")
    assert _firing_marks(last, held, step).tolist() == want.tolist()
    assert _firing_marks(last, held, None).tolist() == want.tolist()

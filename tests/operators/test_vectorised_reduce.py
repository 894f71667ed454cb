"""Keyed built-in aggregations over an Arrow backlog run as one polars query: the switch emits
exactly what replaying the same backlog as rows emits (same records, same order, same watermarks),
what streaming it record by record gives per key and per watermark, and what a plain-Python
rolling fold gives; the accumulators it installs carry the stream on across the switch."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from test_backlog_switch import BACKLOG, LIVE, sorting_harness, transformation_of

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.time import MAX_WATERMARK, Watermark
from slipstream.datastream.transformations import Transformation
from slipstream.operators.backlog import VECTORISED_METRIC
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.testing import OperatorHarness

KINDS = ["sum", "min", "max", "min_by", "max_by"]


def aggregation(kind: str, key: Any = "k", field: Any = "v") -> Transformation:
    return transformation_of(lambda env: getattr(env.from_collection([]).key_by(key), kind)(field))


def backlog(seed: int, batches: int = 12, size: int = 9, keys: int = 5, value: str = "int") -> list[pa.Table]:
    """Arrow batches of ``k``, ``v`` and ``i`` (arrival number), timestamps in ``ts`` (dropped on push)."""
    rng = random.Random(seed)
    draw = {"int": lambda: rng.randint(-20, 20), "float": lambda: rng.choice([0.5, 1.25, -3.0, 7.75, 2.0, 0.1])}[value]
    tables, count = [], 0
    for _ in range(batches):
        rows = [(rng.randrange(keys), draw(), count + j, rng.randrange(0, 400)) for j in range(size)]
        count += size
        tables.append(pa.table({name: [row[i] for row in rows] for i, name in enumerate(("k", "v", "i", "ts"))}))
    return tables


def drive(transformation: Transformation, tables: list[pa.Table], *, arrow: bool, batch_mode: bool,
          sorting: bool = True, budget: int = 1_000_000, spill_dir: str | None = None,
          stamped: bool = True) -> OperatorHarness:
    """Backlog the tables (as Arrow or as rows; with their ``ts`` as timestamps, or without
    timestamps), a watermark after each, then end the input."""
    driver = sorting_harness(transformation, sorting=sorting, batch_mode=batch_mode, budget=budget, spill_dir=spill_dir)
    driver.set_backlog(True)
    for table in tables:
        stamps = table.column("ts").to_pylist()
        records = table.drop_columns(["ts"])
        given = stamps if stamped else None
        batch = RecordBatch(None, given, arrow=records) if arrow else RecordBatch(RecordBatch(arrow=records).values,
                                                                                  given)
        driver.process_batch(batch)
        driver.process_watermark(max(stamps) - 150)
    return driver.end_input()


def segments(events: list[Any]) -> list[list[Any]]:
    """The records between watermarks, each segment's in a canonical order (order across keys may differ)."""
    parts: list[list[Any]] = [[]]
    for event in events:
        if isinstance(event, Watermark):
            parts.append([])
        elif isinstance(event, tuple):
            parts[-1].append((tuple(event.value), event.timestamp))
    return [sorted(part) for part in parts]


def records_of(tables: list[pa.Table], by_time: bool = False) -> list[tuple]:
    """The backlog's ``(k, v, i)`` records in arrival order (or by timestamp, then arrival: BATCH)."""
    records = [(k, v, i, ts) for table in tables
               for k, v, i, ts in zip(*(table.column(name).to_pylist() for name in ("k", "v", "i", "ts")))]
    if by_time:
        records.sort(key=lambda r: (r[3], r[2]))
    return [record[:3] for record in records]


def python_rolling(kind: str, records: list[tuple]) -> list[tuple]:
    """The oracle: what a rolling ``kind`` emits for each record, folded by hand in this order."""
    state: dict[int, tuple] = {}
    out: list[tuple] = []
    for record in records:
        k, v, _ = record
        current = state.get(k)
        if current is None:
            current = record
        elif kind == "sum":
            current = (current[0], current[1] + v, current[2])
        elif kind in ("min", "max"):
            better = v < current[1] if kind == "min" else v > current[1]
            current = (current[0], v, current[2]) if better else current
        else:
            better = v < current[1] if kind == "min_by" else v > current[1]
            current = record if better else current
        state[k] = current
        out.append(current)
    return out


def by_key(records: list[tuple]) -> dict[int, list[tuple]]:
    grouped: dict[int, list[tuple]] = defaultdict(list)
    for record in records:
        grouped[record[0]].append(tuple(record))
    return dict(grouped)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", ["int", "float"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streaming_switch_on_columns_equals_the_row_replay_and_streaming(kind: str, value: str, seed: int) -> None:
    tables = backlog(seed, value=value)
    transformation = aggregation(kind)
    columnar = drive(transformation, tables, arrow=True, batch_mode=False)
    assert columnar.ctx.metrics[VECTORISED_METRIC] == sum(t.num_rows for t in tables)
    rows = drive(transformation, tables, arrow=False, batch_mode=False)
    assert VECTORISED_METRIC not in rows.ctx.metrics
    assert columnar.output.events == rows.output.events  # same records, same order, same watermarks
    streamed = drive(transformation, tables, arrow=False, batch_mode=False, sorting=False)
    assert segments(columnar.output.events) == segments(streamed.output.events)
    assert by_key([record for record, _ in columnar.output.records]) == by_key(python_rolling(kind, records_of(tables)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("budget", [1, 1_000_000])
@pytest.mark.parametrize("value", ["int", "float"])
@pytest.mark.parametrize("stamped", [True, False])
def test_batch_switch_on_columns_equals_the_row_path(kind: str, budget: int, value: str, stamped: bool,
                                                     tmp_path: Any) -> None:
    """Each key's final value, keys in the order first seen (without timestamps, from one group_by
    that keeps the keys' order when the backlog was not spilled; sorted by rank otherwise)."""
    tables = backlog(7, value=value)
    transformation = aggregation(kind)
    columnar = drive(transformation, tables, arrow=True, batch_mode=True, budget=budget, spill_dir=str(tmp_path),
                     stamped=stamped)
    rows = drive(transformation, tables, arrow=False, batch_mode=True, stamped=stamped)
    assert columnar.ctx.metrics[VECTORISED_METRIC] == sum(t.num_rows for t in tables)
    assert columnar.output.events == rows.output.events
    if budget == 1:
        assert columnar.ctx.metrics["spilled_bytes"] > 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_mode", [False, True])
def test_the_stream_continues_from_the_accumulators_the_query_installed(kind: str, batch_mode: bool) -> None:
    tables = backlog(11)
    transformation = aggregation(kind)
    live = [((k, v, 1000 + n), 5000 + n) for n, (k, v) in enumerate([(0, -50), (4, 60), (2, 0), (9, 3), (0, 70)])]
    columnar = drive_then_live(transformation, tables, live, arrow=True, batch_mode=batch_mode)
    rows = drive_then_live(transformation, tables, live, arrow=False, batch_mode=batch_mode)
    assert columnar[-len(live):] == rows[-len(live):]
    oracle = python_rolling(kind, records_of(tables, by_time=batch_mode) + [record for record, _ in live])
    assert [tuple(v) for v, _ in columnar[-len(live):]] == oracle[-len(live):]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_batch_switch_installs_the_accumulators_when_a_snapshot_or_a_record_needs_them(checkpointing: bool) -> None:
    """In BATCH mode nothing follows the switch but the job's end: without checkpoints the final values
    become accumulators only once a snapshot or a record asks; with them, at once (a checkpoint
    freezes keyed state before it asks the operator). Either way a restored run goes on from them."""
    tables = backlog(13)
    driver = OperatorHarness(aggregation("sum"), batch_engine=PolarsBatchEngine(), batch_mode=True,
                             checkpointing=checkpointing).set_backlog(True)
    for table in tables:
        driver.process_batch(RecordBatch(None, table.column("ts").to_pylist(), arrow=table.drop_columns(["ts"])))
    driver.end_input()
    finals = {record[0]: record for record, _ in driver.output.records}
    state = driver.operator.keyed_backend()
    assert len(list(state.keys("_reduce_accumulator"))) == (len(finals) if checkpointing else 0)
    snapshot = driver.snapshot()
    assert len(list(state.keys("_reduce_accumulator"))) == len(finals)
    restored = OperatorHarness(aggregation("sum"), restore=snapshot)
    restored.process_elements([(RecordBatch(arrow=pa.table({"k": [key], "v": [1], "i": [-1]})).values[0], 9_000)
                               for key in sorted(finals)])
    assert [tuple(value) for value in restored.extract_output_values()] == \
        [(key, finals[key][1] + 1, finals[key][2]) for key in sorted(finals)]


def drive_then_live(transformation: Transformation, tables: list[pa.Table], live: list, *, arrow: bool,
                    batch_mode: bool) -> list:
    """Backlog, switch on the last watermark, then the live records one batch as rows."""
    driver = sorting_harness(transformation, batch_mode=batch_mode).set_backlog(True)
    for table in tables:
        records = table.drop_columns(["ts"])
        stamps = table.column("ts").to_pylist()
        driver.process_batch(RecordBatch(None, stamps, arrow=records) if arrow
                                      else RecordBatch(RecordBatch(arrow=records).values, stamps))
    driver.process_watermark(1000).set_backlog(False)
    assert driver.operator.is_checkpoint_blocked() is None
    driver.process_elements([(RecordBatch(arrow=pa.table({"k": [v[0]], "v": [v[1]], "i": [v[2]]})).values[0], ts)
                 for v, ts in live], batch_size=len(live))
    return driver.output.records


@pytest.mark.parametrize("case", ["null", "nan", "negative zero", "overflow", "string", "restored state",
                                  "rows midway"])
def test_what_polars_would_compute_differently_goes_back_to_rows(case: str) -> None:
    kind = "sum" if case in ("overflow", "null") else "min"
    tables = backlog(5, batches=4, value="float" if case in ("nan", "negative zero") else "int")
    first = tables[0].to_pydict()
    if case == "null":
        first["v"][3] = None
    elif case == "nan":
        first["v"][3] = math.nan
    elif case == "negative zero":
        first["v"][2], first["v"][3] = 0.0, -0.0
    elif case == "overflow":
        first["v"][3] = 2 ** 62
        first["v"][4] = 2 ** 62
    elif case == "string":
        first["v"] = [str(v) for v in first["v"]]
        tables = [pa.table({**t.to_pydict(), "v": [str(v) for v in t.column("v").to_pylist()]}) for t in tables]
    tables[0] = pa.table(first)
    transformation = aggregation(kind)
    results = []
    for arrow in (True, False):
        driver = sorting_harness(transformation, batch_mode=False)
        if case == "restored state":
            driver.process_element(RecordBatch(arrow=pa.table({"k": [1], "v": [-99], "i": [-1]})).values[0], 0)
        driver.set_backlog(True)
        for index, table in enumerate(tables):
            records, stamps = table.drop_columns(["ts"]), table.column("ts").to_pylist()
            as_rows = not arrow or (case == "rows midway" and index == 2)
            driver.process_batch(RecordBatch(RecordBatch(arrow=records).values, stamps) if as_rows
                                          else RecordBatch(None, stamps, arrow=records))
            driver.process_watermark(max(stamps) - 150)
        if case == "null":
            with pytest.raises(Exception, match="NoneType|unsupported operand"):
                driver.end_input()
            results.append(None)
            continue
        driver.end_input()
        assert VECTORISED_METRIC not in driver.ctx.metrics
        results.append(driver.output.events)
    assert repr(results[0]) == repr(results[1])  # repr: NaN is not equal to itself


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("kind", ["sum", "max_by"])
@pytest.mark.parametrize("seed", [0, 3])
def test_a_job_from_an_arrow_source_gives_every_rolling_update(parallelism: int, kind: str, seed: int) -> None:
    tables = backlog(seed, batches=20, size=50, keys=30)
    whole = pa.concat_tables(tables)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed)
    source = env.from_source(ArrowSource(whole.drop_columns(["ts"]), batch_size=64), None, "history") \
        .set_parallelism(1)  # one reader: each key's records reach the aggregation in the table's order
    results = list(getattr(source.key_by("k"), kind)("v").execute_and_collect())
    assert by_key(results) == by_key(python_rolling(kind, records_of(tables)))  # each key's in arrival order


def test_watermarks_after_the_last_record_still_follow_the_output() -> None:
    driver = sorting_harness(aggregation("sum"), batch_mode=False).set_backlog(True)
    driver.process_batch(RecordBatch(None, [5, 6], arrow=pa.table({"k": [1, 2], "v": [3, 4], "i": [0, 1]})))
    driver.process_watermark(10).process_watermark(20).end_input()
    assert [e if not isinstance(e, tuple) else e.value[:2] for e in driver.output.events] == \
        [BACKLOG, [1, 3], [2, 4], Watermark(10), Watermark(20), MAX_WATERMARK, LIVE]


@pytest.mark.parametrize("batch_mode", [False, True])
def test_a_sum_outgrowing_a_narrow_integer_field_is_exact(batch_mode: bool) -> None:
    table = pa.table({"k": pa.array([1, 1, 2, 1], pa.int32()), "v": pa.array([2_000_000_000] * 4, pa.int32()),
                      "i": [0, 1, 2, 3], "ts": [0, 1, 2, 3]})
    columnar = drive(aggregation("sum"), [table], arrow=True, batch_mode=batch_mode)
    rows = drive(aggregation("sum"), [table], arrow=False, batch_mode=batch_mode)
    assert columnar.ctx.metrics[VECTORISED_METRIC] == 4
    assert columnar.output.events == rows.output.events
    assert max(record[1] for record, _ in columnar.output.records) == 6_000_000_000


def test_reduce_with_a_built_in_aggregator_is_the_built_in_aggregation() -> None:
    from slipstream.datastream.aggregation import AggregationType, ComparableAggregator, SumAggregator
    assert aggregation("sum").aggregation == ("sum", "v")
    by_reduce = transformation_of(lambda env: env.from_collection([]).key_by("k").reduce(SumAggregator("v")))
    assert by_reduce.aggregation == ("sum", "v")
    tables = backlog(4)
    assert drive(by_reduce, tables, arrow=True, batch_mode=False).output.events == \
        drive(aggregation("sum"), tables, arrow=True, batch_mode=False).output.events
    max_by = transformation_of(lambda env: env.from_collection([]).key_by("k").reduce(
        ComparableAggregator("v", AggregationType.MAX_BY)))
    assert max_by.aggregation == ("max_by", "v")


def test_the_operators_import_polars_only_when_a_columnar_backlog_is_read() -> None:
    """polars' SIGINT handler keeps a blocked main thread from seeing Ctrl-C (pola-rs/polars#21739):
    a job that never reads a columnar backlog must not import it."""
    import subprocess
    import sys
    code = ("import sys; import slipstream.operators.reduce, slipstream.operators.window, "
            "slipstream.operators.process, slipstream.operators.timestamps, slipstream.runtime.executor; "
            "print('polars' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def small_batches(seed: int, count: int = 60) -> list[tuple[pa.RecordBatch, list[int], int]]:
    """Arrow batches of 1-40 records ``(k, v, i)`` with timestamps, a few batches per watermark interval."""
    rng = random.Random(seed)
    batches, arrival, interval = [], 0, 0
    for _ in range(count):
        size = rng.randint(1, 40)
        rows = [(rng.randrange(7), rng.randint(-9, 9), arrival + j) for j in range(size)]
        arrival += size
        interval += rng.random() < 0.2
        batch = pa.RecordBatch.from_pydict({name: [row[n] for row in rows] for n, name in enumerate("kvi")})
        batches.append((batch, [rng.randrange(1000) for _ in rows], interval))
    return batches


@pytest.mark.parametrize("budget", [1 << 30, 2_000])
def test_interval_columns_tag_each_record_with_its_interval_arrival_and_timestamp(budget: int) -> None:
    from slipstream.operators.columnar_backlog import INTERVAL_COLUMN, SEQ_COLUMN, IntervalColumns
    from slipstream.operators.columnar_buffer import TS_COLUMN
    batches = small_batches(3)
    columns = IntervalColumns("k", "v", "sum", memory_budget=budget, spill_dir=None, metrics={}, name="sum")
    expected = []
    for batch, stamps, interval in batches:
        assert columns.add(batch, stamps, interval)
        rows = zip(*(batch.column(name).to_pylist() for name in "kvi"))
        expected += [(*row, interval, len(expected) + n, stamp) for n, (row, stamp) in enumerate(zip(rows, stamps))]
    assert len(columns) == len(expected)
    null_key = pa.RecordBatch.from_pydict({"k": [None], "v": [1], "i": [-1]}, schema=batches[0][0].schema)
    assert not columns.add(null_key, [0], 99)  # the rows take it from here
    frames = list(columns.frames())
    assert columns.buffer.spilled == (budget < 1 << 20)
    got = [row for frame in frames
           for row in frame.select("k", "v", "i", INTERVAL_COLUMN, SEQ_COLUMN, TS_COLUMN).rows()]
    assert sorted(got, key=lambda row: row[4]) == expected  # by arrival number: partitions when spilled
    columns.close()


def test_a_checkpoint_of_a_columnar_backlog_resumes_to_the_same_rolling_updates() -> None:
    batches = small_batches(5)
    oracle = python_rolling("sum", [tuple(row) for batch, _, _ in batches
                                    for row in zip(*(batch.column(n).to_pylist() for n in "kvi"))])
    runs = []
    for cut in (None, 23):
        driver = sorting_harness(aggregation("sum"), batch_mode=False).set_backlog(True)
        interval = 0
        for index, (batch, stamps, batch_interval) in enumerate(batches):
            if batch_interval != interval:
                interval = batch_interval
                driver.process_watermark(interval * 10)
            if index == cut:
                driver = OperatorHarness(aggregation("sum"), batch_engine=PolarsBatchEngine(),
                                         restore=driver.snapshot())
                assert len(driver.operator._columns) == sum(b.num_rows for b, _, _ in batches[:cut])
            driver.process_batch(RecordBatch(None, stamps, arrow=batch))
        driver.end_input()
        runs.append(driver.output.records)
    assert runs[0] == runs[1]
    assert by_key([record for record, _ in runs[1]]) == by_key(oracle)


def final_by_key(kind: str, records: list[tuple]) -> list[tuple]:
    """The oracle of a BATCH reduce: each key's last rolling value, keys in the order first seen."""
    finals: dict[int, tuple] = {}
    for value in python_rolling(kind, records):
        finals[value[0]] = value
    return list(finals.values())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("checkpoint_at", [None, 9])
def test_a_batch_backlog_past_its_budget_is_combined_not_spilled(kind: str, checkpoint_at: int | None) -> None:
    """Only each key's final value counts in BATCH mode, so past its budget (here 8 records' worth of
    bytes) the backlog folds to each key's first record carrying the aggregate (for *_by: its first
    and picked records) instead of spilling, and gives what the rows give, checkpointed or not."""
    tables = backlog(11, batches=20, size=50, keys=4)
    transformation = aggregation(kind)
    driver = sorting_harness(transformation, batch_mode=True, budget=8).set_backlog(True)
    for index, table in enumerate(tables):
        if index == checkpoint_at:
            driver = OperatorHarness(transformation, batch_engine=PolarsBatchEngine(), batch_mode=True,
                                     sort_memory_budget=8, sort_every_backlog=True,
                                     restore=driver.snapshot()).set_backlog(True)
        driver.process_batch(RecordBatch(None, None, arrow=table.drop_columns(["ts"])))
    combined = driver.end_input()
    rows = drive(transformation, tables, arrow=False, batch_mode=True, stamped=False)
    assert combined.ctx.metrics.get("spilled_bytes", 0) == 0
    assert combined.ctx.metrics[VECTORISED_METRIC] == sum(t.num_rows for t in tables)
    assert [record for record, _ in combined.output.records] == [record for record, _ in rows.output.records]
    assert [tuple(record) for record, _ in combined.output.records] == final_by_key(kind, records_of(tables))


@pytest.mark.parametrize("case", ["float sum", "timestamps", "sum outside int32"])
def test_what_a_combiner_would_change_spills_instead(case: str) -> None:
    """A float sum depends on the order of its additions, timestamps on an order that is not arrival,
    and a partial sum must fit the field's type: those backlogs spill as before, with the same results."""
    tables = backlog(11, batches=20, size=50, keys=4, value="float" if case == "float sum" else "int")
    if case == "sum outside int32":
        tables = [table.set_column(1, "v", pa.array([2_000_000_000] * table.num_rows, pa.int32())) for table in tables]
    stamped = case == "timestamps"
    columnar = drive(aggregation("sum"), tables, arrow=True, batch_mode=True, budget=8, stamped=stamped)
    rows = drive(aggregation("sum"), tables, arrow=False, batch_mode=True, stamped=stamped)
    assert columnar.ctx.metrics["spilled_bytes"] > 0
    assert columnar.output.events == rows.output.events

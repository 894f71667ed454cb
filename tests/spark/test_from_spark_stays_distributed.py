"""from_spark on the polars engine keeps the DataFrame in Spark: it is read in pieces of at most
half a reader's buffer (never collected whole, also when one partition holds every row), in the
DataFrame's order, resumable from a position, with the rows left reported; the BATCH keyed
aggregation runs on Spark and ``explain()`` says why; Spark's Python workers are checked before a
function is sent to them, with what to do when they cannot import slipstream's modules."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment, ValueStateDescriptor
from slipstream.datastream.connectors import spark as spark_connector
from slipstream.datastream.connectors.base import END_OF_INPUT, NOTHING_AVAILABLE, SourceReaderContext
from slipstream.datastream.connectors.errors import SourceRestoreError
from slipstream.datastream.connectors.spark import SparkSource
from slipstream.datastream.functions import KeyedProcessFunction, RuntimeContext
from slipstream.errors import SlipstreamError

ROWS = 20_000
BUFFER = 128 * 1024  # pieces of at most 64 KiB: about 2,700 of these rows, so several per partition


def frame(spark: Any, partitions: int = 1) -> Any:
    """ROWS rows ``(k, v, i)``, made in Spark (``row`` gives the same in Python)."""
    return spark.range(0, ROWS, numPartitions=partitions).selectExpr(
        "concat('k', CAST(id * 7919 % 37 AS STRING)) AS k", "(id * 31 % 101) - 50 AS v", "id AS i")


def row(i: int) -> tuple[str, int, int]:
    return f"k{i * 7919 % 37}", i * 31 % 101 - 50, i


def oracle_sums() -> dict[str, int]:
    sums: dict[str, int] = defaultdict(int)
    for i in range(ROWS):
        key, value, _ = row(i)
        sums[key] += value
    return dict(sums)


def make_env(parallelism: int, mode: RuntimeExecutionMode, **options: Any) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    return env.set_runtime_mode(mode).configure(show_progress=False, **options)


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> list[pa.Table]:
    """Every piece read from Spark, as the readers got it."""
    read: list[pa.Table] = []
    original = spark_connector._SparkPieces.read

    def recorded(self: Any, start: int, rows: int) -> pa.Table:
        table = original(self, start, rows)
        read.append(table)
        return table

    monkeypatch.setattr(spark_connector._SparkPieces, "read", recorded)
    return read


class RunningTotals(KeyedProcessFunction):
    """Per record, the key's records and total so far (ValueState)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.totals = runtime_context.get_state(ValueStateDescriptor("totals"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count, total = self.totals.value() or (0, 0)
        self.totals.update((count + 1, total + value.v))
        yield ctx.get_current_key(), count + 1, total + value.v


def finals(records: list) -> dict:
    """The last record per key."""
    return {record[0]: tuple(record[1:]) for record in records}


@pytest.mark.parametrize("parallelism", [1, 2])
def test_keyed_sum_and_process_function_over_many_pieces_equal_the_oracle(
        spark: Any, pieces: list[pa.Table], parallelism: int) -> None:
    dataframe, sums = frame(spark, partitions=2), oracle_sums()
    counts: dict[str, int] = defaultdict(int)
    for i in range(ROWS):
        counts[row(i)[0]] += 1
    # a rolling sum (STREAMING: every record reaches the operator, read through the pieces)
    env = make_env(parallelism, RuntimeExecutionMode.STREAMING)
    updates = list(env.from_source(SparkSource(dataframe, buffer_bytes=BUFFER), None, "rows")
                   .key_by("k").sum("v").execute_and_collect())
    assert len(updates) == ROWS
    assert {key: record[0] for key, record in finals([(r.k, r.v) for r in updates]).items()} == sums
    assert len(pieces) > 4 and sum(piece.num_rows for piece in pieces) == ROWS
    # a keyed process function with state, its backlog sorted on the polars engine (BATCH)
    env = make_env(parallelism, RuntimeExecutionMode.BATCH)
    totals = list(env.from_source(SparkSource(dataframe, buffer_bytes=BUFFER), None, "rows")
                  .key_by("k").process(RunningTotals()).execute_and_collect())
    assert finals(totals) == {key: (counts[key], total) for key, total in sums.items()}


def test_a_partition_holding_every_row_is_read_in_pieces_within_managed_memory(
        spark: Any, pieces: list[pa.Table], monkeypatch: pytest.MonkeyPatch) -> None:
    dataframe = frame(spark, partitions=1)

    def collected_whole(self: Any) -> Any:
        raise AssertionError("the DataFrame was collected whole")

    monkeypatch.setattr(type(dataframe), "toArrow", collected_whole)
    managed = 160 * 1024  # the reader's share of it is its buffer: pieces of at most half
    env = make_env(1, RuntimeExecutionMode.STREAMING, managed_memory=managed)
    rows = list(env.from_spark(dataframe).map(lambda r: (r.k, r.v, r.i)).execute_and_collect())
    assert rows == [row(i) for i in range(ROWS)]  # the DataFrame's order
    assert len(pieces) > 4
    # the first piece is sized by the schema's estimate, the next by the most bytes per row a piece
    # had: estimates, so a piece may pass half the share by what its rows differ from the last ones
    assert max(piece.nbytes for piece in pieces) <= managed // 2 * 1.05
    assert max(piece.num_rows for piece in pieces) < ROWS / 4


def drain(reader: Any, end: int, limit: int | None = None) -> list[int]:
    """The ``i`` column (the DataFrame row) of what ``reader`` emits, up to ``limit`` records,
    waiting for its fetches; after each batch, the rows it reports left are those of its range
    (ending at row ``end``) after the last one emitted."""
    seen: list[int] = []
    while limit is None or len(seen) < limit:
        batch = reader.poll(1000)
        if batch is END_OF_INPUT:
            break
        if batch is NOTHING_AVAILABLE:
            time.sleep(0.005)
            continue
        seen.extend(batch.record_batch.column("i").to_pylist())
        assert reader.records_remaining() == end - seen[-1] - 1
    return seen


def open_reader(source: SparkSource, subtask: int, parallelism: int, position: Any = None) -> Any:
    reader = source.create_reader(subtask, parallelism)
    if position is not None:
        reader.restore_position(position)
    reader.open(SourceReaderContext(subtask, parallelism))
    return reader


def test_readers_report_the_rows_left_and_resume_from_their_position(spark: Any) -> None:
    source = SparkSource(frame(spark, partitions=3), batch_size=1000, buffer_bytes=BUFFER)
    shares = []
    for subtask in range(2):
        end = ROWS // 2 * (subtask + 1)
        reader = open_reader(source, subtask, 2)
        assert reader.records_remaining() is None  # before the DataFrame is planned
        first = drain(reader, end, limit=3000)
        remaining = reader.records_remaining()
        position = reader.snapshot_position()
        rest = drain(reader, end)
        assert reader.records_remaining() == 0 and len(rest) == remaining
        reader.close()
        resumed = open_reader(source, subtask, 2, position)
        assert drain(resumed, end) == rest
        resumed.close()
        shares.append(first + rest)
    assert shares[0] + shares[1] == list(range(ROWS))  # contiguous ranges, in the DataFrame's order
    assert abs(len(shares[0]) - len(shares[1])) <= 1  # split by rows, not by partitions
    with pytest.raises(SourceRestoreError, match="a position is the DataFrame row"):
        source.create_reader(0, 1).restore_position([1, 0])


def test_the_batch_keyed_aggregation_runs_on_spark_on_the_polars_engine(spark: Any, pieces: list[pa.Table]) -> None:
    dataframe = frame(spark, partitions=2)
    env = make_env(2, RuntimeExecutionMode.BATCH)
    env.from_spark(dataframe).key_by("k").sum("v").print()
    plan = env.explain()
    assert "runs on spark as one query: from_spark -> key_by('k').sum('v')" in plan
    assert "not the polars batch engine: the rows stay in Spark" in plan and "Spark Source" not in plan
    env = make_env(2, RuntimeExecutionMode.BATCH)
    result = list(env.from_spark(dataframe).key_by("k").sum("v").execute_and_collect())
    assert {r.k: r.v for r in result} == oracle_sums() and len(result) == len(oracle_sums())
    assert sum(piece.num_rows for piece in pieces) == len(result)  # one row per key came back


def test_workers_that_cannot_import_slipstreams_modules_fail_with_what_to_do(
        spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from slipstream.runtime.batch.spark_engine import SparkBatchEngine, check_python_workers
    check_python_workers(spark)  # this interpreter's workers can
    shadow = tmp_path / "shadow" / "polars"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'polars'\", name='polars')\n")
    python = tmp_path / "python-without-polars"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{tmp_path / "shadow"}:$PYTHONPATH" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    monkeypatch.setattr(spark.sparkContext, "pythonExec", str(python))
    left = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(SlipstreamError) as failure:
        SparkBatchEngine(session=spark).co_group_frames(left, left, lambda a, b: a, first_key="k", second_key="k")
    message = str(failure.value)
    assert "cannot import polars (No module named 'polars')" in message
    assert f"Set PYSPARK_PYTHON to an interpreter with slipstream installed (this driver runs {sys.executable!r})" \
        in message

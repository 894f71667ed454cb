"""co_group over columnar (Arrow) backlog: the columnar buffering path gives what the row path gives.

Arrow input keyed by a field is buffered as Arrow (spilling hash-partitioned IPC files under a
tiny ``sort_memory_budget``), and at the switch runs per key (rows built a chunk at a time) or
vectorised (DataFrames straight from the columns, result emitted as Arrow). The oracle is the
same job over the same records as rows (``from_collection``), and plain Python.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from slipstream.attributes import Boundedness
from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.base import END_OF_INPUT, Sink, SinkWriter, Source, SourceReader
from slipstream.datastream.connectors.columnar import ArrowSourceBatch
from slipstream.datastream.window import EndOfStreamWindows
from slipstream.errors import UserFunctionError
from slipstream.operators.columnar_buffer import SPILL_PARTITIONS, TS_COLUMN, ColumnarBuffer

BUDGETS = [1_000_000, 3]  # everything in memory; spilling after every batch


def records(n: int, keys: int, seed: int) -> list[tuple[int, int, float]]:
    rng = random.Random(seed)
    return [(rng.randrange(keys), i, float(rng.randrange(10))) for i in range(n)]


def table_of(rows: list[tuple]) -> pa.Table:
    return pa.table({"f0": [r[0] for r in rows], "f1": [r[1] for r in rows], "f2": [r[2] for r in rows]},
                    schema=pa.schema([("f0", pa.int64()), ("f1", pa.int64()), ("f2", pa.float64())]))


def per_key(first: list, second: list) -> Any:
    key = (first or second)[0][0]
    yield (key, [(r[1], r[2]) for r in first], [(r[1], r[2]) for r in second])


def vectorised(first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
    a = first.group_by("f0").agg(pl.len().alias("n1"), pl.col("f2").sum().alias("s1"))
    b = second.group_by("f0").agg(pl.len().alias("n2"), pl.col("f2").sum().alias("s2"))
    return a.join(b, on="f0", how="full", coalesce=True).fill_null(0)


def oracle_per_key(first: list, second: list) -> list:
    groups: dict[Any, tuple[list, list]] = defaultdict(lambda: ([], []))
    for record in first:
        groups[record[0]][0].append((record[1], record[2]))
    for record in second:
        groups[record[0]][1].append((record[1], record[2]))
    return sorted((key, a, b) for key, (a, b) in groups.items())


def oracle_vectorised(first: list, second: list) -> list:
    return sorted((key, len(a), sum(x for _, x in a), len(b), sum(x for _, x in b))
                  for key, a, b in oracle_per_key(first, second))


def env_for(budget: int, sorting: bool = True, parallelism: int = 1) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    return env.configure(sort_memory_budget=budget, backlog_sorting=sorting, scheduler_seed=3)


def run(env: StreamExecutionEnvironment, a: Any, b: Any, vectorized: bool, key: Any = "f0") -> list:
    windowed = a.co_group(b).where(key).equal_to(key).window(EndOfStreamWindows.get())
    stream = windowed.apply(vectorised, vectorized=True) if vectorized else windowed.apply(per_key)
    got = [tuple(r) for r in stream.execute_and_collect()]
    return sorted(got)


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("parallelism", [1, 2])
def test_columnar_per_key_co_group_equals_the_row_path_and_the_oracle(budget: int, parallelism: int) -> None:
    first, second = records(400, 60, 1), records(300, 80, 2)  # keys on one side only, too
    env = env_for(budget, parallelism=parallelism)
    columnar = run(env, env.from_source(ArrowSource(table_of(first), batch_size=37), None, "a"),
                   env.from_source(ArrowSource(table_of(second), batch_size=41), None, "b"), False)
    env = env_for(budget, parallelism=parallelism)
    rows = run(env, env.from_collection(first), env.from_collection(second), False, key=0)
    expected = oracle_per_key(first, second)
    if parallelism > 1:  # subtasks' records interleave differently: compare each key's records as sets
        columnar, rows, expected = ([(k, sorted(a), sorted(b)) for k, a, b in got] for got in (columnar, rows, expected))
    # at parallelism 1 the backlog keeps each key's arrival order on both paths, so even the lists agree
    assert columnar == rows == expected


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("sorting", [True, False])
def test_columnar_vectorised_co_group_equals_the_oracle(budget: int, sorting: bool) -> None:
    first, second = records(500, 70, 3), records(200, 90, 4)
    env = env_for(budget, sorting)
    got = run(env, env.from_source(ArrowSource(table_of(first), batch_size=29), None, "a"),
              env.from_source(ArrowSource(table_of(second), batch_size=64), None, "b"), True)
    assert got == oracle_vectorised(first, second)


class ColumnarCounter(Sink):
    def __init__(self) -> None:
        self.arrow_rows = 0
        self.python_rows = 0

    def create_writer(self) -> SinkWriter:
        counter = self

        class Writer(SinkWriter):
            def write(self, values: list, timestamps: list | None) -> None:
                counter.python_rows += len(values)

            def write_arrow(self, batch: Any, timestamps: list | None) -> None:
                counter.arrow_rows += batch.num_rows

        return Writer()


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_vectorised_result_of_a_columnar_backlog_is_emitted_as_arrow(budget: int) -> None:
    first, second = records(300, 50, 5), records(300, 50, 6)
    env = env_for(budget)
    sink = ColumnarCounter()
    a = env.from_source(ArrowSource(table_of(first), batch_size=16), None, "a")
    b = env.from_source(ArrowSource(table_of(second), batch_size=16), None, "b")
    a.co_group(b).where("f0").equal_to("f0").window(EndOfStreamWindows.get()) \
        .apply(vectorised, vectorized=True).sink_to(sink)
    result = env.execute()
    assert (sink.arrow_rows, sink.python_rows) == (len(oracle_per_key(first, second)), 0)
    metrics = next(m for name, m in result.get_all_accumulator_results().items() if name.startswith("CoGroup"))
    assert metrics["backlog_records"] == 600
    assert (metrics["spilled_bytes"] > 0) == (budget == 3)


def test_mixed_inputs_and_lambda_keys_fall_back_to_rows_with_the_same_result() -> None:
    first, second = records(250, 40, 7), records(250, 40, 8)
    expected = oracle_per_key(first, second)
    env = env_for(3)
    mixed = run(env, env.from_source(ArrowSource(table_of(first), batch_size=16), None, "a"),
                env.from_collection(second), False, key=0)
    env = env_for(3)
    keyed_by_lambda = run(env, env.from_source(ArrowSource(table_of(first), batch_size=16), None, "a"),
                          env.from_source(ArrowSource(table_of(second), batch_size=16), None, "b"), False,
                          key=lambda row: row[0])
    assert mixed == keyed_by_lambda == expected


def test_columnar_string_keys_of_both_sides_meet_across_spilled_partitions() -> None:
    first = [(f"k{i % 23}", i, 1.0) for i in range(200)]
    second = [(f"k{i % 31}", i, 2.0) for i in range(150)]
    env = env_for(2)
    got = run(env, env.from_source(ArrowSource(pa.table({"f0": [r[0] for r in first], "f1": [r[1] for r in first],
                                                         "f2": [r[2] for r in first]}), batch_size=10), None, "a"),
              env.from_source(ArrowSource(pa.table({"f0": pa.array([r[0] for r in second], pa.large_string()),
                                                    "f1": [r[1] for r in second],
                                                    "f2": [r[2] for r in second]}), batch_size=10), None, "b"),
              False)
    assert got == oracle_per_key(first, second)


class TimedArrowSource(Source):
    """Arrow batches whose records carry event timestamps (``f1`` is the timestamp)."""

    def __init__(self, rows: list[tuple], batch_size: int) -> None:
        self.rows, self.batch_size = rows, batch_size

    def get_boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    def create_reader(self, subtask_index: int, parallelism: int) -> SourceReader:
        source = self

        class Reader(SourceReader):
            position = 0

            def open(self, context: Any) -> None:
                """Nothing to open."""

            def poll(self, max_records: int) -> Any:
                if self.position >= len(source.rows):
                    return END_OF_INPUT
                chunk = source.rows[self.position:self.position + source.batch_size]
                self.position += len(chunk)
                return ArrowSourceBatch(table_of(chunk).to_batches()[0], [r[1] for r in chunk])

        return Reader()


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("mode", [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH], ids=lambda m: m.name)
def test_each_keys_columnar_records_come_in_arrival_order_or_in_batch_mode_timestamp_order(
        budget: int, mode: RuntimeExecutionMode) -> None:
    rng = random.Random(9)
    first = [(rng.randrange(12), rng.randrange(1000), float(i)) for i in range(150)]
    second = [(rng.randrange(12), rng.randrange(1000), float(i)) for i in range(150)]
    env = env_for(budget).set_runtime_mode(mode)
    got = run(env, env.from_source(TimedArrowSource(first, 13), None, "a"),
              env.from_source(TimedArrowSource(second, 17), None, "b"), False)
    expected = oracle_per_key(first, second)  # arrival order, as streaming the backlog gives them
    if mode is RuntimeExecutionMode.BATCH:  # Flink's BATCH semantics: timestamp order
        expected = [(key, sorted(a, key=lambda r: r[0]), sorted(b, key=lambda r: r[0]))
                    for key, a, b in expected]  # sorted() is stable: arrival order next
    assert got == sorted(expected)


def test_a_failing_per_key_function_on_columnar_backlog_names_the_key() -> None:
    env = env_for(1_000_000)
    rows = [(1, 1, 1.0), (2, 2, 1.0)]

    def fail(first: list, second: list) -> Any:
        if first and first[0][0] == 2:
            raise ValueError("boom")
        return []

    a = env.from_source(ArrowSource(table_of(rows)), None, "a")
    b = env.from_source(ArrowSource(table_of(rows)), None, "b")
    a.co_group(b).where("f0").equal_to("f0").window(EndOfStreamWindows.get()).apply(fail).sink_to(ColumnarCounter())
    with pytest.raises(UserFunctionError, match="key 2"):
        env.execute()


# -- the buffer itself --------------------------------------------------------------------------------
def test_a_columnar_buffer_refuses_what_it_cannot_hold_columnar() -> None:
    buffer = ColumnarBuffer("k")
    assert not buffer.add(pa.record_batch({"x": [1]}), None)  # no key column
    buffer = ColumnarBuffer("k")
    assert not buffer.add(pa.record_batch({"k": [[1]]}), None)  # a list key: not a columnar key
    buffer = ColumnarBuffer(0)
    assert buffer.add(pa.record_batch({"k": [1, 2]}), None)
    assert not buffer.add(pa.record_batch({"k": ["a"]}), None)  # another schema
    assert not buffer.add(pa.record_batch({"k": pa.array([None], pa.int64())}), None)  # a null key
    assert len(buffer) == 2
    buffer.close()


def test_integer_keys_of_different_widths_land_in_the_same_partition() -> None:
    narrow, wide = ColumnarBuffer("k", memory_budget=0), ColumnarBuffer("k", memory_budget=0)
    keys = list(range(0, 3000, 7))
    assert narrow.add(pa.record_batch({"k": pa.array(keys, pa.int32())}), None)
    assert wide.add(pa.record_batch({"k": pa.array(keys, pa.int64())}), None)
    assert narrow.spilled and wide.spilled
    for left, right in zip(narrow.partition_tables(SPILL_PARTITIONS), wide.partition_tables(SPILL_PARTITIONS)):
        assert left.column("k").to_pylist() == right.column("k").to_pylist()
        assert TS_COLUMN not in left.schema.names  # no record had a timestamp
    narrow.close()
    wide.close()


def test_an_unpartitioned_buffer_spills_each_time_as_one_file_and_reads_back_whole_in_arrival_order(
        tmp_path) -> None:
    buffer = ColumnarBuffer("k", memory_budget=1, partitioned=False, spill_dir=str(tmp_path))  # each batch spills
    batches = [pa.record_batch({"k": [3, 1, 3], "v": [0, 1, 2]}), pa.record_batch({"k": [2, 3], "v": [3, 4]}),
               pa.record_batch({"k": [1], "v": [5]})]
    for number, batch in enumerate(batches):
        assert buffer.add(batch, list(range(10 * number, 10 * number + batch.num_rows)))
    assert buffer.spilled and buffer.partition_count == 1
    assert len(list(tmp_path.rglob("*.arrow"))) == 3  # one file a spill, none split by key
    with pytest.raises(ValueError, match="1 table"):
        next(buffer.partition_tables(SPILL_PARTITIONS))
    (table,) = buffer.partition_tables(1)
    assert table.column("v").to_pylist() == [0, 1, 2, 3, 4, 5]
    assert table.column(TS_COLUMN).to_pylist() == [0, 1, 2, 10, 11, 20]
    buffer.close()

"""A job whose history is an Arrow table, timestamped from a column (FieldTimestampAssigner) and
windowed by a built-in aggregation, runs its backlog on the columns and gives what the same job
gives with a Python timestamp assigner (rows, replayed) and what a plain-Python oracle gives, at
every parallelism."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.watermark_strategy import FieldTimestampAssigner, WatermarkStrategy
from slipstream.datastream.window import EventTimeSessionWindows, SlidingEventTimeWindows, TumblingEventTimeWindows
from slipstream.operators.backlog import VECTORISED_METRIC


def history(seed: int, n: int = 2_000) -> pa.Table:
    rng = random.Random(seed)
    stamps = sorted(rng.randrange(0, 50_000) for _ in range(n))
    return pa.table({"k": [rng.randrange(40) for _ in range(n)], "v": [rng.randint(-100, 100) for _ in range(n)],
                     "t": stamps})


WINDOWS: dict[str, Any] = {
    "tumbling": lambda keyed: keyed.window(TumblingEventTimeWindows.of(1_000)),
    "sliding": lambda keyed: keyed.window(SlidingEventTimeWindows.of(1_000, 300)),
    "session": lambda keyed: keyed.window(EventTimeSessionWindows.with_gap(900)),
    "count": lambda keyed: keyed.count_window(5),
}


def run(table: pa.Table, parallelism: int, seed: int, assigner: Any, window: str = "tumbling",
        **options: Any) -> tuple[list[tuple], dict[str, Any]]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, **options)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(200).with_timestamp_assigner(assigner)
    results: list[tuple] = []
    keyed = env.from_source(ArrowSource(table, batch_size=128), strategy, "history").set_parallelism(1).key_by("k")
    WINDOWS[window](keyed).sum("v").name("sums").add_sink(lambda row: results.append(tuple(row)))
    metrics = env.execute().get_all_accumulator_results()["sums"]
    return sorted(results), metrics


def oracle(table: pa.Table) -> list[tuple]:
    windows: dict[tuple[int, int], tuple] = {}
    for k, v, t in zip(*(table.column(name).to_pylist() for name in ("k", "v", "t"))):
        window = (k, t - t % 1_000)
        first = windows.get(window)
        windows[window] = (k, v, t) if first is None else (first[0], first[1] + v, first[2])
    return sorted(windows.values())


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_columnar_history_of_window_sums_equals_rows_and_an_oracle(parallelism: int, seed: int) -> None:
    table = history(seed)
    columnar, metrics = run(table, parallelism, seed, FieldTimestampAssigner("t"))
    rows, _ = run(table, parallelism, seed, lambda row, _: row["t"])
    assert columnar == rows == oracle(table)
    assert metrics[VECTORISED_METRIC] == table.num_rows


@pytest.mark.parametrize("window", list(WINDOWS))
def test_a_spilled_columnar_history_of_windows_equals_rows(window: str) -> None:
    """Past its memory budget the columnar buffer spills by key partition, and the switch reads the
    partitions one after another: each key's records stay in arrival order, which is all a window's
    fold needs (the first record's fields, a count's numbering, a session's gaps)."""
    table = history(3)
    columnar, metrics = run(table, 1, 0, FieldTimestampAssigner("t"), window, sort_memory_budget=2)
    rows, _ = run(table, 1, 0, lambda row, _: row["t"], window)
    assert metrics["spilled_bytes"] > 0 and metrics[VECTORISED_METRIC] == table.num_rows
    assert columnar == rows
    if window == "tumbling":
        assert columnar == oracle(table)


def test_a_field_assigner_keeps_arrow_batches_columnar_with_the_column_as_timestamps() -> None:
    from slipstream.datastream.connectors.base import Sink, SinkWriter
    seen: list[tuple[int, list]] = []

    class Columns(Sink):
        def create_writer(self) -> SinkWriter:
            class Writer(SinkWriter):
                def write(self, values: list, timestamps: list | None) -> None:
                    raise AssertionError("rows were built")

                def write_arrow(self, batch: Any, timestamps: list | None) -> None:
                    seen.append((batch.num_rows, timestamps))
            return Writer()

    env = StreamExecutionEnvironment.get_execution_environment()
    table = pa.table({"t": [5, 3, 9], "x": ["a", "b", "c"]})
    env.from_source(ArrowSource(table), WatermarkStrategy.for_monotonous_timestamps()
                    .with_timestamp_assigner(FieldTimestampAssigner("t")), "t").sink_to(Columns())
    env.execute()
    assert seen == [(3, [5, 3, 9])]

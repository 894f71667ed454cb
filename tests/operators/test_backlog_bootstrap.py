"""A KeyedProcessFunction that is also a KeyedStateBootstrapFunction gets its backlog as one polars
DataFrame (``process_backlog``) and returns each key's state: nothing is emitted for the backlog, the
state is installed at the switch, and the stream continues from it record by record, at every
parallelism."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from test_backlog_switch import sorting_harness, transformation_of

from slipstream.datastream import KeyedStateBootstrapFunction, StreamExecutionEnvironment  # where a user finds it
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.errors import InvalidProgramError, SlipstreamError
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.testing import OperatorHarness


class Totals(KeyedProcessFunction, KeyedStateBootstrapFunction):
    """Running totals and counts per user; the backlog's come from one group_by."""

    calls = 0

    def open(self, runtime_context: Any) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_backlog(self, frame: pl.DataFrame) -> pl.DataFrame:
        Totals.calls += 1
        return frame.group_by("user").agg(pl.col("amount").sum().alias("total"), pl.len().alias("count"))

    def process_element(self, value: Any, ctx: Any):
        total = (self.total.value() or 0) + value["amount"]
        count = (self.count.value() or 0) + 1
        self.total.update(total)
        self.count.update(count)
        yield value["user"], total, count


def history(seed: int, n: int = 300) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": rng.randrange(20), "amount": rng.randint(1, 50)} for _ in range(n)]


def oracle(backlog: list[dict[str, Any]], live: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for record in backlog:
        totals[record["user"]][0] += record["amount"]
        totals[record["user"]][1] += 1
    out = []
    for record in live:
        state = totals[record["user"]]
        state[0] += record["amount"]
        state[1] += 1
        out.append((record["user"], state[0], state[1]))
    return out


@pytest.mark.parametrize("arrow", [True, False])
@pytest.mark.parametrize("batch_mode", [False, True])
def test_the_backlog_becomes_state_in_one_call_and_the_stream_goes_on_from_it(arrow: bool, batch_mode: bool) -> None:
    backlog, live = history(1), history(2, n=40)
    Totals.calls = 0
    driver = sorting_harness(transformation_of(lambda env: env.from_collection([]).key_by("user").process(Totals())),
                    batch_mode=batch_mode).set_backlog(True)
    for start in range(0, len(backlog), 64):
        chunk = backlog[start:start + 64]
        driver.process_batch(RecordBatch(None, None, arrow=pa.Table.from_pylist(chunk)) if arrow
                                      else RecordBatch(chunk))
        driver.process_watermark(start)
    assert driver.operator.is_checkpoint_blocked() is None and driver.operator.snapshot_backlog()["own"] is not None
    driver.process_watermark(10_000).set_backlog(False)
    assert Totals.calls == 1 and driver.output.records == []  # one call, no output for the backlog
    driver.process_elements([(record, None) for record in live], batch_size=4)
    assert [tuple(v) for v, _ in driver.output.records] == oracle(backlog, live)


@pytest.mark.parametrize("arrow", [True, False])
def test_a_checkpoint_mid_backlog_restores_the_frames_and_the_stream_goes_on_from_them(arrow: bool) -> None:
    """The backlog frames go into a checkpoint taken while they are buffered; an operator restored from
    it takes the rest of the backlog and gives what one uninterrupted operator gives."""
    backlog, live = history(3), history(4, n=40)
    transformation = transformation_of(lambda env: env.from_collection([]).key_by("user").process(Totals()))

    def push(driver: OperatorHarness, records: list[dict[str, Any]]) -> None:
        for start in range(0, len(records), 64):
            chunk = records[start:start + 64]
            driver.process_batch(RecordBatch(None, None, arrow=pa.Table.from_pylist(chunk)) if arrow
                                 else RecordBatch(chunk))

    first = sorting_harness(transformation, batch_mode=False).set_backlog(True)
    push(first, backlog[:170])
    second = OperatorHarness(transformation, restore=first.snapshot(), batch_engine=PolarsBatchEngine(),
                             batch_mode=False, sort_memory_budget=1_000_000).set_backlog(True)
    push(second, backlog[170:])
    second.process_watermark(10_000).set_backlog(False)
    second.process_elements([(record, None) for record in live], batch_size=4)
    assert [tuple(v) for v, _ in second.output.records] == oracle(backlog, live)


@pytest.mark.one_process("it counts the bootstrap function's calls in a class attribute, in this process")
@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 5])
def test_a_hybrid_job_bootstraps_each_subtasks_keys(parallelism: int, seed: int) -> None:
    backlog, live = history(seed), history(seed + 100, n=60)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed)
    Totals.calls = 0
    source = HybridSource.builder(CollectionSource(backlog)).add_source(IteratorSource(live, bounded=False)).build()
    results = list(env.from_source(source, None, "transactions").key_by("user").process(Totals())
                   .execute_and_collect())
    by_user: dict[int, list[tuple]] = defaultdict(list)
    for result in results:
        by_user[result[0]].append(tuple(result))
    expected: dict[int, list[tuple]] = defaultdict(list)
    for result in oracle(backlog, live):
        expected[result[0]].append(result)
    assert by_user == expected
    assert 1 <= Totals.calls <= parallelism  # once per subtask that had backlog: no per-record calls for it


def test_a_bootstrap_function_needs_a_stream_keyed_by_a_field() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidProgramError, match="key the stream by a field"):
        env.from_collection([{"user": 1}]).key_by(lambda r: r["user"]).process(Totals())


class Stray(Totals):
    def process_backlog(self, frame: pl.DataFrame) -> pl.DataFrame:
        return pl.DataFrame({"user": [-1], "total": [0]})


class NotAFrame(Totals):
    def process_backlog(self, frame: pl.DataFrame) -> Any:
        return {"user": 1}


@pytest.mark.parametrize("function, message", [(Stray(), "state for key -1, which is not in its backlog"),
                                               (NotAFrame(), "must return a polars DataFrame")])
def test_what_process_backlog_returns_is_checked(function: Totals, message: str) -> None:
    driver = sorting_harness(transformation_of(lambda env: env.from_collection([]).key_by("user").process(function)),
                    batch_mode=False).set_backlog(True)
    driver.process_batch(RecordBatch(history(3, n=5)))
    with pytest.raises(SlipstreamError, match=message):
        driver.set_backlog(False)


def test_explain_says_a_bootstrap_function_gets_its_backlog_as_one_frame() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(CollectionSource([{"user": 1, "amount": 2}]), None, "history") \
        .key_by("user").process(Totals()).name("totals").print()
    plan = env.explain()
    assert "gives it to process_backlog(frame) as one polars DataFrame at the switch" in plan
    assert "sorts its backlog" not in plan.split("totals")[1]
    plain = StreamExecutionEnvironment.get_execution_environment()
    plain.from_collection([1]).key_by(lambda x: x).process(PlainTotals()).print()
    assert "process_backlog" not in plain.explain()


class PlainTotals(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: Any):  # noqa: ANN201
        yield value

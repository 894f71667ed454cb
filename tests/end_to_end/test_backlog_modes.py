"""The same keyed jobs in STREAMING, BATCH and AUTOMATIC mode, with backlog sorting on (also
under a tiny sort memory budget, so the backlog spills) and off, at parallelism 1, 2 and 4:
the final results agree with a plain-Python oracle every time (FLIP-327)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import EndOfStreamWindows, TumblingEventTimeWindows

SORTING = {"sorted": {}, "sorted-spilling": {"sort_memory_budget": 3}, "record-by-record": {"backlog_sorting": False}}

pytestmark = pytest.mark.configure(batch_size=7, channel_capacity=2)

RNG = random.Random(20231)
RECORDS = [(RNG.choice("abcdefghij"), RNG.randint(-20, 40), i) for i in range(400)]  # (key, value, time)


def sorting_into(env: StreamExecutionEnvironment, sorting: str, tmp_path: Any) -> StreamExecutionEnvironment:
    """``env`` with the backlog sorting of ``SORTING[sorting]``, spilling into ``tmp_path``."""
    return env.configure(spill_dir=str(tmp_path), **SORTING[sorting])


def timed(env: StreamExecutionEnvironment) -> Any:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _: r[2])
    return env.from_collection(RECORDS).assign_timestamps_and_watermarks(strategy)


def final_per_key(updates: list, key: Callable[[Any], Any]) -> dict:
    final: dict = {}
    for update in updates:
        final[key(update)] = update
    return final


def groups() -> dict[str, list[tuple[str, int, int]]]:
    grouped: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for record in RECORDS:
        grouped[record[0]].append(record)
    return grouped


class CountAtEnd(KeyedProcessFunction):
    """Counts and sums per key; a timer beyond the input emits the totals once per key."""

    def open(self, runtime_context: Any) -> None:
        self.totals = runtime_context.get_state(ValueStateDescriptor("totals"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count, total = self.totals.value() or (0, 0)
        self.totals.update((count + 1, total + value[1]))
        ctx.timer_service().register_event_time_timer(10 ** 9)
        return ()

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield (ctx.get_current_key(),) + self.totals.value()


def run_sum(env: StreamExecutionEnvironment) -> Any:
    # the other fields come from the key's first record, which at parallelism > 1 depends on
    # arrival order: compare only the key and the sum
    updates = list(env.from_collection(RECORDS).map(lambda r: (r[0], r[1])).key_by(lambda r: r[0]).sum(1)
                   .execute_and_collect())
    oracle = {k: (k, sum(r[1] for r in rs)) for k, rs in groups().items()}
    return final_per_key(updates, lambda r: r[0]), oracle


def run_max_by(env: StreamExecutionEnvironment) -> Any:
    # values made unique per key (ties would be broken by arrival order when streaming)
    updates = list(timed(env).map(lambda r: (r[0], r[1] * 1000 + r[2], r[2])).key_by(lambda r: r[0]).max_by(1)
                   .execute_and_collect())
    oracle = {k: max((r[0], r[1] * 1000 + r[2], r[2]) for r in rs) for k, rs in groups().items()}
    return final_per_key(updates, lambda r: r[0]), oracle


def run_reduce(env: StreamExecutionEnvironment) -> Any:
    updates = list(env.from_collection(RECORDS).key_by(lambda r: r[0])
                   .reduce(lambda a, b: (a[0], max(a[1], b[1]), min(a[2], b[2]))).execute_and_collect())
    oracle = {k: (k, max(r[1] for r in rs), min(r[2] for r in rs)) for k, rs in groups().items()}
    return final_per_key(updates, lambda r: r[0]), oracle


def run_process(env: StreamExecutionEnvironment) -> Any:
    out = list(timed(env).key_by(lambda r: r[0]).process(CountAtEnd()).execute_and_collect())
    return sorted(out), sorted((k, len(rs), sum(r[1] for r in rs)) for k, rs in groups().items())


def run_tumbling(env: StreamExecutionEnvironment) -> Any:
    out = list(timed(env).key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(50))
               .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).execute_and_collect())
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, -1])
    for key, value, time in RECORDS:
        cell = sums[(key, time // 50)]
        cell[0] += value
        cell[1] = max(cell[1], time)
    return sorted(out), sorted((k, s, t) for (k, _), (s, t) in sums.items())


def run_end_of_stream(env: StreamExecutionEnvironment) -> Any:
    out = list(env.from_collection(RECORDS).key_by(lambda r: r[0]).window(EndOfStreamWindows.get())
               .process(lambda key, ctx, elements: [(key, sorted(e[1] for e in elements))]).execute_and_collect())
    return sorted(out), sorted((k, sorted(r[1] for r in rs)) for k, rs in groups().items())


JOBS = {"sum": run_sum, "max_by": run_max_by, "reduce": run_reduce, "process": run_process,
        "tumbling": run_tumbling, "end_of_stream": run_end_of_stream}


@pytest.mark.modes(*RuntimeExecutionMode)
@pytest.mark.parametrize("job", list(JOBS))
@pytest.mark.parametrize("sorting", list(SORTING))
def test_every_mode_gives_the_oracles_final_result(job: str, sorting: str, env: StreamExecutionEnvironment,
                                                   tmp_path: Any) -> None:
    got, oracle = JOBS[job](sorting_into(env, sorting, tmp_path))
    assert got == oracle
    assert list(tmp_path.iterdir()) == []  # spill directories are removed after the switch


@pytest.mark.modes(RuntimeExecutionMode.BATCH)
def test_sorted_reduce_in_batch_mode_emits_one_value_per_key_and_reports_its_backlog(
        env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    sorting_into(env, "sorted-spilling", tmp_path)
    env.from_collection(RECORDS).key_by(lambda r: r[0]).sum(1).name("sum").add_sink(lambda _: None)
    metrics = env.execute().get_accumulator_result("sum")
    assert metrics["records_out"] == len(groups())  # not one update per record
    assert metrics["backlog_records"] == len(RECORDS) and metrics["spilled_bytes"] > 0
    assert metrics["batch_engine"] == "polars" and metrics["switch_time"] > 0


@pytest.mark.parametrize("sorting", [True, "always"])
def test_live_records_after_a_hybrid_backlog_stream_on_from_the_batch_state(sorting: bool | str, tmp_path: Any) -> None:
    history = [("a", 1), ("b", 10), ("a", 2), ("b", 20), ("c", 5)]
    live = [("a", 100), ("c", 1000), ("a", 3)]
    env = StreamExecutionEnvironment.get_execution_environment().configure(spill_dir=str(tmp_path),
                                                                          backlog_sorting=sorting)
    source = HybridSource.builder(CollectionSource(history)).add_source(IteratorSource(live, bounded=False)).build()
    updates = list(env.from_source(source, None, "history then live").key_by(lambda r: r[0]).sum(1)
                   .execute_and_collect())
    # a backlog of rows streams (every rolling update in arrival order); sorted, it is reduced key by
    # key (every rolling update too); then every live record gets its rolling update at once,
    # continuing from the state the backlog left
    backlog = [("a", 1), ("a", 3), ("b", 10), ("b", 30), ("c", 5)] if sorting == "always" else \
        [("a", 1), ("b", 10), ("a", 3), ("b", 30), ("c", 5)]
    assert updates == backlog + [("a", 103), ("c", 1005), ("a", 106)]


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_sorted_reduce_in_streaming_mode_emits_every_rolling_update_in_key_order(
        env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    sorting_into(env, "sorted-spilling", tmp_path)
    updates = list(env.from_collection(RECORDS).key_by(lambda r: r[0]).sum(1).execute_and_collect())
    assert len(updates) == len(RECORDS)
    for key, records in groups().items():
        running = [u[1] for u in updates if u[0] == key]
        # a running sum over the key's records in their arrival order (which, with several
        # source subtasks, interleaves their slices): its steps are exactly the key's values
        steps = [b - a for a, b in zip([0] + running, running)]
        assert sorted(steps) == sorted(r[1] for r in records)

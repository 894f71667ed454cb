"""The FLIP-327 switch, driven directly on the sorting operators (reduce, keyed process, window):
nothing leaves them during backlog; at the switch they produce what streaming would have ended
with; afterwards they stream on from the state the batch installed. In BATCH mode (the driver's
default) the backlog is sorted by key and time; in STREAMING mode the switch gives what streaming
the same input gives, watermark by watermark."""

from __future__ import annotations

import gc
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from slipstream.attributes import RecordAttributes
from slipstream.datastream.environment import StreamExecutionEnvironment
from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.state import ValueStateDescriptor
from slipstream.datastream.time import MAX_WATERMARK, Watermark
from slipstream.datastream.transformations import Transformation
from slipstream.datastream.window import EndOfStreamWindows, TumblingEventTimeWindows
from slipstream.errors import UserFunctionError
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.testing import OperatorHarness

BACKLOG = RecordAttributes(True)
LIVE = RecordAttributes(False)


def transformation_of(build: Callable[[StreamExecutionEnvironment], Any]) -> Transformation:
    """The transformation the API builds for ``build(env)`` (its last one)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    build(env)
    return env._transformations[-1]


def sorting_harness(transformation: Transformation, *, sorting: bool = True, budget: int = 1_000_000,
                    spill_dir: str | None = None, batch_mode: bool = True) -> OperatorHarness:
    """One operator subtask; ``sorting`` gives it a polars engine, with which it sorts every backlog
    (``backlog_sorting="always"``: even one it would stream). It runs as in BATCH mode (rolling
    operators emit final values at the switch) unless ``batch_mode`` is False, as in a STREAMING job
    whose sources report backlog."""
    return OperatorHarness(transformation, batch_engine=PolarsBatchEngine() if sorting else None,
                           batch_mode=batch_mode, sort_memory_budget=budget, spill_dir=spill_dir,
                           sort_every_backlog=sorting)


def last_per_key(records: list[tuple[Any, int | None]], key: Callable[[Any], Any]) -> dict[Any, Any]:
    final: dict[Any, Any] = {}
    for value, _ in records:
        final[key(value)] = value
    return final


def streamed(transformation: Transformation, records: list[tuple[Any, int | None]]) -> OperatorHarness:
    """The oracle: the same operator without a batch engine, record by record."""
    return sorting_harness(transformation, sorting=False).process_elements(records, batch_size=4).end_input()


def in_time_order(records: list[tuple[Any, int | None]], key: Callable[[Any], Any]) -> list:
    """What the switch replays: grouped by key (first seen), by timestamp, then arrival."""
    first: dict[Any, int] = {}
    for value, _ in records:
        first.setdefault(key(value), len(first))
    return [r for _, r in sorted(enumerate(records), key=lambda p: (first[key(p[1][0])], p[1][1], p[0]))]


# -- reduce ---------------------------------------------------------------------------------------------
AGGREGATES: dict[str, Callable[[Any], Any]] = {
    "sum": lambda ks: ks.sum(1),
    "min": lambda ks: ks.min(1),
    "max": lambda ks: ks.max(1),
    "min_by": lambda ks: ks.min_by(1),
    "max_by": lambda ks: ks.max_by(1),
    "reduce": lambda ks: ks.reduce(lambda a, b: (a[0], a[1] * 31 % 1009 + b[1], a[2] + b[2])),
}


def reduce_job(kind: str) -> Transformation:
    return transformation_of(lambda env: AGGREGATES[kind](env.from_collection([]).key_by(lambda r: r[0])))


def tuples(n: int, seed: int, value: Callable[[random.Random], Any]) -> list[tuple[Any, int]]:
    rng = random.Random(seed)
    return [((rng.choice("abcdefg"), value(rng), i), i) for i in range(n)]


@pytest.mark.parametrize("kind", list(AGGREGATES))
@pytest.mark.parametrize("value", ["int", "float", "mixed"])
@pytest.mark.parametrize("budget", [1, 7, 1_000_000])
def test_reduce_emits_nothing_during_backlog_then_each_keys_final_value(kind: str, value: str, budget: int,
                                                                      tmp_path: Any) -> None:
    draw = {"int": lambda r: r.randint(-50, 50), "float": lambda r: r.choice([0.5, 1.25, -3.0, 7.75, 2.0]),
            "mixed": lambda r: r.choice([1, 2.5, -3, 4.0])}[value]
    records = tuples(120, seed=len(kind) + budget, value=draw)
    transformation = reduce_job(kind)
    driver = sorting_harness(transformation, budget=budget, spill_dir=str(tmp_path)).set_backlog(True)
    driver.process_elements(records, batch_size=4).process_watermark(60)
    assert driver.output.events == [BACKLOG]  # no record, no watermark while backlog
    driver.end_input()
    finals = driver.output.records
    oracle = last_per_key(streamed(transformation, records).output.records, lambda r: r[0])
    assert {v[0]: v for v, _ in finals} == oracle
    assert len(finals) == len(oracle)  # one value per key (Flink BATCH semantics)
    assert [v[0] for v, _ in finals] == list(dict.fromkeys(r[0] for r, _ in records))  # first-seen key order
    last_ts = {r[0]: ts for r, ts in records}
    assert all(ts == last_ts[v[0]] for v, ts in finals)  # the timestamp of the key's latest record
    # the records, then the held watermark (only the latest: 60 was overtaken by the final one),
    # then the end of backlog goes downstream
    assert driver.output.events[-2:] == [MAX_WATERMARK, LIVE] and Watermark(60) not in driver.output.events
    if budget == 1:
        assert driver.ctx.metrics["spilled_bytes"] > 0


def test_reduce_streams_on_from_the_installed_state() -> None:
    records = tuples(50, seed=3, value=lambda r: r.randint(0, 9))
    live = [(("a", 100, -1), 1000), (("z", 5, -2), 1001), (("a", 1, -3), 1002)]
    transformation = reduce_job("sum")
    driver = sorting_harness(transformation).set_backlog(True)
    driver.process_elements(records, batch_size=4).set_backlog(False)
    at_switch = len(driver.output.records)
    driver.process_elements(live, batch_size=4)
    after = driver.output.records[at_switch:]
    oracle = streamed(transformation, records + live).output.records
    assert after == oracle[-3:]  # rolling updates again, continuing from the backlog's sums
    assert driver.operator.is_checkpoint_blocked() is None


@pytest.mark.parametrize("kind", ["sum", "min", "max_by"])
def test_in_streaming_mode_a_built_in_aggregation_streams_a_backlog_of_rows_unless_told_to_sort(kind: str) -> None:
    """Replayed key by key, a backlog of Python rows costs a rolling aggregation more than streaming it
    (benchmarks/backlog.py), so it is not buffered: each record's rolling value goes on at once, as
    without backlog sorting; ``backlog_sorting="always"`` (``sort_every_backlog``) buffers it anyway."""
    records = tuples(60, seed=5, value=lambda r: r.randint(-9, 9))
    transformation = reduce_job(kind)
    oracle = streamed(transformation, records).output.records
    streaming = OperatorHarness(transformation, batch_engine=PolarsBatchEngine(), batch_mode=False).set_backlog(True)
    streaming.process_elements(records[:30], batch_size=4).process_watermark(29).process_elements(records[30:])
    assert not streaming.operator.is_buffering_backlog and streaming.ctx.metrics["backlog_phase"] == "streaming"
    assert streaming.output.records == oracle and Watermark(29) in streaming.output.events  # during the backlog
    streaming.set_backlog(False).set_backlog(True).process_elements([(("a", 1, 99), 99)])
    assert not streaming.operator.is_buffering_backlog  # a later backlog of rows streams too
    forced = OperatorHarness(transformation, batch_engine=PolarsBatchEngine(), batch_mode=False,
                             sort_every_backlog=True).set_backlog(True)
    forced.process_elements(records, batch_size=4)
    assert forced.operator.is_buffering_backlog and forced.output.records == []
    forced.set_backlog(False)
    assert sorted(forced.output.records, key=repr) == sorted(oracle, key=repr)


def test_reduce_sorts_each_keys_records_by_timestamp() -> None:
    # arrival order differs from time order: the batch folds in time order (then arrival)
    records = [(("k", "late"), 5), (("k", "early"), 1), (("j", "x"), 3), (("k", "tie-1"), 5), (("k", "mid"), 2)]
    transformation = transformation_of(
        lambda env: env.from_collection([]).key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + "," + b[1])))
    driver = sorting_harness(transformation).set_backlog(True).process_elements(records, batch_size=4).end_input()
    assert driver.output.records == [(("k", "early,mid,late,tie-1"), 5), (("j", "x"), 3)]
    # ... which is what streaming ends with when the records arrive in time order
    ordered = in_time_order(records, lambda r: r[0])
    assert {v[0]: v for v, _ in driver.output.records} == \
        last_per_key(streamed(transformation, ordered).output.records, lambda r: r[0])


@pytest.mark.parametrize("kind", ["sum", "min", "max_by"])
def test_dict_and_scalar_records_take_the_vectorised_path(kind: str) -> None:
    rng = random.Random(kind)
    dicts = [({"k": rng.choice("xyz"), "v": rng.randint(-9, 9), "i": i}, i) for i in range(60)]
    build = {"sum": lambda ks: ks.sum("v"), "min": lambda ks: ks.min("v"), "max_by": lambda ks: ks.max_by("v")}
    transformation = transformation_of(lambda env: build[kind](env.from_collection([]).key_by(lambda r: r["k"])))
    driver = sorting_harness(transformation).set_backlog(True).process_elements(dicts, batch_size=4).end_input()
    assert {v["k"]: v for v, _ in driver.output.records} == \
        last_per_key(streamed(transformation, dicts).output.records, lambda r: r["k"])
    assert all(original == {"k": original["k"], "v": original["v"], "i": original["i"]} for original, _ in dicts)
    scalars = [(rng.randint(0, 100), i) for i in range(60)]
    transformation = transformation_of(lambda env: getattr(env.from_collection([]).key_by(lambda x: x % 4),
                                                           kind)(0))
    driver = sorting_harness(transformation).set_backlog(True).process_elements(scalars, batch_size=4).end_input()
    groups: dict[int, list[int]] = defaultdict(list)
    for x, _ in scalars:
        groups[x % 4].append(x)
    combine = {"sum": sum, "min": min, "max_by": max}[kind]
    keys = dict.fromkeys(x % 4 for x, _ in scalars)
    assert [v for v, _ in driver.output.records] == [combine(groups[k]) for k in keys]


def test_reduce_without_a_batch_engine_processes_backlog_record_by_record() -> None:
    records = tuples(20, seed=1, value=lambda r: r.randint(0, 9))
    driver = sorting_harness(reduce_job("sum"), sorting=False).set_backlog(True).process_elements(records, batch_size=4)
    assert len(driver.output.records) == 20
    assert driver.operator.is_checkpoint_blocked() is None


def test_checkpoints_are_taken_while_buffering_and_metrics_are_reported() -> None:
    driver = sorting_harness(reduce_job("sum"), budget=5).set_backlog(True)
    driver.process_elements(tuples(30, seed=2, value=lambda r: r.randint(0, 9)), batch_size=4)
    assert driver.operator.is_checkpoint_blocked() is None
    assert len(driver.operator.snapshot_backlog()["buffers"][0]["runs"]) > 0  # the buffer goes into checkpoints
    driver.end_input()
    assert driver.operator.snapshot_backlog() is None
    metrics = driver.ctx.metrics
    assert metrics["backlog_records"] == 30 and metrics["spilled_bytes"] > 0
    assert metrics["backlog_seconds"] >= metrics["switch_time"] > 0
    assert metrics["batch_engine"] == "polars"


def test_a_failing_key_selector_during_backlog_names_the_operator_and_record() -> None:
    transformation = transformation_of(lambda env: env.from_collection([]).key_by(lambda r: r["missing"]).sum(1))
    driver = sorting_harness(transformation).set_backlog(True)
    with pytest.raises(UserFunctionError, match="op") as caught:
        driver.process_elements([(("a", 1), 0)])
    assert "('a', 1)" in str(caught.value)


def test_a_reduce_function_returning_none_fails_at_the_switch() -> None:
    transformation = transformation_of(lambda env: env.from_collection([]).key_by(lambda r: r[0])
                                       .reduce(lambda a, b: None))
    driver = sorting_harness(transformation).set_backlog(True)
    driver.process_elements([(("a", 1), 0), (("a", 2), 1)], batch_size=4)
    with pytest.raises(UserFunctionError, match="returned None"):
        driver.set_backlog(False)


# -- keyed process functions ----------------------------------------------------------------------------
class CountAndRemind(KeyedProcessFunction):
    """Counts records per key, echoes each with its count, and reminds 10 ms after each one."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10)
        yield ("element", ctx.get_current_key(), value, ctx.timestamp(), count, ctx.is_backlog())

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ("timer", ctx.get_current_key(), timestamp, self.count.value())


def process_job() -> Transformation:
    return transformation_of(lambda env: env.from_collection([]).key_by(lambda r: r[0]).process(CountAndRemind()))


def test_keyed_process_replays_key_by_key_in_time_order_then_fires_held_timers() -> None:
    records = [(("b", 1), 7), (("a", 2), 3), (("b", 3), 2), (("a", 4), 30), (("a", 5), 3)]
    driver = sorting_harness(process_job()).set_backlog(True)
    driver.process_elements(records, batch_size=4).process_watermark(15)
    assert driver.output.events == [BACKLOG]
    driver.set_backlog(False)
    events = list(driver.output.events)
    replay = [e.value for e in events if isinstance(e, tuple) and e.value[0] == "element"]
    assert [(key, value[1], ts, count) for _, key, value, ts, count, _ in replay] == [
        ("b", 3, 2, 1), ("b", 1, 7, 2), ("a", 2, 3, 1), ("a", 5, 3, 2), ("a", 4, 30, 3)]
    assert all(backlog for *_, backlog in replay)  # replayed records are backlog to the function
    # timers due by the held watermark (15) fire after the replay, seeing the final counts
    timers = [e.value for e in events if isinstance(e, tuple) and e.value[0] == "timer"]
    assert timers == [("timer", "b", 12, 2), ("timer", "a", 13, 3)]
    assert events[-2:] == [Watermark(15), LIVE]
    # streaming continues from the replayed state, timers included
    driver.process_elements([(("a", 6), 40)]).process_watermark(100)
    later = [e.value for e in driver.output.events[len(events):] if isinstance(e, tuple)]
    assert later[0][:5] == ("element", "a", ("a", 6), 40, 4)
    assert ("timer", "b", 17, 2) in later and ("timer", "a", 40, 4) in later and ("timer", "a", 50, 4) in later


class CollectorState(KeyedProcessFunction):
    """Emits whether the cyclic garbage collector is on as each record is processed."""

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
        yield value, gc.isenabled()


def test_the_switch_runs_with_the_garbage_collector_paused_and_turns_it_back_on() -> None:
    transformation = transformation_of(
        lambda env: env.from_collection([]).key_by(lambda r: r[0]).process(CollectorState()))
    driver = sorting_harness(transformation, batch_mode=False).set_backlog(True)
    driver.process_elements([(("a", 1), 1), (("b", 2), 2)]).set_backlog(False)
    driver.process_elements([(("a", 3), 3)])
    assert [value for value, _ in driver.output.records] == [(("a", 1), False), (("b", 2), False), (("a", 3), True)]
    assert gc.isenabled()


@pytest.mark.parametrize("budget", [1, 1_000_000])
def test_keyed_process_final_state_matches_streaming(budget: int, tmp_path: Any) -> None:
    rng = random.Random(budget)
    records = [((rng.choice("pqrs"), i), i) for i in range(80)]  # time order == arrival order
    driver = sorting_harness(process_job(), budget=budget, spill_dir=str(tmp_path)).set_backlog(True)
    driver.process_elements(records, batch_size=4).end_input()
    oracle = streamed(process_job(), records)

    def outputs(d: OperatorHarness) -> list:
        return sorted(v[:5] for v, _ in d.output.records)

    assert outputs(driver) == outputs(oracle)


# -- windows ----------------------------------------------------------------------------------------------
def window_jobs() -> dict[str, Transformation]:
    def tumbling(env: StreamExecutionEnvironment) -> Any:
        return (env.from_collection([]).key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(10))
                .reduce(lambda a, b: (a[0], a[1] + b[1])))

    def end_of_stream(env: StreamExecutionEnvironment) -> Any:
        return (env.from_collection([]).key_by(lambda r: r[0]).window(EndOfStreamWindows.get())
                .process(lambda key, ctx, elements: [(key, sorted(e[1] for e in elements))]))

    return {"tumbling": transformation_of(tumbling), "end_of_stream": transformation_of(end_of_stream)}


@pytest.mark.parametrize("name", ["tumbling", "end_of_stream"])
@pytest.mark.parametrize("budget", [2, 1_000_000])
def test_windows_fire_at_the_switch_with_streamings_results(name: str, budget: int, tmp_path: Any) -> None:
    transformation = window_jobs()[name]
    assert transformation.get_has_internal_sorter()
    rng = random.Random(budget)
    records = [((rng.choice("uvw"), rng.randint(0, 9)), i // 2) for i in range(70)]
    driver = sorting_harness(transformation, budget=budget, spill_dir=str(tmp_path)).set_backlog(True)
    driver.process_elements(records, batch_size=4).process_watermark(20)
    assert driver.output.events == [BACKLOG]
    driver.end_input()
    oracle = streamed(transformation, records)
    assert sorted(map(repr, driver.output.records)) == sorted(map(repr, oracle.output.records))


def test_window_backlog_records_are_never_late_in_batch_mode() -> None:
    # streaming drops a record behind the watermark; BATCH mode applies only the final watermark
    transformation = window_jobs()["tumbling"]
    records = [(("u", 1), 25), (("u", 2), 3)]
    driver = sorting_harness(transformation).set_backlog(True)
    driver.process_watermark(20).process_elements(records, batch_size=4).end_input()
    assert sorted(driver.output.records) == [(("u", 1), 29), (("u", 2), 9)]


def test_every_sorting_operator_declares_an_internal_sorter() -> None:
    assert reduce_job("sum").get_has_internal_sorter()
    assert process_job().get_has_internal_sorter()
    for transformation in window_jobs().values():
        assert transformation.get_has_internal_sorter()
    assert window_jobs()["end_of_stream"].get_is_output_on_eof()
    assert not window_jobs()["tumbling"].get_is_output_on_eof()


# -- STREAMING mode: the switch gives what streaming the same input gives --------------------------------
def intervals(events: list[Any]) -> list[tuple[list[str], Any]]:
    """What went downstream between consecutive watermarks (as sorted reprs), and each watermark."""
    found: list[tuple[list[str], Any]] = []
    records: list[str] = []
    for event in events:
        if isinstance(event, tuple):
            records.append(repr(event))
        elif isinstance(event, Watermark):
            found.append((sorted(records), event))
            records = []
    return found + [(sorted(records), None)]


def drive(transformation: Transformation, steps: list[Any], sorting: bool) -> OperatorHarness:
    """Backlog from the start: batches of records and watermarks as ``steps`` say, then the end."""
    driver = sorting_harness(transformation, sorting=sorting, batch_mode=False).set_backlog(True)
    for step in steps:
        if isinstance(step, int):
            driver.process_watermark(step)
        else:
            driver.process_elements(step)
    return driver.end_input()


def out_of_order_steps(seed: int) -> list[Any]:
    """Batches of (record, ts) out of order, some far behind, each followed by a rising watermark."""
    rng = random.Random(seed)
    steps: list[Any] = []
    newest = 0
    for i in range(30):
        batch = []
        for j in range(rng.randint(1, 4)):
            newest += rng.randint(0, 6)
            ts = max(0, newest - rng.choice([0, 3, 8, 40]))
            batch.append(((rng.choice("uvw"), i * 10 + j), ts))
        steps += [batch, newest - 5]
    return steps


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("job", ["process", "tumbling"])
def test_streaming_switch_fires_and_forwards_watermark_by_watermark_as_streaming(seed: int, job: str) -> None:
    transformation = process_job() if job == "process" else window_jobs()["tumbling"]
    steps = out_of_order_steps(seed)
    sorted_run = drive(transformation, steps, sorting=True)
    streamed_run = drive(transformation, steps, sorting=False)
    # the same outputs between the same watermarks: an operator downstream sees each output at the
    # watermark it saw it at when the backlog streamed
    assert intervals(sorted_run.output.events) == intervals(streamed_run.output.events)
    assert sorted_run.ctx.metrics.get("num_late_records_dropped", 0) == \
        streamed_run.ctx.metrics.get("num_late_records_dropped", 0)
    if job == "tumbling":
        assert sorted_run.ctx.metrics["num_late_records_dropped"] > 0
    else:  # timers fired between the records, not only at the end
        kinds = [e.value[0] for e in sorted_run.output.events if isinstance(e, tuple)]
        assert "element" in kinds[kinds.index("timer"):]

"""The Spark runner: each job kind it accepts commits the same output as the embedded runtime
(and as a plain-Python oracle) on local[2]; what it cannot run is refused at planning, naming
the operator; ``explain()`` shows the Spark plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import spark_runner_jobs as jobs

from slipstream.datastream import KeyedCoProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.time import Time
from slipstream.datastream.window import EventTimeSessionWindows, TumblingEventTimeWindows
from slipstream.errors import JobExecutionError
from slipstream.spark_runner import SparkPlanningError, SparkRunner

FILES = range(3)


def run_embedded(kind: str, input_dir: Path, output: Path) -> list[str]:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    jobs.build(env, kind, input_dir, output)
    env.execute(f"{kind} embedded")
    return jobs.committed_lines(output)


def run_spark(spark: Any, kind: str, input_dir: Path, output: Path, location: Path) -> list[str]:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(location)))
    jobs.build(env, kind, input_dir, output)
    env.execute(f"{kind} on spark")
    return jobs.spark_committed_lines(output)


@pytest.mark.parametrize("kind", ["stateless", "keyed", "keyed_to_sink", "reduce", "sum", "side_output",
                                  "tumbling_reduce", "sliding_process", "tumbling_aggregate",
                                  "watermarked_split"])
def test_a_job_commits_what_the_embedded_runtime_commits(spark: Any, tmp_path: Path, kind: str) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    expected = jobs.oracle(kind, FILES)
    assert run_embedded(kind, tmp_path / "in", tmp_path / "embedded") == expected
    assert run_spark(spark, kind, tmp_path / "in", tmp_path / "spark", tmp_path / "checkpoint") == expected


def test_a_dataframe_source_commits_what_the_embedded_runtime_commits(spark: Any, tmp_path: Path) -> None:
    """``from_spark`` as a stream's source: written once as Parquet, read by the file stream source, in
    the DataFrame's order (a rolling reduce shows it); a second run on the same checkpoint location
    finds the query done and writes nothing twice."""
    events = [jobs.parse(line) for index in FILES for line in jobs.event_lines(index)]
    frame = spark.createDataFrame(events, "key string, ts long, amount long").coalesce(2)

    def build(env: StreamExecutionEnvironment, output: Path) -> None:
        env.from_spark(frame).map(lambda row: (row.key, row.ts, row.amount)).name("parse").key_by(jobs.key_of) \
            .reduce(jobs.add_amounts).name("totals").map(jobs.shown).sink_to(jobs.text_sink(output))

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    build(env, tmp_path / "embedded")
    env.execute("frame embedded")
    expected = jobs.oracle("reduce", FILES)
    assert jobs.committed_lines(tmp_path / "embedded") == expected
    for attempt in range(2):
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
        build(env, tmp_path / "spark")
        if attempt == 0:
            assert "the DataFrame written once as Parquet" in env.explain()
        env.execute("frame on spark")
        assert jobs.spark_committed_lines(tmp_path / "spark") == expected


def test_a_dataframe_source_with_event_time_windows_fires_every_window(spark: Any, tmp_path: Path) -> None:
    """A bounded event-time job over a DataFrame: the end of input reaches its watermark, as a file source's."""
    events = [jobs.parse(line) for index in FILES for line in jobs.event_lines(index)]
    frame = spark.createDataFrame(events, "key string, ts long, amount long").coalesce(2)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    jobs.windowed(env.from_spark(frame).map(lambda row: (row.key, row.ts, row.amount))) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(jobs.TUMBLE_MS))).reduce(jobs.add_amounts) \
        .map(jobs.shown).sink_to(jobs.text_sink(tmp_path / "spark"))
    env.execute("frame windows on spark")
    assert jobs.spark_committed_lines(tmp_path / "spark") == jobs.oracle("tumbling_reduce", FILES)


def test_a_parquet_file_sink_commits_the_rows_the_embedded_runtime_commits(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    events = [jobs.parse(line) for index in FILES for line in jobs.event_lines(index)]
    expected = sorted(event for event in events if event[2] % 3 != 0)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    jobs.build(env, "parquet", tmp_path / "in", tmp_path / "embedded")
    env.execute("parquet embedded")
    assert jobs.parquet_rows(jobs.visible_files(tmp_path / "embedded")) == expected
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    jobs.build(env, "parquet", tmp_path / "in", tmp_path / "spark")
    plan = env.explain()
    assert "Spark's file sink (parquet)" in plan and "schema key string, ts int64, amount int64" in plan
    env.execute("parquet on spark")
    assert jobs.parquet_rows(jobs.spark_committed_files(tmp_path / "spark")) == expected


def test_a_record_that_does_not_fit_the_parquet_schema_fails_naming_the_sink_and_record(spark: Any,
                                                                                         tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", range(1))
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.source(env, tmp_path / "in").map(jobs.parse).map(lambda e: {"key": e[0], "ts": e[1], "amount": str(e[2])}) \
        .sink_to(jobs.parquet_sink(tmp_path / "out")).name("parquet")
    with pytest.raises(JobExecutionError) as caught:
        env.execute("unfit", runner=SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    message = str(caught.value)
    assert "sink 'parquet'" in message and "'amount'" in message and "does not fit" in message


def test_a_parquet_sink_without_a_schema_is_refused(spark: Any, tmp_path: Path) -> None:
    from slipstream.datastream.connectors.file_system import FileSink
    from slipstream.datastream.formats.parquet import ParquetBulkWriters
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.source(env, tmp_path / "in").map(jobs.parse).map(jobs.as_dict) \
        .sink_to(FileSink.for_bulk_format(str(tmp_path / "out"), ParquetBulkWriters.for_schema()).build()).name("pq")
    message = refused(spark, env)
    assert "operator 'pq'" in message and "ParquetBulkWriters.for_schema(schema)" in message


def test_a_callable_sink_gets_every_record_on_the_driver(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    got: list[str] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.build(env, "keyed", tmp_path / "in", got.append)
    env.execute("collect", runner=SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    assert sorted(got) == jobs.oracle("keyed", FILES)


def test_a_second_run_on_the_same_checkpoint_reads_only_new_files(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", range(2))
    runner = SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint"), available_now=True)
    for files in (range(2), range(2, 4)):
        jobs.write_input(tmp_path / "in", files)
        env = StreamExecutionEnvironment.get_execution_environment()
        jobs.build(env, "reduce", tmp_path / "in", tmp_path / "out", watched=True)
        env.execute("twice", runner=runner)
    assert jobs.spark_committed_lines(tmp_path / "out") == jobs.oracle("reduce", range(4))


def hybrid_input(tmp_path: Path) -> tuple[Path, Path]:
    """History files 0-1 in a directory whose name sorts after the live one's (files 2-3), so only
    the HybridSource's order, not the paths', puts history first."""
    history, live = tmp_path / "z-history", tmp_path / "a-live"
    jobs.write_input(history, range(2))
    jobs.write_input(live, range(2, 4))
    return history, live


@pytest.mark.parametrize("kind", ["reduce", "keyed"])
def test_a_hybrid_source_reads_history_then_the_live_directory_as_the_embedded_runtime(
        spark: Any, tmp_path: Path, kind: str) -> None:
    history, live = hybrid_input(tmp_path)
    expected = jobs.oracle(kind, range(4))  # a rolling reduce's running totals show the order
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    jobs.build(env, kind, live, tmp_path / "embedded", history=history)
    env.execute("hybrid embedded")
    assert jobs.committed_lines(tmp_path / "embedded") == expected
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint"), max_files_per_trigger=1))
    jobs.build(env, kind, live, tmp_path / "spark", history=history)
    assert "HybridSource as the union of the 2 file stream sources" in env.explain()
    env.execute("hybrid on spark")
    assert jobs.spark_committed_lines(tmp_path / "spark") == expected


def test_a_hybrid_source_then_watches_its_live_directory(spark: Any, tmp_path: Path) -> None:
    history, live = hybrid_input(tmp_path)
    runner = SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint"), available_now=True)
    for files in (range(4, 4), range(4, 6)):
        jobs.write_input(live, files)
        env = StreamExecutionEnvironment.get_execution_environment()
        jobs.build(env, "reduce", live, tmp_path / "out", watched=True, history=history)
        env.execute("hybrid watched", runner=runner)
    assert jobs.spark_committed_lines(tmp_path / "out") == jobs.oracle("reduce", range(6))


def test_a_hybrid_source_of_other_sources_is_refused(spark: Any, tmp_path: Path) -> None:
    from slipstream.datastream.connectors.hybrid_source import HybridSource
    from slipstream.datastream.connectors.iterator import CollectionSource
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    hybrid = HybridSource.builder(CollectionSource(["a,1,2"])).add_source(jobs.file_source(tmp_path / "in")).build()
    env.from_source(hybrid, None, "mixed").sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "operator 'mixed'" in message and "part 0 of its HybridSource" in message


def union_job(env: StreamExecutionEnvironment, tmp_path: Path, output: Path) -> None:
    first = jobs.source(env, tmp_path / "first").map(jobs.parse)
    second = jobs.source(env, tmp_path / "second").map(jobs.parse).map(lambda e: (e[0].upper(), e[1], e[2]))
    first.union(second).name("both").filter(lambda e: e[2] % 3 != 0).map(jobs.shown) \
        .sink_to(jobs.text_sink(output))


def test_a_union_of_streams_commits_what_the_embedded_runtime_commits(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "first", range(2))
    jobs.write_input(tmp_path / "second", range(2, 4))
    events = [jobs.parse(line) for index in range(4) for line in jobs.event_lines(index)]
    expected = sorted(repr(e if n < 80 else (e[0].upper(), e[1], e[2])) for n, e in enumerate(events) if e[2] % 3 != 0)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    union_job(env, tmp_path, tmp_path / "embedded")
    env.execute("union embedded")
    assert jobs.committed_lines(tmp_path / "embedded") == expected
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    union_job(env, tmp_path, tmp_path / "spark")
    assert "union: 'both' of the 2 streams above" in env.explain()
    env.execute("union on spark")
    assert jobs.spark_committed_lines(tmp_path / "spark") == expected


def test_a_union_of_watermarked_streams_is_refused_naming_the_operator(spark: Any, tmp_path: Path) -> None:
    from slipstream.datastream.watermark_strategy import WatermarkStrategy
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(jobs.event_time)
    timed = jobs.source(env, tmp_path / "in").map(jobs.parse).assign_timestamps_and_watermarks(strategy)
    timed.union(jobs.source(env, tmp_path / "in").map(jobs.parse)).name("both").map(jobs.shown) \
        .sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "operator 'both'" in message
    assert "assign timestamps and watermarks to every input, or after the union" in message


def test_explain_shows_the_query_the_state_schema_and_the_trigger(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    jobs.build(env, "keyed", tmp_path / "in", tmp_path / "out", watched=True)
    plan = env.explain()
    assert "trigger: processingTime 500 ms" in plan
    assert f"checkpointLocation: {tmp_path / 'checkpoint'}" in plan
    assert f"withWatermark(et, {jobs.BOUND_MS + 1} ms)" in plan
    assert "groupBy(key).transformWithState: 'tracker' (uid 'tracker'), timeMode EventTime" in plan
    assert "encoded in the keyed operator's Python stage" not in plan  # a map comes between
    for line in ("state 'count': value state", "state 'recent': list state", "state 'buckets': map state"):
        assert line in plan
    assert "Spark's file sink (text)" in plan


def refused(spark: Any, env: StreamExecutionEnvironment) -> str:
    env.set_runner(SparkRunner(spark))
    with pytest.raises(SparkPlanningError) as caught:
        env.explain()
    return str(caught.value)


def test_a_session_window_is_refused_naming_the_operator(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.windowed(jobs.source(env, tmp_path / "in").map(jobs.parse)) \
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(10))).reduce(jobs.add_amounts).name("sessions") \
        .sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "operator 'sessions'" in message and "session windows merge" in message


def test_a_window_without_watermarks_is_refused_naming_the_operator(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.source(env, tmp_path / "in").map(jobs.parse).key_by(jobs.key_of) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10))).reduce(jobs.add_amounts).name("sums") \
        .sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "operator 'sums'" in message and "need timestamps and watermarks" in message


def test_a_loop_is_refused_naming_the_operator(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = jobs.source(env, tmp_path / "in").map(len)

    def halve(stream: Any) -> Any:
        smaller = stream.map(lambda n: n // 2)
        return smaller.filter(lambda n: n > 0), smaller.filter(lambda n: n == 0)

    numbers.iterate(halve).sink_to(jobs.text_sink(tmp_path / "out"))
    assert "a Spark Structured Streaming query is acyclic" in refused(spark, env)


class Pairing(KeyedCoProcessFunction):
    """Both inputs' records as they come, and an event-time timer per key and 100 ms of either."""

    def process_element1(self, event: tuple[str, int, int], ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(event[1] - event[1] % 100 + 99)
        yield "first", event

    def process_element2(self, event: tuple[str, int, int], ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(event[1] - event[1] % 100 + 99)
        yield "second", event

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield "timer", ctx.get_current_key(), timestamp


def watermarked_halves(env: StreamExecutionEnvironment, input_dir: Path) -> tuple[Any, Any]:
    """The even and the odd amounts, each from its own source with its own watermark strategy."""
    from slipstream.datastream.time import Duration
    from slipstream.datastream.watermark_strategy import WatermarkStrategy

    def half(name: str, parity: int) -> Any:
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(jobs.BOUND_MS)) \
            .with_timestamp_assigner(jobs.event_time)
        return jobs.source(env, input_dir).map(jobs.parse).filter(lambda e: e[2] % 2 == parity) \
            .assign_timestamps_and_watermarks(strategy).name(name)
    return half("even", 0), half("odd", 1)


def test_connected_streams_with_a_watermark_each_commit_what_the_embedded_runtime_commits(spark: Any,
                                                                                           tmp_path: Path) -> None:
    """Flink's watermark of a two-input operator is the smaller of its inputs'; so is Spark's with a
    watermark per input (multipleWatermarkPolicy min)."""
    jobs.write_input(tmp_path / "in", FILES)
    events = [jobs.parse(line) for index in FILES for line in jobs.event_lines(index)]
    expected = sorted([repr(("first" if e[2] % 2 == 0 else "second", e)) for e in events]
                      + [repr(("timer", k, t)) for k, t in {(e[0], e[1] - e[1] % 100 + 99) for e in events}])

    def build(env: StreamExecutionEnvironment, output: Path) -> None:
        even, odd = watermarked_halves(env, tmp_path / "in")
        even.connect(odd).key_by(jobs.key_of, jobs.key_of).process(Pairing()).name("pairing").map(jobs.shown) \
            .sink_to(jobs.text_sink(output))

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    build(env, tmp_path / "embedded")
    env.execute("pairs embedded")
    assert jobs.committed_lines(tmp_path / "embedded") == expected
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    build(env, tmp_path / "spark")
    plan = env.explain()
    assert "after 'even'" in plan and "after 'odd'" in plan and "timeMode EventTime" in plan
    env.execute("pairs on spark")
    assert jobs.spark_committed_lines(tmp_path / "spark") == expected


def test_watermarks_reaching_different_event_time_operators_are_refused(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    even, odd = watermarked_halves(env, tmp_path / "in")
    firsts = even.key_by(jobs.key_of).window(TumblingEventTimeWindows.of(Time.milliseconds(30))) \
        .reduce(jobs.add_amounts)
    seconds = odd.key_by(jobs.key_of).window(TumblingEventTimeWindows.of(Time.milliseconds(30))) \
        .reduce(jobs.add_amounts)
    firsts.union(seconds).map(jobs.shown).sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "Spark keeps one watermark per query" in message and ("operator 'even'" in message
                                                                  or "operator 'odd'" in message)


def test_a_bounded_iteration_is_refused_as_an_iteration(spark: Any, tmp_path: Path) -> None:
    from slipstream.datastream.iteration import DataStreamList, IterationBodyResult, Iterations
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    numbers = jobs.source(env, tmp_path / "in").map(len)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        smaller = variables.get(0).map(lambda n: n // 2)
        return IterationBodyResult([smaller.filter(lambda n: n > 0)], [smaller.filter(lambda n: n == 0)])

    outputs = Iterations.iterate_bounded_streams_until_termination(DataStreamList.of(numbers), DataStreamList.of(),
                                                                   body)
    outputs.get(0).map(str).sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "FLIP-176 iteration whose head is" in message and "driver-side rounds" in message


def test_a_source_spark_cannot_watch_is_refused(spark: Any, tmp_path: Path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(str).sink_to(jobs.text_sink(tmp_path / "out"))
    message = refused(spark, env)
    assert "cannot run operator 'Source: Collection Source'" in message or "Collection" in message
    assert "reads a FileSource's directory" in message


def test_a_job_with_two_sinks_is_refused(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    lines = jobs.source(env, tmp_path / "in")
    lines.sink_to(jobs.text_sink(tmp_path / "a"))
    lines.sink_to(jobs.text_sink(tmp_path / "b"))
    assert "one sink" in refused(spark, env)


def test_a_co_group_backlog_becomes_the_initial_state_of_the_stream(spark: Any, tmp_path: Path) -> None:
    """Profiles from a reference table: a vectorised co_group of Parquet history and an Arrow table runs as
    Spark batch, its profiles the keyed co-process's initial state; live records come from an
    unbounded IteratorSource through the driver's feed files."""
    embedded: list[str] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    jobs.bootstrap_job(env, tmp_path / "embedded", embedded.append)
    env.execute("bootstrap embedded")
    on_spark: list[str] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.bootstrap_job(env, tmp_path / "spark", on_spark.append)
    env.execute("bootstrap on spark", runner=SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    assert sorted(embedded) == jobs.bootstrap_oracle()
    assert sorted(on_spark) == jobs.bootstrap_oracle()


def fail_on_key_c(event: tuple[str, int, int]) -> tuple[str, int, int]:
    if event[0] == "c" and event[1] > 50:
        raise ValueError("no c after 50")
    return event


def test_a_failing_function_fails_the_job_naming_the_operator_and_the_record(spark: Any, tmp_path: Path) -> None:
    jobs.write_input(tmp_path / "in", range(1))
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.source(env, tmp_path / "in").map(jobs.parse).map(fail_on_key_c).name("checked").map(jobs.shown) \
        .sink_to(jobs.text_sink(tmp_path / "out"))
    with pytest.raises(JobExecutionError) as caught:
        env.execute("failing", runner=SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    message = str(caught.value)
    assert "operator 'checked'" in message and "('c', " in message and "no c after 50" in message


def before_1970(event: tuple[str, int, int]) -> tuple[str, int, int]:
    return event[0], event[1] - 100, event[2]


def test_an_event_time_before_1970_fails_the_query_rather_than_being_dropped_as_late(spark: Any,
                                                                                    tmp_path: Path) -> None:
    """Spark's watermark starts at 0, so it would drop such a record as late, silently: the query fails instead,
    naming the operator and the record."""
    jobs.write_input(tmp_path / "in", range(1))
    env = StreamExecutionEnvironment.get_execution_environment()
    jobs.windowed(jobs.source(env, tmp_path / "in").map(jobs.parse).map(before_1970)) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(50))).reduce(jobs.add_amounts).map(jobs.shown) \
        .sink_to(jobs.text_sink(tmp_path / "out"))
    with pytest.raises(JobExecutionError) as caught:
        env.execute("early", runner=SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    message = str(caught.value)
    assert "the event time -" in message and "before 1970" in message and "gave record (" in message


def test_every_transformation_kind_is_translated_or_refused_with_a_reason() -> None:
    import importlib
    import pkgutil

    import slipstream
    from slipstream.datastream.transformations import Transformation
    from slipstream.spark_runner.plan import REFUSED, TRANSLATED
    for module in pkgutil.walk_packages(slipstream.__path__, "slipstream."):
        if ".runtime" not in module.name and ".spark_runner" not in module.name:
            importlib.import_module(module.name)
    kinds, todo = set(), [Transformation]
    while todo:
        for kind in todo.pop().__subclasses__():
            kinds.add(kind)
            todo.append(kind)
    missing = [kind.__name__ for kind in kinds
               if kind.__module__.startswith("slipstream.") and not issubclass(kind, (*TRANSLATED, *REFUSED))]
    assert not missing, f"kinds the Spark runner neither translates nor refuses: {missing}"


@pytest.mark.parametrize("kind,why", [("tumbling_reduce", "drops by record time"), ("sum", "update mode")])
def test_explain_says_why_a_window_or_rolling_aggregation_is_not_sparks_own(spark: Any, tmp_path: Path, kind: str,
                                                                            why: str) -> None:
    jobs.write_input(tmp_path / "in", FILES)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    jobs.build(env, kind, tmp_path / "in", tmp_path / "out", watched=True)
    plan = env.explain()
    assert "groupBy(key).transformWithState" in plan
    assert "not Spark's own aggregation" in plan and why in plan

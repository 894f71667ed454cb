"""A ``KeyedStateBootstrapFunction`` on the Spark runner: its backlog runs as a Spark batch query
through ``process_backlog``, whose rows are the streaming query's initial state, and the stream
goes on from there as on the embedded runtime (and as a plain-Python oracle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import spark_runner_jobs as jobs

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.time import Duration
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.spark_runner import SparkPlanningError, SparkRunner
from slipstream.spark_runner.frames import present_files
from slipstream.spark_runner.plan import FileStreamNode


def hybrid(history: Path, live: Path) -> Any:
    return HybridSource.builder(jobs.file_source(history)).add_source(jobs.file_source(live, watched=True)).build()


def test_the_backlog_becomes_sparks_initial_state_and_the_stream_goes_on_from_it(spark: Any, tmp_path: Path) -> None:
    history, live = tmp_path / "z-history", tmp_path / "a-live"
    jobs.write_input(history, range(2))
    jobs.write_input(live, range(2, 4))  # there when the query first starts: backlog too
    expected = jobs.totals_oracle(range(4), range(4, 6))

    embedded: list[str] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False)
    later = [line for index in range(4, 6) for line in jobs.event_lines(index)]
    source = HybridSource.builder(jobs.file_source(history)).add_source(jobs.file_source(live)) \
        .add_source(IteratorSource(lambda: iter(later), bounded=False)).build()
    jobs.totals_job(env, source, embedded.append)
    env.execute("bootstrap embedded")
    assert sorted(embedded) == expected

    runner = SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint"), available_now=True)
    for files in (range(4, 4), range(4, 6)):  # the first run only bootstraps; the second streams new files
        jobs.write_input(live, files)
        env = StreamExecutionEnvironment.get_execution_environment()
        jobs.totals_job(env, hybrid(history, live), tmp_path / "spark")
        env.execute("bootstrap on spark", runner=runner)
        if not files:
            assert jobs.spark_committed_lines(tmp_path / "spark") == []
    assert jobs.spark_committed_lines(tmp_path / "spark") == expected


def test_without_backlog_sorting_the_backlog_goes_through_process_element(spark: Any, tmp_path: Path) -> None:
    history, live = tmp_path / "z-history", tmp_path / "a-live"
    jobs.write_input(history, range(2))
    jobs.write_input(live, range(2, 3))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(backlog_sorting=False)
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint"), available_now=True))
    jobs.totals_job(env, hybrid(history, live), tmp_path / "spark")
    assert "process_backlog" not in env.explain()
    env.execute("record by record")
    assert jobs.spark_committed_lines(tmp_path / "spark") == jobs.totals_oracle(range(0), range(3))


def test_explain_shows_the_backlog_query_and_the_stream_skipping_its_files(spark: Any, tmp_path: Path) -> None:
    history, live = tmp_path / "history", tmp_path / "live"
    jobs.write_input(history, range(1))
    live.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark))
    jobs.totals_job(env, hybrid(history, live), tmp_path / "out")
    plan = env.explain()
    assert "through process_backlog of the KeyedStateBootstrapFunction per partition of keys" in plan
    assert "initial state: each key's value states from process_backlog" in plan
    assert f"the files {live} holds when the query first starts" in plan
    assert "the files there when the query first started are skipped" in plan


def test_a_bootstrap_function_after_a_watermark_is_refused_naming_it(spark: Any, tmp_path: Path) -> None:
    history, live = tmp_path / "history", tmp_path / "live"
    jobs.write_input(history, range(1))
    live.mkdir()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_runner(SparkRunner(spark))
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(5)) \
        .with_timestamp_assigner(jobs.event_time)
    env.from_source(hybrid(history, live), None, "events").map(jobs.parse) \
        .assign_timestamps_and_watermarks(strategy).key_by(0).process(jobs.Totals()).name("totals") \
        .sink_to(jobs.text_sink(tmp_path / "out"))
    with pytest.raises(SparkPlanningError) as caught:
        env.explain()
    assert "operator 'totals'" in str(caught.value) and "KeyedStateBootstrapFunction after a watermark" in str(
        caught.value)


def test_the_files_present_at_start_are_listed_once_without_hidden_ones(tmp_path: Path) -> None:
    live = tmp_path / "live"
    (live / "nested").mkdir(parents=True)
    (live / "_temporary").mkdir()
    for name in ("part-0.txt", "nested/part-1.txt", ".part-2.txt.tmp", "_SUCCESS", "_temporary/part-3.txt"):
        (live / name).write_text("a,1,2\n")
    node = FileStreamNode(None, str(live), None, False)  # type: ignore[arg-type]
    listed = present_files(str(tmp_path / "checkpoint"), node)
    assert listed == [str(live / "nested" / "part-1.txt"), str(live / "part-0.txt")]
    (live / "part-4.txt").write_text("a,1,2\n")  # arrived later: the stream's, on every restart too
    assert present_files(str(tmp_path / "checkpoint"), node) == listed
    kept = list((tmp_path / "checkpoint" / "backlog-files").iterdir())
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == listed


def test_a_process_backlog_result_without_the_key_fails_naming_the_operator(spark: Any, tmp_path: Path) -> None:
    from slipstream.errors import JobExecutionError
    history, live = tmp_path / "history", tmp_path / "live"
    jobs.write_input(history, range(1))
    jobs.write_input(live, range(1, 2))  # a file makes a micro-batch, the first of which installs the state
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_source(hybrid(history, live), None, "events").map(jobs.parse).key_by(0) \
        .process(jobs.KeylessTotals()).name("totals").sink_to(jobs.text_sink(tmp_path / "out"))
    with pytest.raises(JobExecutionError) as caught:
        env.execute("keyless", runner=SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint"),
                                                  available_now=True))
    assert "operator 'totals': process_backlog must return a polars DataFrame with the key column 'f0'" in str(
        caught.value)


def live_lines() -> Any:
    """The lines of input files 2-3, as an unbounded IteratorSource gives them."""
    return iter([line for index in range(2, 4) for line in jobs.event_lines(index)])


def history_then_iterator(history: Path) -> Any:
    return HybridSource.builder(jobs.file_source(history)).add_source(IteratorSource(live_lines, bounded=False)).build()


@pytest.mark.parametrize("sorting", [True, False])
def test_history_files_then_an_unbounded_iterator_give_what_the_embedded_runtime_gives(
        spark: Any, tmp_path: Path, sorting: bool) -> None:
    history = tmp_path / "history"
    jobs.write_input(history, range(2))
    # sorted, the history is process_backlog's; streamed, each record goes through process_element
    expected = jobs.totals_oracle(range(2), range(2, 4)) if sorting else jobs.totals_oracle(range(0), range(4))
    embedded: list[str] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False, backlog_sorting=sorting)
    jobs.totals_job(env, history_then_iterator(history), embedded.append)
    env.execute("history then iterator, embedded")
    assert sorted(embedded) == expected

    on_spark: list[str] = []
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(backlog_sorting=sorting)
    env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
    jobs.totals_job(env, history_then_iterator(history), on_spark.append)
    assert "the last an IteratorSource fed through files" in env.explain() or sorting
    env.execute("history then iterator, on spark")
    assert sorted(on_spark) == expected


def test_parquet_history_reaches_process_backlog_as_columns_in_arrival_order(spark: Any, tmp_path: Path) -> None:
    from slipstream.datastream.connectors.file_system import FileSource
    from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
    history = jobs.parquet_history(tmp_path / "history")
    expected = jobs.last_amounts_oracle(history)
    got: dict[str, list[str]] = {"embedded": [], "spark": []}
    for runner in got:
        env = StreamExecutionEnvironment.get_execution_environment()
        env.configure(show_progress=False)
        if runner == "spark":
            env.set_runner(SparkRunner(spark, checkpoint_location=str(tmp_path / "checkpoint")))
        parquet = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(), str(tmp_path / "history")).build()
        source = HybridSource.builder(parquet).add_source(IteratorSource(jobs.live_transactions, bounded=False)).build()
        env.from_source(source, None, "transactions").key_by("user").process(jobs.LastAmounts()).name("last") \
            .add_sink(got[runner].append)
        if runner == "spark":
            assert "its Parquet files read by Spark as columns (never records)" in env.explain()
        env.execute(f"parquet history, {runner}")
    assert sorted(got["embedded"]) == expected
    assert sorted(got["spark"]) == expected

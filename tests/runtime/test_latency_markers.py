"""Latency markers (Flink's ``metrics.latency.interval``): a streaming source's markers reach every
operator outside loops, which record source-to-operator latency; the figures show in the job's
metrics, its progress, Prometheus and the web view; loops, iterations and restored jobs still end
and stay exactly-once with markers on; backlog sources and interval 0 send none."""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slipstream.datastream import RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.formats.base import Encoder
from slipstream.datastream.progress_listener import JobProgressListener
from slipstream.runtime.latency import LatencyHistogram, quantile

DELAY_MS = 5


def streaming_env(interval_ms: int | None = 10, **options) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(show_progress=False, batch_size=4, **options)
    if interval_ms is not None:
        env.get_config().set_latency_tracking_interval(interval_ms)
    return env


def numbers(n: int) -> IteratorSource:
    """1..n from a streaming (not backlog) source, restorable (a factory)."""
    return IteratorSource(lambda: iter(range(1, n + 1)), bounded=False)


def delayed_job(env: StreamExecutionEnvironment, n: int, out: list) -> None:
    """numbers -> (rebalance) a map sleeping DELAY_MS per record -> (rebalance) a sink."""
    def slow(x: int) -> int:
        time.sleep(DELAY_MS / 1000)
        return x

    (env.from_source(numbers(n), None, "numbers").uid("numbers").rebalance().map(slow).name("slow").uid("slow")
     .rebalance().add_sink(out.append).name("sink").uid("sink"))


class Latest(JobProgressListener):
    """Every progress report, the terminated event's last figures at the end."""

    def __init__(self) -> None:
        self.progress = []

    def on_job_progress(self, event) -> None:
        self.progress.append(event.progress)

    def on_job_terminated(self, event) -> None:
        self.progress.append(event.progress)


def test_a_delay_in_a_map_shows_in_the_latency_after_it_in_metrics_progress_and_prometheus():
    env, out, listener = streaming_env(progress_interval=0.05, metrics_port=0), [], Latest()
    env.add_progress_listener(listener)
    n = 400
    delayed_job(env, n, out)
    started = time.monotonic()
    client = env.execute_async("delayed")
    scraped = {}
    url = client.get_urls()["metrics"]
    while not client.wait(0.05):
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
        except OSError:  # URLError, or a reset of the connection
            assert client.wait(5), "the metrics endpoint failed while the job ran"
            break  # the job ended, and its endpoint with it, during the scrape
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("slipstream_operator_latency"):
                    scraped[(sample.name, sample.labels["operator_name"], sample.labels.get("quantile"))] = \
                        sample.value
    result = client.get_job_execution_result().result()
    elapsed_ms = (time.monotonic() - started) * 1000
    assert Counter(out) == Counter(range(1, n + 1))
    metrics = result.get_all_accumulator_results()
    sink = metrics["sink"]["latency"]
    # every marker waited in the map's queue behind at least one record, which slept DELAY_MS
    assert DELAY_MS <= sink["p50"] <= sink["p99"] <= sink["p999"] <= sink["max"] < elapsed_ms
    assert sink["count"] >= 3 and metrics["slow"]["latency"]["count"] >= sink["count"]
    assert "latency" not in metrics["numbers"]  # a source does not record its own markers
    seen = [p.operator("sink").latency for p in listener.progress if p.operator("sink").latency is not None]
    assert seen and seen[-1].p50 >= DELAY_MS
    assert scraped[("slipstream_operator_latency", "sink", "0.99")] >= DELAY_MS
    assert scraped[("slipstream_operator_latency_count", "sink", None)] >= 1


def test_on_worker_processes_the_workers_histograms_are_merged_in_the_result_and_the_progress(tmp_path):
    env, n, listener = streaming_env(workers=2, progress_interval=0.05).set_parallelism(2), 600, Latest()
    env.add_progress_listener(listener)
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    (env.from_source(numbers(n), None, "numbers").uid("numbers").set_parallelism(1).rebalance()
     .map(lambda x: time.sleep(DELAY_MS / 1000) or str(x)).name("slow").uid("slow")
     .rebalance().sink_to(sink).name("sink").uid("sink"))
    metrics = env.execute("on workers").get_all_accumulator_results()
    assert committed(tmp_path / "out") == Counter(str(x) for x in range(1, n + 1))
    assert metrics["sink"]["latency"]["count"] >= 3 and metrics["sink"]["latency"]["p50"] >= DELAY_MS
    last = listener.progress[-1]  # the listeners watch from the driver: the plan and the workers' reports
    assert [(op.name, op.parallelism, op.is_source, op.is_sink) for op in last.operators] == \
        [("numbers", 1, True, False), ("slow", 2, False, False), ("sink", 2, False, True)]
    assert last.operator("sink").records_in == n and last.operator("sink").latency.p50 >= DELAY_MS


def test_metrics_latency_interval_zero_and_backlog_sources_send_no_markers():
    off = streaming_env(interval_ms=None)
    off.configure(Configuration().set_string("metrics.latency.interval", "0 ms"))
    assert off.get_config().get_latency_tracking_interval() == 0
    out: list = []
    delayed_job(off, 50, out)
    assert all("latency" not in values for values in off.execute("off").get_all_accumulator_results().values())

    backlog = streaming_env()
    (backlog.from_collection(list(range(200))).rebalance().map(lambda x: x).name("m")
     .add_sink(out.append).name("sink"))
    assert all("latency" not in values for values in backlog.execute("backlog").get_all_accumulator_results().values())


def countdown(stream):
    """A FLIP-15 loop body: each number goes round until it reaches zero."""
    minus = stream.map(lambda r: (r[0], r[1] - 1)).name("minus one").uid("minus-one")
    return (minus.filter(lambda r: r[1] > 0).name("again").uid("again"),
            minus.filter(lambda r: r[1] <= 0).name("done").uid("done"))


class FailOnce:
    """Raises the first time it sees ``value``."""

    def __init__(self, value: int) -> None:
        self.value, self.failed = value, False

    def __call__(self, record):
        if record[0] == self.value and not self.failed:
            self.failed = True
            raise RuntimeError(f"injected failure at {record}")
        return record


def committed(directory) -> Counter:
    lines: Counter = Counter()
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        if not name.startswith((".", "_")):
            with open(os.path.join(directory, name)) as handle:
                lines.update(handle.read().splitlines())
    return lines


@pytest.mark.one_process("its FailOnce fails once by an attribute of its function, which a restarted worker has anew")
@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_loop_fed_by_a_streaming_source_ends_and_restores_exactly_once_with_markers_on(tmp_path, parallelism):
    env = streaming_env(interval_ms=1).set_parallelism(parallelism)
    env.enable_checkpointing(20)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    n = 3000
    fail = FailOnce(n // 2)
    sink = FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build()
    (env.from_source(numbers(n), None, "numbers").uid("numbers").set_parallelism(1)
     .map(lambda x: (x, x % 7 + 1)).name("rounds").uid("rounds")
     .iterate(lambda s: countdown(s.map(fail).name("hook").uid("hook")))
     .map(lambda r: str(r[0])).uid("format").sink_to(sink).uid("sink"))
    result = env.execute("loop with markers")
    metrics = result.get_all_accumulator_results()
    assert metrics["checkpoints"]["restarts"] == 1 and fail.failed
    assert committed(tmp_path / "out") == Counter(str(x) for x in range(1, n + 1))
    assert "latency" in metrics["rounds"]  # markers reach the operators before the loop ...
    assert not any("latency" in metrics[uid] for uid in ("hook", "minus one", "again", "done"))  # ... not into it


def test_a_histogram_keeps_the_latest_markers_and_merges_across_workers():
    histogram = LatencyHistogram()
    for latency in range(1000):
        histogram.update(float(latency))
    stats = histogram.statistics()
    assert stats.count == 1000 and stats.min == 872.0 and stats.max == 999.0  # the latest 128
    assert stats.p50 == quantile([float(x) for x in range(872, 1000)], 0.5) == 935.5
    other = LatencyHistogram([1.0, 2.0], count=2)
    merged = histogram.merged(other)
    assert merged.count == 1002 and merged.statistics().min == 1.0 and histogram.count == 1000
    assert LatencyHistogram().statistics() is None


def test_the_web_view_shows_each_operators_latency_in_chromium(tmp_path):
    from test_web_ui import browse  # the headless Chromium helper of the web view's tests

    env, out = streaming_env(progress_interval=0.1, ui_port=0), []
    released = threading.Event()

    def slow(x: int) -> int:
        if not released.is_set():
            time.sleep(DELAY_MS / 1000)
        return x

    (env.from_source(numbers(10 ** 7), None, "numbers").uid("numbers").rebalance().map(slow).name("slow").uid("slow")
     .rebalance().filter(lambda x: False).uid("quiet").add_sink(out.append).name("sink").uid("sink"))
    client = env.execute_async("latency in the browser")
    try:
        while not any(op.name == "sink" and op.latency is not None for op in client.get_progress().operators):
            assert not client.wait(0.05), "the job ended before a marker reached its sink"
        dom = browse(client.get_urls()["web view"], "--dump-dom")
    finally:
        client.cancel().result(timeout=60)
    cell = re.search(r'<tr data-uid="sink">.*?<td class="latency">([^<]*)</td>', dom)
    assert cell and re.fullmatch(r"[\d.]+ / [\d.]+ ms", cell.group(1)), dom[:2000]
    assert re.search(r'id="live-sink"[^>]*>[^<]*p99 [\d.]+ ms<', dom)

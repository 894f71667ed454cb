"""The metrics endpoint: a running job's metrics scraped over loopback in Prometheus's format,
under Flink's metric names, agree with what the job counted."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.connectors.sinks import FunctionSink
from slipstream.errors import InvalidProgramError

N = 10_000


def scrape(url: str) -> dict[tuple[str, str | None], float]:
    """Every sample of the endpoint, by metric name and operator."""
    assert url.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, sample.labels.get("operator_name")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def slowed_job(tmp_path, parallelism: int, released: threading.Event):
    """Numbers -> a map slowed down until ``released`` -> evens -> a sink; checkpoints every 10 ms."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(show_progress=False, batch_size=50, progress_interval=0.02, metrics_port=0)
    env.enable_checkpointing(10)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))

    def hold(x: int) -> int:
        if x % 10 == 0 and not released.is_set():
            threading.Event().wait(0.002)
        return x

    (env.from_source(NumberSequenceSource(1, N), None, "numbers").uid("numbers")
     .map(hold).name("hold").uid("hold").filter(lambda x: x % 2 == 0).name("evens").uid("evens")
     .sink_to(FunctionSink(lambda value: None)).name("sink").uid("sink"))
    return env


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_scrape_shows_the_running_jobs_counts_under_flinks_names(tmp_path, parallelism):
    released = threading.Event()
    client = slowed_job(tmp_path, parallelism, released).execute_async("scraped")
    try:
        url = client.get_urls()["metrics"]
        samples = {}
        for _ in range(500):  # the monitor samples every 20 ms: wait for one with a checkpoint
            samples = scrape(url)
            if samples.get(("slipstream_operator_numRecordsIn", "hold"), 0) > 0 \
                    and samples.get(("slipstream_job_numberOfCompletedCheckpoints", None), 0) >= 1:
                break
            threading.Event().wait(0.02)
        hold_in = samples[("slipstream_operator_numRecordsIn", "hold")]
        assert 0 < hold_in < N
        assert samples[("slipstream_operator_numRecordsOut", "numbers")] >= hold_in
        assert samples[("slipstream_operator_isBackPressured", "hold")] in (0.0, 1.0)
        for name in ("numRecordsOutPerSecond", "numRecordsInPerSecond"):
            assert (f"slipstream_operator_{name}", "evens") in samples
        assert samples[("slipstream_job_lastCheckpointSize", None)] > 0
        assert samples[("slipstream_job_lastCheckpointDuration", None)] >= 0
        assert samples[("slipstream_job_uptime", None)] > 0
    finally:
        released.set()
    client.get_job_execution_result().result()
    final = scrape_after_end(client)
    assert final is None  # the endpoint closes with the job


def scrape_after_end(client) -> dict | None:
    try:
        return scrape(client._driver.monitor.servers["metrics"].url)
    except OSError:
        return None


def test_the_final_figures_match_an_oracle(tmp_path):
    released = threading.Event()
    released.set()
    client = slowed_job(tmp_path, 2, released).execute_async("counted")
    client.get_job_execution_result().result()
    progress = client.get_progress()
    assert progress.status == "FINISHED"
    evens = sum(1 for x in range(1, N + 1) if x % 2 == 0)
    assert (progress.operator("evens").records_in, progress.operator("evens").records_out) == (N, evens)
    assert progress.operator("sink").records_in == evens


def test_a_port_in_use_is_refused_with_the_reason(tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = slowed_job(tmp_path, 1, threading.Event())
        env.configure(metrics_port=taken.getsockname()[1])
        with pytest.raises(InvalidProgramError, match="metrics_port"):
            env.execute_async("refused")

"""The iteration examples against numpy oracles: sync results equal numpy's within
floating-point tolerance; async LR converges to least squares within 1e-2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slipstream.datastream import MapFunction, RestartStrategies, RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.formats.base import Encoder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import iteration_kmeans as kmeans  # noqa: E402
import iteration_linear_regression as linreg  # noqa: E402
import iteration_online_logistic_regression as online  # noqa: E402

pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING), pytest.mark.configure(channel_capacity=2, quantum=2)]

ON_WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
"""The job runs in one process and on two worker processes (an iteration is placed whole on one of them)."""


@ON_WORKERS
@pytest.mark.zipped(parallelisms=(1, 3, 4), seeds=(0, 4, 9), modes=(RuntimeExecutionMode.STREAMING,
                                                                    RuntimeExecutionMode.BATCH,
                                                                    RuntimeExecutionMode.STREAMING))
def test_kmeans_equals_numpy(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    blocks, initial = kmeans.make_data(3000, 4, 5, seed=env.runtime_options.scheduler_seed, block=250)
    (centroids,) = list(kmeans.build_kmeans(env, blocks, initial, 6).execute_and_collect())
    np.testing.assert_allclose(centroids, kmeans.kmeans_numpy(np.concatenate(blocks), initial, 6), rtol=1e-9, atol=1e-9)


@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(2)
def test_kmeans_replays_its_points_from_disk_past_the_memory_budget(env: StreamExecutionEnvironment,
                                                                     tmp_path: Path) -> None:
    """With room for 5 records (blocks of 100 points) in memory, the replayed blocks past them are
    read back from a spill file every round: the centroids still equal numpy's, and the spill files
    are gone afterwards."""
    blocks, initial = kmeans.make_data(3000, 4, 5, seed=1, block=100)
    env.configure(sort_memory_budget=5, spill_dir=str(tmp_path))
    out: list = []
    kmeans.build_kmeans(env, blocks, initial, 6).add_sink(out.append)
    metrics = env.execute("kmeans-spilling").get_all_accumulator_results()
    np.testing.assert_allclose(out[0], kmeans.kmeans_numpy(np.concatenate(blocks), initial, 6), rtol=1e-9, atol=1e-9)
    spilled = [values.get("spilled_bytes", 0) for name, values in metrics.items() if "data" in name]
    assert spilled and all(size > 0 for size in spilled), metrics
    assert not list(tmp_path.iterdir())


@ON_WORKERS
@pytest.mark.zipped(parallelisms=(1, 4), seeds=(0, 3))
def test_sync_linear_regression_equals_numpy_gradient_descent(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    blocks, w0 = linreg.make_data(1200, 4, seed=env.runtime_options.scheduler_seed, block=100)
    (w,) = list(linreg.build_sync(env, blocks, w0, 0.1, 15).execute_and_collect())
    X, y = np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
    np.testing.assert_allclose(w, linreg.gd_numpy(X, y, w0, 0.1, 15), rtol=1e-9, atol=1e-12)


@ON_WORKERS
@pytest.mark.zipped(parallelisms=(2, 4), seeds=(1, 6))
def test_async_linear_regression_converges_to_least_squares(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    blocks, w0 = linreg.make_data(1200, 4, seed=env.runtime_options.scheduler_seed, block=100)
    (w,) = list(linreg.build_async(env, blocks, w0, 0.05, 300).execute_and_collect())
    X, y = np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
    assert np.abs(w - np.linalg.lstsq(X, y, rcond=None)[0]).max() < 1e-2


@ON_WORKERS
@pytest.mark.zipped(parallelisms=(1, 2, 4), seeds=(0, 5, 2))
def test_online_logistic_regression_equals_numpy_mini_batches(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    X, y = online.make_samples(1000, 3, seed=env.runtime_options.scheduler_seed)
    initial = env.from_collection([(0, np.zeros(3))]).set_parallelism(1)
    models = list(online.build_online(env, initial, online.live_source(env, X, y), 0.5, 40).execute_and_collect())
    oracle = online.online_numpy(X, y, np.zeros(3), 0.5, 40)
    assert [v for v, _ in models] == list(range(1, len(oracle) + 1))
    np.testing.assert_allclose(np.array([w for _, w in models]), np.array(oracle), rtol=1e-9, atol=1e-12)


@ON_WORKERS
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(3)
def test_offline_then_online_in_one_job(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    X, y = online.make_samples(1600, 3, seed=7)
    models = list(online.build_offline_then_online(env, (X[:1000], y[:1000]), (X[1000:], y[1000:]), np.zeros(3),
                                                   0.5, 12, 40, block=100).execute_and_collect())
    start = online.offline_numpy(X[:1000], y[:1000], np.zeros(3), 0.5, 12)
    oracle = online.online_numpy(X[1000:], y[1000:], start, 0.5, 40)
    np.testing.assert_allclose(np.array([w for _, w in models]), np.array(oracle), rtol=1e-9, atol=1e-12)


class FailOnce(MapFunction):
    """Raises at its ``at``-th record, once per test: the count of failures lives on the class, since
    the function's own attributes are what a restore puts back."""

    failures = 0

    def __init__(self, at: int) -> None:
        self.at, self.seen = at, 0

    def map(self, value: Any) -> Any:
        self.seen += 1
        if self.seen == self.at and not FailOnce.failures:
            FailOnce.failures += 1
            raise RuntimeError(f"injected failure at live sample {self.seen}")
        return value


@pytest.mark.zipped(parallelisms=(1, 2), seeds=(0, 3))
def test_offline_then_online_restarts_from_a_checkpoint_and_gives_the_same_models(env: StreamExecutionEnvironment,
                                                                                  tmp_path: Path) -> None:
    """A failure in the live stream while the online iteration runs: the job restarts from its latest
    checkpoint (the online iteration's models, samples and mini-batches in flight, and the functions'
    attributes, are in it) and the committed models still equal numpy's mini-batch SGD."""
    FailOnce.failures = 0
    X, y = online.make_samples(1600, 3, seed=7)
    env.configure(batch_size=8)  # sources read a few samples at a time
    env.get_checkpoint_config().set_checkpoint_interval_records(100).set_checkpoint_storage_dir(str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    blocks = [(X[i:i + 100], y[i:i + 100]) for i in range(0, 1000, 100)]
    offline = linreg.build_sync(env, blocks, np.zeros(3), 0.5, 12, gradient_fn=online.logistic_gradient)
    live = online.live_source(env, X[1000:], y[1000:]).map(FailOnce(400)).set_parallelism(1)
    models = online.build_online(env, offline.map(lambda w: (0, w)).set_parallelism(1), live, 0.5, 40)
    out = tmp_path / "out"
    models.map(lambda m: f"{m[0]};{list(m[1])!r}").sink_to(
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build())
    stats = env.execute("offline-then-online").get_accumulator_result("checkpoints")
    assert FailOnce.failures == 1 and stats["restarts"] == 1 and stats["restored_from"] is not None
    lines = [line for f in sorted(out.iterdir()) if not f.name.startswith((".", "_"))
             for line in f.read_text().splitlines()]
    got = sorted((int(v), eval(w)) for v, w in (line.split(";") for line in lines))  # noqa: S307 - our own lines
    start = online.offline_numpy(X[:1000], y[:1000], np.zeros(3), 0.5, 12)
    oracle = online.online_numpy(X[1000:], y[1000:], start, 0.5, 40)
    assert [v for v, _ in got] == list(range(1, len(oracle) + 1))
    np.testing.assert_allclose(np.array([w for _, w in got]), np.array(oracle), rtol=1e-9, atol=1e-12)

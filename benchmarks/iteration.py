"""FLIP-176 iteration benchmarks, each against the plain baseline in the same run.

1. Rounds per second of an almost empty body: one record goes round, a listener passes it
   on at each epoch watermark, a criteria stream stops it after R rounds. (Flink ML measured
   182 ms per round before its fix; the baseline here is a Python loop doing the same call.)
2. KMeans on 10^6 points × 10 dims, k = 10, 10 rounds (examples/iteration_kmeans.py: replayed
   data in blocks of 10^4 points, the assignment vectorised with numpy) against a numpy loop
   doing the same 10 rounds.
3. The same KMeans with a checkpoint every ``--checkpoint-ms`` against the run without, in
   the same run: the iteration is snapshotted whole, its replay cache as content-addressed
   segments (each point is written by the first checkpoint that holds it; later ones refer
   to its segment, as do the per-round operator's blocks), so the figure is what
   checkpoints of an iteration with a large replayed input cost.

Run: ``python benchmarks/iteration.py [--points N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import iteration_kmeans as kmeans  # noqa: E402

from slipstream.datastream import FlatMapFunction, OutputTag, StreamExecutionEnvironment  # noqa: E402
from slipstream.datastream.iteration import (  # noqa: E402
    DataStreamList,
    IterationBodyResult,
    IterationListener,
    iterate_bounded_streams_until_termination,
)

CONTINUE = OutputTag("continue")


class PassOn(FlatMapFunction, IterationListener):
    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.value: Any = None

    def flat_map(self, value: Any) -> list:
        self.value = value
        return []

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        collector.collect(self.value + 1)
        if epoch_watermark < self.rounds:
            context.output(CONTINUE, epoch_watermark)


def empty_rounds(rounds: int) -> float:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        passed = variables.get(0).flat_map(PassOn(rounds))
        return IterationBodyResult([passed], [], passed.get_side_output(CONTINUE))

    iterate_bounded_streams_until_termination(DataStreamList.of(env.from_collection([0])), DataStreamList.of(), body)
    env.from_collection([0]).add_sink(lambda _: None)  # a job needs a sink; the body has no output
    started = time.perf_counter()
    env.execute("empty rounds")
    return time.perf_counter() - started


def python_rounds(rounds: int) -> float:
    fn, started = PassOn(rounds), time.perf_counter()
    out: list = []

    class Sink:
        collect = out.append

    value = 0
    for epoch in range(1, rounds + 1):
        fn.flat_map(value)
        fn.on_epoch_watermark_incremented(epoch, None if epoch >= rounds else _Ctx(), Sink)
        value = out.pop()
    return time.perf_counter() - started


class _Ctx:
    def output(self, tag: Any, value: Any) -> None:
        pass


def kmeans_with_checkpoints(blocks: list, initial: np.ndarray, parallelism: int, interval_ms: int
                            ) -> tuple[float, float, np.ndarray, dict[str, Any]]:
    """KMeans as above, checkpointed every ``interval_ms`` into a temporary directory: its wall and
    CPU seconds (the process's, checkpoint writer included), centroids and checkpoint figures."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    with tempfile.TemporaryDirectory() as directory:
        env.get_checkpoint_config().set_checkpoint_interval(interval_ms).set_checkpoint_storage_dir(directory)
        out: list = []
        kmeans.build_kmeans(env, blocks, initial, 10).add_sink(out.append)
        started, cpu = time.perf_counter(), time.process_time()
        result = env.execute("kmeans with checkpoints")
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return elapsed, cpu, out[0], result.get_accumulator_result("checkpoints")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--checkpoint-ms", type=int, default=500)
    args = parser.parse_args()

    elapsed = empty_rounds(args.rounds)
    baseline = python_rounds(args.rounds)
    print(f"empty body: {args.rounds} rounds in {elapsed:.2f} s = {args.rounds / elapsed:,.0f} rounds/s "
          f"({elapsed / args.rounds * 1000:.3f} ms per round; Flink ML before its fix: 182 ms); "
          f"plain Python loop: {baseline / args.rounds * 1e6:.1f} µs per round; ratio {elapsed / baseline:,.0f}×")

    blocks, initial = kmeans.make_data(args.points, 10, 10, block=10_000)
    points = np.concatenate(blocks)
    started = time.perf_counter()
    expected = kmeans.kmeans_numpy(points, initial, 10)
    numpy_s = time.perf_counter() - started
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(args.parallelism)
    started, cpu = time.perf_counter(), time.process_time()
    (centroids,) = list(kmeans.build_kmeans(env, blocks, initial, 10).execute_and_collect())
    slipstream_s, slipstream_cpu = time.perf_counter() - started, time.process_time() - cpu
    assert np.allclose(centroids, expected)
    print(f"KMeans {args.points:,} × 10, k = 10, 10 rounds: slipstream {slipstream_s:.2f} s "
          f"(parallelism {args.parallelism}), numpy loop {numpy_s:.2f} s, ratio {slipstream_s / numpy_s:.2f}×")

    checkpointed_s, checkpointed_cpu, centroids, stats = kmeans_with_checkpoints(
        blocks, initial, args.parallelism, args.checkpoint_ms)
    assert np.allclose(centroids, expected)
    durations = stats["durations_ms"]
    print(f"KMeans with a checkpoint every {args.checkpoint_ms} ms: {checkpointed_s:.2f} s against {slipstream_s:.2f} s "
          f"without ({slipstream_s / checkpointed_s:.0%} of the speed); {stats['completed']} checkpoint(s), "
          f"the last at the end, which wrote {stats['last_size_bytes'] / 1e6:.2f} MB (every point is written once), "
          f"{sum(durations) / len(durations):.0f} ms on average from trigger to written; CPU {checkpointed_cpu:.2f} s "
          f"against {slipstream_cpu:.2f} s ({slipstream_cpu / checkpointed_cpu:.0%})")


if __name__ == "__main__":
    main()

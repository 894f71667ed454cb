"""KMeans as a synchronous, bounded iteration over replayed data (FLIP-176).

The centroids are the iteration's variable (one record: a ``k × d`` array at parallelism
1); the points are a replayed data stream of ``m × d`` blocks, so the assignment step is
vectorised with numpy. Each round, a per-round operator (``IterationBody.for_each_round``)
gets the round's centroids and the whole replayed data, and at the epoch watermark emits
its partial sums; one ALL_ROUND operator merges them into the next centroids, sends them
round again, and emits a termination-criteria record while rounds remain. When the
iteration ends, it outputs the final centroids.

Synchronous: everything that reaches the feedback is emitted from
``on_epoch_watermark_incremented``. Run: ``python examples/iteration_kmeans.py``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from slipstream.datastream import CoProcessFunction, OutputTag, ProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBody,
    IterationBodyResult,
    IterationConfig,
    IterationListener,
    Iterations,
    OperatorLifeCycle,
    ReplayableDataStreamList,
)

MODEL = OutputTag("kmeans-model")
CONTINUE = OutputTag("kmeans-continue")


def assign(centroids: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The index of each point's nearest centroid (squared Euclidean distance)."""
    distances = (points * points).sum(1)[:, None] - 2 * points @ centroids.T + (centroids * centroids).sum(1)[None, :]
    return distances.argmin(1)


def partial_sums(centroids: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k, d = centroids.shape
    labels = assign(centroids, points)
    sums = np.zeros((k, d))
    np.add.at(sums, labels, points)
    return sums, np.bincount(labels, minlength=k).astype(float)


def kmeans_numpy(points: np.ndarray, initial: np.ndarray, rounds: int) -> np.ndarray:
    """The oracle: ``rounds`` Lloyd steps over all points (an empty cluster keeps its centroid)."""
    centroids = initial.copy()
    for _ in range(rounds):
        sums, counts = partial_sums(centroids, points)
        centroids = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], centroids)
    return centroids


class AssignPoints(CoProcessFunction, IterationListener):
    """Per round: the round's centroids (input 1) and every block of points (input 2); at the
    epoch watermark, the partial sums of this subtask's points."""

    def __init__(self) -> None:
        self.centroids: np.ndarray | None = None
        self.blocks: list[np.ndarray] = []

    def process_element1(self, value: Any, ctx: Any) -> None:
        self.centroids = value

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.blocks.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if self.centroids is None:
            return
        k, d = self.centroids.shape
        sums, counts = np.zeros((k, d)), np.zeros(k)
        for block in self.blocks:
            block_sums, block_counts = partial_sums(self.centroids, block)
            sums += block_sums
            counts += block_counts
        collector.collect((sums, counts, self.centroids))


class UpdateCentroids(ProcessFunction, IterationListener):
    """Merges the partial sums of a round into the next centroids (ALL_ROUND, parallelism 1)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.partials: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.centroids: np.ndarray | None = None

    def process_element(self, value: Any, ctx: Any) -> None:
        self.partials.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if not self.partials:
            return
        sums = sum(p[0] for p in self.partials)
        counts = sum(p[1] for p in self.partials)
        old = self.partials[0][2]
        self.partials = []
        self.centroids = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], old)
        collector.collect(self.centroids)           # the next round's centroids (epoch + 1)
        if epoch_watermark < self.rounds:           # the seed's epochs start at 1 (Flink ML's at 0)
            context.output(CONTINUE, epoch_watermark)

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        context.output(MODEL, self.centroids)


def kmeans_body(rounds: int) -> Any:
    def body(variable_streams: DataStreamList, data_streams: DataStreamList) -> IterationBodyResult:
        partials = IterationBody.for_each_round(
            DataStreamList.of(variable_streams.get(0), data_streams.get(0)),
            lambda inputs: inputs.get(0).broadcast().connect(inputs.get(1)).process(AssignPoints()))
        merged = partials.get(0).global_().process(UpdateCentroids(rounds)).set_parallelism(1)
        return IterationBodyResult(DataStreamList.of(merged), DataStreamList.of(merged.get_side_output(MODEL)),
                                   merged.get_side_output(CONTINUE))
    return body


def build_kmeans(env: StreamExecutionEnvironment, blocks: list[np.ndarray], initial: np.ndarray, rounds: int) -> Any:
    """The final centroids of ``rounds`` KMeans rounds over ``blocks``, as a one-record stream."""
    centroids = env.from_collection([initial]).set_parallelism(1)
    points = env.from_collection(blocks).set_parallelism(env.get_parallelism())  # blocks spread over the subtasks
    config = IterationConfig.new_builder().set_operator_life_cycle(OperatorLifeCycle.ALL_ROUND).build()
    outputs = Iterations.iterate_bounded_streams_until_termination(
        DataStreamList.of(centroids), ReplayableDataStreamList.replay(points), config, kmeans_body(rounds))
    return outputs.get(0)


def make_data(n: int, d: int, k: int, seed: int = 0, block: int = 10_000) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 5, (k, d))
    points = centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d))
    return [points[i:i + block] for i in range(0, n, block)], points[:k].copy()


def main() -> None:
    blocks, initial = make_data(100_000, 10, 10)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    started = time.perf_counter()
    (result,) = list(build_kmeans(env, blocks, initial, 10).execute_and_collect())
    elapsed = time.perf_counter() - started
    oracle = kmeans_numpy(np.concatenate(blocks), initial, 10)
    print(f"10 rounds in {elapsed:.2f} s; max difference from numpy: {np.abs(result - oracle).max():.2e}")


if __name__ == "__main__":
    main()

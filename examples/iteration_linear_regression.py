"""Linear regression by gradient descent as a bounded iteration, in sync and async form (FLIP-176).

The data (blocks of ``(X, y)``) is a non-replayed data stream: each subtask of the
gradient operator keeps its blocks for the whole iteration (ALL_ROUND).

* **Sync** (:func:`build_sync`): the weights go round at parallelism 1. Each round every
  subtask computes its gradient at the epoch watermark (all of the round's weights and,
  in round 1, all the data have arrived), and one operator sums them at its epoch
  watermark into the next weights — exactly full-batch gradient descent, so the result
  equals numpy's (:func:`gd_numpy`) within floating-point error. The termination
  criteria stream stops it after ``rounds`` rounds.
* **Async** (:func:`build_async`): no function waits for an epoch watermark after the
  first. Each subtask's gradient is applied as soon as it arrives and the new weights go
  back to that subtask only, which computes its next gradient as soon as they reach it
  (the next round, as all feedback) — like a parameter server, gradients never summed.
  There is no criteria stream: the updater stops sending weights after ``updates``
  updates, and the iteration ends after the first round with no feedback. It converges
  to the least-squares solution (within 1e-2 on the weights of the test data).

Run: ``python examples/iteration_linear_regression.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from slipstream.datastream import CoProcessFunction, OutputTag, ProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    IterationListener,
    iterate_bounded_streams_until_termination,
)

MODEL = OutputTag("lr-model")
CONTINUE = OutputTag("lr-continue")


def gradient(w: np.ndarray, block: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    X, y = block
    return X.T @ (X @ w - y)


def gd_numpy(X: np.ndarray, y: np.ndarray, w0: np.ndarray, rate: float, rounds: int) -> np.ndarray:
    """The sync oracle: ``rounds`` full-batch gradient steps on the mean squared error."""
    w = w0.copy()
    for _ in range(rounds):
        w = w - rate * (X.T @ (X @ w - y)) / len(y)
    return w


def make_data(n: int, d: int, seed: int = 0, block: int = 250, noise: float = 0.01
              ) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(0, 1, (n, d))
    y = X @ rng.normal(0, 2, d) + rng.normal(0, noise, n)
    return [(X[i:i + block], y[i:i + block]) for i in range(0, n, block)], np.zeros(d)


# -- sync ------------------------------------------------------------------------------------------
class SyncGradient(CoProcessFunction, IterationListener):
    def __init__(self, gradient_fn: Any = gradient) -> None:
        self.gradient_fn = gradient_fn
        self.w: np.ndarray | None = None
        self.blocks: list[tuple[np.ndarray, np.ndarray]] = []

    def process_element1(self, value: Any, ctx: Any) -> None:
        self.w = value

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.blocks.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if self.w is not None:
            total = sum((self.gradient_fn(self.w, b) for b in self.blocks), np.zeros_like(self.w))
            collector.collect((total, sum(len(b[1]) for b in self.blocks), self.w))
            self.w = None


class SyncUpdate(ProcessFunction, IterationListener):
    def __init__(self, rate: float, rounds: int) -> None:
        self.rate, self.rounds = rate, rounds
        self.parts: list[Any] = []
        self.w: np.ndarray | None = None

    def process_element(self, value: Any, ctx: Any) -> None:
        self.parts.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if not self.parts:
            return
        total = sum(p[0] for p in self.parts)
        count = sum(p[1] for p in self.parts)
        w = self.parts[0][2]
        self.parts = []
        self.w = w - self.rate * total / count
        collector.collect(self.w)
        if epoch_watermark < self.rounds:
            context.output(CONTINUE, epoch_watermark)

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        context.output(MODEL, self.w)


def build_sync(env: StreamExecutionEnvironment, blocks: list, w0: np.ndarray, rate: float, rounds: int,
               gradient_fn: Any = gradient) -> Any:
    """The weights after ``rounds`` gradient steps (``gradient_fn(w, block)``: a block's summed gradient)."""
    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        parts = variables.get(0).broadcast().connect(data.get(0)).process(SyncGradient(gradient_fn))
        updated = parts.global_().process(SyncUpdate(rate, rounds)).set_parallelism(1)
        return IterationBodyResult([updated], [updated.get_side_output(MODEL)], updated.get_side_output(CONTINUE))

    return iterate_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection([w0]).set_parallelism(1)),
        DataStreamList.of(env.from_collection(blocks).set_parallelism(env.get_parallelism())), body).get(0)


# -- async -----------------------------------------------------------------------------------------
class AsyncGradient(CoProcessFunction, IterationListener):
    """Weights ``(subtask, w)`` in, this subtask's mean gradient out — as soon as the data is in."""

    def __init__(self) -> None:
        self.blocks: list[tuple[np.ndarray, np.ndarray]] = []
        self.data_complete = False
        self.waiting: Any = None

    def _gradient(self, value: Any) -> tuple:
        j, w = value
        count = sum(len(b[1]) for b in self.blocks)
        return (j, sum((gradient(w, b) for b in self.blocks), np.zeros_like(w)) / max(count, 1), w)

    def process_element1(self, value: Any, ctx: Any) -> Any:
        if self.data_complete:
            return [self._gradient(value)]
        self.waiting = value
        return None

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.blocks.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        self.data_complete = True   # epoch 1 complete: every data record has arrived
        if self.waiting is not None:
            collector.collect(self._gradient(self.waiting))
            self.waiting = None


class AsyncUpdate(ProcessFunction, IterationListener):
    def __init__(self, rate: float, updates: int) -> None:
        self.rate, self.updates = rate, updates
        self.done = 0
        self.w: np.ndarray | None = None

    def process_element(self, value: Any, ctx: Any) -> Any:
        j, mean_gradient, w = value
        if self.w is None:
            self.w = w.copy()
        self.w = self.w - self.rate * mean_gradient
        self.done += 1
        if self.done < self.updates:
            yield (j, self.w)           # back to the subtask that sent the gradient

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        context.output(MODEL, self.w)


def build_async(env: StreamExecutionEnvironment, blocks: list, w0: np.ndarray, rate: float, updates: int) -> Any:
    parallelism = env.get_parallelism()

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        to_subtask = variables.get(0).partition_custom(lambda j, n: j % n, lambda r: r[0])
        parts = to_subtask.connect(data.get(0)).process(AsyncGradient())
        updated = parts.global_().process(AsyncUpdate(rate, updates)).set_parallelism(1)
        feedback = updated.partition_custom(lambda j, n: j % n, lambda r: r[0])
        return IterationBodyResult([feedback], [updated.get_side_output(MODEL)])

    return iterate_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection([(j, w0) for j in range(parallelism)]).set_parallelism(parallelism)),
        DataStreamList.of(env.from_collection(blocks).set_parallelism(env.get_parallelism())), body).get(0)


def main() -> None:
    blocks, w0 = make_data(4000, 5)
    X = np.concatenate([b[0] for b in blocks])
    y = np.concatenate([b[1] for b in blocks])
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    (sync,) = list(build_sync(env, blocks, w0, 0.1, 50).execute_and_collect())
    print("sync  max |w - numpy GD|:", np.abs(sync - gd_numpy(X, y, w0, 0.1, 50)).max())
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(4)
    (async_w,) = list(build_async(env, blocks, w0, 0.05, 400).execute_and_collect())
    print("async max |w - least squares|:", np.abs(async_w - np.linalg.lstsq(X, y, rcond=None)[0]).max())


if __name__ == "__main__":
    main()

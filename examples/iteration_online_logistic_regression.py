"""Online logistic regression by mini-batches over an unbounded stream (FLIP-176), and the
offline-then-online job: train on the history with a bounded iteration, then keep training
on the live stream with an unbounded one — in the same job.

Online (:func:`build_online`): the model ``(version, w)`` is the variable, at parallelism
1, broadcast to the gradient operator; the live samples ``(x, y)`` are an unbounded data
stream, spread round robin over its subtasks. Subtask j uses its b-th local mini-batch
with model version b only: once both are there it sends its partial gradient, and the
updater, once it has all subtasks' parts of version b, emits version b + 1 — round again
to the gradient operator and out as the job's output. So the global mini-batch b is the
samples ``[b·B, (b+1)·B)`` of the stream whatever the interleaving, and the models equal
numpy's mini-batch SGD (:func:`online_numpy`) within floating-point error. Asynchronous:
everything is emitted from ``process_element``; no function waits for an epoch. The
iteration never ends while the stream is open; when a finite "live" stream ends, it ends
once nothing goes round any more (a last partial mini-batch is not used).

Offline then online (:func:`build_offline_then_online`): the history is a bounded stream;
a synchronous bounded iteration (full-batch gradient descent for ``rounds`` rounds, as in
``iteration_linear_regression``) produces the model that becomes the initial variable of
the online iteration; live samples wait in the online body until it arrives.

Run: ``python examples/iteration_online_logistic_regression.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from iteration_linear_regression import build_sync

from slipstream.datastream import CoProcessFunction, OutputTag, ProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.iteration import DataStreamList, IterationBodyResult, iterate_unbounded_streams

MODELS = OutputTag("online-models")


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def logistic_gradient(w: np.ndarray, block: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    X, y = block
    return X.T @ (sigmoid(X @ w) - y)


def online_numpy(X: np.ndarray, y: np.ndarray, w0: np.ndarray, rate: float, batch: int) -> list[np.ndarray]:
    """The oracle: one model per full mini-batch of ``batch`` consecutive samples."""
    models, w = [], w0.copy()
    for start in range(0, len(y) - batch + 1, batch):
        w = w - rate * logistic_gradient(w, (X[start:start + batch], y[start:start + batch])) / batch
        models.append(w)
    return models


def offline_numpy(X: np.ndarray, y: np.ndarray, w0: np.ndarray, rate: float, rounds: int) -> np.ndarray:
    w = w0.copy()
    for _ in range(rounds):
        w = w - rate * logistic_gradient(w, (X, y)) / len(y)
    return w


def make_samples(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(0, 1, (n, d))
    y = (sigmoid(X @ rng.normal(0, 2, d)) > rng.random(n)).astype(float)
    return X, y


class MiniBatchGradient(CoProcessFunction):
    """Model versions (input 1) and samples (input 2): the partial gradient of local batch b with
    model version b."""

    def __init__(self, local_batch: int) -> None:
        self.local_batch = local_batch
        self.model: tuple[int, np.ndarray] | None = None
        self.samples: list[tuple[np.ndarray, float]] = []
        self.next_batch = 0

    def _ready(self) -> Iterable[Any]:
        if self.model is not None and self.model[0] == self.next_batch and len(self.samples) >= self.local_batch:
            batch, self.samples = self.samples[:self.local_batch], self.samples[self.local_batch:]
            X = np.array([s[0] for s in batch])
            y = np.array([s[1] for s in batch])
            self.next_batch += 1
            yield (self.model[0], logistic_gradient(self.model[1], (X, y)), len(batch), self.model[1])

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        self.model = value
        return self._ready()

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        self.samples.append(value)
        return self._ready()


class ModelUpdate(ProcessFunction):
    """Joins the parts of each version's mini-batch into the next version (parallelism 1)."""

    def __init__(self, rate: float, parts: int) -> None:
        self.rate, self.parts = rate, parts
        self.pending: dict[int, list[Any]] = {}

    def process_element(self, value: Any, ctx: Any) -> Iterable[Any]:
        version = value[0]
        parts = self.pending.setdefault(version, [])
        parts.append(value)
        if len(parts) == self.parts:
            del self.pending[version]
            total = sum(p[1] for p in parts)
            count = sum(p[2] for p in parts)
            w = parts[0][3] - self.rate * total / count
            yield (version + 1, w)             # round again: the next version
            yield MODELS, (version + 1, w)     # and out


def build_online(env: StreamExecutionEnvironment, initial_model: Any, live: Any, rate: float, batch: int) -> Any:
    """The stream of model versions ``(version, w)`` trained on ``live`` from ``initial_model``
    (a one-record stream of ``(0, w0)``)."""
    parallelism = env.get_parallelism()
    if batch % parallelism:
        raise ValueError(f"the mini-batch size {batch} must be a multiple of the parallelism {parallelism}")

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        parts = variables.get(0).broadcast().connect(data.get(0).rebalance()) \
            .process(MiniBatchGradient(batch // parallelism))
        updated = parts.global_().process(ModelUpdate(rate, parallelism)).set_parallelism(1)
        return IterationBodyResult([updated], [updated.get_side_output(MODELS)])

    return iterate_unbounded_streams(DataStreamList.of(initial_model), DataStreamList.of(live), body).get(0)


def live_source(env: StreamExecutionEnvironment, X: np.ndarray, y: np.ndarray) -> Any:
    """The live stream: samples read by a reader thread (an unbounded source)."""
    samples = [(X[i], float(y[i])) for i in range(len(y))]
    return env.from_source(IteratorSource(samples, bounded=False), None, "live samples")


def build_offline_then_online(env: StreamExecutionEnvironment, history: tuple[np.ndarray, np.ndarray],
                              live: tuple[np.ndarray, np.ndarray], w0: np.ndarray, rate: float, rounds: int,
                              batch: int, block: int = 200) -> Any:
    X, y = history
    blocks = [(X[i:i + block], y[i:i + block]) for i in range(0, len(y), block)]
    offline = build_sync(env, blocks, w0, rate, rounds, gradient_fn=logistic_gradient)
    initial = offline.map(lambda w: (0, w)).set_parallelism(1)
    return build_online(env, initial, live_source(env, *live), rate, batch)


def main() -> None:
    X, y = make_samples(6000, 4)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    initial = env.from_collection([(0, np.zeros(4))]).set_parallelism(1)
    models = list(build_online(env, initial, live_source(env, X, y), 0.5, 100).execute_and_collect())
    oracle = online_numpy(X, y, np.zeros(4), 0.5, 100)
    print(f"online: {len(models)} models, last differs from numpy by {np.abs(models[-1][1] - oracle[-1]).max():.2e}")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    models = list(build_offline_then_online(env, (X[:4000], y[:4000]), (X[4000:], y[4000:]), np.zeros(4),
                                            0.5, 20, 100).execute_and_collect())
    w = offline_numpy(X[:4000], y[:4000], np.zeros(4), 0.5, 20)
    oracle = online_numpy(X[4000:], y[4000:], w, 0.5, 100)
    print(f"offline then online: {len(models)} models, last differs by {np.abs(models[-1][1] - oracle[-1]).max():.2e}")


if __name__ == "__main__":
    main()

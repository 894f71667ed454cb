"""Loops and iterations on worker processes: a SIGKILL of the worker running a loop or an iteration
fails the job over to its last checkpoint, exactly once; a loop nested in an iteration keeps every
epoch whole on two workers as in one process.

The killed jobs are the fault-injection jobs of ``tests/checkpoint/crash_job.py`` (``loop``,
``nested``, ``iteration``, ``iteration_loop``), run on two workers with a restart allowed: their
hook, a map inside the loop body (or the iteration's), SIGKILLs its own process — the worker the
loop is placed on — once a checkpoint completed while records went round (in an iteration: in
its second epoch or later). The checkpoint the job fails over to holds records in flight in the
cycle: in the loop heads' feedback logs, or in the channels of the iteration. The oracles, and the
checks of the keyed state in the final checkpoint, are the kill tests' own.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from worker_jobs import worker_processes

from slipstream.datastream import RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    iterate_and_replay_bounded_streams_until_termination,
)
from slipstream.errors import WorkerLostError
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.testing import CollectingSink

TESTS = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(TESTS / "checkpoint"), str(TESTS / "iteration"), str(TESTS.parent / "examples")]

import iteration_linear_regression as linreg  # noqa: E402
import iteration_online_logistic_regression as online  # noqa: E402
from crash_job import build, rounds  # noqa: E402
from test_iteration_checkpoints import DATA, LINES, Merge, RoundSum, region_state, replay_oracle  # noqa: E402
from test_iteration_kills import check_iteration, records_in_flight, region_states  # noqa: E402
from test_loop_kills import check_exactly_once, in_flight  # noqa: E402
from test_loops_in_iterations import build as loop_in_iteration  # noqa: E402
from test_loops_in_iterations import oracle as loop_in_iteration_oracle  # noqa: E402


class KillOnceCheckpointed:
    """SIGKILLs the process it runs in at the first record after a checkpoint completed that was
    triggered once a record ``arms`` accepted came by (the one after the checkpoint that may have
    been in flight then) — the first time only (the file ``marker`` remembers it across processes
    and restarts). Armed, each record waits ``pause_s``, so the job does not end before. The checkpoint
    directory is listed at most every ``LOOK_S`` (with up to a thousand checkpoints retained, a listing
    per record made one turn of a loaded machine outlast the worker's heartbeat timeout)."""

    LOOK_S = 0.005

    def __init__(self, checkpoints: str, marker: str, arms: Callable[[Any], bool], pause_s: float = 0.0002) -> None:
        self.checkpoints, self.marker, self.arms, self.pause_s = checkpoints, marker, arms, pause_s
        self.armed_after: int | None = None  # the newest complete checkpoint when it was armed
        self._looked_at, self._newest_seen = -1.0, 0

    def _newest(self) -> int:
        now = time.monotonic()
        if now - self._looked_at >= self.LOOK_S:
            self._looked_at = now
            self._newest_seen = max(CheckpointStorage(self.checkpoints).complete_ids(), default=0) \
                if os.path.isdir(self.checkpoints) else 0
        return self._newest_seen

    def __call__(self, value: Any) -> Any:
        if os.path.exists(self.marker):
            return value
        if self.armed_after is None:
            if self.arms(value):
                self._looked_at = -1.0  # arming reads the directory as it is now
                self.armed_after = self._newest()
        elif self._newest() > self.armed_after + 1:
            with open(self.marker, "w") as file:
                file.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        if self.armed_after is not None:
            time.sleep(self.pause_s)
        return value


class Counted:
    """Accepts the ``count``-th record it sees in its process and every one after it; each record
    before waits ``pause_s`` (a live source's pace)."""

    def __init__(self, count: int, pause_s: float) -> None:
        self.count, self.pause_s, self.seen = count, pause_s, 0

    def __call__(self, value: Any) -> bool:
        self.seen += 1
        if self.seen < self.count:
            time.sleep(self.pause_s)
        return self.seen >= self.count


def in_an_epoch_after_the_first(record: tuple[int, int]) -> bool:
    """A record ``(x, rounds left)`` of the iteration jobs in its second epoch or later."""
    return rounds(record[0]) - record[1] >= 1


@pytest.mark.parametrize("kind,n", [("loop", 2000), ("nested", 1000), ("iteration", 6000), ("iteration_loop", 3000)])
def test_a_sigkill_of_the_worker_running_a_loop_fails_over_to_the_last_checkpoint_exactly_once(tmp_path: Path,
                                                                                             kind: str, n: int):
    """Every round is checked exactly once; the kill lands when a checkpoint completes, and a round whose
    checkpoint happened to hold no record in flight (the channels were empty at that instant: it
    depends on the machine's timing) is run again, so the restore of records in flight is covered."""
    iteration = kind.startswith("iteration")
    for attempt in range(IN_FLIGHT_ROUNDS):
        directory = tmp_path / f"round-{attempt}"
        out, checkpoints, marker = str(directory / "out"), str(directory / "chk"), str(directory / "killed")
        directory.mkdir()
        kill = KillOnceCheckpointed(checkpoints, marker, in_an_epoch_after_the_first if iteration else lambda r: True)
        env = build(kind, out, checkpoints, n, parallelism=2, records=None if iteration else 400, retained=1000,
                    restart=RestartStrategies.fixed_delay_restart(1, 0), fail=kill)
        env.configure(workers=2)
        stats = env.execute(f"workers-{kind}").get_accumulator_result("checkpoints")
        with open(marker) as file:
            assert int(file.read()) != os.getpid()  # a worker died, not the driver
        assert stats["restarts"] == 1 and stats["restored_from"] is not None, stats
        restored = CheckpointStorage(checkpoints).read_verified(stats["restored_from"], None)
        (check_iteration if iteration else check_exactly_once)(kind, n, out, checkpoints, [])
        assert worker_processes() == []
        if (records_in_flight if iteration else in_flight)(restored) > 0:
            return
    pytest.fail(f"none of {IN_FLIGHT_ROUNDS} rounds restored a checkpoint with records in flight")


IN_FLIGHT_ROUNDS = 4


@pytest.mark.parametrize("n,parallelism,seed,budget", [(150, 2, 3, 1), (120, 3, 11, 4), (90, 4, 5, 100_000)])
def test_a_loop_inside_an_iteration_leaves_every_epoch_whole_on_two_workers(n: int, parallelism: int, seed: int,
                                                                            budget: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(workers=2, scheduler_seed=seed, batch_size=3, channel_capacity=2, quantum=2)
    assert Counter(loop_in_iteration(env, n, budget).execute_and_collect()) == loop_in_iteration_oracle(n)
    assert worker_processes() == []


@pytest.mark.parametrize("kind,n,parallelism,workers", [("loop", 2000, 2, 1), ("loop", 2000, 3, 2),
                                                        ("iteration", 6000, 2, 1)])
def test_a_checkpoint_of_a_loop_on_two_workers_restores_at_another_worker_count(tmp_path: Path, kind: str, n: int,
                                                                                parallelism: int, workers: int):
    """The job dies with its loop's worker and cannot restart; run again from its latest checkpoint
    in one process or on other workers (a loop at another parallelism too; an iteration restores at
    the parallelism it was checkpointed at), its committed output is the oracle's."""
    out, checkpoints, marker = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "killed")
    iteration = kind.startswith("iteration")
    kill = KillOnceCheckpointed(checkpoints, marker, in_an_epoch_after_the_first if iteration else lambda r: True)
    records = None if iteration else 400
    env = build(kind, out, checkpoints, n, parallelism=2, records=records, retained=1000, fail=kill)
    with pytest.raises(WorkerLostError, match="killed by signal SIGKILL"):
        env.configure(workers=2).execute(f"workers-{kind}")
    env = build(kind, out, checkpoints, n, parallelism=parallelism, records=records, retained=1000, fail=kill)
    stats = env.configure(workers=workers).execute(f"again-{kind}", restore_from="latest") \
        .get_accumulator_result("checkpoints")
    restored = CheckpointStorage(checkpoints).read_verified(stats["restored_from"], None)
    assert (records_in_flight if iteration else in_flight)(restored) > 0
    (check_iteration if iteration else check_exactly_once)(kind, n, out, checkpoints, [])
    assert worker_processes() == []


def test_a_sigkill_of_the_worker_running_an_iteration_with_replayed_data_fails_over_exactly_once(tmp_path: Path):
    """Data replayed every round (``iterate_and_replay_bounded_streams_until_termination``): the
    worker running the iteration is killed in round 3 or later, after a checkpoint taken while the
    rounds ran; the job fails over to it and every round's model comes out once, as the oracle's."""
    checkpoints, marker = str(tmp_path / "chk"), str(tmp_path / "killed")
    kill = KillOnceCheckpointed(checkpoints, marker, lambda model: model[0] >= 3, pause_s=0.1)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    env.configure(workers=2, batch_size=16, channel_capacity=2, quantum=2)
    env.get_checkpoint_config().set_checkpoint_interval(20).set_checkpoint_storage_dir(checkpoints) \
        .set_num_retained_checkpoints(1000)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    w0 = 12_345
    expected, _ = replay_oracle(w0)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        model = variables.get(0).map(kill).set_parallelism(1)
        parts = model.broadcast().connect(data.get(0)).process(RoundSum())
        merged = parts.global_().process(Merge()).set_parallelism(1)
        return IterationBodyResult([merged], [merged.get_side_output(LINES)])

    outputs = iterate_and_replay_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection([(1, w0)]).set_parallelism(1)),
        DataStreamList.of(env.from_collection(DATA)), body)
    lines = CollectingSink()
    outputs.get(0).sink_to(lines)
    stats = env.execute("workers-replay").get_accumulator_result("checkpoints")
    assert os.path.exists(marker) and stats["restarts"] == 1 and stats["restored_from"] is not None, stats
    progress = region_state(stats["restored_from"])["coordinator"][0]["progress"]
    assert progress["epoch_watermark"] >= 1 and not progress["terminated"], progress
    assert Counter(lines.values) == expected
    assert worker_processes() == []


def test_a_sigkill_of_a_worker_while_an_unbounded_iteration_trains_fails_over_exactly_once(tmp_path: Path):
    """Offline then online (a bounded iteration's model starts an unbounded one over live samples):
    the worker reading the live samples is killed after a checkpoint taken while the online
    iteration trained on them on the other worker (the offline one had ended); the job fails over
    to it and every model version is committed once, equal to numpy's mini-batch SGD."""
    checkpoints, marker = str(tmp_path / "chk"), str(tmp_path / "killed")
    X, y = online.make_samples(1600, 3, seed=7)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(workers=2, batch_size=8, channel_capacity=2, quantum=2)
    env.get_checkpoint_config().set_checkpoint_interval(20).set_checkpoint_storage_dir(checkpoints) \
        .set_num_retained_checkpoints(1000)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    kill = KillOnceCheckpointed(checkpoints, marker, Counted(300, pause_s=0.005), pause_s=0.005)
    blocks = [(X[i:i + 100], y[i:i + 100]) for i in range(0, 1000, 100)]
    offline = linreg.build_sync(env, blocks, np.zeros(3), 0.5, 12, gradient_fn=online.logistic_gradient)
    live = online.live_source(env, X[1000:], y[1000:]).map(kill).set_parallelism(1)
    models = online.build_online(env, offline.map(lambda w: (0, w)).set_parallelism(1), live, 0.5, 40)
    out = CollectingSink()
    models.sink_to(out)
    stats = env.execute("workers-online").get_accumulator_result("checkpoints")
    assert os.path.exists(marker) and stats["restarts"] == 1 and stats["restored_from"] is not None, stats
    restored = CheckpointStorage(checkpoints).read_verified(stats["restored_from"], None)
    progress = [state["coordinator"][0]["progress"] for state in region_states(restored)]
    assert sorted((p["terminated"], p["epoch_watermark"] > 0) for p in progress) == [(False, True), (True, True)]
    start = online.offline_numpy(X[:1000], y[:1000], np.zeros(3), 0.5, 12)
    oracle = online.online_numpy(X[1000:], y[1000:], start, 0.5, 40)
    got = sorted(out.values, key=lambda model: model[0])
    assert [version for version, _ in got] == list(range(1, len(oracle) + 1))
    np.testing.assert_allclose(np.array([w for _, w in got]), np.array(oracle), rtol=1e-9, atol=1e-12)
    assert worker_processes() == []

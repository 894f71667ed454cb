"""``execute_and_collect`` runs through the same driver as ``execute``: it takes checkpoints,
restarts by the job's restart strategy, and hands out each record exactly once across a
restart from a checkpoint (at least once without checkpoints, where a restart starts over)."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import MapFunction, RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.connectors.base import Sink, SinkWriter
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.sinks import CollectSink
from slipstream.errors import CheckpointError, UserFunctionError

pytestmark = pytest.mark.one_process("its fault injector is one instance shared by every attempt in this process "
                                     "(__deepcopy__ returns it)")

KEYS = 7
N = 3_000


class FailAt(MapFunction):
    """Raises the first ``times`` times it sees ``value``, noting how many records the caller
    had taken from the iterator by then."""

    def __init__(self, value: int, taken: list, times: int = 1) -> None:
        self.value = value
        self.taken = taken
        self.left = times
        self.failed_after: list[int] = []

    def __deepcopy__(self, memo: dict) -> FailAt:
        return self  # one instance for every subtask and attempt, so it fails only ``times`` times

    def map(self, value: int) -> int:
        if value == self.value and self.left > 0:
            self.left -= 1
            self.failed_after.append(len(self.taken))
            raise RuntimeError(f"injected failure at {value}")
        return value


LIFECYCLE: Counter = Counter()


class Tracked(MapFunction):
    """Counts its subtasks' opens and closes (every run must close what it opened)."""

    def open(self, runtime_context: Any) -> None:
        LIFECYCLE["open"] += 1

    def map(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        LIFECYCLE["close"] += 1


def make_env(parallelism: int, seed: int, checkpoint_dir: str | None = None,
             records: int | None = 200) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, batch_size=16, channel_capacity=2, backlog_sorting=False)
    if records is not None:
        env.get_checkpoint_config().set_checkpoint_interval_records(records)
    if checkpoint_dir is not None:
        env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    return env


def running_counts(env: StreamExecutionEnvironment, fail: MapFunction | None = None) -> Any:
    """Numbers 1..N -> (x % KEYS, 1) -> a running count per key: (key, 1), (key, 2), ..."""
    numbers = env.from_collection(list(range(1, N + 1)))
    if fail is not None:
        numbers = numbers.map(fail)
    return numbers.map(lambda x: (x % KEYS, 1)).key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))


def oracle() -> Counter:
    per_key = Counter(x % KEYS for x in range(1, N + 1))
    return Counter((key, count) for key, total in per_key.items() for count in range(1, total + 1))


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_collect_takes_the_checkpoints_execute_takes(tmp_path: Any, parallelism: int) -> None:
    executed, collected = str(tmp_path / "execute"), str(tmp_path / "collect")
    env = make_env(parallelism, 3, executed)
    running_counts(env).add_sink(lambda record: None)
    stats = env.execute().get_accumulator_result("checkpoints")
    assert stats["completed"] >= 2
    env = make_env(parallelism, 3, collected)
    got = Counter(running_counts(env).execute_and_collect())
    assert got == oracle()
    assert os.listdir(collected) and sorted(os.listdir(collected)) == sorted(os.listdir(executed))


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 5])
def test_a_restart_from_a_checkpoint_hands_out_each_record_once(tmp_path: Any, parallelism: int,
                                                               seed: int) -> None:
    env = make_env(parallelism, seed, str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    got: list = []
    fail = FailAt(2 * N // 3, got)
    for record in running_counts(env, fail).execute_and_collect():
        got.append(record)
    assert len(fail.failed_after) == 1 and fail.failed_after[0] > 0  # records were out before the failure
    assert Counter(got) == oracle()


def test_without_checkpoints_a_restart_starts_over_and_collects_at_least_once() -> None:
    env = make_env(1, 0, records=None)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    got: list = []
    fail = FailAt(N // 2, got)
    got.extend(running_counts(env, fail).execute_and_collect())
    expected = oracle()
    first_run, second_run = got[:-sum(expected.values())], got[-sum(expected.values()):]
    assert fail.failed_after[0] > 0 and first_run
    assert Counter(second_run) == expected  # the restarted run's whole output, after the first run's
    assert not Counter(first_run) - expected  # what came before the failure came again


class CommitFailsOnce(Sink):
    """A two-phase-commit sink whose first commit of checkpoint ``at`` or later raises: the run fails
    after that checkpoint completed but before the sinks notified after it committed."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.failed = False

    def create_writer(self) -> SinkWriter:
        return _CommitFailsOnceWriter(self)


class _CommitFailsOnceWriter(SinkWriter):
    def __init__(self, sink: CommitFailsOnce) -> None:
        self._sink = sink

    def write(self, values: list, timestamps: list | None) -> None:
        pass

    def supports_two_phase_commit(self) -> bool:
        return True

    def prepare_commit(self, checkpoint_id: int) -> None:
        return None

    def commit(self, checkpoint_id: int) -> None:
        if checkpoint_id >= self._sink.at and not self._sink.failed:
            self._sink.failed = True
            raise RuntimeError(f"commit of checkpoint {checkpoint_id} failed")

    def restore_commit_state(self, states: list[Any]) -> None:
        pass


@pytest.mark.parametrize("parallelism", [1, 2])
def test_records_of_a_checkpoint_that_completed_but_was_not_committed_are_handed_out_once(
        tmp_path: Any, parallelism: int) -> None:
    env = make_env(parallelism, 2, str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    failing = CommitFailsOnce(at=3)
    counts = running_counts(env)
    counts.sink_to(failing)
    got = list(counts.execute_and_collect())
    assert failing.failed
    assert Counter(got) == oracle()


def test_collect_gives_up_after_the_configured_restarts_and_closes_every_run(tmp_path: Any) -> None:
    env = make_env(2, 1, str(tmp_path / "chk"))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 0))
    fail = FailAt(N // 2, [], times=10)
    LIFECYCLE.clear()
    with pytest.raises(UserFunctionError, match=f"injected failure at {N // 2}"):
        list(running_counts(env, fail).map(Tracked()).execute_and_collect())
    assert fail.left == 7  # the first run and two restarts
    assert LIFECYCLE["open"] == LIFECYCLE["close"] >= 2  # each run closed what it had opened


def test_an_unbounded_collect_with_checkpoints_hands_out_records_as_checkpoints_complete() -> None:
    env = make_env(1, 0, records=5)
    source = IteratorSource(itertools.count(), bounded=False)
    assert env.from_source(source, None, "counter").execute_and_collect(limit=12) == list(range(12))


def test_closing_a_collect_deletes_the_checkpoints_made_for_it(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = make_env(2, 0)
    with running_counts(env).execute_and_collect() as records:
        assert next(records)
        assert any(name.startswith("slipstream-checkpoints-") for name in os.listdir(tmp_path))
    assert not any(name.startswith("slipstream-checkpoints-") for name in os.listdir(tmp_path))


def test_a_collect_sink_refuses_to_restore_before_what_it_handed_out() -> None:
    sink = CollectSink()
    writer = sink.create_writer()
    writer.open(0, 1)
    writer.begin_two_phase_commit()
    writer.write([1, 2], None)
    assert not sink.buffer  # nothing is handed out before its checkpoint completes
    first = writer.prepare_commit(1)
    writer.write([3], None)
    second = writer.prepare_commit(2)
    writer.commit(2)
    assert list(sink.buffer) == [1, 2, 3]
    restarted = sink.create_writer()
    restarted.open(0, 1)
    restarted.begin_two_phase_commit()
    restarted.check_commit_state([second])
    restarted.restore_commit_state([second])  # an earlier run committed checkpoint 2: nothing twice
    assert list(sink.buffer) == [1, 2, 3]
    with pytest.raises(CheckpointError, match="already handed out the records of checkpoint 2"):
        restarted.check_commit_state([first])
    assert list(sink.buffer) == [1, 2, 3]

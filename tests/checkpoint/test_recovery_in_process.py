"""Restarts and restores inside one process: restart strategies, restore at another parallelism,
AT_LEAST_ONCE, disk full while checkpointing, FLIP-327's checkpoint rules, the config API."""

from __future__ import annotations

import os

import pytest

from crash_job import build, oracle
from slipstream.datastream import (CheckpointConfig, CheckpointingMode, RestartStrategies,
                                   StreamExecutionEnvironment)
from slipstream.errors import DiskFullError, InvalidProgramError, UserFunctionError
from slipstream.runtime.checkpoint.fs import FaultInjectingFileSystem
from slipstream.runtime.checkpoint.snapshot import loads_checkpointed
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.driver import JobDriver
from test_kill_recovery import committed_output

pytestmark = pytest.mark.one_process("its fault injectors fail once by attributes of their functions and count what "
                                     "they saw there, in this process")


class FailOnce:
    """Raises the first ``times`` times it sees ``value``."""

    def __init__(self, value: int, times: int = 1) -> None:
        self.value = value
        self.left = times
        self.seen = 0

    def __call__(self, value: int) -> None:
        if value == self.value:
            self.seen += 1
            if self.left > 0:
                self.left -= 1
                raise RuntimeError(f"injected failure at {value}")


def paths(tmp_path):
    return str(tmp_path / "out"), str(tmp_path / "chk")


@pytest.mark.parametrize("kind,n", [("counts", 20_000), ("union", 12_000), ("windows", 6_000)])
def test_task_failure_restarts_from_latest_checkpoint_exactly_once(tmp_path, kind, n):
    out, chk = paths(tmp_path)
    fail = FailOnce(n // 2)
    env = build(kind, out, chk, n, interval_ms=None, records=1000,
                restart=RestartStrategies.fixed_delay_restart(2, 0), fail=fail)
    result = env.execute(f"restart-{kind}")
    stats = result.get_accumulator_result("checkpoints")
    assert stats["restarts"] == 1
    assert fail.seen >= 2  # failed once, then the record came again from the checkpoint
    assert committed_output(out) == oracle(kind, n)


def test_a_record_that_keeps_failing_ends_the_job_after_the_configured_attempts(tmp_path):
    out, chk = paths(tmp_path)
    fail = FailOnce(5_000, times=100)
    env = build("counts", out, chk, 10_000, interval_ms=None, records=1000,
                restart=RestartStrategies.fixed_delay_restart(3, 0), fail=fail)
    with pytest.raises(UserFunctionError, match="injected failure at 5000"):
        env.execute("poison")
    assert fail.seen == 4  # the first run and three restarts


def test_failure_rate_restarts_until_too_many_failures_come_within_the_interval(tmp_path):
    """Flink's failure rate: at most 2 failures a minute restart; the third within it ends the job."""
    out, chk = paths(tmp_path)
    fail = FailOnce(5_000, times=100)
    env = build("counts", out, chk, 10_000, interval_ms=None, records=1000,
                restart=RestartStrategies.failure_rate_restart(2, 60_000, 0), fail=fail)
    with pytest.raises(UserFunctionError, match="injected failure at 5000"):
        env.execute("poison")
    assert fail.seen == 3  # the first run and two restarts


def test_failure_rate_counts_only_the_failures_within_its_interval(tmp_path):
    """With an interval shorter than a run, every failure is the only one in it: the job recovers."""
    out, chk = paths(tmp_path)
    fail = FailOnce(5_000, times=3)
    strategy = RestartStrategies.failure_rate_restart(1, 0, 0)
    assert strategy.allows_restart([10.0]) and strategy.allows_restart([10.0, 20.0])
    assert not RestartStrategies.failure_rate_restart(1, 60_000, 0).allows_restart([10.0, 20.0])
    env = build("counts", out, chk, 10_000, interval_ms=None, records=1000, restart=strategy, fail=fail)
    assert env.execute("recovers").get_accumulator_result("checkpoints")["restarts"] == 3
    assert committed_output(out) == oracle("counts", 10_000)


def test_no_restart_fails_at_once(tmp_path):
    out, chk = paths(tmp_path)
    fail = FailOnce(500)
    env = build("counts", out, chk, 1_000, interval_ms=None, records=100,
                restart=RestartStrategies.no_restart(), fail=fail)
    with pytest.raises(UserFunctionError):
        env.execute("no-restart")
    assert fail.seen == 1


@pytest.mark.parametrize("kind", ["counts", "windows", "union"])
@pytest.mark.parametrize("new_parallelism", [1, 3])
def test_restore_at_another_parallelism(tmp_path, kind, new_parallelism):
    n = 8_000
    out, chk = paths(tmp_path)
    with pytest.raises(UserFunctionError):
        build(kind, out, chk, n, interval_ms=None, records=500, fail=FailOnce(n * 3 // 4)).execute("first")
    assert os.listdir(chk), "the failed run left checkpoints"
    if kind == "windows":  # timers of open windows (on disk with RocksDB) go to the subtasks owning their keys
        assert pending_event_timers(chk, "windows") > 0
    env = build(kind, out, chk, n, interval_ms=None, records=500, parallelism=new_parallelism)
    result = env.execute("rescaled", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None
    assert committed_output(out) == oracle(kind, n)


def pending_event_timers(checkpoints: str, uid: str) -> int:
    """The event-time timers operator ``uid``'s subtasks hold in the newest complete checkpoint
    (in a file of their own, which the checkpoint writer wrote)."""
    storage = CheckpointStorage(checkpoints)
    checkpoint = storage.read_verified(storage.path_of(storage.complete_ids()[-1]), None)
    return sum(len(loads_checkpointed(checkpoint.files[subtask.timers], checkpoint.files,
                                      checkpoint.path)["event"])
               for subtask in checkpoint.manifest.operators[uid].subtasks if subtask.timers)


def test_at_least_once_loses_nothing(tmp_path):
    out, chk = paths(tmp_path)
    n = 12_000
    env = build("union", out, chk, n, interval_ms=None, records=700, mode=CheckpointingMode.AT_LEAST_ONCE,
                restart=RestartStrategies.fixed_delay_restart(1, 0), fail=FailOnce(n // 2))
    env.execute("alo")
    got, expected = committed_output(out), oracle("union", n)
    assert not expected - got


def test_disk_full_while_writing_a_checkpoint_is_a_typed_error_and_a_restart_loses_nothing(tmp_path):
    out, chk = paths(tmp_path)
    n = 6_000
    env = build("counts", out, chk, n, interval_ms=None, records=1000)
    fs = FaultInjectingFileSystem(disk_full_after=12)  # inside the second checkpoint
    with pytest.raises(DiskFullError) as caught:
        JobDriver(env._take_job("full"), fs=fs).run()
    assert caught.value.path.startswith(chk) and "no space left" in str(caught.value)
    # No half-written checkpoint: every checkpoint directory left is complete.
    for name in os.listdir(chk):
        if name == "shared":
            continue
        assert os.path.exists(os.path.join(chk, name, "_manifest.json")), name
    env = build("counts", out, chk, n, interval_ms=None, records=1000)
    env.execute("after freeing space", restore_from="latest")
    assert committed_output(out) == oracle("counts", n)


def test_tolerable_checkpoint_failures_keep_the_job_running(tmp_path):
    out, chk = paths(tmp_path)
    n = 6_000
    env = build("counts", out, chk, n, interval_ms=None, records=1000)
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1)
    fs = FaultInjectingFileSystem(disk_full_after=12)
    result = JobDriver(env._take_job("tolerant"), fs=fs).run()
    stats = result.get_accumulator_result("checkpoints")
    assert stats["failed"] == 1 and stats["completed"] >= 2
    assert committed_output(out) == oracle("counts", n)


def test_checkpoints_are_taken_while_a_sorter_processes_backlog(tmp_path):
    out, chk = paths(tmp_path)
    env = build("counts", out, chk, 5_000, interval_ms=None, records=200)
    env.configure(backlog_sorting="always")  # a Python reduce sorts only when told to
    result = env.execute("sorting")
    stats = result.get_accumulator_result("checkpoints")
    assert not stats["skip_reasons"] and stats["completed"] > 5, stats
    # Sorted batch work (STREAMING mode) emits every running count, key by key, at the switch.
    assert committed_output(out) == oracle("counts", 5_000)


def test_interval_during_backlog_zero_takes_no_checkpoint_while_sources_are_backlog(tmp_path):
    out, chk = paths(tmp_path)
    env = build("counts", out, chk, 5_000, interval_ms=None, records=200)
    env.get_checkpoint_config().set_checkpoint_interval_during_backlog(0)
    result = env.execute("backlog interval")
    # The final checkpoint, and at most one after the sources ended (they are no longer backlog).
    assert result.get_accumulator_result("checkpoints")["completed"] <= 2
    assert committed_output(out) == oracle("counts", 5_000)
    out, chk = paths(tmp_path / "without")
    result = build("counts", out, chk, 5_000, interval_ms=None, records=200).execute("no backlog interval")
    assert result.get_accumulator_result("checkpoints")["completed"] >= 5


def test_operators_hear_of_checkpoints_before_the_barrier_and_on_completion(tmp_path, monkeypatch):
    from slipstream.operators.sink import SinkOperator
    calls = []
    prepare, complete = SinkOperator.prepare_snapshot_pre_barrier, SinkOperator.notify_checkpoint_complete
    monkeypatch.setattr(SinkOperator, "prepare_snapshot_pre_barrier",
                        lambda self, cid: (calls.append(("prepare", cid)), prepare(self, cid)))
    monkeypatch.setattr(SinkOperator, "notify_checkpoint_complete",
                        lambda self, cid: (calls.append(("complete", cid)), complete(self, cid)))
    out, chk = paths(tmp_path)
    build("counts", out, chk, 3_000, interval_ms=None, records=1000, parallelism=1).execute("hooks")
    prepared = [cid for what, cid in calls if what == "prepare"]
    completed = [cid for what, cid in calls if what == "complete"]
    assert prepared and prepared == sorted(prepared)
    assert set(prepared) <= set(completed)


def test_print_and_collect_sinks_stay_at_least_once_and_work_with_checkpoints(tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(10).get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path))
    env.get_checkpoint_config().set_checkpoint_interval_records(10)
    seen = []
    env.from_collection(list(range(100))).map(lambda x: x * 2).add_sink(seen.append)
    env.execute("function sink")
    assert sorted(seen) == [x * 2 for x in range(100)]


def test_checkpoint_config_api():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert not env.get_checkpoint_config().is_checkpointing_enabled()
    env.enable_checkpointing(500, CheckpointingMode.AT_LEAST_ONCE)
    config = env.get_checkpoint_config()
    assert isinstance(config, CheckpointConfig)
    assert env.get_checkpoint_interval() == 500
    assert env.get_checkpointing_mode() is CheckpointingMode.AT_LEAST_ONCE
    config.set_min_pause_between_checkpoints(100).set_checkpoint_timeout(2000)
    config.set_tolerable_checkpoint_failure_number(2).set_num_retained_checkpoints(3)
    assert (config.get_min_pause_between_checkpoints(), config.get_checkpoint_timeout(),
            config.get_tolerable_checkpoint_failure_number(), config.get_num_retained_checkpoints()) == \
        (100, 2000, 2, 3)
    with pytest.raises(InvalidProgramError):
        config.set_max_concurrent_checkpoints(2)
    with pytest.raises(InvalidProgramError):
        config.set_num_retained_checkpoints(0)
    with pytest.raises(InvalidProgramError):
        env.set_restart_strategy("always")
    strategy = RestartStrategies.fixed_delay_restart(3, 10)
    env.set_restart_strategy(strategy)
    assert env.get_restart_strategy() is strategy


def test_restore_latest_needs_a_storage_directory():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).add_sink(lambda x: None)
    with pytest.raises(InvalidProgramError, match="checkpoint directory"):
        env.execute("x", restore_from="latest")


@pytest.mark.parametrize("fail_at", [11_900, 3_000])
def test_file_source_position_is_restored_before_the_reader_lists_its_splits(tmp_path, fail_at):
    """Regression: the reader was restored after ``open`` had listed every split, so a restored
    file source read its finished file again."""
    out, chk = paths(tmp_path)
    n = 12_000
    env = build("union", out, chk, n, interval_ms=None, records=500,
                restart=RestartStrategies.fixed_delay_restart(1, 0), fail=FailOnce(fail_at))
    env.execute("file position")
    assert committed_output(out) == oracle("union", n)

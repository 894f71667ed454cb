"""Checkpoints written by a background thread while the job goes on: the tasks stop only to freeze
their keyed state (copy-on-write), the checkpoint completes once its files are durable, and the
output stays exactly-once across failures."""

from __future__ import annotations

import os
import threading
import time

import pytest
from crash_job import build, oracle
from test_kill_recovery import committed_output

from slipstream.datastream import RestartStrategies
from slipstream.runtime.checkpoint.fs import FileSystem
from slipstream.runtime.driver import JobDriver

pytestmark = pytest.mark.one_process("its fault injector fails once by an attribute of its function, which a restarted "
                                     "worker gets afresh")


class Counting:
    """An identity step counting the records that passed it."""

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, value: int) -> None:
        self.seen += 1


class HoldingFileSystem(FileSystem):
    """Holds the first fsync made outside the job's thread until the job processed ``more`` records
    (or ``patience`` seconds passed): possible only if the job goes on while a checkpoint is written."""

    def __init__(self, counting: Counting, more: int, patience: float = 30.0) -> None:
        self.counting, self.more, self.patience = counting, more, patience
        self.held: bool | None = None  # True: released by the job's progress; False: by impatience

    def _fsync(self, fd: int) -> None:
        super()._fsync(fd)
        if self.held is None and threading.current_thread() is not threading.main_thread():
            target, deadline = self.counting.seen + self.more, time.monotonic() + self.patience
            while self.counting.seen < target and time.monotonic() < deadline:
                time.sleep(0.001)
            self.held = self.counting.seen >= target


def test_the_job_goes_on_while_a_checkpoint_is_written(tmp_path) -> None:
    counting = Counting()
    n = 200_000
    env = build("counts", str(tmp_path / "out"), str(tmp_path / "chk"), n, interval_ms=None, records=20_000,
                fail=counting, async_writes=True)
    fs = HoldingFileSystem(counting, more=5_000)
    result = JobDriver(env._take_job("held"), fs=fs).run()
    assert fs.held is True
    stats = result.get_accumulator_result("checkpoints")
    assert stats["completed"] >= 2 and stats["failed"] == 0
    assert committed_output(str(tmp_path / "out")) == oracle("counts", n)


class FailOnceAfterACheckpoint:
    """Raises once, on a record seen after a checkpoint completed (its manifest is in place).

    Past ``after`` records with no checkpoint complete yet, each record waits a millisecond, so a
    loaded machine's slow background writer still finishes one before the input runs out."""

    def __init__(self, root: str, after: int) -> None:
        self.directory, self.after, self.seen, self.failed = os.path.join(root, "chk"), after, 0, False

    def __call__(self, value: int) -> None:
        self.seen += 1
        if self.failed or self.seen < self.after:
            return
        if any(os.path.exists(os.path.join(self.directory, name, "_manifest.json"))
               for name in os.listdir(self.directory)):
            self.failed = True
            raise RuntimeError(f"injected failure at {value}")
        time.sleep(0.001)


@pytest.mark.parametrize("kind,n", [("counts", 30_000), ("union", 30_000), ("windows", 30_000)])
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_restart_from_a_checkpoint_written_in_the_background_loses_and_duplicates_nothing(
        tmp_path, kind: str, n: int, parallelism: int) -> None:
    root = str(tmp_path)
    fail = FailOnceAfterACheckpoint(root, n // 3)
    env = build(kind, os.path.join(root, "out"), os.path.join(root, "chk"), n, interval_ms=5, records=1_000,
                parallelism=parallelism, restart=RestartStrategies.fixed_delay_restart(1, 0), fail=fail,
                async_writes=True)
    stats = env.execute("background").get_accumulator_result("checkpoints")
    assert fail.failed and stats["restarts"] == 1
    assert committed_output(os.path.join(root, "out")) == oracle(kind, n)


def test_a_write_in_progress_when_the_job_ends_runs_at_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's thread waiting for a background writer counts as idle: with the writer's longest
    deferral made absurdly long, a busy job whose checkpoints are still being written when its input
    ends would otherwise wait for it chunk after chunk."""
    from slipstream.runtime.checkpoint import pacing

    monkeypatch.setattr(pacing, "SHORTEST_DEFERRAL_S", 60.0)
    monkeypatch.setattr(pacing, "LONGEST_DEFERRAL_S", 60.0)
    n = 20_000
    env = build("wide", str(tmp_path / "out"), str(tmp_path / "chk"), n, interval_ms=None, records=5_000,
                async_writes=True)
    started = time.perf_counter()
    result = JobDriver(env._take_job("ends while writing")).run()
    assert time.perf_counter() - started < 50
    assert result.get_accumulator_result("checkpoints")["completed"] >= 2
    assert committed_output(str(tmp_path / "out")) == oracle("wide", n)

"""The kill battery of ``tests/checkpoint/test_kill_recovery.py`` with every job's subtasks on two
worker processes: the driver is SIGKILLed at random moments while its workers run (after a checkpoint
of that start completed) and restarted from its checkpoint directory until the job finishes, and the
committed output must equal the oracle. Each kill also takes the driver's end of the workers'
control sockets with it: the workers must end by themselves (no orphans), and the restarted driver
starts workers of its own."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest
from worker_jobs import worker_processes, workers_left

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS / "checkpoint"))

from test_kill_recovery import run_until_done  # noqa: E402


@pytest.mark.parametrize("kind,n", [("counts", 300_000), ("union", 160_000), ("windows", 40_000),
                                    ("broadcast", 100_000)])
def test_sigkill_of_a_driver_with_two_workers_and_restart_gives_exactly_once_output(tmp_path: Path, kind: str, n: int,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    marker = f"SLIPSTREAM_TEST_MARKER_{kind}_{time.monotonic_ns()}"
    monkeypatch.setenv("CRASH_JOB_WORKERS", "2")
    monkeypatch.setenv(marker, "1")
    rng = random.Random(f"worker-kill-{kind}")

    def two_workers_running(checkpoints: str) -> bool:  # besides a checkpoint of this start (run_until_done)
        return len(worker_processes(marker=marker)) == 2

    kills = 0
    for attempt in range(5):  # a run may end before the kill's moment came: then another one
        kills += run_until_done(kind, n, str(tmp_path / f"run{attempt}"), rng, 2 - kills, delays=(0.0, 0.5),
                                kill_after=two_workers_running)
        if kills == 2:
            break
    assert kills == 2
    assert workers_left(marker) == []

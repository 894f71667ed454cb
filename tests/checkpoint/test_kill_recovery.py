"""Fault injection: SIGKILL a job in a child process at random moments, restart it from its
checkpoint directory, repeat until it finishes; the committed output must equal the oracle.

Each of the four jobs is killed until its target (3, 3, 3 and 2: 11 kills on each state backend,
every one after the start's first checkpoint) is reached, asserted by its own test — a count
summed across tests would need them in one process, which pytest-xdist does not give. A target
fits in one round (one run from nothing), so each test costs about one run of its job plus a start
per kill; the hundreds of kills that test breadth, not each job's path through a restore, are
``benchmarks/checkpoint_soak.py``'s.
The child restores through the command-line route (``SLIPSTREAM_RESTORE_FROM=latest``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from crash_job import newest_complete_id, oracle  # noqa: E402

from slipstream.runtime.checkpoint.storage import CheckpointStorage  # noqa: E402

JOB = os.path.join(HERE, "crash_job.py")


def committed_output(directory: str) -> Counter:
    """Lines of the visible part files: what a reader of the sink's directory sees."""
    lines: Counter = Counter()
    if not os.path.isdir(directory):
        return lines
    for name in os.listdir(directory):
        if not name.startswith(".") and not name.startswith("_"):
            with open(os.path.join(directory, name)) as handle:
                lines.update(handle.read().splitlines())
    return lines


def run_until_done(kind: str, n: int, workdir: str, rng: random.Random, max_kills: int,
                   async_writes: bool = False, after_kill: Callable[[str], None] = lambda checkpoints: None,
                   delays: tuple[float, float] = (0.3, 0.8),
                   kill_after: Callable[[str], bool] | None = None) -> int:
    """Run the job, killing it after a random delay (seconds, within ``delays``, counted from the
    first checkpoint this start completed, once ``kill_after`` holds of the checkpoint directory too)
    up to ``max_kills`` times (``after_kill`` sees the checkpoint directory after each); returns the
    kills. Every kill lands in a running job that restored the last checkpoint, not in an
    interpreter still importing or restoring."""
    out, checkpoints = os.path.join(workdir, "out"), os.path.join(workdir, "chk")
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest", PYTHONFAULTHANDLER="1",
               CRASH_JOB_ASYNC_WRITES="1" if async_writes else "0")
    kills = 0
    while True:
        baseline = newest_complete_id(checkpoints)
        process = subprocess.Popen([sys.executable, JOB, kind, out, checkpoints, str(n)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while kills < max_kills and process.poll() is None and not (
                newest_complete_id(checkpoints) > baseline and (kill_after is None or kill_after(checkpoints))):
            time.sleep(0.02)
        if kills < max_kills:
            try:
                process.wait(timeout=rng.uniform(*delays))
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.communicate()
                kills += 1
                after_kill(checkpoints)
                continue
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()
        # Nothing lost or duplicated, and nothing uncommitted left visible.
        got, expected = committed_output(out), oracle(kind, n)
        missing, extra = expected - got, got - expected
        assert not missing and not extra, (
            f"{kind}: {sum(missing.values())} line(s) lost (e.g. {list(missing)[:3]}), "
            f"{sum(extra.values())} duplicated or unexpected (e.g. {list(extra)[:3]}) after {kills} kills")
        return kills


KILL_DELAYS = (0.1, 0.6)
"""Seconds from a start's first checkpoint to its kill. Each job runs for at least about a second
past its first checkpoint on a quiet 2-core machine (on the heap backend, the faster one), so most
starts are killed: with the windows job at 40,000 records and delays of 0.3-0.8 s it ended first in
almost every round, and one test went round after round for minutes on a quiet machine."""
MAX_ROUNDS = 25
"""Rounds (fresh runs from nothing) a test may take to reach its kills: past them the jobs end before
the kills land, which a faster machine than these sizes were chosen on would show first."""


def kill_rounds(kind: str, n: int, tmp_path, rng: random.Random, target: int, async_writes: bool = False) -> None:
    """``target`` kills of ``kind`` in fresh rounds, each run to its end and its output checked
    against the oracle (:func:`run_until_done`)."""
    kills = rounds = 0
    while kills < target:
        assert rounds < MAX_ROUNDS, f"{kind}: {kills} kill(s) in {rounds} rounds: the job ends before its kills land"
        kills += run_until_done(kind, n, str(tmp_path / f"round{rounds}"), rng, target - kills, async_writes=async_writes,
                                delays=KILL_DELAYS)
        rounds += 1


@pytest.mark.parametrize("kind,n,target", [("counts", 300_000, 3), ("union", 160_000, 3), ("windows", 120_000, 3),
                                           ("broadcast", 200_000, 2)])
def test_sigkill_and_restart_gives_exactly_once_output(tmp_path, kind, n, target):
    kill_rounds(kind, n, tmp_path, random.Random(f"kill-{kind}"), target)


@pytest.mark.parametrize("kind,n", [("counts", 300_000), ("union", 160_000), ("windows", 120_000)])
def test_sigkill_while_checkpoints_are_written_in_the_background_gives_exactly_once_output(tmp_path, kind, n):
    """Every checkpoint written by the background writer while the job goes on (a kill may land
    mid-write, or between the manifest and the sinks' commit): the same exactly-once output."""
    kill_rounds(kind, n, tmp_path, random.Random(f"kill-async-{kind}"), 2, async_writes=True)


@pytest.mark.parametrize("kind,n", [("windows", 80_000)])  # keyed state and timers, through several checkpoints
def test_sigkill_in_the_middle_of_writing_a_checkpoint_in_the_background_restores_the_one_before(tmp_path, kind, n):
    """The background writer is held inside an fsync of a checkpoint's files (with a checkpoint
    complete before it) and the job is killed there: the half-written checkpoint never counts, the
    restart restores the one before, and the output is exactly-once."""
    out, checkpoints, marker = str(tmp_path / "out"), str(tmp_path / "chk"), str(tmp_path / "held")
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest", PYTHONFAULTHANDLER="1", CRASH_JOB_ASYNC_WRITES="1",
               CRASH_JOB_HOLD_WRITE=marker)
    command = [sys.executable, JOB, kind, out, checkpoints, str(n)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not os.path.exists(marker) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the marker written, the writer asleep in its fsync
    assert process.poll() is None, process.communicate()[1].decode()
    process.send_signal(signal.SIGKILL)
    process.communicate()
    with open(marker) as file:
        complete_when_held = [int(i) for i in file.read().split()]
    storage = CheckpointStorage(checkpoints)
    assert storage.complete_ids() == complete_when_held  # the checkpoint being written never completed
    restarted = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
                               check=False)
    assert restarted.returncode == 0, restarted.stderr.decode()
    assert committed_output(out) == oracle(kind, n)

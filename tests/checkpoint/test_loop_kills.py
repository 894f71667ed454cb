"""Exactly-once in cycles (FLINK-3257) under SIGKILL: a looping job killed while records go round.

The ``loop`` and ``nested`` jobs of :mod:`crash_job` read numbers 1..N from a durable
source, count them per key (state ``from-the-source``), and send each number round a
loop ``rounds(x)`` times (1 to 11; in ``nested`` every round also goes round an inner
loop 1 to 3 times). A keyed function inside the loop decrements the rounds and, when a
number leaves, counts it per key (state ``left-the-loop``); a FileSink writes what leaves.

The child process is killed (SIGKILL) after it completed one or two new checkpoints
(polling its checkpoint directory), at a random delay, and restarted with ``SLIPSTREAM_RESTORE_FROM=latest``
until it finishes. A kill counts only if the checkpoint the restart restores from holds
records in the loop head's feedback log — records that were going round at the cut and
that only the log brings back. At the end:

* the committed sink output equals the oracle exactly: nothing lost, nothing duplicated;
* per key, the source count (state before the loop, in the final checkpoint) equals the
  loop's state count (``left-the-loop``, in the final checkpoint) equals the sink count
  (numbers in the committed output), and these equal the numbers 1..N per key.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from crash_job import KEYS, oracle
from test_kill_recovery import JOB, committed_output

from slipstream.runtime.checkpoint.snapshot import keyed_layers
from slipstream.runtime.checkpoint.storage import CheckpointStorage, VerifiedCheckpoint
from slipstream.runtime.clock import SystemClock
from slipstream.runtime.state import create_keyed_backend


@dataclass
class Kill:
    restored_from: int  # the newest complete checkpoint when the child died: what the restart restores
    in_flight: int  # records in the loop heads' feedback logs of that checkpoint
    source_done: bool  # whether the source had read everything at that checkpoint


def newest_checkpoint(checkpoints: str) -> VerifiedCheckpoint | None:
    storage = CheckpointStorage(checkpoints)
    for _ in range(50):
        try:
            ids = storage.complete_ids()
            return storage.read_verified(storage.path_of(ids[-1]), None) if ids else None
        except Exception:  # noqa: BLE001 - a checkpoint pruned or written under us: look again
            time.sleep(0.005)
    raise AssertionError(f"no readable checkpoint in {checkpoints}")


def in_flight(checkpoint: VerifiedCheckpoint) -> int:
    """Records logged by every loop head's subtasks: what was going round at the checkpoint."""
    total = 0
    for entry in checkpoint.manifest.operators.values():
        if entry.kind == "LoopHeadTransformation":
            for subtask in entry.subtasks:
                if subtask.operator:
                    log = pickle.loads(checkpoint.files[subtask.operator])["feedback_log"]
                    total += sum(len(values) for values, _ in log)
    return total


def source_done(checkpoint: VerifiedCheckpoint) -> bool:
    """Whether the job's "numbers" source had read everything (False for a job without one)."""
    entry = checkpoint.manifest.operators.get("numbers")
    if entry is None:
        return False
    return all(not pickle.loads(checkpoint.files[s.operator])["position"] for s in entry.subtasks if s.operator)


def keyed_counts(checkpoint: VerifiedCheckpoint, uid: str, state: str) -> Counter:
    """Key -> value of the keyed ValueState ``state`` of operator ``uid``, over all its subtasks: each
    subtask's keyed state (every layer) restored into a fresh backend of the kind the job ran on, as a
    restart restores it, whatever that backend's files are."""
    counts: Counter = Counter()
    entry = checkpoint.manifest.operators[uid]
    for subtask in entry.subtasks:
        backend = create_keyed_backend(None, entry.max_parallelism, SystemClock().now_ms)
        try:
            for layer in keyed_layers(subtask, checkpoint.files, checkpoint.path):
                backend.restore(layer)
            for entries in backend.snapshot().get(state, {}).values():
                for key, value in entries:
                    assert key not in counts, f"key {key} in two subtasks of {uid}"
                    counts[key] = value
        finally:
            backend.dispose()
    return counts


def run_with_kills(kind: str, n: int, parallelism: int, workdir: str, rng: random.Random,
                   wanted: int, count_in_flight: Callable[[VerifiedCheckpoint], int] = in_flight,
                   check: Callable[..., None] | None = None,
                   ripe: Callable[[VerifiedCheckpoint | None], bool] | None = None) -> list[Kill]:
    """Run the job, SIGKILLing it after 1-2 new complete checkpoints and a random delay, until
    ``wanted`` kills restored a checkpoint with records in flight (``count_in_flight``), or one
    restored a checkpoint where the source had read everything and nothing went round (no later kill
    could count: where a restart took longer than two checkpoints, the harness killed every restart
    for ever); then let it finish and ``check`` the outcome (by default :func:`check_exactly_once`).
    With ``ripe``, a kill also waits for a newest checkpoint ``ripe`` accepts (the phase the test is
    about has begun), so restarts are not spent before it."""
    out, checkpoints = os.path.join(workdir, "out"), os.path.join(workdir, "chk")
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest", PYTHONFAULTHANDLER="1")
    kills: list[Kill] = []
    while True:
        before = newest_checkpoint(checkpoints) if os.path.isdir(checkpoints) else None
        baseline = before.checkpoint_id if before else 0
        process = subprocess.Popen([sys.executable, JOB, kind, out, checkpoints, str(n), str(parallelism)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        drained = bool(kills) and kills[-1].source_done and kills[-1].in_flight == 0
        if sum(k.in_flight > 0 for k in kills) < wanted and not drained:
            new, seen = rng.randint(1, 2), None
            while process.poll() is None:
                ids = CheckpointStorage(checkpoints).complete_ids() if os.path.isdir(checkpoints) else []
                if len([i for i in ids if i > baseline]) >= new and ids[-1] != seen:
                    seen = ids[-1]
                    if ripe is None or ripe(newest_checkpoint(checkpoints)):
                        break
                time.sleep(0.005)
            time.sleep(rng.uniform(0, 0.08))
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.communicate()
                restored = newest_checkpoint(checkpoints)
                assert restored is not None
                kills.append(Kill(restored.checkpoint_id, count_in_flight(restored), source_done(restored)))
                continue
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()
        (check or check_exactly_once)(kind, n, out, checkpoints, kills)
        return kills


def check_exactly_once(kind: str, n: int, out: str, checkpoints: str, kills: list[Kill]) -> None:
    got, expected = committed_output(out), oracle(kind, n)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"{kind}: {sum(missing.values())} line(s) lost (e.g. {list(missing)[:3]}), "
        f"{sum(extra.values())} duplicated or unexpected (e.g. {list(extra)[:3]}) after kills {kills}")
    final = newest_checkpoint(checkpoints)  # the final checkpoint, taken when every task finished
    assert final is not None and in_flight(final) == 0
    numbers = [int(line.split(",")[1]) for line in got.elements() if line.startswith("r,")]
    assert sorted(numbers) == list(range(1, n + 1))
    per_key = Counter(x % KEYS for x in range(1, n + 1))
    source = keyed_counts(final, "source-count", "from-the-source")
    loop = keyed_counts(final, "loop-count", "left-the-loop")
    sink = Counter(x % KEYS for x in numbers)
    assert source == loop == sink == per_key, (source, loop, sink, per_key)
    assert sum(source.values()) == sum(loop.values()) == sum(sink.values()) == n


@pytest.mark.parametrize("state_backend,kind,n,parallelism,wanted", [
    ("hashmap", "loop", 12_000, 1, 6),
    ("rocksdb", "nested", 6_000, 1, 4),
    ("rocksdb", "loop", 12_000, 2, 4),
], indirect=["state_backend"])
def test_sigkills_while_records_go_round_a_loop_lose_and_duplicate_nothing(tmp_path, kind, n, parallelism,
                                                                           wanted):
    rng = random.Random(f"loop-kills-{kind}-{parallelism}")
    kills: list[Kill] = []
    for rounds in range(6):
        kills += run_with_kills(kind, n, parallelism, str(tmp_path / f"round{rounds}"), rng,
                                wanted - sum(k.in_flight > 0 for k in kills))
        if sum(k.in_flight > 0 for k in kills) >= wanted:
            break
    # Every counted kill restored a checkpoint whose loop head logged records going round: they
    # came back only from the log (kills before and after the source read its last number both
    # occur, as ``Kill.source_done`` shows, but which ones a run gets depends on timing).
    landed = [k for k in kills if k.in_flight > 0]
    assert len(landed) >= wanted, kills

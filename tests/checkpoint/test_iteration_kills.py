"""Exactly-once in FLIP-176 iterations under SIGKILL: a sync iteration killed between epochs.

The ``iteration`` job of :mod:`crash_job` sends numbers 1..N round a bounded iteration,
``rounds(x)`` epochs each. Its listeners keep what they learn in attributes (the numbers
of the current epoch; the running totals) and write one line per epoch and one at the
end through a two-phase-commit FileSink, so a listener call repeated or lost across a
restore shows in the committed output. The child is SIGKILLed after one or two new
checkpoints, at a random delay, and restarted with ``SLIPSTREAM_RESTORE_FROM=latest``; a
kill counts only if the checkpoint it restores holds records in flight inside the
iteration while its epochs run. At the end:

* the committed output equals the oracle exactly: each epoch's line once, with the counts
  and running sums of an uninterrupted run, and the final line once;
* the keyed state inside the body (visits per key) and the listener's attributes in the
  final checkpoint equal what the oracle says.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import numpy as np
from crash_job import KEYS, online_models, oracle, rounds
from test_kill_recovery import committed_output
from test_loop_kills import keyed_counts, newest_checkpoint, run_with_kills

from slipstream.operators.elements import RecordBatch
from slipstream.runtime.checkpoint.iteration_region import REGION_KIND
from slipstream.runtime.checkpoint.snapshot import loads_checkpointed
from slipstream.runtime.checkpoint.storage import VerifiedCheckpoint


def region_states(checkpoint: VerifiedCheckpoint) -> list[dict]:
    """The state of each iteration in the checkpoint."""
    return [loads_checkpointed(checkpoint.files[entry.subtasks[0].operator], checkpoint.files, checkpoint.path)
            for entry in checkpoint.manifest.operators.values() if entry.kind == REGION_KIND]


def region_state(checkpoint: VerifiedCheckpoint) -> dict:
    (state,) = region_states(checkpoint)
    return state


def records_in_flight(checkpoint: VerifiedCheckpoint) -> int:
    """Records waiting in the channels of iterations whose epochs run at the checkpoint."""
    total = 0
    for state in region_states(checkpoint):
        progress = state["coordinator"][0]["progress"]
        if progress["epoch_watermark"] >= 1 and not progress["terminated"]:
            total += sum(len(element) for task in state["tasks"] for channel in task["channels"] if channel
                         for element in channel["elements"] if type(element) is RecordBatch)
    return total


def epochs_running(checkpoint: VerifiedCheckpoint | None) -> bool:
    """Whether the checkpoint holds records in flight inside a running iteration: the sync iteration
    starts its epochs once the source has ended, and a kill before that is not what this module tests."""
    return checkpoint is not None and records_in_flight(checkpoint) > 0


def check_iteration(kind: str, n: int, out: str, checkpoints: str, kills: list) -> None:
    got, expected = committed_output(out), oracle(kind, n)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"{sum(missing.values())} line(s) lost (e.g. {list(missing)[:3]}), {sum(extra.values())} duplicated "
        f"or unexpected (e.g. {list(extra)[:3]}) after kills {kills}")
    final = newest_checkpoint(checkpoints)
    visits = Counter()
    for x in range(1, n + 1):
        visits[x % KEYS] += rounds(x)
    assert keyed_counts(final, "step", "visits") == visits
    state = region_state(final)
    assert state["coordinator"][0]["progress"]["terminated"]
    (epochs,) = [task for task, (uid, _, _) in zip(state["tasks"], state["layout"]) if uid == "epochs"]
    # the listener at the head of the task "epochs"
    attributes = loads_checkpointed(epochs["functions"][0][0], final.files, final.path)
    (final_line,) = [line for line in expected if line.startswith("final,")]
    assert final_line == f"final,{attributes['visits']},{attributes['cumulative']}"


@pytest.mark.parametrize("state_backend,n,parallelism,wanted", [("hashmap", 60_000, 1, 3), ("rocksdb", 60_000, 2, 3)],
                         indirect=["state_backend"])
def test_sigkills_between_epochs_repeat_and_lose_no_listener_call(tmp_path, n, parallelism, wanted):
    rng = random.Random(f"iteration-kills-{parallelism}")
    kills: list = []
    for attempt in range(6):
        kills += run_with_kills("iteration", n, parallelism, str(tmp_path / f"round{attempt}"), rng,
                                wanted - sum(k.in_flight > 0 for k in kills), records_in_flight, check_iteration,
                                epochs_running)
        if sum(k.in_flight > 0 for k in kills) >= wanted:
            break
    assert sum(k.in_flight > 0 for k in kills) >= wanted, kills


def check_online(kind: str, n: int, out: str, checkpoints: str, kills: list) -> None:
    """Every model version committed once, each equal to numpy's within floating-point error."""
    lines = committed_output(out)
    versions = sorted((int(v), [float(w) for w in weights.split(",")])
                      for v, weights in (line.split(";") for line in lines.elements()))
    expected = online_models(n)
    assert [v for v, _ in versions] == list(range(1, len(expected) + 1)), f"after kills {kills}"
    np.testing.assert_allclose(np.array([w for _, w in versions]), np.array(expected), rtol=1e-9, atol=1e-12)


@pytest.mark.one_process("its target (three kills restoring records in flight in six rounds) is reached in one process;"
                         " on workers the checkpoints hold fewer (2 of 3 here)")
@pytest.mark.parametrize("state_backend", ["hashmap"], indirect=True)  # its state is in the functions' attributes
def test_sigkills_while_training_online_commit_each_model_version_once(tmp_path):
    """The offline-then-online example, killed while its unbounded iteration trains on live samples
    (models, samples and partial gradients in flight, the functions' attributes in the checkpoint)."""
    rng = random.Random("online-kills")
    kills: list = []
    for attempt in range(6):
        kills += run_with_kills("online", 5000, 2, str(tmp_path / f"round{attempt}"), rng,
                                3 - sum(k.in_flight > 0 for k in kills), records_in_flight, check_online,
                                epochs_running)
        if sum(k.in_flight > 0 for k in kills) >= 3:
            break
    assert sum(k.in_flight > 0 for k in kills) >= 3, kills

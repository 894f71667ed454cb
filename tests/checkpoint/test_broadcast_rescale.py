"""Broadcast state restored at another parallelism: every new instance gets a copy of the broadcast
state (Flink's rule: new instance ``i`` takes old instance ``i mod n``'s), keyed state and the data
records that waited for the broadcast backlog go by key; the committed output equals the oracle
whether the failure came while the rules were still being read or after."""

from __future__ import annotations

import os

import pytest
from crash_job import build, oracle
from test_kill_recovery import committed_output
from test_rescale import FailAfterCheckpoints

from slipstream.errors import UserFunctionError

N = 6_000


class FailOnLines(FailAfterCheckpoints):
    """Fails as :class:`FailAfterCheckpoints`, counting only the lines written (the job's hook also
    sees the numbers read, long before the rules end)."""

    def __call__(self, value) -> None:
        if isinstance(value, str):
            super().__call__(value)


@pytest.mark.parametrize("old,new", [(1, 3), (3, 1), (2, 4)])
@pytest.mark.parametrize("moment", ["early", "late"])
def test_broadcast_state_restores_at_another_parallelism(tmp_path, old, new, moment):
    root = str(tmp_path)
    out, checkpoints = os.path.join(root, "out"), os.path.join(root, "chk")
    # early: right after the second checkpoint, which holds part of the rules and numbers waiting for
    # the rest (the first one comes before the numbers reach the operator); late: once most lines are
    # written, after the rules ended (the latest checkpoint then is one taken after them when numbers
    # were still being read, as at 1 -> 3, else one taken while they were)
    fail = FailAfterCheckpoints(root, 40, checkpoints=2) if moment == "early" else \
        FailOnLines(root, N * 4 // 5 // old)
    with pytest.raises(UserFunctionError, match="injected failure"):
        build("broadcast", out, checkpoints, N, parallelism=old, records=400, fail=fail).execute("before")
    result = build("broadcast", out, checkpoints, N, parallelism=new, records=400).execute(
        "rescaled", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None
    got, expected = committed_output(out), oracle("broadcast", N)
    assert not expected - got and not got - expected, (
        f"lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}")

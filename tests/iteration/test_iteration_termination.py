"""FLIP-176 termination, against a plain-Python oracle of the epochs a job goes through.

A record ``(v, e)`` holds its epoch ``e`` in the value itself (initial records have
epoch 1; ``Chain`` sends ``(v + 1, e + 1)`` round while ``v < limit``), so the test knows
every record's epoch independently of the runtime. FLIP-176 promises: the last
``on_epoch_watermark_incremented`` call gets the largest epoch of any record ingested; a
bounded iteration ends once its inputs are consumed and EITHER a round saw no record on
the termination-criteria stream OR no feedback record was seen between two consecutive
epoch watermarks. Async bodies (feedback sent from ``process_element``) included, at
parallelism 1, 2 and 4, over many scheduler seeds.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from slipstream.datastream import OutputTag, ProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    IterationListener,
    iterate_bounded_streams_until_termination,
)
from slipstream.datastream.transformations import HeadRole
from slipstream.operators.spill_file import SpillFile
from slipstream.runtime.termination import HeadCommand, IterationHeadControl

SEEN = OutputTag("seen")          # what each subtask saw: records, epoch watermarks, the end
CRITERIA = OutputTag("criteria")

ISSUE_INITIAL = [(3, 1), (2, 1), (2, 1), (5, 1), (5, 1), (3, 1)]


class Chain(ProcessFunction, IterationListener):
    """Sends ``(v + 1, e + 1)`` round while ``v < limit``, at once (async) or from the listener
    (sync); emits a criteria record for every epoch ``< criteria_until`` (per record, or per
    epoch watermark: ``criteria_from``), ``criteria_until`` None meaning for ever."""

    def __init__(self, limit: int, sync: bool, criteria_from: str | None, criteria_until: int | None) -> None:
        self.limit, self.sync = limit, sync
        self.criteria_from, self.criteria_until = criteria_from, criteria_until

    def open(self, runtime_context: Any) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.watermark = 0
        self.held: list[tuple[int, int]] = []

    def _criteria(self, epoch: int, source: str, context: Any) -> None:
        if self.criteria_from == source and (self.criteria_until is None or epoch < self.criteria_until):
            context.output(CRITERIA, epoch)

    def process_element(self, value: tuple[int, int], ctx: Any) -> Any:
        v, e = value
        ctx.output(SEEN, ("record", self.subtask, value, self.watermark))
        self._criteria(e, "records", ctx)
        if v >= self.limit:
            return []
        if self.sync:
            self.held.append((v + 1, e + 1))
            return []
        return [(v + 1, e + 1)]

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        self.watermark = epoch_watermark
        context.output(SEEN, ("epoch", self.subtask, epoch_watermark))
        self._criteria(epoch_watermark, "listener", context)
        for record in self.held:
            collector.collect(record)
        self.held = []

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        context.output(SEEN, ("terminated", self.subtask))


def oracle_records(initial: list[tuple[int, int]], limit: int) -> Counter:
    """Every record the body processes when nothing stops it early: each chain to ``limit``."""
    records: Counter = Counter()
    for v, e in initial:
        records[(v, e)] += 1
        while v < limit:
            v, e = v + 1, e + 1
            records[(v, e)] += 1
    return records


def oracle_last_epoch(records: Counter, criteria_until: int | None) -> int:
    """The round the iteration ends after: the first with no feedback (the largest epoch of any
    record), or the first with no criteria record, whichever comes first."""
    last_with_feedback = max(e for _, e in records)
    return last_with_feedback if criteria_until is None else min(last_with_feedback, criteria_until)


def run(initial: list[tuple[int, int]], limit: int, parallelism: int, seed: int, *, sync: bool = False,
        criteria_from: str | None = None, criteria_until: int | None = None, feedback_budget: int = 100_000,
        spill_dir: str | None = None, workers: int = 1) -> list[tuple]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, batch_size=2, channel_capacity=2, quantum=2, spill_dir=spill_dir,
                  workers=workers)
    env.runtime_options.channel_memory_budget = feedback_budget

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        step = variables.get(0).rebalance().process(Chain(limit, sync, criteria_from, criteria_until))
        criteria = step.get_side_output(CRITERIA) if criteria_from is not None else None
        return IterationBodyResult([step], [step.get_side_output(SEEN)], criteria)

    outputs = iterate_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection(initial).set_parallelism(parallelism)), DataStreamList.of(), body)
    return list(outputs.get(0).execute_and_collect())


def check(seen: list[tuple], initial: list[tuple[int, int]], limit: int, parallelism: int,
          criteria_until: int | None = None) -> None:
    """The run went through exactly the oracle's epochs, at every subtask."""
    every = oracle_records(initial, limit)
    last = oracle_last_epoch(every, criteria_until)
    records = [(s[2], s[3]) for s in seen if s[0] == "record"]
    assert Counter(value for value, _ in records) == Counter({r: n for r, n in every.items() if r[1] <= last})
    # a record of epoch e arrives after epoch watermark e - 1 and before e: never ahead of its round
    assert all(watermark == value[1] - 1 for value, watermark in records), records
    for subtask in range(parallelism):
        assert [s[2] for s in seen if s[:2] == ("epoch", subtask)] == list(range(1, last + 1)), subtask
        assert seen.count(("terminated", subtask)) == 1


# -- an async body reaches the epoch watermark of its last records -----------------------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", range(16))
def test_an_async_body_ends_only_after_the_watermark_of_its_largest_epoch(parallelism: int, seed: int) -> None:
    """The issue's job: records of epoch 4 exist, so the last epoch watermark is 4 — at every seed."""
    assert oracle_last_epoch(oracle_records(ISSUE_INITIAL, 5), None) == 4
    check(run(ISSUE_INITIAL, 5, parallelism, seed), ISSUE_INITIAL, 5, parallelism)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(initial=[v for v, _ in ISSUE_INITIAL], limit=5, parallelism=1, seed=3, sync=False)
@given(initial=st.lists(st.integers(0, 6), min_size=1, max_size=8), limit=st.integers(0, 6),
       parallelism=st.sampled_from([1, 2, 4]), seed=st.integers(0, 10_000), sync=st.booleans())
def test_the_last_epoch_watermark_is_the_largest_epoch_of_any_record(initial: list[int], limit: int,
                                                                     parallelism: int, seed: int,
                                                                     sync: bool) -> None:
    records = [(v, 1) for v in initial]
    check(run(records, limit, parallelism, seed, sync=sync), records, limit, parallelism)



# -- the criteria stream's rule and the feedback rule: either ends the iteration --------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("criteria_from", ["listener", "records"])
@pytest.mark.parametrize("sync", [False, True])
def test_feedback_stopping_ends_an_iteration_whose_criteria_stream_keeps_emitting(parallelism: int, seed: int,
                                                                                 criteria_from: str,
                                                                                 sync: bool) -> None:
    """Criteria records come until round 9, feedback stops in round 4: it ends at epoch 4."""
    seen = run(ISSUE_INITIAL, 5, parallelism, seed, sync=sync, criteria_from=criteria_from, criteria_until=9)
    check(seen, ISSUE_INITIAL, 5, parallelism, criteria_until=9)


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_an_iteration_with_nothing_going_round_ends_after_round_one_despite_its_criteria(parallelism: int,
                                                                                        seed: int) -> None:
    initial = [(7, 1), (5, 1), (9, 1)]
    seen = run(initial, 5, parallelism, seed, criteria_from="listener", criteria_until=100)
    check(seen, initial, 5, parallelism, criteria_until=100)
    assert [s for s in seen if s[:2] == ("epoch", 0)] == [("epoch", 0, 1)]


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("criteria_from", ["listener", "records"])
@pytest.mark.parametrize("sync", [False, True])
def test_an_empty_criteria_stream_ends_an_iteration_whose_feedback_goes_on(parallelism: int, seed: int,
                                                                          criteria_from: str, sync: bool) -> None:
    """Feedback would go on to epoch 20; the criteria stream is empty in round 3: it ends at 3."""
    initial = [(0, 1), (2, 1), (19, 1)]
    seen = run(initial, 19, parallelism, seed, sync=sync, criteria_from=criteria_from, criteria_until=3)
    check(seen, initial, 19, parallelism, criteria_until=3)
    assert max(s[2] for s in seen if s[0] == "epoch") == 3


@pytest.mark.parametrize("initial,limit,criteria_from,criteria_until,sync", [
    (ISSUE_INITIAL, 5, None, None, False),
    (ISSUE_INITIAL, 5, "listener", 9, True),
    ([(0, 1), (2, 1), (19, 1)], 19, "records", 3, False),
])
@pytest.mark.parametrize("parallelism", [2, 4])
def test_the_termination_rules_hold_on_two_worker_processes(initial: list[tuple[int, int]], limit: int,
                                                            criteria_from: str | None, criteria_until: int | None,
                                                            sync: bool, parallelism: int) -> None:
    """The iteration placed whole on one of two workers, its inputs and exits on both: it goes
    through exactly the oracle's epochs, at every subtask, and ends by itself, as in one process."""
    seen = run(initial, limit, parallelism, 1, sync=sync, criteria_from=criteria_from,
               criteria_until=criteria_until, workers=2)
    check(seen, initial, limit, parallelism, criteria_until=criteria_until)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.lists(st.integers(0, 6), min_size=1, max_size=6), limit=st.integers(0, 6),
       criteria_from=st.sampled_from([None, "listener", "records"]),
       criteria_until=st.integers(1, 9), parallelism=st.sampled_from([1, 2, 4]),
       seed=st.integers(0, 10_000), sync=st.booleans())
def test_an_iteration_ends_at_the_first_round_without_feedback_or_without_criteria(
        initial: list[int], limit: int, criteria_from: str | None, criteria_until: int | None, parallelism: int,
        seed: int, sync: bool) -> None:
    records = [(v, 1) for v in initial]
    seen = run(records, limit, parallelism, seed, sync=sync, criteria_from=criteria_from,
               criteria_until=criteria_until)
    check(seen, records, limit, parallelism, criteria_until=criteria_until if criteria_from else None)

def test_feedback_waiting_for_its_round_spills_past_the_channel_budget(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Any) -> None:
    """What waits at the head for its round is bounded in memory like a feedback channel: past
    ``channel_memory_budget`` records it goes to disk, comes back whole, and leaves no file."""
    spilled: Counter = Counter()

    def append(file: SpillFile, element: Any, original: Any = SpillFile.append) -> None:
        spilled[file.owner.startswith("the feedback held")] += 1
        original(file, element)

    monkeypatch.setattr(SpillFile, "append", append)
    initial = [(v % 4, 1) for v in range(200)]
    check(run(initial, 5, 2, 7, feedback_budget=3, spill_dir=str(tmp_path)), initial, 5, 2)
    assert spilled[True] > 0
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("criteria_from", ["listener", "records"])
def test_a_criteria_head_whose_feedback_ended_before_its_termination_ends(
        monkeypatch: pytest.MonkeyPatch, parallelism: int, criteria_from: str) -> None:
    """Once the other heads terminated, the body may end and the criteria stream's end of input
    reach the criteria head before the head ran its own termination (the order a restore can
    bring back): the head then ends at once instead of waiting for an end it already read."""
    run_commands, has_commands = IterationHeadControl.run_commands, IterationHeadControl.has_commands

    def postponed(control: IterationHeadControl) -> bool:
        return (control.role is HeadRole.CRITERIA and not all(c.ended for c in control._feedback.channels)
                and any(command is HeadCommand.TERMINATE for command, _ in control._commands))

    monkeypatch.setattr(IterationHeadControl, "has_commands", lambda c: not postponed(c) and has_commands(c))
    monkeypatch.setattr(IterationHeadControl, "run_commands", lambda c: None if postponed(c) else run_commands(c))
    seen = run(ISSUE_INITIAL, 5, parallelism, 3, criteria_from=criteria_from, criteria_until=3)
    check(seen, ISSUE_INITIAL, 5, parallelism, criteria_until=3)

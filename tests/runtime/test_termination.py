"""The FLIP-15 termination protocol: its parts on hand-made channels, and runs checked turn by turn.

The instrumented runs step the scheduler one turn at a time and, whenever a loop head
ends its scope, assert that no record is left in any channel of that scope — the
"never earlier" half of "the job ends exactly when no record is pending anywhere".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from slipstream.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.scope import ROOT_SCOPE, StreamScope
from slipstream.errors import SlipstreamError
from slipstream.operators.elements import (
    RecordBatch,
    TerminationAttempt,
    TerminationStatus,
)
from slipstream.runtime.channels import SpillingChannel
from slipstream.runtime.executor import JobRun
from slipstream.runtime.job_graph import EdgeKind
from slipstream.runtime.loop_task import LoopHeadTask
from slipstream.runtime.planner import plan_job
from slipstream.runtime.task import StreamTask
from slipstream.runtime.termination import (
    BatonAligner,
    HeadControl,
    TaskTermination,
    TerminationCoordinator,
    lies_within,
)
from slipstream.testing import ManualClock

IDLE, BUSY = TerminationStatus.IDLE, TerminationStatus.BUSY


@dataclass(eq=False)
class FakeChannel:
    ended: bool = False


def baton(scope: StreamScope, attempt: int, status: TerminationStatus = IDLE, completed: int | None = None,
          visited: int | None = None) -> TerminationAttempt:
    level = scope.get_level()
    return TerminationAttempt(scope, attempt, level if visited is None else visited,
                              level - 1 if completed is None else completed, status)


# -- the baton ---------------------------------------------------------------------------------------
def test_a_baton_is_typed_and_knows_whether_it_announces_completion() -> None:
    scope = ROOT_SCOPE.nest()
    attempt = baton(scope, 1)
    assert attempt.last_completed_level == 0 and not attempt.is_completion
    assert baton(scope, 1, completed=1).is_completion
    forwarded = attempt.visited(2, busy=True)
    assert forwarded.status is BUSY and forwarded.last_visited_level == 2 and forwarded.attempt_id == 1
    assert forwarded.visited(2, busy=False).status is BUSY       # once BUSY, it stays BUSY
    assert attempt.visited(1, busy=False) is attempt


def test_lies_within_means_the_scope_or_a_scope_nested_in_it() -> None:
    outer = ROOT_SCOPE.nest()
    inner = outer.nest()
    assert lies_within(outer, outer) and lies_within(inner, outer)
    assert not lies_within(ROOT_SCOPE, outer) and not lies_within(outer, inner)


# -- alignment ---------------------------------------------------------------------------------------
def test_a_baton_completes_once_every_channel_delivered_it_or_ended() -> None:
    a, b, c = FakeChannel(), FakeChannel(), FakeChannel()
    aligner = BatonAligner([a, b, c])
    scope = ROOT_SCOPE.nest()
    assert aligner.deliver(a, baton(scope, 1)) is None
    assert aligner.deliver(b, baton(scope, 1, BUSY)) is None
    c.ended = True
    [done] = aligner.channel_ended()
    assert done.attempt_id == 1 and done.status is BUSY and len(aligner) == 0


def test_batons_of_other_scopes_attempts_and_completions_align_apart() -> None:
    a, b = FakeChannel(), FakeChannel()
    aligner = BatonAligner([a, b])
    outer = ROOT_SCOPE.nest()
    inner = outer.nest()
    assert aligner.deliver(a, baton(outer, 1)) is None
    assert aligner.deliver(a, baton(outer, 2)) is None
    assert aligner.deliver(a, baton(inner, 1)) is None
    assert aligner.deliver(a, baton(outer, 2, completed=1)) is None
    assert aligner.deliver(b, baton(outer, 1)).attempt_id == 1
    assert aligner.deliver(b, baton(inner, 1)).scope == inner
    done = aligner.deliver(b, baton(outer, 2, completed=1))
    assert done.is_completion and len(aligner) == 1


def test_a_task_adds_its_status_and_forwards_on_every_output() -> None:
    scope = ROOT_SCOPE.nest()
    sent: list[TerminationAttempt] = []
    a, b = FakeChannel(), FakeChannel()
    busy = {"now": False}
    task = TaskTermination(scope, [a, b], sent.append, lambda: busy["now"], lambda: False)
    task.on_attempt(a, baton(scope, 1))
    assert not sent
    task.on_attempt(b, baton(scope, 1))
    assert sent == [baton(scope, 1)]
    busy["now"] = True
    task.on_attempt(a, baton(scope, 2))
    task.on_attempt(b, baton(scope, 2))
    assert sent[-1].status is BUSY


def test_a_task_outside_the_batons_scope_drops_it() -> None:
    """A loop exit lies in the enclosing scope: the baton has done its work there."""
    sent: list[TerminationAttempt] = []
    channel = FakeChannel()
    exit_task = TaskTermination(ROOT_SCOPE, [channel], sent.append, lambda: False, lambda: False)
    exit_task.on_attempt(channel, baton(ROOT_SCOPE.nest(), 1))
    assert not sent


def test_a_finished_task_forwards_nothing() -> None:
    scope = ROOT_SCOPE.nest()
    sent: list[TerminationAttempt] = []
    a, b = FakeChannel(), FakeChannel()
    task = TaskTermination(scope, [a, b], sent.append, lambda: False, lambda: True)
    task.on_attempt(a, baton(scope, 1))
    b.ended = True
    task.on_channel_ended(b)
    assert not sent


# -- heads and the coordinator -----------------------------------------------------------------------
class Head:
    """A head subtask on fake channels: what it broadcast, whether it terminated."""

    def __init__(self, coordinator: TerminationCoordinator, scope: StreamScope, index: int = 0,
                 busy: bool = False) -> None:
        self.regular, self.feedback = FakeChannel(), FakeChannel()
        self.sent: list[TerminationAttempt] = []
        self.ended = False
        self.busy = busy
        self.control = HeadControl("head", index, scope, [self.regular], [self.feedback], coordinator,
                                   self.sent.append, lambda: self.busy, self._terminate)

    def _terminate(self) -> None:
        self.ended = True

    def end_input(self) -> None:
        self.regular.ended = True
        self.control.on_channel_ended(self.regular)

    def turn(self) -> None:
        self.control.run_commands()

    def back(self, b: TerminationAttempt) -> None:
        self.control.on_attempt(self.feedback, b)


def test_attempts_start_when_every_head_subtask_ended_its_input() -> None:
    coordinator = TerminationCoordinator()
    scope = ROOT_SCOPE.nest()
    h0, h1 = Head(coordinator, scope, 0), Head(coordinator, scope, 1)
    h0.end_input()
    assert not h0.control.has_commands()
    h1.end_input()
    assert h0.control.has_commands() and h1.control.has_commands()
    h0.turn()
    h1.turn()
    assert h0.sent == h1.sent == [baton(scope, 1)]


def test_records_coming_round_during_an_attempt_make_it_retry_with_a_higher_id() -> None:
    coordinator = TerminationCoordinator()
    scope = ROOT_SCOPE.nest()
    h0, h1 = Head(coordinator, scope, 0), Head(coordinator, scope, 1)
    for head in (h0, h1):
        head.end_input()
    for head in (h0, h1):
        head.turn()
    h0.control.on_feedback_records(3)
    h0.back(baton(scope, 1))
    assert not h1.control.has_commands()           # waits for every subtask's report
    h1.back(baton(scope, 1))
    for head in (h0, h1):
        head.turn()
        assert head.sent[-1] == baton(scope, 2) and not head.ended
    for head in (h0, h1):
        head.back(baton(scope, 2))
    for head in (h0, h1):
        head.turn()
        assert head.ended and head.sent[-1] == baton(scope, 2, completed=1)
    assert [(r.attempt_id, r.clean, r.feedback_records) for r in coordinator.history] == [(1, False, 3), (2, True, 0)]
    assert coordinator.completed == [scope]


def test_a_busy_status_makes_the_attempt_retry() -> None:
    coordinator = TerminationCoordinator()
    scope = ROOT_SCOPE.nest()
    head = Head(coordinator, scope)
    head.end_input()
    head.turn()
    head.back(baton(scope, 1, BUSY))
    head.turn()
    assert head.sent[-1].attempt_id == 2 and not head.ended


def test_a_busy_head_sends_a_busy_baton() -> None:
    coordinator = TerminationCoordinator()
    head = Head(coordinator, ROOT_SCOPE.nest(), busy=True)
    head.end_input()
    head.turn()
    assert head.sent[-1].status is BUSY


def test_records_before_the_attempt_do_not_count() -> None:
    coordinator = TerminationCoordinator()
    scope = ROOT_SCOPE.nest()
    head = Head(coordinator, scope)
    head.control.on_feedback_records(10)
    head.end_input()
    head.turn()
    head.back(baton(scope, 1))
    head.turn()
    assert head.ended


def test_a_nested_head_takes_the_outer_baton_round_its_loop_and_reports() -> None:
    coordinator = TerminationCoordinator()
    outer = ROOT_SCOPE.nest()
    inner = outer.nest()
    top, nested = Head(coordinator, outer), Head(coordinator, inner)
    assert len(coordinator.heads_within(outer)) == 2 and len(coordinator.heads_within(inner)) == 1
    top.end_input()
    top.turn()
    nested.control.on_attempt(nested.regular, top.sent[-1])
    assert nested.sent[-1] == baton(outer, 1, visited=2)            # forwarded into the inner body
    nested.control.on_feedback_records(1)                           # the inner loop is still busy
    nested.back(baton(outer, 1, visited=2))
    top.back(baton(outer, 1))
    top.turn()
    assert top.sent[-1] == baton(outer, 2)                          # the outer attempt failed
    nested.control.on_attempt(nested.regular, top.sent[-1])
    nested.back(baton(outer, 2, visited=2))
    top.back(baton(outer, 2))
    top.turn()
    assert top.ended and top.sent[-1].is_completion
    # outermost decision first: the completion reaches the nested head ahead of its end of input
    nested.control.on_attempt(nested.regular, top.sent[-1])
    assert nested.control.enclosing_complete and nested.sent[-1].is_completion
    nested.end_input()
    nested.turn()
    assert nested.ended and coordinator.attempts(inner) == 0        # no attempt of its own needed


def test_a_nested_head_whose_input_ends_without_a_completion_runs_its_own_attempts() -> None:
    coordinator = TerminationCoordinator()
    inner = ROOT_SCOPE.nest().nest()
    nested = Head(coordinator, inner)
    nested.end_input()
    nested.turn()
    assert nested.sent == [baton(inner, 1)]
    nested.back(baton(inner, 1))
    nested.turn()
    assert nested.ended


def test_records_coming_back_after_the_end_are_an_error_not_a_loss() -> None:
    coordinator = TerminationCoordinator()
    scope = ROOT_SCOPE.nest()
    head = Head(coordinator, scope)
    head.end_input()
    head.turn()
    head.back(baton(scope, 1))
    head.turn()
    head.control.on_feedback_records(0)
    with pytest.raises(SlipstreamError, match="1 record\\(s\\) came back through the feedback edge after the "
                                              "loop had ended"):
        head.control.on_feedback_records(1)


def test_a_baton_that_was_never_sent_is_a_protocol_error() -> None:
    coordinator = TerminationCoordinator()
    scope = ROOT_SCOPE.nest()
    head = Head(coordinator, scope)
    with pytest.raises(SlipstreamError, match="out of step"):
        head.back(baton(scope, 7))


# -- instrumented runs -------------------------------------------------------------------------------
def _countdown(numbers):  # type: ignore[no-untyped-def]
    stepped = numbers.map(lambda r: (r[0], r[1] - 1) + r[2:])
    return stepped.filter(lambda r: r[1] > 0), stepped.filter(lambda r: r[1] <= 0)


def _region_records(run: JobRun, scope: StreamScope, head: StreamTask) -> int:
    """Records queued on any channel read by a task of ``scope`` (or of a loop nested in it) from
    which ``head`` can be reached: records that may still come round. One on its way to the loop's
    exit (past its last feedback branch) is leaving, and may still be queued when the loop ends."""
    readers = {id(input_channel.channel): task for task in run.tasks for input_channel in task.inputs}
    reaches_head: set[int] = set()
    frontier = [head]
    while frontier:  # walk upstream from the head, within the scope
        consumer = frontier.pop()
        for task in run.tasks:
            if id(task) not in reaches_head and lies_within(task.head.transformation.scope, scope) and any(
                    readers.get(id(channel)) is consumer for writer in task.writers for channel in writer.channels):
                reaches_head.add(id(task))
                frontier.append(task)
    count = 0
    for task in run.tasks:
        if id(task) not in reaches_head:
            continue
        for input_channel in task.inputs:
            channel = input_channel.channel
            assert len(channel) == len(channel.queue), "test assumes nothing spilled"
            count += sum(len(e) for e in channel.queue if type(e) is RecordBatch)
    return count


def run_checked(env: StreamExecutionEnvironment) -> tuple[JobRun, list[Any]]:
    """Run turn by turn; whenever a head ends its scope, its scope must hold no record."""
    out: list[Any] = []
    run = JobRun(spec := env._take_job("checked"), plan_job(spec))
    heads = [task for task in run.tasks if isinstance(task, LoopHeadTask)]
    ended: set[int] = set()
    run.open()
    try:
        while run.scheduler.run_turn():
            for head in heads:
                if head.scope_terminated and id(head) not in ended:
                    ended.add(id(head))
                    assert _region_records(run, head.control.scope, head) == 0, f"{head} ended with records inside"
    finally:
        run.close_quietly()
    assert len(ended) == len(heads)
    return run, out


# the jobs below (the env fixture's): streaming, in small batches through short channels
pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING),
              pytest.mark.configure(batch_size=2, channel_capacity=2, quantum=2)]


@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(*range(4))
def test_nested_loops_end_with_nothing_inside(env: StreamExecutionEnvironment) -> None:
    got: list[Any] = []

    def inner(numbers):  # type: ignore[no-untyped-def]
        return _countdown(numbers.rebalance())

    def outer(records):  # type: ignore[no-untyped-def]
        once_round = records.map(lambda r: (r[0], r[0] % 3 + 1, r[1])).iterate(inner)
        stepped = once_round.map(lambda r: (r[0], r[2] - 1))
        return stepped.filter(lambda r: r[1] > 0).key_by(lambda r: r[0]), stepped.filter(lambda r: r[1] <= 0)

    env.from_collection([(i, i % 5 + 1) for i in range(40)]).iterate(outer).add_sink(got.append)
    run, _ = run_checked(env)
    assert sorted(r[0] for r in got) == list(range(40))
    assert run.termination.completed and all(r.attempt_id >= 1 for r in run.termination.history)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(5)
def test_loops_in_sequence_and_side_by_side_end_with_nothing_inside(env: StreamExecutionEnvironment) -> None:
    got: list[Any] = []
    source = env.from_collection([(i, i % 4 + 1) for i in range(30)])
    first = source.iterate(_countdown).map(lambda r: (r[0], r[0] % 3 + 1)).iterate(_countdown)
    beside = source.map(lambda r: (r[0] + 100, r[1])).iterate(_countdown)
    first.union(beside).add_sink(got.append)
    run, _ = run_checked(env)
    assert sorted(r[0] for r in got) == list(range(30)) + list(range(100, 130))
    assert len(run.termination.completed) == 3


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_loop_over_an_empty_input_ends_after_one_attempt(env: StreamExecutionEnvironment) -> None:
    got: list[Any] = []
    env.from_collection([]).iterate(_countdown).add_sink(got.append)
    run, _ = run_checked(env)
    assert got == [] and [(r.attempt_id, r.clean) for r in run.termination.history] == [(1, True)]


@pytest.mark.seeds(*range(6))
@pytest.mark.parallelisms(2)
def test_no_deadlock_is_reported_while_an_attempt_is_in_flight(env: StreamExecutionEnvironment) -> None:
    """With a manual clock the scheduler never waits for time: every idle moment would be a deadlock."""
    env.configure(clock=ManualClock())
    got: list[Any] = []
    env.from_collection([(i, i % 7) for i in range(25)]).iterate(
        lambda numbers: numbers.iterate(_countdown) and _countdown(numbers)).add_sink(got.append)
    env.execute()
    assert len(got) == 25


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(3)
def test_a_loop_never_deadlocks_on_backpressure_and_its_feedback_spills(env: StreamExecutionEnvironment) -> None:
    """Every record doubles on each round: far more goes round than forward channels hold."""
    env.configure(batch_size=1, channel_capacity=1, quantum=1)
    env.runtime_options.channel_memory_budget = 4
    got: list[Any] = []

    def doubling(numbers):  # type: ignore[no-untyped-def]
        children = numbers.flat_map(lambda r: [(r[0], r[1] - 1)] * 2 if r[1] > 0 else [r])
        return children.filter(lambda r: r[1] > 0), children.filter(lambda r: r[1] <= 0)

    env.from_collection([(i, 6) for i in range(4)]).iterate(doubling).add_sink(got.append)
    run = JobRun(spec := env._take_job("spill"), plan_job(spec))
    feedback = [channel for channel in run.channels if isinstance(channel, SpillingChannel)]
    writers = [w for task in run.tasks for w in task.writers if w.edge.kind is EdgeKind.FEEDBACK]
    run.open()
    while run.scheduler.run_turn():
        assert all(writer.has_capacity() for writer in writers)   # a feedback edge never pushes back
    spilled = sum(c.spilled_bytes for c in feedback)
    run.close()
    assert len(got) == 4 * 2 ** 6
    assert spilled > 0


class DelayedEcho(KeyedProcessFunction):
    """Holds each record until a processing-time timer fires, then sends it round once more.

    The delay is long enough that a loaded machine still tries to end the loop while it waits.
    """

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        if value[1] > 0:
            ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 250)
            return [(value[0], -1)]   # leaves now; the timer sends one more record round later
        return [value]

    def on_timer(self, timestamp, ctx):  # type: ignore[no-untyped-def]
        yield (ctx.get_current_key(), 1)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_task_holding_timers_is_busy_so_the_loop_waits_for_them(env: StreamExecutionEnvironment) -> None:
    got: list[Any] = []

    def body(records):  # type: ignore[no-untyped-def]
        echoed = records.key_by(lambda r: r[0]).process(DelayedEcho())
        return echoed.filter(lambda r: r[1] > 0).map(lambda r: (r[0], 0)), echoed.filter(lambda r: r[1] <= 0)

    env.from_collection([(i, 1) for i in range(3)]).iterate(body).add_sink(got.append)
    run, _ = run_checked(env)
    assert sorted(got) == sorted([(i, -1) for i in range(3)] + [(i, 0) for i in range(3)])
    assert any(not r.clean and r.feedback_records == 0 for r in run.termination.history)  # BUSY-only failures

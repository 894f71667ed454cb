"""Loop termination without timeouts: the FLIP-15 ``TerminationAttempt`` protocol.

This module knows scopes, channels, batons and head subtasks — never operators.
Three parts:

* :class:`BatonAligner` — a baton is complete at a task once every channel of a group
  delivered it (or ended). Aligning a loop's baton does not block channels: records
  behind it on a channel that already delivered it are processed, which is safe (see
  below). An iteration's epoch baton does hold such a channel until the epoch is aligned
  (see :class:`EpochProgress`).
* :class:`TaskTermination` — what every task in a loop does: align a baton on all its
  inputs, add its status (BUSY while it holds processing-time timers, i.e. may emit
  without new input) and forward it on all its outputs — if the task lies inside the
  baton's scope. A loop exit lies outside its loop's scope, so batons stop there.
* :class:`HeadControl` (one per loop-head subtask) and :class:`TerminationCoordinator`
  (one per job) — the heads run the attempts, the coordinator joins what the parallel
  head subtasks report and decides.

The protocol, for a loop scope S whose head has regular inputs (from S's parent scope)
and a feedback input:

1. **Attempting phase.** A head subtask whose regular inputs have all ended tells the
   coordinator it is ready. For a top-level loop this is when the sources (or loops)
   feeding it finished; once every subtask of S's head is ready, the coordinator starts
   attempt 1.
2. **Speculative attempt.** Each head subtask of S sends the baton ``(S, k)`` down its
   outputs, after everything it emitted so far, and counts the records that come back
   through its feedback edge from then on. Plain tasks align and forward the baton,
   adding their status. A nested loop's head inside S ("an operator with a feedback
   input") associates the baton with the outermost unterminated scope, S: it aligns
   the baton on its regular inputs, forwards it into its own body, counts its own
   feedback records until the baton comes back through its feedback edge, and reports
   too. So a baton is aligned wherever a path leaves a loop and re-enters the scope
   around it.
3. **Decision.** When every head in S (S's own subtasks and every nested head) has
   reported attempt k, the coordinator decides: if no head saw a feedback record while
   the baton was in its loop, and every status was IDLE, S is complete; otherwise it
   starts attempt k + 1 at once.
4. **Termination, outermost decision first.** Each head subtask of S sends the
   completion baton ``(S, k, last_completed_level = level(S))`` and then its end of
   input. End of input flows through the body and out of the exit; nested heads got
   the completion baton ahead of their end of input, so they end at once, no attempt
   of their own needed. The work itself is done innermost first: a head reads its
   feedback before its input, and an attempt of S cannot succeed while a loop inside
   it still has records going round.

**Loops inside iterations.** An epoch baton of an iteration I that reaches a loop L nested in
I is not taken round L at once: L's head subtasks hold it, and once all hold epoch e the
coordinator runs attempts of L, as in step 2, until one comes back clean — nothing went
round L while it was inside, and no task was busy. Then every head subtask of L sends the
held baton into L's body, and through L's exit it goes on into I: so an operator after L
reaches epoch watermark e only after every record of epoch e has left L, however often
it went round. (Records of the next epoch entering L meanwhile only make an attempt fail
and the check repeat.) Epochs held at L are checked in order, one at a time.

Why a successful attempt leaves no record anywhere in S: channels are FIFO and every
task forwards a baton only after every input delivered it, and emits on every output
the baton after whatever it emitted before. A record *ahead* of ``(S, k)`` anywhere in
S therefore stays ahead of it on every path, so if it would go round it reaches some
head's feedback before that head's baton returns, and is counted. A record *behind*
``(S, k)`` was emitted after the baton passed its producer, so it descends from
something the producer received after the baton — by induction, from a record some
head received through its feedback between sending the baton and getting it back
(counted), or from a timer (its task was BUSY). Sources cannot be behind it: a loop's
only entry from outside is its head, whose regular inputs had ended.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from slipstream.datastream.scope import StreamScope
from slipstream.datastream.transformations import HeadRole
from slipstream.errors import SlipstreamError
from slipstream.operators.elements import TerminationAttempt, TerminationStatus

Broadcast = Callable[[TerminationAttempt], None]
"""Sends a baton on every output of a task, after what the task emitted before."""

ScopeMap = Callable[[StreamScope], StreamScope]
"""A scope of a checkpointed run -> the same scope in this run (scopes are numbered as a job is built)."""


class HeadCommand(Enum):
    """What the coordinator tells a head subtask to do on its next turn. The values are what a
    checkpoint of an iteration holds for a queued command (see :meth:`HeadControl.snapshot`)."""

    INJECT = "inject"  # send the baton of a new attempt (a loop) or round (an iteration)
    RELEASE = "release"  # send the oldest epoch held at this loop on, into its body
    TERMINATE = "terminate"  # end the scope: completion baton, then end of input


class RoundDecision(Enum):
    """What an iteration does after a round; the values are what its checkpoints hold."""

    TERMINATE = "terminate"
    NEXT = "next"
    PARK = "park"  # nothing happened while an input is open: the next record starts the next round


def lies_within(task_scope: StreamScope, scope: StreamScope) -> bool:
    """Whether a task of ``task_scope`` is part of loop ``scope`` (its scope, or one nested in it)."""
    return task_scope == scope or task_scope.is_inner_of(scope)


@dataclass
class _Alignment:
    delivered: set[int] = field(default_factory=set)
    status: TerminationStatus = TerminationStatus.IDLE
    last_visited_level: int = 0


class BatonAligner:
    """Aligns batons over a group of channels.

    A baton is complete once every channel of the group delivered it or ended; the
    completed baton carries the BUSY status if any copy did. Several batons (of several
    scopes, or successive attempts still in flight on some paths) align independently.
    """

    def __init__(self, channels: Iterable[Any], holds: Callable[[TerminationAttempt], bool] = lambda baton: False
                 ) -> None:
        self.channels = list(channels)
        self._holds = holds
        self._pending: dict[tuple[StreamScope, int, int], _Alignment] = {}

    def deliver(self, channel: Any, baton: TerminationAttempt) -> TerminationAttempt | None:
        key = (baton.scope, baton.attempt_id, baton.last_completed_level)
        alignment = self._pending.get(key)
        if alignment is None:
            alignment = self._pending[key] = _Alignment()
        alignment.delivered.add(id(channel))
        if not baton.is_completion and self._holds(baton):
            channel.held = True  # what follows on this channel is of a later epoch: it waits (see "Epochs")
        if baton.status is TerminationStatus.BUSY:
            alignment.status = TerminationStatus.BUSY
        alignment.last_visited_level = max(alignment.last_visited_level, baton.last_visited_level)
        return self._complete(key, alignment)

    def release(self) -> None:
        """The epoch the channels held for is aligned (or, at a loop, gone on): read them again.
        A channel holds for one epoch at a time, so every held channel held for that one."""
        for channel in self.channels:
            channel.held = False

    def channel_ended(self) -> list[TerminationAttempt]:
        """Batons that an ended channel completed (it will deliver none)."""
        done = []
        for key, alignment in list(self._pending.items()):
            baton = self._complete(key, alignment)
            if baton is not None:
                done.append(baton)
        return done

    def _complete(self, key: tuple[StreamScope, int, int], alignment: _Alignment) -> TerminationAttempt | None:
        for channel in self.channels:
            if id(channel) not in alignment.delivered and not channel.ended:
                return None
        del self._pending[key]
        scope, attempt_id, last_completed = key
        return TerminationAttempt(scope, attempt_id, alignment.last_visited_level, last_completed,
                                  alignment.status)

    def __len__(self) -> int:
        return len(self._pending)

    def snapshot(self) -> list[tuple[StreamScope, int, int, list[int], TerminationStatus, int]]:
        """The half-aligned batons, with their channels as positions in the group."""
        positions = {id(c): n for n, c in enumerate(self.channels)}
        return [(scope, attempt_id, last_completed, sorted(positions[c] for c in alignment.delivered),
                 alignment.status, alignment.last_visited_level)
                for (scope, attempt_id, last_completed), alignment in self._pending.items()]

    def restore(self, state: list[tuple[StreamScope, int, int, list[int], TerminationStatus, int]],
                in_this_run: ScopeMap) -> None:
        for scope, attempt_id, last_completed, delivered, status, last_visited in state:
            self._pending[(in_this_run(scope), attempt_id, last_completed)] = _Alignment(
                {id(self.channels[n]) for n in delivered}, status, last_visited)


class TaskTermination:
    """The protocol at a task without a feedback input: align, add the status, forward.

    ``on_aligned`` (for tasks inside an iteration) is called with every baton of an
    iteration scope once it is aligned, before it is forwarded: that is the task's epoch
    watermark increment (see "Epochs" below).
    """

    def __init__(self, scope: StreamScope, channels: Iterable[Any], broadcast: Broadcast,
                 busy: Callable[[], bool], finished: Callable[[], bool],
                 on_aligned: Callable[[TerminationAttempt], None] | None = None,
                 iterations: Collection[StreamScope] = ()) -> None:
        self.scope = scope
        self.level = scope.get_level()
        self._aligner = BatonAligner(channels, lambda baton: baton.scope in iterations)
        self._broadcast = broadcast
        self._busy = busy
        self._finished = finished
        self._on_aligned = on_aligned

    def on_attempt(self, channel: Any, baton: TerminationAttempt) -> None:
        if not lies_within(self.scope, baton.scope):
            return  # the baton leaves its loop here (a loop exit): it has done its work
        done = self._aligner.deliver(channel, baton)
        if done is not None:
            self._forward(done)

    def on_channel_ended(self, channel: Any) -> None:
        for done in self._aligner.channel_ended():
            self._forward(done)

    def snapshot(self) -> Any:
        return self._aligner.snapshot()

    def restore(self, state: Any, in_this_run: ScopeMap) -> None:
        self._aligner.restore(state, in_this_run)

    def _forward(self, baton: TerminationAttempt) -> None:
        if not self._finished():
            if self._on_aligned is not None and not baton.is_completion:
                self._on_aligned(baton)
            self._broadcast(baton.visited(self.level, self._busy()))
        self._aligner.release()


class HeadControl:
    """The protocol at one subtask of a loop head: its attempts, and its part in outer ones.

    The task hosting the head calls :meth:`on_attempt`, :meth:`on_channel_ended` and
    :meth:`on_feedback_records`, runs :meth:`run_commands` on its turn while
    :meth:`has_commands`, and gives ``terminate`` to end the loop's input (end of input
    into the body, while it keeps reading the feedback until that ends too).
    """

    def __init__(self, name: str, subtask_index: int, scope: StreamScope, regular: Iterable[Any],
                 feedback: Iterable[Any], coordinator: TerminationCoordinator, broadcast: Broadcast,
                 busy: Callable[[], bool], terminate: Callable[[], None],
                 on_epoch: Callable[[int], None] | None = None) -> None:
        self.name = name
        self.subtask_index = subtask_index
        self.scope = scope
        self.level = scope.get_level()
        self.coordinator = coordinator
        self._regular = BatonAligner(regular, lambda baton: baton.scope in coordinator.iterations)
        self._regular_ids = {id(c) for c in self._regular.channels}
        self._feedback = BatonAligner(feedback)
        self._broadcast = broadcast
        self._busy = busy
        self._terminate = terminate
        self._commands: deque[tuple[HeadCommand, int]] = deque()
        self._in_flight: dict[tuple[StreamScope, int], int] = {}  # attempt -> feedback records seen
        self._held_epochs: deque[TerminationAttempt] = deque()  # of the iteration around: until this loop is quiet
        self._on_epoch = on_epoch  # a loop in an iteration: its chain's epoch watermark, as an epoch goes on
        self.enclosing_complete = False  # a completion baton of an enclosing scope came through
        self.ready = False
        self.terminated = False
        coordinator.register(self)

    def __repr__(self) -> str:
        return f"{self.name} ({self.subtask_index + 1})"

    # -- from the task ----------------------------------------------------------------------------
    def on_attempt(self, channel: Any, baton: TerminationAttempt) -> None:
        if id(channel) in self._regular_ids:
            done = self._regular.deliver(channel, baton)
            if done is not None:
                self._on_regular_baton(done)
        else:
            done = self._feedback.deliver(channel, baton)
            if done is not None:
                self._on_feedback_baton(done)

    def on_channel_ended(self, channel: Any) -> None:
        if self.terminated or id(channel) not in self._regular_ids:
            return  # feedback channels end only after the loop terminated
        for done in self._regular.channel_ended():
            self._on_regular_baton(done)
        if not self.ready and all(c.ended for c in self._regular.channels):
            self.ready = True
            if self.enclosing_complete:
                self._commands.append((HeadCommand.TERMINATE, 0))
            else:
                self.coordinator.ready(self)

    def on_feedback_records(self, count: int) -> None:
        if not count:
            return
        if self.terminated:
            raise SlipstreamError(
                f"loop head '{self.name}' (subtask {self.subtask_index + 1}, scope {self.scope}): {count} "
                "record(s) came back through the feedback edge after the loop had ended. An operator "
                "in the loop body emitted them at end of input, when event time ended, or from a timer "
                "after the loop's last record; such an operator cannot feed its loop")
        in_flight = self._in_flight
        for key in in_flight:
            in_flight[key] += count

    def has_commands(self) -> bool:
        return bool(self._commands)

    def run_commands(self) -> None:
        while self._commands and not self.terminated:
            command, attempt_id = self._commands.popleft()
            if command is HeadCommand.INJECT:
                self._in_flight[(self.scope, attempt_id)] = 0
                status = TerminationStatus.BUSY if self._busy() else TerminationStatus.IDLE
                self._broadcast(TerminationAttempt(self.scope, attempt_id, self.level, self.level - 1, status))
            elif command is HeadCommand.RELEASE:
                epoch = self._held_epochs.popleft()
                if self._on_epoch is not None:
                    self._on_epoch(epoch.attempt_id)
                self._broadcast(epoch.visited(self.level, self._busy()))
                self._regular.release()  # the next epoch's records may come in now
            else:
                if attempt_id:  # decided here: announce it to the loops inside, ahead of end of input
                    self._broadcast(TerminationAttempt(self.scope, attempt_id, self.level, self.level))
                self.terminated = True
                self._in_flight.clear()
                self._terminate()

    # -- checkpoints of iterations (runtime.checkpoint.iteration_region) --------------------------
    def snapshot(self) -> dict[str, Any]:
        """This head subtask's protocol state: commands not run yet, attempts in flight, held epochs."""
        return {"commands": [(command.value, n) for command, n in self._commands], "in_flight": dict(self._in_flight),
                "held_epochs": list(self._held_epochs), "enclosing_complete": self.enclosing_complete,
                "ready": self.ready, "terminated": self.terminated,
                "regular": self._regular.snapshot(), "feedback": self._feedback.snapshot()}

    def restore(self, state: dict[str, Any], in_this_run: ScopeMap) -> None:
        self._commands = deque((HeadCommand(command), n) for command, n in state["commands"])
        self._in_flight = {(in_this_run(scope), attempt): seen for (scope, attempt), seen in state["in_flight"].items()}
        self._held_epochs = deque(replace(baton, scope=in_this_run(baton.scope)) for baton in state["held_epochs"])
        self.enclosing_complete, self.ready = state["enclosing_complete"], state["ready"]
        self.terminated = state["terminated"]
        self._regular.restore(state["regular"], in_this_run)
        self._feedback.restore(state["feedback"], in_this_run)

    # -- from the coordinator ---------------------------------------------------------------------
    def command_inject(self, attempt_id: int) -> None:
        self._commands.append((HeadCommand.INJECT, attempt_id))

    def command_terminate(self, attempt_id: int) -> None:
        self._commands.append((HeadCommand.TERMINATE, attempt_id))

    def command_release(self, epoch: int) -> None:
        """This loop is quiet: the oldest epoch held at it goes on into its body (and out)."""
        self._commands.append((HeadCommand.RELEASE, epoch))

    # -- internals --------------------------------------------------------------------------------
    def _on_regular_baton(self, baton: TerminationAttempt) -> None:
        """A baton of an enclosing scope, aligned on the regular inputs: take it round this loop —
        or, an epoch of an iteration around the loop, hold it until the loop is quiet (see "Loops
        inside iterations" in the module docstring)."""
        if baton.is_completion:
            self.enclosing_complete = True
        elif baton.scope in self.coordinator.iterations:
            self._held_epochs.append(baton)
            self.coordinator.epoch_reached(self, baton.attempt_id)
            return
        else:
            self._in_flight[(baton.scope, baton.attempt_id)] = 0
        self._broadcast(baton.visited(self.level, self._busy()))

    def _on_feedback_baton(self, baton: TerminationAttempt) -> None:
        """A baton came back round this loop: report what was seen while it was inside."""
        if baton.is_completion or self.terminated or baton.scope in self.coordinator.iterations:
            return  # a released epoch has done its work in here
        seen = self._in_flight.pop((baton.scope, baton.attempt_id), None)
        if seen is None:
            raise SlipstreamError(f"loop head '{self.name}': baton {baton} came back without having "
                                  "been sent (termination protocol out of step)")
        clean = seen == 0 and baton.status is TerminationStatus.IDLE
        self.coordinator.report(baton.scope, baton.attempt_id, self, clean, seen)


@dataclass
class AttemptRecord:
    """One decided attempt, for metrics and tests."""

    scope: StreamScope
    attempt_id: int
    clean: bool
    feedback_records: int


class TerminationCoordinator:
    """Joins the reports of all head subtasks of a scope and decides each attempt.

    One per job, like Flink's operator coordinators: it holds the scope tree of the
    job's loops (which heads exist at which scope), never any operator.
    """

    def __init__(self) -> None:
        self._heads: dict[StreamScope, list[HeadControl]] = {}
        self._ready: dict[StreamScope, set[int]] = {}
        self._reports: dict[tuple[StreamScope, int], dict[int, tuple[bool, int]]] = {}
        self.history: list[AttemptRecord] = []
        self.completed: list[StreamScope] = []
        self.iterations: dict[StreamScope, EpochProgress] = {}  # FLIP-176 scopes: rounds, not attempts
        self._round_reports: dict[tuple[StreamScope, int], dict[int, tuple[IterationHeadControl, int]]] = {}
        self._epochs_reached: dict[tuple[StreamScope, int], set[int]] = {}  # (loop, epoch) -> its head subtasks
        self._epochs_to_check: dict[StreamScope, deque[int]] = {}  # loop -> epochs every head subtask holds
        self._checking: dict[StreamScope, int] = {}  # loop -> the epoch its attempt in flight checks

    def register(self, head: HeadControl) -> None:
        self._heads.setdefault(head.scope, []).append(head)

    @property
    def scopes(self) -> list[StreamScope]:
        return list(self._heads)

    def heads_within(self, scope: StreamScope) -> list[HeadControl]:
        """Every head subtask that takes part in attempts of ``scope``: its own and nested ones."""
        return [head for s, heads in self._heads.items() if lies_within(s, scope) for head in heads]

    def ready(self, head: HeadControl) -> None:
        """A head subtask's regular inputs ended: once all of its scope's are, attempt 1 starts."""
        ready = self._ready.setdefault(head.scope, set())
        ready.add(id(head))
        if len(ready) == len(self._heads[head.scope]):
            self._start(head.scope, 1)

    def report(self, scope: StreamScope, attempt_id: int, head: HeadControl, clean: bool, records: int) -> None:
        reports = self._reports.setdefault((scope, attempt_id), {})
        reports[id(head)] = (clean, records)
        if len(reports) < len(self.heads_within(scope)):
            return
        del self._reports[(scope, attempt_id)]
        clean_all = all(ok for ok, _ in reports.values())
        self.history.append(AttemptRecord(scope, attempt_id, clean_all, sum(n for _, n in reports.values())))
        if scope in self._checking:
            self._epoch_checked(scope, attempt_id, clean_all)
        elif clean_all:
            self.completed.append(scope)
            for own in self._heads[scope]:
                own.command_terminate(attempt_id)
        else:
            self._start(scope, attempt_id + 1)

    def _start(self, scope: StreamScope, attempt_id: int) -> None:
        for head in self._heads[scope]:
            head.command_inject(attempt_id)

    def attempts(self, scope: StreamScope) -> int:
        return sum(1 for record in self.history if record.scope == scope)

    # -- loops inside iterations: an epoch goes on once the loop is quiet ----------------------------
    def epoch_reached(self, head: HeadControl, epoch: int) -> None:
        """A loop head subtask inside an iteration holds ``epoch``: once every subtask does, attempts
        of the loop's scope check that nothing of that epoch still goes round it."""
        reached = self._epochs_reached.setdefault((head.scope, epoch), set())
        reached.add(id(head))
        if len(reached) == len(self._heads[head.scope]):
            del self._epochs_reached[(head.scope, epoch)]
            self._epochs_to_check.setdefault(head.scope, deque()).append(epoch)
            if head.scope not in self._checking:
                self._check_next_epoch(head.scope)

    def _check_next_epoch(self, scope: StreamScope) -> None:
        waiting = self._epochs_to_check.get(scope)
        if waiting:
            self._checking[scope] = waiting.popleft()
            self._start(scope, self.attempts(scope) + 1)

    def _epoch_checked(self, scope: StreamScope, attempt_id: int, quiet: bool) -> None:
        if not quiet:
            self._start(scope, attempt_id + 1)
            return
        epoch = self._checking.pop(scope)
        for own in self._heads[scope]:
            own.command_release(epoch)
        self._check_next_epoch(scope)

    # -- FLIP-176 iterations: epoch rounds ----------------------------------------------------------
    def add_iteration(self, scope: StreamScope, has_criteria: bool) -> EpochProgress:
        """Declare ``scope`` an iteration: its batons are epoch watermarks, decided by rounds."""
        progress = self.iterations.get(scope)
        if progress is None:
            progress = self.iterations[scope] = EpochProgress(scope, has_criteria)
        return progress

    def report_round(self, scope: StreamScope, epoch: int, head: IterationHeadControl, records: int) -> None:
        """A head subtask's part of round ``epoch``: the records it counted in the round."""
        reports = self._round_reports.setdefault((scope, epoch), {})
        reports[id(head)] = (head, records)
        heads = self._heads[scope]
        if len(reports) < len(heads):
            return
        del self._round_reports[(scope, epoch)]
        progress = self.iterations[scope]
        counts = dict.fromkeys(HeadRole, 0)
        for reporter, count in reports.values():
            counts[reporter.role] += count
        inputs_ended = all(h.inputs_ended for h in heads)  # type: ignore[attr-defined]
        pending = sum(h.pending_records() for h in heads)  # type: ignore[attr-defined]
        decision = progress.decide(epoch, counts, inputs_ended, pending)
        if decision is RoundDecision.TERMINATE:
            self.completed.append(scope)
            for own in heads:
                own.command_terminate(epoch)
        elif decision is RoundDecision.NEXT:
            self._start(scope, epoch + 1)

    def snapshot_scopes(self, scopes: list[StreamScope]) -> list[dict[str, Any]]:
        """What this coordinator knows of ``scopes`` (an iteration and the loops inside it), with
        head subtasks as positions in its lists (see :mod:`runtime.checkpoint.iteration_region`)."""
        state = []
        for scope in scopes:
            own = {id(head): n for n, head in enumerate(self._heads[scope])}
            within = {id(head): n for n, head in enumerate(self.heads_within(scope))}
            entry: dict[str, Any] = {
                "ready": sorted(own[h] for h in self._ready.get(scope, ())),
                "reports": {attempt: {within[h]: report for h, report in reports.items()}
                            for (s, attempt), reports in self._reports.items() if s == scope},
                "history": [r for r in self.history if r.scope == scope], "completed": scope in self.completed,
                "epochs_reached": {epoch: sorted(own[h] for h in heads)
                                   for (s, epoch), heads in self._epochs_reached.items() if s == scope},
                "epochs_to_check": list(self._epochs_to_check.get(scope, ())), "checking": self._checking.get(scope)}
            progress = self.iterations.get(scope)
            if progress is not None:
                entry["round_reports"] = {epoch: {own[h]: count for h, (_, count) in reports.items()}
                                          for (s, epoch), reports in self._round_reports.items() if s == scope}
                entry["progress"] = {"epoch_watermark": progress.epoch_watermark, "parked": progress.parked,
                                     "terminated": progress.terminated, "rounds": list(progress.rounds)}
            state.append(entry)
        return state

    def restore_scopes(self, scopes: list[StreamScope], state: list[dict[str, Any]]) -> None:
        """Put back what :meth:`snapshot_scopes` took, into the same scopes of this run."""
        for scope, entry in zip(scopes, state, strict=True):
            heads, within = self._heads[scope], self.heads_within(scope)
            self._ready[scope] = {id(heads[n]) for n in entry["ready"]}
            for attempt, reports in entry["reports"].items():
                self._reports[(scope, attempt)] = {id(within[n]): report for n, report in reports.items()}
            self.history += [replace(record, scope=scope) for record in entry["history"]]
            if entry["completed"]:
                self.completed.append(scope)
            for epoch, reached in entry["epochs_reached"].items():
                self._epochs_reached[(scope, epoch)] = {id(heads[n]) for n in reached}
            if entry["epochs_to_check"]:
                self._epochs_to_check[scope] = deque(entry["epochs_to_check"])
            if entry["checking"] is not None:
                self._checking[scope] = entry["checking"]
            if "progress" in entry:
                for epoch, reports in entry["round_reports"].items():
                    self._round_reports[(scope, epoch)] = {id(heads[n]): (heads[n], count)
                                                           for n, count in reports.items()}
                progress, saved = self.iterations[scope], entry["progress"]
                progress.epoch_watermark, progress.parked = saved["epoch_watermark"], saved["parked"]
                progress.terminated, progress.rounds = saved["terminated"], list(saved["rounds"])

    def wake(self, scope: StreamScope) -> None:
        """Something happened in a parked iteration (a record, an input's end): run the next round."""
        progress = self.iterations.get(scope)
        if progress is not None and progress.parked:
            progress.parked = False
            self._start(scope, progress.epoch_watermark + 1)


@dataclass
class RoundRecord:
    """One decided round of an iteration, for metrics and tests."""

    epoch: int
    feedback_records: int
    criteria_records: int
    data_records: int
    decision: RoundDecision

    def __getstate__(self) -> dict[str, Any]:
        """Checkpoints hold the decision's value, the string they always held."""
        return dict(vars(self), decision=self.decision.value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state, decision=RoundDecision(state["decision"]))


class EpochProgress:
    """Epochs of one FLIP-176 iteration scope: the globally aligned epoch watermark and the rule
    that ends the iteration.

    Epochs (the seed's numbering: initial variables and data have epoch 1; Flink ML starts
    at 0): each round N starts when every head subtask of the scope sends the baton
    ``(scope, N)`` into the body after every record of epoch N it emits. Every task aligns
    it on all its inputs — that is its epoch watermark reaching N — calls its operators'
    listeners and forwards it; it comes back through the feedback edges (and the
    termination-criteria edge) after every record of epoch N + 1, and each head reports the
    records it counted since the previous round. Records carry their epoch by position: a
    record between the batons N - 1 and N of a channel has epoch N, because a variable head
    keeps what comes back through its feedback until the next round starts and sends it
    then, ahead of that round's baton. (Sent round at once, an async record would enter the
    body ahead of the baton of an earlier epoch than its own and be counted in an earlier
    round: the iteration could end before its epoch watermark.) So a head's count for round
    N is exactly the feedback of epoch N + 1 (for a criteria head, the criteria records of
    epoch N), and the last epoch watermark is the largest epoch of any record. A channel
    that delivered baton N is not read again until N is aligned at its task (the baton
    *holds* it), so every task takes its input epoch by epoch: what a listener sends round
    at epoch N never reaches another subtask of the same operator before that subtask's
    epoch watermark N, and a sync algorithm's rounds stay exact at any parallelism. This
    cannot deadlock: a held channel's producer already sent the baton on all its outputs,
    and feedback channels, which never fill, are never held.
    Unbounded data heads take no part in the counts: their records have the maximum epoch.

    Decision, once every head reported round N: the iteration terminates when all its
    inputs ended and the round saw no feedback record (none of epoch N + 1) or, with a
    criteria stream, no criteria record — either suffices, as FLIP-176 states it — and no
    head holds records counted toward a later round (``pending``: an unbounded data head
    may have let in its last records, and seen its input end, after it sent baton N; they
    are round N + 1's, so that round runs). (Flink
    ML's coordinator counts the criteria records with the feedback, so there a criteria
    stream that keeps emitting outlives the feedback; here it does not.) Otherwise round
    N + 1 starts — unless nothing at all happened in round N while some input is still
    open (an unbounded iteration waiting for live data): then the scope parks and the next
    record, or an input's end, starts round N + 1. Epoch watermarks so never spin while a
    job is idle.
    """

    def __init__(self, scope: StreamScope, has_criteria: bool) -> None:
        self.scope = scope
        self.has_criteria = has_criteria
        self.epoch_watermark = 0
        self.parked = False
        self.terminated = False
        self.rounds: list[RoundRecord] = []

    def decide(self, epoch: int, counts: dict[HeadRole, int], inputs_ended: bool, pending: int) -> RoundDecision:
        """Round ``epoch`` is over (``counts``: records per head role): terminate, next or park."""
        self.epoch_watermark = epoch
        if inputs_ended and not pending and self.ends_after(counts):
            decision = RoundDecision.TERMINATE
            self.terminated = True
        elif any(counts.values()) or pending or inputs_ended:
            decision = RoundDecision.NEXT
        else:
            decision = RoundDecision.PARK
            self.parked = True
        self.rounds.append(RoundRecord(epoch, counts[HeadRole.VARIABLE], counts[HeadRole.CRITERIA],
                                       counts[HeadRole.DATA], decision))
        return decision

    def ends_after(self, counts: dict[HeadRole, int]) -> bool:
        """FLIP-176's rule for a round whose inputs are consumed: no record went round through the
        feedback, or (with a criteria stream) none reached the criteria stream — either suffices."""
        return counts[HeadRole.VARIABLE] == 0 or (self.has_criteria and counts[HeadRole.CRITERIA] == 0)


class IterationHeadControl(HeadControl):
    """The protocol at one subtask of an iteration head (FLIP-176), on the FLIP-15 baton machinery.

    Differences from a loop head: its batons are epoch watermarks, one round after the
    other, and it counts records per round (not per attempt) — what came back through its
    feedback edge (a variable head), what reached it from the termination-criteria stream
    (a criteria head), or what it let in (a data head, which has no feedback and reports
    each round as it starts it). After termination, records still coming back are dropped:
    they belong to a round that will never run. ``on_epoch(epoch)`` runs before the head
    sends an epoch's baton: a variable head sends the feedback it held there, a replaying
    data head its data again, and operators chained to the head get their epoch watermark.
    """

    def __init__(self, name: str, subtask_index: int, scope: StreamScope, regular: Iterable[Any],
                 feedback: Iterable[Any], coordinator: TerminationCoordinator, broadcast: Broadcast,
                 busy: Callable[[], bool], terminate: Callable[[], None], role: HeadRole, bounded: bool,
                 on_epoch: Callable[[int], None]) -> None:
        super().__init__(name, subtask_index, scope, regular, feedback, coordinator, broadcast, busy, terminate)
        self.role = role
        self.bounded = bounded
        self._on_epoch: Callable[[int], None] = on_epoch
        self._counted = 0  # records counted since the last report
        self.inputs_ended = not self._regular.channels

    def snapshot(self) -> dict[str, Any]:
        """This subtask's part in its iteration's rounds, and the records it counted in this one."""
        return dict(super().snapshot(), counted=self._counted, inputs_ended=self.inputs_ended)

    def restore(self, state: dict[str, Any], in_this_run: ScopeMap) -> None:
        super().restore(state, in_this_run)
        self._counted, self.inputs_ended = state["counted"], state["inputs_ended"]

    def start(self) -> None:
        """Deployed: a head with no input (criteria), or whose records have the maximum epoch
        (unbounded data), is ready for round 1 at once."""
        if not self.ready and (not self._regular.channels or (self.role is HeadRole.DATA and not self.bounded)):
            self.ready = True
            self.coordinator.ready(self)

    def pending_records(self) -> int:
        return self._counted

    def count(self, records: int) -> None:
        """Records came in (feedback, criteria or data): they belong to the current round."""
        if records and not self.terminated:
            self._counted += records
            self.coordinator.wake(self.scope)

    def on_feedback_records(self, count: int) -> None:
        self.count(count)

    def on_channel_ended(self, channel: Any) -> None:
        super().on_channel_ended(channel)
        if not self.inputs_ended and all(c.ended for c in self._regular.channels):
            self.inputs_ended = True
            self.coordinator.wake(self.scope)

    def run_commands(self) -> None:
        while self._commands and not self.terminated:
            command, epoch = self._commands.popleft()
            if command is HeadCommand.INJECT:
                self._on_epoch(epoch)
                self._broadcast(TerminationAttempt(self.scope, epoch, self.level, self.level - 1))
                if not self._feedback.channels:  # nothing comes back to a data head: report at once
                    self._report(epoch)
            else:
                self._broadcast(TerminationAttempt(self.scope, epoch, self.level, self.level))
                self.terminated = True
                self._terminate()

    def _on_regular_baton(self, baton: TerminationAttempt) -> None:
        raise SlipstreamError(f"iteration head '{self.name}': a baton of scope {baton.scope} reached its "
                              "input; iterations nested in loops or iterations are not supported")

    def _on_feedback_baton(self, baton: TerminationAttempt) -> None:
        if baton.is_completion or self.terminated:
            return
        self._report(baton.attempt_id)

    def _report(self, epoch: int) -> None:
        counted, self._counted = self._counted, 0
        self.coordinator.report_round(self.scope, epoch, self, counted)

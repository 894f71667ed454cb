"""Tasks: one subtask of a job vertex, i.e. a chain of operators driven as a mailbox loop.

The scheduler gives a runnable task a turn (:meth:`StreamTask.step`); the task takes
up to ``quantum`` elements from its input channels (or polls its source), pushes
them through its chain, fires due processing-time timers, and flushes its writers.
Operators are only ever called from their task's turn, never concurrently.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slipstream.attributes import RecordAttributes
from slipstream.datastream.time import MAX_TIMESTAMP, MAX_WATERMARK, MIN_TIMESTAMP, Watermark
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import (
    EndOfInput,
    LatencyMarker,
    RecordBatch,
    TerminationAttempt,
    WatermarkStatus,
)
from slipstream.operators.memory import check_state
from slipstream.operators.source import InputStatus, SourceOperator
from slipstream.runtime.channels import Channel
from slipstream.runtime.checkpoint.barriers import CheckpointBarrier
from slipstream.runtime.clock import Clock
from slipstream.runtime.record_writer import RecordWriter

SOURCE_RETRY_MS = 20
"""How soon a source that had nothing is polled again even without a notification."""


class TaskProcessingTimeService:
    """A task's processing-time callbacks, fired in the task's own turn when due."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, Callable[[int], None]]] = []
        self._seq = itertools.count()

    def get_current_processing_time(self) -> int:
        return self._clock.now_ms()

    def register_timer(self, timestamp: int, callback: Callable[[int], None]) -> None:
        heapq.heappush(self._heap, (timestamp, next(self._seq), callback))

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def deadlines(self) -> list[int]:
        """The times of the callbacks waiting, in order (one per registration)."""
        return sorted(timestamp for timestamp, _, _ in self._heap)

    def fire_due(self, now: int) -> bool:
        """Run the callbacks due at ``now``; whether any ran."""
        fired = False
        while self._heap and self._heap[0][0] <= now:
            timestamp, _, callback = heapq.heappop(self._heap)
            callback(timestamp)
            fired = True
        return fired

    def fire_all(self) -> None:
        """Fire everything left, in time order (used only where a test clock asks for it)."""
        while self._heap:
            timestamp, _, callback = heapq.heappop(self._heap)
            callback(timestamp)


@dataclass(eq=False)
class InputChannel:
    """One channel into the task, with the state the task keeps about it."""

    channel: Channel
    input_index: int
    priority: int = 0  # channels of higher priority are read first (feedback-first in loops)
    first_when_full: bool = False  # read before all others whenever its in-memory buffer is at its budget
    blocking: bool = False  # a BLOCKING edge: read only once its producer has finished
    watermark: int = MIN_TIMESTAMP
    idle: bool = False
    ended: bool = False
    backlog: bool = False
    blocked: bool = False  # delivered a checkpoint barrier; not read until all inputs did (alignment)
    held: bool = False  # delivered an epoch of an iteration; not read until the epoch is aligned (termination)


class StreamTask:
    """A subtask of a job vertex that reads input channels."""

    def __init__(self, name: str, subtask_index: int, operators: list[StreamOperator],
                 inputs: list[InputChannel], writers: list[RecordWriter],
                 timers: TaskProcessingTimeService, clock: Clock, quantum: int) -> None:
        self.name = name
        self.subtask_index = subtask_index
        self.operators = operators
        self.head = operators[0]
        self.inputs = inputs
        self.writers = writers
        self.timers = timers
        self.clock = clock
        self.quantum = quantum
        self.finished = False
        self.barrier_handler: Any = None  # set by the checkpoint coordinator when checkpointing is on
        self.termination: Any = None  # loop termination batons (runtime.termination); set for every task
        self.iteration: Any = None  # inside an iteration: tells operators its epochs and its end (loop_task)
        self.latency: Any = None  # latency markers (runtime.latency); set when the job tracks latency
        self.deployed = False
        self.after_open: list[Callable[[], None]] = []  # restore steps that need open operators
        self.backlog_ended: Callable[[], None] = lambda: None  # it or an input left its backlog (set by the job run)
        self.deployed_at: float | None = None
        self.finished_at: float | None = None
        self._blocking_inputs = [c for c in inputs if c.blocking]
        priorities = sorted({c.priority for c in inputs}, reverse=True)
        self._priority_groups = [[c for c in inputs if c.priority == p] for p in priorities]
        self._next_in_group = [0] * len(self._priority_groups)
        self._first_when_full = [c for c in inputs if c.first_when_full]
        count = max((c.input_index for c in inputs), default=-1) + 1
        self._by_input: list[list[InputChannel]] = [[c for c in inputs if c.input_index == i]
                                                    for i in range(count)]
        self._input_watermark = [MIN_TIMESTAMP] * count
        self._input_idle = [False] * count
        self._input_backlog = [False] * count
        self._input_ended = [False] * count

    def __repr__(self) -> str:
        return f"{self.name} ({self.subtask_index + 1})"

    # -- life cycle -------------------------------------------------------------------------------
    def deploy(self) -> None:
        """Open operators from the tail to the head, so each is ready before it gets input.

        Called on the task's first turn, which for a task behind BLOCKING edges comes only
        once their producers finished; what it reads from them is backlog (FLIP-327).
        """
        self.deployed = True
        self.deployed_at = time.perf_counter()
        for operator in reversed(self.operators):
            operator.open()
        for step in self.after_open:
            step()
        self.after_open = []
        for input_channel in self._blocking_inputs:
            input_channel.backlog = True
        for index in {c.input_index for c in self._blocking_inputs}:
            self._update_backlog(index)

    def in_backlog(self) -> bool:
        """Whether backlog is still ahead of this task: it is not deployed yet (it may wait behind
        a BLOCKING edge) or one of its inputs is backlog (FLIP-327)."""
        return not self.finished and (not self.deployed or any(self._input_backlog))

    def is_deployable(self) -> bool:
        for input_channel in self._blocking_inputs:
            if not input_channel.channel.producer_finished:
                return False
        return True

    def close(self) -> None:
        """Close the operators (if they were opened), then free their keyed state (a RocksDB
        backend's database and directory go)."""
        try:
            if self.deployed:
                for operator in self.operators:
                    operator.close()
        finally:
            for operator in self.operators:
                backend = operator.ctx.keyed_backend
                if backend is not None:
                    backend.dispose()

    # -- checkpoints of iterations (runtime.checkpoint.iteration_region) --------------------------
    def snapshot_channels(self, internal: Callable[[InputChannel], bool]) -> list[dict[str, Any] | None]:
        """Each input channel's waiting elements and what the task knows of it (None where not
        ``internal``: a channel whose producer replays from the checkpoint by itself)."""
        return [{"elements": c.channel.snapshot_elements(), "producer_finished": c.channel.producer_finished,
                 "ended": c.ended, "watermark": c.watermark, "idle": c.idle, "held": c.held} if internal(c) else None
                for c in self.inputs]

    def restore_channels(self, states: list[dict[str, Any] | None]) -> None:
        """Put back what :meth:`snapshot_channels` took; the operators get their inputs'
        watermarks again once they are open."""
        for input_channel, state in zip(self.inputs, states):
            if state is None:
                continue
            for element in state["elements"]:
                input_channel.channel.push(element)
            input_channel.channel.producer_finished = state["producer_finished"]
            input_channel.ended, input_channel.watermark = state["ended"], state["watermark"]
            input_channel.idle, input_channel.held = state["idle"], state["held"]
        for index, channels in enumerate(self._by_input):
            self._input_ended[index] = all(c.ended for c in channels)
        self.after_open.append(self._reapply_watermarks)

    def _reapply_watermarks(self) -> None:
        for index in range(len(self._by_input)):
            self._update_watermark(index)

    # -- scheduling -------------------------------------------------------------------------------
    def can_write(self) -> bool:
        for writer in self.writers:
            if not writer.has_capacity():
                return False
        return True

    def has_input(self) -> bool:
        for input_channel in self.inputs:
            if input_channel.channel.queue and not input_channel.blocked and not input_channel.held:
                return True
        return False

    def is_runnable(self, now: int) -> bool:
        """Whether a turn now would do something: deployable, or input or a due timer, and room in
        every output. The room is looked at last: most tasks, most turns, have nothing to do, and the
        scheduler asks every task at every turn."""
        if self.finished:
            return False
        if not self.deployed:
            return self.is_deployable() and self.can_write()
        if not self.has_input():
            deadline = self.timers.next_deadline()
            if deadline is None or deadline > now:
                return False
        return self.can_write()

    def next_deadline(self) -> int | None:
        """When this task next has something to do without new input (None: only on input, or
        once its output has room: a full output is not waited out by polling)."""
        deadline = self.timers.next_deadline()
        return deadline if deadline is not None and self.can_write() else None

    def step(self) -> None:
        """One turn: due timers, then up to ``quantum`` input elements, then flush."""
        if not self.deployed:
            self.deploy()
        self.timers.fire_due(self.clock.now_ms())
        for _ in range(self.quantum):
            if self.finished or not self.can_write():
                break
            chosen = self._choose_input()
            if chosen is None:
                break
            self._dispatch(chosen, chosen.channel.pop())
        self.flush()
        for operator in self.operators:
            check_state(operator.ctx)

    def _choose_input(self) -> InputChannel | None:
        """The next channel to read: the highest priority that has data, round robin within it
        (before them, a ``first_when_full`` channel whose in-memory buffer is at its budget)."""
        for candidate in self._first_when_full:
            if candidate.channel.queue and not candidate.blocked and not candidate.held \
                    and candidate.channel.is_at_budget():
                return candidate
        for group_index, group in enumerate(self._priority_groups):
            count = len(group)
            start = self._next_in_group[group_index]
            for offset in range(count):
                candidate = group[(start + offset) % count]
                if candidate.channel.queue and not candidate.blocked and not candidate.held:
                    self._next_in_group[group_index] = (start + offset + 1) % count
                    return candidate
        return None

    def flush(self) -> None:
        for writer in self.writers:
            writer.flush()

    # -- elements ---------------------------------------------------------------------------------
    def _dispatch(self, source: InputChannel, element: Any) -> None:
        if type(element) is RecordBatch:
            self.head.ctx.metrics["records_in"] += len(element)  # no rows built for Arrow batches
            self.head.process_batch(element, source.input_index)
        elif type(element) is Watermark:
            source.watermark = element.timestamp
            self._update_watermark(source.input_index)
        elif type(element) is WatermarkStatus:
            source.idle = element.idle
            self._update_watermark(source.input_index)
        elif type(element) is RecordAttributes:
            source.backlog = element.is_backlog()
            self._update_backlog(source.input_index)
        elif type(element) is EndOfInput:
            self._end_channel(source)
        elif type(element) is CheckpointBarrier:
            self.barrier_handler.on_barrier(source, element)
        elif type(element) is TerminationAttempt:
            self.termination.on_attempt(source, element)
        elif type(element) is LatencyMarker:
            self.latency.on_marker(element)
        else:
            raise TypeError(f"task {self}: unexpected element {element!r}")

    def _update_watermark(self, input_index: int) -> None:
        """The input's watermark is the minimum over its active channels (ended ones count as MAX)."""
        channels = self._by_input[input_index]
        active = [c.watermark for c in channels if c.ended or not c.idle]
        idle = not active
        if idle != self._input_idle[input_index]:
            self._input_idle[input_index] = idle
            self.head.process_watermark_status(idle, input_index)
        if active:
            watermark = min(active)
            if watermark > self._input_watermark[input_index]:
                self._input_watermark[input_index] = watermark
                self.head.process_watermark(Watermark(watermark), input_index)

    def _update_backlog(self, input_index: int) -> None:
        backlog = any(c.backlog for c in self._by_input[input_index] if not c.ended)
        if backlog != self._input_backlog[input_index]:
            self._input_backlog[input_index] = backlog
            self.head.process_record_attributes(RecordAttributes(backlog), input_index)
            if not backlog:
                self.backlog_ended()

    def _end_channel(self, source: InputChannel) -> None:
        source.ended = True
        source.watermark = MAX_TIMESTAMP
        index = source.input_index
        self._update_watermark(index)
        self._update_backlog(index)
        if all(c.ended for c in self._by_input[index]):
            self._input_ended[index] = True
            self.head.end_input(index)
            if all(self._input_ended):
                self._finish()
        if self.barrier_handler is not None:
            self.barrier_handler.on_channel_ended(source)
        if self.termination is not None:
            self.termination.on_channel_ended(source)

    def _finish(self) -> None:
        """All input ended: finish operators head to tail, then tell downstream."""
        for position, operator in enumerate(self.operators):
            if position > 0:
                operator.end_input(0)
            if self.iteration is not None:
                self.iteration.on_terminated(operator)
            operator.finish()
        self.finished_at = time.perf_counter()  # before downstream hears: a consumer elsewhere may start at once
        for writer in self.writers:
            writer.finish()
        self.finished = True


class SourceTask(StreamTask):
    """A subtask whose chain starts with a source operator: it polls instead of reading channels."""

    def __init__(self, name: str, subtask_index: int, operators: list[StreamOperator],
                 writers: list[RecordWriter], timers: TaskProcessingTimeService, clock: Clock,
                 quantum: int, batch_size: int) -> None:
        super().__init__(name, subtask_index, operators, [], writers, timers, clock, quantum)
        self.source: SourceOperator = operators[0]  # type: ignore[assignment]
        self.batch_size = batch_size
        self.available = True
        self._retry_at = 0
        self.source.notify_available = self._notify
        self.wakeup: Callable[[], None] = lambda: None

    def _notify(self) -> None:
        """Called by a reader (possibly from its own thread) when it has records."""
        self.available = True
        self.wakeup()

    def in_backlog(self) -> bool:
        return not self.finished and (not self.deployed or self.source.is_backlog())

    def is_runnable(self, now: int) -> bool:
        if self.finished:
            return False
        if not (self.available or now >= self._retry_at):
            deadline = self.timers.next_deadline()
            if deadline is None or deadline > now:
                return False
        return self.can_write()

    def next_deadline(self) -> int | None:
        if self.finished or not self.can_write():
            return None
        deadline = self.timers.next_deadline()
        return self._retry_at if deadline is None else min(deadline, self._retry_at)

    def step(self) -> None:
        was_in_backlog = self.in_backlog()
        self._step()
        if was_in_backlog and not self.in_backlog():  # deployed live, or its reader left its backlog
            self.backlog_ended()

    def _step(self) -> None:
        if not self.deployed:
            self.deploy()
        now = self.clock.now_ms()
        self.timers.fire_due(now)
        for _ in range(self.quantum):
            if self.finished or not self.can_write():
                break
            # Cleared before the poll, so a reader thread's notification during it is not lost.
            self.available = False
            status = self.source.emit_next(self.batch_size)
            if status is InputStatus.END_OF_INPUT:
                self.source.output.emit_watermark(MAX_WATERMARK)
                self._finish()
                break
            if status is InputStatus.NOTHING_AVAILABLE:
                self._retry_at = now + SOURCE_RETRY_MS
                break
            self.available = True
        self.flush()
        if self.latency is not None and not self.finished:
            self.latency.maybe_mark(self.head.ctx.uid, self.subtask_index, not self.source.is_backlog())

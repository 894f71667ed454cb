"""Loop operators (FLIP-15): the head, the feedback tail and the exit of a loop.

All three pass records through unchanged; what makes a loop a loop is the FEEDBACK
edge from the tail back to the head, and the task that hosts the head
(:mod:`slipstream.runtime.loop_task`), which runs the termination protocol. The
operators only decide what the time-like elements do at the loop's boundary:

* the **head** forwards records of both inputs: of its input (0) on its main output,
  of the feedback (1) on the main output too, or on the feedback side output of an
  ``iterate_with_feedback`` loop. Its watermark, idleness and backlog status are its
  input's alone: the feedback carries none, or the loop would hold back its own clock.
  The final watermark (end of event time) waits until the loop has ended, so what
  follows the loop (an event-time window) sees every record that went round before
  event time ends. Records keep their timestamps as they go round; one that goes round
  while its input's watermark passes its timestamp may arrive late after the loop —
  per-round event time is what FLIP-176's epoch watermarks add. The head's output is
  never backlog (FLIP-327): what goes round depends on every intermediate result, so a
  loop body runs record by record even while its input is backlog, rather than sorting
  and keeping only final results.
* the **feedback tail** forwards records only: watermarks, idleness and record
  attributes stop there, since the head must not wait for what it sent itself.
* the **exit** forwards everything; it exists to mark where the loop's scope ends.

During backlog all three pass records on one by one (there is nothing to sort).
With checkpointing on, the head's state is the log of records its task saw going
round the loop during a checkpoint (FLINK-3257); on restore it replays them first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slipstream.attributes import RecordAttributes
from slipstream.datastream.time import MAX_TIMESTAMP, Watermark
from slipstream.datastream.transformations import (
    FeedbackTailTransformation,
    LoopExitTransformation,
    LoopHeadTransformation,
)
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch

INPUT = 0
"""The head's input from outside the loop."""

FEEDBACK = 1
"""The head's input from its feedback tail."""


class LoopHeadOperator(StreamOperator):
    """Merges a loop's input with its feedback (or splits them, for ``iterate_with_feedback``)."""

    transformation_type = LoopHeadTransformation
    backlog = streamed("a loop head forwards its input and feedback into the loop body as they come")
    num_inputs = 2

    def __init__(self, transformation: LoopHeadTransformation) -> None:
        super().__init__(transformation)
        self.feedback_tag = transformation.feedback_tag
        self._input_idle[FEEDBACK] = True  # never part of the watermark minimum
        self._final_watermark: Watermark | None = None
        self._replay: list[tuple[list[Any], list[Any] | None]] = []

    def open(self) -> None:
        """After a restore, first send round again what was going round at the checkpoint."""
        super().open()
        replay, self._replay = self._replay, []
        for values, timestamps in replay:
            self.process_batch(RecordBatch(values, timestamps), FEEDBACK)

    def initialize_state(self, state: Any) -> None:
        """The records its task logged going round the loop at the checkpoint (FLINK-3257)."""
        if state:
            self._replay = list(state.get("feedback_log", ()))

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        """At another parallelism every logged record is replayed once: old subtask i's log goes
        to new subtask i mod parallelism."""
        for index, state in enumerate(states):
            if state and index % self.ctx.parallelism == self.ctx.subtask_index:
                self._replay.extend(state.get("feedback_log", ()))

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if input_index == FEEDBACK and self.feedback_tag is not None:
            self.output.collect_side(self.feedback_tag, batch)
        else:
            self.output.collect_batch(batch)

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        if input_index == INPUT:
            super().process_watermark(watermark, input_index)

    def on_watermark(self, watermark: Watermark) -> None:
        if watermark.timestamp >= MAX_TIMESTAMP:
            self._final_watermark = watermark  # sent when the loop has ended (finish)
        else:
            self.output.emit_watermark(watermark)

    def finish(self) -> None:
        """The loop has ended: now event time may end inside it and after it."""
        if self._final_watermark is not None:
            self.output.emit_watermark(self._final_watermark)

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        if input_index == INPUT:
            super().process_watermark_status(idle, input_index)

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        """A loop body is never backlog: each intermediate result may go round again."""


class FeedbackTailOperator(StreamOperator):
    """Sends what reaches the end of a loop body back to the head: records only."""

    transformation_type = FeedbackTailTransformation
    backlog = streamed("a feedback tail sends records back to its head as they come")

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if len(batch):
            self.output.collect_batch(batch)

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        """Stops here: the head's clock is its input's."""

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        """Stops here, as watermarks do."""

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        """Stops here: the loop's backlog status is its input's."""


class LoopExitOperator(StreamOperator):
    """Passes what leaves a loop into the enclosing scope."""

    transformation_type = LoopExitTransformation
    backlog = streamed("a loop exit passes records out of the loop as they come")

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        self.output.collect_batch(batch)

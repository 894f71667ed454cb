"""Loop operators (FLIP-15): the head, the feedback tail and the exit of a loop.

All three pass records through unchanged; what makes a loop a loop is the FEEDBACK
edge from the tail back to the head, and the task that hosts the head
(:mod:`slipstream.runtime.loop_task`), which runs the termination protocol. The
operators only decide what the time-like elements do at the loop's boundary:

* the **head** forwards records of both inputs: of its input (0) on its main output,
  of the feedback (1) on the main output too, or on the feedback side output of an
  ``iterate_with_feedback`` loop. Its watermark, idleness and backlog status are its
  input's alone: the feedback carries none, or the loop would hold back its own clock.
* the **feedback tail** forwards records only: watermarks, idleness and record
  attributes stop there, since the head must not wait for what it sent itself.
* the **exit** forwards everything; it exists to mark where the loop's scope ends.

During backlog all three pass records on one by one (there is nothing to sort).
"""

from __future__ import annotations

from typing import Any

from slipstream.attributes import RecordAttributes
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import (
    FeedbackTailTransformation,
    LoopExitTransformation,
    LoopHeadTransformation,
)
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch

INPUT = 0
"""The head's input from outside the loop."""

FEEDBACK = 1
"""The head's input from its feedback tail."""


class LoopHeadOperator(StreamOperator):
    """Merges a loop's input with its feedback (or splits them, for ``iterate_with_feedback``)."""

    transformation_type = LoopHeadTransformation
    num_inputs = 2

    def __init__(self, transformation: LoopHeadTransformation) -> None:
        super().__init__(transformation)
        self.feedback_tag = transformation.feedback_tag
        self._input_idle[FEEDBACK] = True  # never part of the watermark minimum

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        if input_index == FEEDBACK and self.feedback_tag is not None:
            self.output.collect_side(self.feedback_tag, batch)
        else:
            self.output.collect_batch(batch)

    def process_watermark(self, watermark: Watermark, input_index: int = 0) -> None:
        if input_index == INPUT:
            super().process_watermark(watermark, input_index)

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> None:
        if input_index == INPUT:
            super().process_watermark_status(idle, input_index)

    def process_record_attributes(self, attributes: RecordAttributes, input_index: int = 0) -> None:
        if input_index == INPUT:
            super().process_record_attributes(attributes, input_index)


class FeedbackTailOperator(StreamOperator):
    """Sends what reaches the end of a loop body back to the head: records only."""

    transformation_type = FeedbackTailTransformation

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

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        self.output.collect_batch(batch)


def is_loop_head(transformation: Any) -> bool:
    return isinstance(transformation, LoopHeadTransformation)

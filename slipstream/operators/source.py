"""``SourceOperator``: polls a source reader and emits what it reads into its chain.

The runtime's source task calls :meth:`emit_next` instead of feeding input. A
watermark strategy given to ``from_source`` is planned as a chained
timestamps-and-watermarks operator right after this one.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, cast

from slipstream.attributes import Boundedness, RecordAttributes
from slipstream.datastream.connectors.base import (
    END_OF_INPUT,
    NOTHING_AVAILABLE,
    Source,
    SourceBatch,
    SourceReader,
    SourceReaderContext,
)
from slipstream.datastream.connectors.errors import SourceFormatError, SourceRestoreError
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import SourceTransformation
from slipstream.errors import SlipstreamError, user_code
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import OperatorContext, StreamOperator
from slipstream.operators.elements import RecordBatch
from slipstream.operators.memory import MemoryBudget


class InputStatus(Enum):
    """What a poll of a source found, as Flink's ``DataInputStatus``."""

    MORE_AVAILABLE = 0
    NOTHING_AVAILABLE = 1
    END_OF_INPUT = 2


class SourceOperator(StreamOperator):
    transformation_type = SourceTransformation
    backlog = streamed("a source reads its backlog and emits it as it reads: it has no input to sort")
    emits_declared_type = True
    num_inputs = 0

    def __init__(self, transformation: SourceTransformation) -> None:
        super().__init__(transformation)
        self.source: Source = transformation.source
        self.reader: SourceReader | None = None
        self.notify_available: Callable[[], None] = lambda: None
        self._restored_position: Any = None
        self._backlog: bool | None = None
        self._read_budget: MemoryBudget | None = None

    def setup(self, ctx: OperatorContext) -> None:
        """A source whose readers buffer what they fetch takes a share of managed memory for it."""
        super().setup(ctx)
        if self.source.buffers_reads and ctx.memory is not None:
            owner = f"the read buffer of '{ctx.name}' (subtask {ctx.subtask_index + 1}/{ctx.parallelism})"
            self._read_budget = ctx.memory.managed.budget(owner, ctx.metrics)

    def open(self) -> None:
        self.reader = self.source.create_reader(self.ctx.subtask_index, self.ctx.parallelism)
        pts = self.ctx.processing_time_service
        self._reports_backlog_changes = self.reader.is_backlog() is not None
        if self._restored_position is not None:
            # Before open: readers start from their position in open (a file source lists only
            # unfinished splits, an iterator source skips what it emitted).
            self.reader.restore_position(self._restored_position)
        budget = self._read_budget
        self.reader.open(SourceReaderContext(
            self.ctx.subtask_index, self.ctx.parallelism, self.notify_available, pts.get_current_processing_time,
            read_buffer_bytes=None if budget is None else budget.limit,
            report_memory=(lambda used: None) if budget is None else budget.set_usage))
        self._report_backlog()

    def check_restore(self) -> None:
        """The source refuses a restored position whose input is gone, before any task opens."""
        if self._restored_position is None:
            return
        try:
            self.source.check_position(self._restored_position)
        except SourceRestoreError as error:
            raise SourceRestoreError(f"{self.where()}: {error}") from None

    def _report_backlog(self) -> None:
        """Tell downstream when the source starts or stops emitting backlog (FLIP-327).

        A reader that does not say is backlog exactly while its source is bounded.
        """
        assert self.reader is not None  # made in open
        backlog = self.reader.is_backlog()
        if backlog is None:
            backlog = self.source.get_boundedness() is Boundedness.BOUNDED
        if backlog != bool(self._backlog):
            self._backlog = backlog
            self.output.emit_record_attributes(RecordAttributes(backlog))
        elif self._backlog is None:
            self._backlog = backlog

    def is_backlog(self) -> bool:
        return bool(self._backlog)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        raise SlipstreamError(f"source '{self.ctx.name}' has no input to process")

    def emit_next(self, max_records: int) -> InputStatus:
        """Poll the reader once and emit what it returned."""
        assert self.reader is not None  # made in open
        try:
            with user_code(self, lambda: f"poll of {type(self.reader).__name__}", what="read"):
                result = self.reader.poll(max_records)
        except SourceFormatError as exc:
            raise (exc if exc.source else exc.in_source(self.where())) from exc
        if self._reports_backlog_changes:
            # After every poll, also one that found nothing: a watched directory's backlog ends
            # when the files present at start are consumed, not when the next file appears.
            self._report_backlog()
        if result is END_OF_INPUT:
            return InputStatus.END_OF_INPUT
        if result is NOTHING_AVAILABLE:
            return InputStatus.NOTHING_AVAILABLE
        result = cast(SourceBatch, result)  # what is not a signal is records (or duck-typed like them)
        arrow = getattr(result, "record_batch", None)
        if arrow is not None:
            if arrow.num_rows:
                self.output.collect_batch(RecordBatch(None, result.timestamps, arrow=arrow))
        elif result.values:
            self.output.collect_batch(RecordBatch(result.values, result.timestamps))
        side = getattr(result, "side_outputs", None)
        if side:  # e.g. bad records: emitted in this poll, so before the next barrier, as the main ones
            for tag, values in side.items():
                self.output.collect_side(tag, RecordBatch(values))
        watermark = getattr(result, "watermark", None)
        if watermark is not None:  # the reader's own event time, after this poll's records
            self.output.emit_watermark(Watermark(watermark))
        return InputStatus.MORE_AVAILABLE

    def snapshot_state(self) -> Any:
        return None if self.reader is None else {"position": self.reader.snapshot_position()}

    def initialize_state(self, state: Any) -> None:
        if state:
            self._restored_position = state["position"]

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        """The source redistributes what its old readers had left among the new ones
        (:meth:`Source.redistribute_positions`): file splits, number and index ranges, phases."""
        positions = [None if not state else state["position"] for state in states]
        if all(position is None for position in positions):
            return
        shares = self.source.redistribute_positions(positions, self.ctx.parallelism)
        self._restored_position = shares[self.ctx.subtask_index]

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

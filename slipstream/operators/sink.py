"""``SinkOperator``: hands batches to a sink writer; flushes it at end of input.

When the job takes checkpoints and the writer supports two-phase commit, output is
exactly-once: the writer prepares at every checkpoint (its pending output is part of
the snapshot) and commits when the checkpoint completes; at end of input nothing is
committed until the job's final checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from slipstream.attributes import OperatorAttributes, OperatorAttributesBuilder
from slipstream.datastream.connectors.base import RecordWriteError, Sink, SinkWriter
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import SinkTransformation, Transformation
from slipstream.errors import CheckpointError, SlipstreamError, raise_user_error
from slipstream.operators.backlog_path import streamed
from slipstream.operators.base import StreamOperator
from slipstream.operators.elements import RecordBatch


class SinkOperator(StreamOperator):
    transformation_type = SinkTransformation
    backlog = streamed("a sink writes each record as it comes: sorting would only hold its output back")

    def __init__(self, transformation: SinkTransformation) -> None:
        super().__init__(transformation)
        self.sink: Sink = transformation.sink
        self.writer: SinkWriter = self.sink.create_writer()
        self._two_phase = False
        self._checkpoint_id = 0
        self._restored: list[Any] | None = None

    def _uses_two_phase_commit(self) -> bool:
        return self.ctx.checkpointing and self.writer.supports_two_phase_commit()

    def check_restore(self) -> None:
        """The writer refuses a restore that would lose output or write it twice, before any
        sink subtask of the job commits or deletes anything (that happens in :meth:`open`)."""
        if self._restored is None or not self._uses_two_phase_commit():
            return
        try:
            self.writer.check_commit_state(self._restored)
        except CheckpointError as error:
            raise CheckpointError(f"{self.where()}: {error}") from None

    def open(self) -> None:
        self.writer.open(self.ctx.subtask_index, self.ctx.parallelism)
        self._two_phase = self._uses_two_phase_commit()
        if self._two_phase:
            self.writer.begin_two_phase_commit()
            if self._restored is not None:
                self.writer.restore_commit_state(self._restored)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        try:  # a try, not a guard: sinks see one-record batches, where a guard's cost shows
            if batch.arrow is not None:
                self.writer.write_arrow(batch.arrow, batch.timestamps)
            else:
                self.writer.write(batch.values, batch.timestamps)
        except RecordWriteError as exc:
            raise self._write_error(exc) from exc.cause
        except Exception as exc:
            raise_user_error(self, exc, lambda: _written(batch), what="write of")

    def _write_error(self, exc: RecordWriteError) -> SlipstreamError:
        """Name this sink and the record a writer could not write (also when it fails later,
        at a flush or a checkpoint, on a record it had buffered)."""
        return self.user_error(exc.record, exc.cause, what="write of")

    @classmethod
    def attributes_for(cls, transformation: Transformation) -> OperatorAttributes:
        """A transactional sink's output appears when a checkpoint completes (or, without
        checkpoints, at end of input): FLIP-327's ``is_output_on_checkpoint``."""
        sink = cast(SinkTransformation, transformation).sink  # the registry pairs the two
        return OperatorAttributesBuilder().set_is_output_on_checkpoint(sink.is_transactional()).build()

    def on_watermark(self, watermark: Watermark) -> None:
        """Sinks are the end of the line: watermarks stop here."""

    def finish(self) -> None:
        if not self._two_phase:  # a two-phase-commit writer commits at the final checkpoint
            try:
                self.writer.flush()
            except RecordWriteError as exc:
                raise self._write_error(exc) from exc.cause

    # -- checkpoints ----------------------------------------------------------------------------
    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        self._checkpoint_id = checkpoint_id

    def snapshot_state(self) -> Any:
        if not self._two_phase:
            return None
        try:
            return {"writer": self.writer.prepare_commit(self._checkpoint_id)}
        except RecordWriteError as exc:
            raise self._write_error(exc) from exc.cause

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self._two_phase:
            self.writer.commit(checkpoint_id)

    def initialize_state(self, state: Any) -> None:
        if state:
            self._restored = [state["writer"]]

    def initialize_rescaled_state(self, states: list[Any], owns_key: Callable[[Any], bool]) -> None:
        """Old subtask ``i``'s pending output is committed by new subtask ``i % parallelism``."""
        parallelism, index = self.ctx.parallelism, self.ctx.subtask_index
        self._restored = [state["writer"] for old, state in enumerate(states)
                          if state and old % parallelism == index]

    def close(self) -> None:
        self.writer.close()


def _written(batch: RecordBatch) -> Any:
    """The record a failed write of ``batch`` is named by: the record, or the batch's first."""
    if len(batch.values) == 1:
        return batch.values[0]
    return f"a batch of {len(batch.values)} records starting with {batch.values[0]!r}"

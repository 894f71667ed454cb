"""``SinkOperator``: hands batches to a sink writer; flushes it at end of input."""

from __future__ import annotations

from slipstream.datastream.connectors.base import RecordWriteError, Sink, SinkWriter
from slipstream.datastream.transformations import SinkTransformation
from slipstream.errors import SlipstreamError
from slipstream.operators.elements import RecordBatch
from slipstream.operators.base import StreamOperator


class SinkOperator(StreamOperator):
    transformation_type = SinkTransformation

    def __init__(self, transformation: SinkTransformation) -> None:
        super().__init__(transformation)
        self.sink: Sink = transformation.sink
        self.writer: SinkWriter | None = None

    def open(self) -> None:
        self.writer = self.sink.create_writer()
        self.writer.open(self.ctx.subtask_index, self.ctx.parallelism)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> None:
        try:
            if batch.arrow is not None:
                self.writer.write_arrow(batch.arrow, batch.timestamps)
            else:
                self.writer.write(batch.values, batch.timestamps)
        except SlipstreamError:
            raise
        except RecordWriteError as exc:
            raise self.user_error(exc.record, exc.cause, what="write of") from exc.cause
        except Exception as exc:
            record = batch.values[0] if len(batch.values) == 1 else \
                f"a batch of {len(batch.values)} records starting with {batch.values[0]!r}"
            raise self.user_error(record, exc, what="write of") from exc

    def on_watermark(self, watermark) -> None:
        """Sinks are the end of the line: watermarks stop here."""

    def finish(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

"""Operator outputs inside a task: to the next chained operator, or to the task's record writers."""

from __future__ import annotations

from typing import Any

from slipstream.attributes import RecordAttributes
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import Watermark
from slipstream.operators.base import Output, StreamOperator
from slipstream.operators.elements import RecordBatch, WatermarkStatus
from slipstream.runtime.record_writer import RecordWriter


class ChainingOutput(Output):
    """Hands elements straight to the next operator of the chain."""

    def __init__(self, next_operator: StreamOperator, metrics: dict[str, Any],
                 next_metrics: dict[str, Any]) -> None:
        self._next = next_operator
        self._metrics = metrics
        self._next_metrics = next_metrics

    def collect_batch(self, batch: RecordBatch) -> None:
        count = len(batch)  # not len(batch.values): that would build the rows of an Arrow batch
        self._metrics["records_out"] += count
        self._next_metrics["records_in"] += count
        self._next.process_batch(batch, 0)

    def collect_side(self, tag: OutputTag, batch: RecordBatch) -> None:
        """A side output nobody reads is dropped, as in Flink (its readers break the chain)."""

    def emit_watermark(self, watermark: Watermark) -> None:
        self._next.process_watermark(watermark, 0)

    def emit_record_attributes(self, attributes: RecordAttributes) -> None:
        self._next.process_record_attributes(attributes, 0)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._next.process_watermark_status(status.idle, 0)


class NetworkOutput(Output):
    """The chain's last output: main records to the main edges, side outputs to their edges."""

    def __init__(self, main: list[RecordWriter], side: dict[OutputTag, list[RecordWriter]],
                 metrics: dict[str, Any]) -> None:
        self._main = main
        self._side = side
        self._all = main + [writer for writers in side.values() for writer in writers]
        self._metrics = metrics

    def collect_batch(self, batch: RecordBatch) -> None:
        self._metrics["records_out"] += len(batch)
        for writer in self._main:
            writer.emit(batch)

    def collect_side(self, tag: OutputTag, batch: RecordBatch) -> None:
        for writer in self._side.get(tag, ()):
            writer.emit(batch)

    def _broadcast(self, element: Any) -> None:
        for writer in self._all:
            writer.broadcast_event(element)

    def emit_watermark(self, watermark: Watermark) -> None:
        self._broadcast(watermark)

    def emit_record_attributes(self, attributes: RecordAttributes) -> None:
        self._broadcast(attributes)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self._broadcast(status)

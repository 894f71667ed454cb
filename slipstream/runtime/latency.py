"""Latency tracking with Flink's latency markers (``metrics.latency.interval``).

Every ``interval`` ms a streaming source's task sends a
:class:`~slipstream.operators.elements.LatencyMarker` down one channel of each of its
outputs. A marker waits behind the records ahead of it, so the time it spends in channels and
behind slow records is what a record spends there; it goes around user code. Each operator it
reaches records ``now - marked_time`` in its ``latency`` histogram (the last
:data:`HISTORY_SIZE` markers, of all its subtasks and sources: Flink's ``single`` granularity),
and the task forwards it on.

A marker costs nothing per record: a source task looks at the clock once per turn, and a task
meets a marker only where it would meet a watermark. Markers travel only on PIPELINED edges
between operators outside every loop and iteration: never into a feedback edge, an iteration
head or a loop body, whose termination and checkpoints count what is in their channels, and
never on a BLOCKING edge (its consumer reads long after). A source sends none while it reads
backlog, whose records are sorted, not streamed.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from slipstream.datastream.progress_listener import LatencyStatistics
from slipstream.datastream.scope import ROOT_SCOPE
from slipstream.datastream.transformations import LoopHeadTransformation
from slipstream.operators.elements import LatencyMarker
from slipstream.runtime.job_graph import EdgeKind, StreamEdge
from slipstream.runtime.record_writer import RecordWriter

LATENCY_METRIC = "latency"
"""The key of an operator's :class:`LatencyHistogram` in its metrics (Flink's metric name)."""

HISTORY_SIZE = 128
"""How many of the latest markers a histogram keeps (Flink's ``metrics.latency.history-size``)."""

class LatencyHistogram:
    """The latencies (ms) of an operator's latest :data:`HISTORY_SIZE` markers, and how many it had."""

    __slots__ = ("count", "samples")

    def __init__(self, samples: Iterable[float] = (), count: int = 0) -> None:
        self.samples: deque[float] = deque(samples, maxlen=HISTORY_SIZE)
        self.count = count

    def update(self, latency_ms: float) -> None:
        self.samples.append(latency_ms)
        self.count += 1

    def merged(self, other: LatencyHistogram) -> LatencyHistogram:
        """Both histograms' samples (the operator's subtasks on two worker processes), in a new one."""
        joined = LatencyHistogram(count=self.count + other.count)
        joined.samples = deque([*self.samples, *other.samples], maxlen=2 * HISTORY_SIZE)
        return joined

    def statistics(self) -> LatencyStatistics | None:
        """Percentiles over the window (None before the first marker); safe from another thread."""
        ordered = sorted(list(self.samples))  # list() copies the deque in one step under the GIL
        if not ordered:
            return None
        return LatencyStatistics(
            count=self.count, min=ordered[0], max=ordered[-1], mean=sum(ordered) / len(ordered),
            p50=quantile(ordered, 0.5), p95=quantile(ordered, 0.95), p99=quantile(ordered, 0.99),
            p999=quantile(ordered, 0.999))

    def __repr__(self) -> str:
        return f"LatencyHistogram({self.statistics()})"


def quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of an ascending list, interpolated linearly between neighbours."""
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def readable_metrics(metrics: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Copies of an operator's metrics with each latency histogram as its statistics (a dict of
    count, min, max, mean, p50, p95, p99, p999), as ``get_metrics()`` and a job's result show them."""
    readable = {}
    for name, values in list(metrics.items()):
        copy = dict(values)
        histogram = copy.get(LATENCY_METRIC)
        if isinstance(histogram, LatencyHistogram):
            statistics = histogram.statistics()
            if statistics is None:
                del copy[LATENCY_METRIC]
            else:
                copy[LATENCY_METRIC] = dataclasses.asdict(statistics)
        readable[name] = copy
    return readable


def carries_markers(edge: StreamEdge) -> bool:
    """Whether latency markers travel on ``edge``: PIPELINED, between operators outside every loop."""
    return edge.kind is EdgeKind.PIPELINED and all(
        node.transformation.scope == ROOT_SCOPE and not isinstance(node.transformation, LoopHeadTransformation)
        for node in (edge.source, edge.target))


class LatencyTracking:
    """A task's part: record a marker at each operator of its chain (``metrics``: theirs, a source's
    own excluded), forward it on one channel of each output that carries markers (round robin);
    a source task also sends them."""

    __slots__ = ("_histograms", "_interval_ms", "_next_at", "_turn", "_writers")

    def __init__(self, metrics: list[dict[str, Any]], writers: list[RecordWriter], interval_ms: int) -> None:
        self._histograms = [values.setdefault(LATENCY_METRIC, LatencyHistogram()) for values in metrics]
        self._writers = [writer for writer in writers if carries_markers(writer.edge)]
        self._interval_ms = interval_ms
        self._next_at = 0.0
        self._turn = 0

    def on_marker(self, marker: LatencyMarker) -> None:
        """A marker reached the task: every operator of its chain records it, then it goes on."""
        latency = time.monotonic() * 1000 - marker.marked_time
        for histogram in self._histograms:
            histogram.update(latency)
        self._forward(marker)

    def maybe_mark(self, source: str, subtask_index: int, streaming: bool) -> None:
        """At the end of a source task's turn: send a marker when one is due and the source streams.
        The operators chained to the source record it (at about nothing, as in Flink)."""
        now = time.monotonic() * 1000
        if now < self._next_at:
            return
        self._next_at = now + self._interval_ms
        if streaming:
            for histogram in self._histograms:
                histogram.update(0.0)
            self._forward(LatencyMarker(now, source, subtask_index))

    def _forward(self, marker: LatencyMarker) -> None:
        self._turn += 1
        for writer in self._writers:
            writer.send_event(marker, self._turn % len(writer.channels))


__all__ = ["HISTORY_SIZE", "LATENCY_METRIC", "LatencyHistogram", "LatencyTracking",
           "carries_markers", "quantile", "readable_metrics"]

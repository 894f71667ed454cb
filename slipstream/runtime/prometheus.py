"""The job's metrics in Prometheus's text format (``metrics_port``), with Flink's metric names.

Each scrape reads the monitor's latest sample (:mod:`slipstream.runtime.monitor`), so a scrape
never touches the job. Names are ``slipstream_<scope>_<Flink's name>`` where Flink has the
metric (``numRecordsIn``, ``numRecordsOut``, ``numRecordsInPerSecond``,
``numRecordsOutPerSecond``, ``currentInputWatermark``, ``isBackPressured``,
``lastCheckpointDuration``, ``lastCheckpointSize``, ``numberOfCompletedCheckpoints``,
``numberOfFailedCheckpoints``, ``uptime``), and slipstream's own otherwise (the backlog's).
Every value is a gauge, as Flink's Prometheus reporter exports its counters, except
``slipstream_operator_latency``: the source-to-operator latency (ms) from the latency markers
(:mod:`slipstream.runtime.latency`), a summary with ``quantile`` 0.5, 0.95, 0.99 and 0.999 over
the latest markers and ``_count`` (every marker so far), as Flink's reporter exports its
``latency`` histogram. Operator
metrics carry ``job_name``, ``job_id``, ``operator_name`` and ``operator_id`` (the uid) labels.
The endpoint listens on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slipstream.datastream.progress_listener import JobProgress, OperatorProgress

if TYPE_CHECKING:
    from slipstream.runtime.monitor import JobMonitor

HOST = "127.0.0.1"

OPERATOR_LABELS = ["job_name", "job_id", "operator_name", "operator_id"]
JOB_LABELS = ["job_name", "job_id"]

OperatorValue = Callable[[OperatorProgress], "float | None"]

OPERATOR_METRICS: list[tuple[str, str, OperatorValue]] = [
    ("numRecordsIn", "Records the operator received, over all its subtasks.", lambda op: op.records_in),
    ("numRecordsOut", "Records the operator emitted, over all its subtasks.", lambda op: op.records_out),
    ("numRecordsInPerSecond", "Records in per second since the previous sample.",
     lambda op: op.records_in_per_second),
    ("numRecordsOutPerSecond", "Records out per second since the previous sample.",
     lambda op: op.records_out_per_second),
    ("currentInputWatermark", "The least event-time watermark (ms) over the operator's subtasks.",
     lambda op: op.watermark),
    ("isBackPressured", "1 when some subtask's output was full when sampled.", lambda op: float(op.back_pressured)),
    ("backlogRecords", "Backlog records the operator buffered for its sorted batch work (FLIP-327).",
     lambda op: op.backlog_records if op.backlog_phase is not None else None),
    ("spilledBytes", "Bytes the operator spilled to disk.", lambda op: op.spilled_bytes),
    ("memoryBytes", "Bytes the operator holds against the job's memory budgets (estimated).",
     lambda op: op.memory_bytes),
]

LATENCY_QUANTILES = (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"), ("0.999", "p999"))
"""The quantiles of the latency summary, and the :class:`LatencyStatistics` field of each."""

JobValue = Callable[[JobProgress], "float | None"]

JOB_METRICS: list[tuple[str, str, JobValue]] = [
    ("uptime", "Milliseconds since the job started.", lambda p: p.elapsed_seconds * 1000),
    ("lastCheckpointDuration", "Milliseconds the latest completed checkpoint took.",
     lambda p: p.checkpoints[-1].duration_ms if p.checkpoints else None),
    ("lastCheckpointSize", "Bytes of the latest completed checkpoint.",
     lambda p: p.checkpoints[-1].size_bytes if p.checkpoints else None),
    ("numberOfCompletedCheckpoints", "Checkpoints completed.", lambda p: p.checkpoints_completed),
    ("numberOfFailedCheckpoints", "Checkpoints failed.", lambda p: p.checkpoints_failed),
    ("numberOfSkippedCheckpoints", "Checkpoints skipped (FLIP-327: sorting backlog, BLOCKING edge in use).",
     lambda p: p.checkpoints_skipped),
    ("backlogRecordsRead", "Records the sources have read.", lambda p: p.backlog.records_read),
    ("backlogRecordsRemaining", "Backlog records the sources have still to read (when they can tell).",
     lambda p: p.backlog.records_remaining),
    ("backlogEtaSeconds", "Seconds until the sources finish reading their backlog, at the current rate.",
     lambda p: p.backlog.eta_seconds),
    ("switchedAfterSeconds", "Seconds from the start to the switch from backlog to streaming.",
     lambda p: p.backlog.switched_after_seconds),
]


class ProgressCollector(Collector):
    """Collects a monitor's latest sample as gauges."""

    def __init__(self, progress: Callable[[], JobProgress]) -> None:
        self._progress = progress

    def collect(self) -> Iterator[Metric]:
        progress = self._progress()
        job = [progress.job_name, progress.job_id]
        for name, documentation, value in OPERATOR_METRICS:
            family = GaugeMetricFamily(f"slipstream_operator_{name}", documentation, labels=OPERATOR_LABELS)
            for operator in progress.operators:
                figure = value(operator)
                if figure is not None:
                    family.add_metric([*job, operator.name, operator.uid], figure)
            yield family
        yield _latency_summary(progress, job)
        for name, documentation, job_value in JOB_METRICS:
            family = GaugeMetricFamily(f"slipstream_job_{name}", documentation, labels=JOB_LABELS)
            figure = job_value(progress)
            if figure is not None:
                family.add_metric(job, figure)
            yield family


def _latency_summary(progress: JobProgress, job: list[str]) -> Metric:
    """Each operator's latency statistics as one summary family (quantile samples and a count)."""
    name = "slipstream_operator_latency"
    summary = Metric(name, "Source-to-operator latency (ms) of the latest latency markers.", "summary")
    for operator in progress.operators:
        latency = operator.latency
        if latency is None:
            continue
        labels = dict(zip(OPERATOR_LABELS, [*job, operator.name, operator.uid]))
        for quantile, field in LATENCY_QUANTILES:
            summary.add_sample(name, {**labels, "quantile": quantile}, getattr(latency, field))
        summary.add_sample(f"{name}_count", labels, latency.count)
    return summary


def progress_registry(monitor: JobMonitor) -> CollectorRegistry:
    """A registry of its own holding ``monitor``'s figures (not the process-wide default registry)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProgressCollector(lambda: monitor.latest))
    return registry


class MetricsServer:
    """prometheus_client's HTTP server on 127.0.0.1 for one job's metrics."""

    def __init__(self, monitor: JobMonitor, port: int) -> None:
        self._server, self._thread = start_http_server(port, addr=HOST, registry=progress_registry(monitor))
        self.port: int = self._server.server_address[1]
        self.url = f"http://{HOST}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve_metrics(monitor: JobMonitor, port: int) -> MetricsServer:
    """Serve ``monitor``'s job metrics on ``port`` (0: a free one) until :meth:`MetricsServer.close`."""
    return MetricsServer(monitor, port)


__all__ = ["MetricsServer", "ProgressCollector", "progress_registry", "serve_metrics"]

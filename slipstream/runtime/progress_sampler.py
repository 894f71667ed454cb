"""Samples a running job's figures into a :class:`~slipstream.datastream.progress_listener.JobProgress`.

It runs on the monitor's thread (:mod:`slipstream.runtime.monitor`), never on the job's: it
reads counters the tasks keep anyway (records in and out, backlog phase, spilled bytes), the
operators' current watermarks and latency histograms, whether each task's output is full, what the backlog sources
have left, and the checkpoint coordinator's figures. Each read is of one attribute or one
dict copy, both atomic under the GIL, so the job never waits for it. Rates are the change of a
count between two samples over the time between them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from slipstream.datastream.progress_listener import (
    BacklogProgress,
    CheckpointProgress,
    JobProgress,
    LatencyStatistics,
    OperatorProgress,
)
from slipstream.datastream.time import MIN_TIMESTAMP
from slipstream.datastream.transformations import SinkTransformation, SourceTransformation
from slipstream.operators.sink import SinkOperator
from slipstream.operators.window import LATE_DROPPED_METRIC
from slipstream.runtime.job_graph import StreamNode
from slipstream.runtime.latency import LATENCY_METRIC, LatencyHistogram
from slipstream.runtime.task import SourceTask, StreamTask

if TYPE_CHECKING:
    from slipstream.runtime.executor import Run


@dataclass
class _Subtask:
    task: StreamTask
    operator: Any


@dataclass
class _Operator:
    """One operator of the run: its metrics entry, its subtasks (none where they run on worker
    processes), its parallelism, and whether it is a source or a sink."""

    name: str
    metrics: dict[str, Any]
    subtasks: list[_Subtask]
    parallelism: int
    is_source: bool
    is_sink: bool


def run_operators(run: Run) -> list[_Operator]:
    """The run's operators in plan order, each with its subtasks' tasks and operator objects; on
    worker processes, where no task runs here, from the plan alone."""
    if not run.task_metrics:
        return [_Operator(_metrics_key(run, node), {}, [], node.parallelism,
                          isinstance(node.transformation, SourceTransformation),
                          isinstance(node.transformation, SinkTransformation))
                for vertex in run.graph.vertices for node in vertex.nodes]
    key_of = {id(values): name for name, values in run.metrics.items()}
    operators: dict[str, _Operator] = {}
    for task, node_metrics in run.task_metrics.items():
        for position, (operator, values) in enumerate(zip(task.operators, node_metrics)):
            name = key_of[id(values)]
            if name not in operators:
                operators[name] = _Operator(name, values, [], 0, isinstance(task, SourceTask) and position == 0,
                                            isinstance(operator, SinkOperator))
            operators[name].subtasks.append(_Subtask(task, operator))
            operators[name].parallelism += 1
    return list(operators.values())


class SubtasksSeen(NamedTuple):
    """What one process sees of an operator's subtasks that run in it; a worker reports it for the
    driver, which runs none of them."""

    finished: int
    watermark: int | None  # the least over them, None while one has none
    back_pressured: bool  # some subtask's output was full
    records_remaining: int | None  # a source's: what its backlog readers have left (None: one cannot tell)


def subtasks_seen(subtasks: list[_Subtask]) -> SubtasksSeen:
    return SubtasksSeen(sum(1 for s in subtasks if s.task.finished), _watermark(subtasks), _back_pressured(subtasks),
                        _remaining(_reading(subtasks)))


def combined(seen: list[SubtasksSeen]) -> SubtasksSeen:
    """One operator's subtasks as several processes see them, together."""
    watermarks = [s.watermark for s in seen if s.watermark is not None]
    remaining = [s.records_remaining for s in seen if s.records_remaining is not None]
    every = len(seen)  # a figure is known only when every process knows its own
    return SubtasksSeen(sum(s.finished for s in seen),
                        min(watermarks) if every and len(watermarks) == every else None,
                        any(s.back_pressured for s in seen),
                        sum(remaining) if every and len(remaining) == every else None)


def seen_in_this_process(run: Run) -> dict[str, SubtasksSeen]:
    """Per operator (by metrics name) with subtasks in this process, what it sees of them: what a
    worker reports."""
    return {operator.name: subtasks_seen(operator.subtasks) for operator in run_operators(run) if operator.subtasks}


def _metrics_key(run: Run, node: StreamNode) -> str:
    """The name ``node``'s metrics go by (as :meth:`JobRun._metrics_for` gives it)."""
    entry = run.metrics.get(node.name)
    return node.name if entry is None or entry.get("uid") == node.uid else f"{node.name} [{node.uid}]"


def _watermark(subtasks: list[_Subtask]) -> int | None:
    """The least watermark over the subtasks (None while one has none, or none runs here)."""
    least = min((getattr(s.operator, "current_watermark", MIN_TIMESTAMP) for s in subtasks), default=MIN_TIMESTAMP)
    return None if least == MIN_TIMESTAMP else least


def _back_pressured(subtasks: list[_Subtask]) -> bool:
    return any(not s.task.finished and not s.task.can_write() for s in subtasks)


class ProgressSampler:
    """Turns successive looks at a run into progress reports with rates."""

    def __init__(self, job_id: str, job_name: str, started: float) -> None:
        self.job_id = job_id
        self.job_name = job_name
        self.started = started  # time.time() when the job started
        self._run: Run | None = None
        self._operators: list[_Operator] = []
        self._last: dict[str, tuple[float, int, int]] = {}  # operator -> (time, records in, records out)

    def sample(self, run: Run | None, status: str) -> JobProgress:
        """The job's progress now (``run`` None: before its first run opened)."""
        now = time.time()
        if run is not self._run:
            self._run, self._operators, self._last = run, run_operators(run) if run is not None else [], {}
        # on worker processes the subtasks run elsewhere: their workers report what they see of them
        elsewhere = run.subtasks_elsewhere() if run is not None else {}
        operators = [self._operator(op, now, elsewhere) for op in self._operators]
        checkpoints = run.checkpoint_coordinator if run is not None else None
        figures = checkpoints.metrics if checkpoints is not None else {}
        return JobProgress(
            job_id=self.job_id, job_name=self.job_name, timestamp=now, elapsed_seconds=now - self.started,
            status=status, operators=operators, backlog=self._backlog(run, operators),
            checkpoints=[CheckpointProgress(*entry) for entry in list(checkpoints.history)] if checkpoints else [],
            checkpoints_completed=figures.get("completed", 0), checkpoints_failed=figures.get("failed", 0),
            checkpoints_skipped=figures.get("skipped", 0))

    def _operator(self, operator: _Operator, now: float, elsewhere: dict[str, SubtasksSeen]) -> OperatorProgress:
        assert self._run is not None  # sampled only with a run
        # by name: a run on worker processes replaces its entries with every report
        values = dict(self._run.metrics.get(operator.name, operator.metrics))
        records_in, records_out = values.get("records_in", 0), values.get("records_out", 0)
        before = self._last.get(operator.name)
        self._last[operator.name] = (now, records_in, records_out)
        span = now - before[0] if before is not None else 0.0
        rate_in = (records_in - before[1]) / span if before is not None and span > 0 else 0.0
        rate_out = (records_out - before[2]) / span if before is not None and span > 0 else 0.0
        here = [subtasks_seen(operator.subtasks)] if operator.subtasks else []
        remote = elsewhere.get(operator.name)
        seen = combined([*here, remote] if remote is not None else here)
        switch = values.get("switch_time")
        return OperatorProgress(
            name=operator.name, uid=values.get("uid", ""), parallelism=operator.parallelism,
            records_in=records_in, records_out=records_out,
            records_in_per_second=rate_in, records_out_per_second=rate_out,
            watermark=seen.watermark, back_pressured=seen.back_pressured, finished_subtasks=seen.finished,
            backlog_phase=values.get("backlog_phase"), backlog_records=values.get("backlog_records", 0),
            spilled_bytes=values.get("spilled_bytes", 0), batch_engine=values.get("batch_engine"),
            memory_bytes=sum(value for name, value in values.items() if name.startswith("memory_bytes.")),
            switch_seconds=switch, late_records_dropped=values.get(LATE_DROPPED_METRIC, 0),
            records_remaining=seen.records_remaining if operator.is_source else None,
            is_source=operator.is_source, is_sink=operator.is_sink, latency=_latency(values.get(LATENCY_METRIC)))

    def _backlog(self, run: Run | None, operators: list[OperatorProgress]) -> BacklogProgress:
        sources = [op for op in operators if op.is_source]
        sorting = any(op.backlog_phase in ("buffering", "batch work") for op in operators)
        read = sum(op.records_out for op in sources)
        rate = sum(op.records_out_per_second for op in sources)
        # each source's count was read before what it has left: read + remaining <= total
        remaining = None if any(op.records_remaining is None for op in sources) else \
            sum(op.records_remaining or 0 for op in sources)
        fraction = read / (read + remaining) if remaining is not None and read + remaining else None
        eta = remaining / rate if remaining is not None and rate > 0 else None
        if run is not None and not run.task_metrics:  # on worker processes: the readers are elsewhere
            active = run.in_backlog()
        else:
            active = bool(_reading([s for op in self._operators if op.is_source for s in op.subtasks])) or sorting
        return BacklogProgress(active=active, records_read=read, records_remaining=remaining,
                               fraction=fraction, eta_seconds=eta,
                               switched_after_seconds=_switched_after(run, self._operators))


def _latency(histogram: LatencyHistogram | None) -> LatencyStatistics | None:
    return histogram.statistics() if histogram is not None else None


def _reading(subtasks: list[_Subtask]) -> list[_Subtask]:
    """The source subtasks still reading backlog."""
    return [s for s in subtasks if not s.task.finished and s.operator.is_backlog()]


def _remaining(reading: list[_Subtask]) -> int | None:
    """Records the backlog readers still have, None when one of them cannot tell."""
    total = 0
    for subtask in reading:
        reader = getattr(subtask.operator, "reader", None)
        left = reader.records_remaining() if reader is not None else None
        if left is None:
            return None
        total += left
    return total


def _switched_after(run: Run | None, operators: list[_Operator]) -> float | None:
    """Seconds from the run's start to its switch from backlog to streaming: the job's own switch
    (no task has backlog left and a source goes on), or the last operator's (None: none yet)."""
    if run is None:
        return None
    job_switch = run.metrics.get("job", {}).get("switched_ms")
    if job_switch is not None:
        return float(job_switch) / 1000
    switched = [op.metrics["switched_at"] for op in operators if "switched_at" in op.metrics]
    return max(switched) - run.started_at if switched else None


__all__ = ["ProgressSampler", "run_operators"]

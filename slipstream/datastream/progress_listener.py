"""Progress listeners, as Spark's ``StreamingQueryListener``: a running job reports its progress.

Register a :class:`JobProgressListener` with ``env.add_progress_listener(listener)``; while
the job runs it gets :meth:`~JobProgressListener.on_job_started`, then every
``progress_interval`` seconds (``env.configure(progress_interval=...)``, 1 s by default)
:meth:`~JobProgressListener.on_job_progress` with a :class:`JobProgress`, and once the job
ends :meth:`~JobProgressListener.on_job_terminated`. The events are delivered on a monitor
thread of their own, never on the job's: a slow listener delays the next event, not a record.
The figures are samples of counters the tasks keep anyway, so listening costs the job nothing
per record. An exception in a listener is logged and the listener keeps getting events.

Example:
    >>> class PrintRates(JobProgressListener):
    ...     def on_job_progress(self, event):
    ...         for op in event.progress.operators:
    ...             print(op.name, op.records_out_per_second)
    >>> from slipstream.datastream import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env = env.add_progress_listener(PrintRates())
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BacklogProgress", "CheckpointProgress", "JobProgress", "JobProgressEvent", "JobProgressListener",
           "JobStartedEvent", "JobTerminatedEvent", "LatencyStatistics", "OperatorProgress"]


@dataclass(frozen=True)
class LatencyStatistics:
    """Source-to-operator latency (ms) of the latest latency markers an operator received (Flink's
    ``latency`` histogram over its last ``metrics.latency.history-size`` = 128 markers, of all its
    subtasks and sources): ``count`` is every marker so far, the rest are over the window."""

    count: int
    min: float
    max: float
    mean: float
    p50: float
    p95: float
    p99: float
    p999: float


@dataclass(frozen=True)
class OperatorProgress:
    """One operator, summed (counts, rates) or combined (watermark: the least) over its subtasks.

    ``watermark`` is None until every subtask has one; ``back_pressured`` says that some subtask's
    output was full when sampled (Flink's ``isBackPressured``); ``backlog_phase`` is None for an
    operator without a backlog phase, else "buffering", "batch work" or "streaming" (FLIP-327).
    A source's ``records_remaining`` is what its readers still have to read of their backlog (None
    when one cannot tell, and for every other operator). ``latency`` is its source-to-operator
    latency from the latency markers (None while none reached it: markers flow only while a
    source streams, and never into loops or iterations).
    """

    name: str
    uid: str
    parallelism: int
    records_in: int
    records_out: int
    records_in_per_second: float
    records_out_per_second: float
    watermark: int | None
    back_pressured: bool
    finished_subtasks: int
    backlog_phase: str | None = None
    backlog_records: int = 0
    spilled_bytes: int = 0
    memory_bytes: int = 0  # held in memory against the job's budgets (estimated; 0 when none is set)
    batch_engine: str | None = None
    switch_seconds: float | None = None
    late_records_dropped: int = 0
    records_remaining: int | None = None
    is_source: bool = False
    is_sink: bool = False
    latency: LatencyStatistics | None = None  # None until a latency marker reached it


@dataclass(frozen=True)
class BacklogProgress:
    """The backlog the sources still have to read: ``records_remaining`` is None when some backlog
    source cannot tell (then so are ``fraction`` and ``eta_seconds``). ``switched_after_seconds`` is
    when (after the start) the last operator switched from its backlog to streaming.

    The job runs on while a report is taken, so the counts read come first and what remains
    after: their sum falls short of the whole backlog by what was read in between, never over it,
    and ``fraction`` never goes back from one report to the next."""

    active: bool
    records_read: int
    records_remaining: int | None
    fraction: float | None
    eta_seconds: float | None
    switched_after_seconds: float | None


@dataclass(frozen=True)
class CheckpointProgress:
    """A completed checkpoint: its id, how long it took from trigger to written (ms), its size
    in bytes, and when it completed (seconds since the epoch)."""

    checkpoint_id: int
    duration_ms: float
    size_bytes: int
    completed_at: float


@dataclass(frozen=True)
class JobProgress:
    """A job's progress at ``timestamp`` (seconds since the epoch), as Spark's ``StreamingQueryProgress``."""

    job_id: str
    job_name: str
    timestamp: float
    elapsed_seconds: float
    status: str
    operators: list[OperatorProgress]
    backlog: BacklogProgress
    checkpoints: list[CheckpointProgress] = field(default_factory=list)  # the latest ones, oldest first
    checkpoints_completed: int = 0
    checkpoints_failed: int = 0
    checkpoints_skipped: int = 0

    def operator(self, name: str) -> OperatorProgress:
        """The operator called ``name`` (KeyError if none is)."""
        for candidate in self.operators:
            if candidate.name == name:
                return candidate
        raise KeyError(f"no operator named {name!r} in job '{self.job_name}'")

    def to_dict(self) -> dict[str, Any]:
        """The progress as plain data (what the web view's ``/api/progress`` sends as JSON)."""
        return asdict(self)


@dataclass(frozen=True)
class JobStartedEvent:
    job_id: str
    job_name: str
    timestamp: float


@dataclass(frozen=True)
class JobProgressEvent:
    progress: JobProgress


@dataclass(frozen=True)
class JobTerminatedEvent:
    """The job ended: ``status`` FINISHED, FAILED or CANCELED (a stop with a savepoint is CANCELED,
    as in Flink); ``error`` the failure's message; ``progress`` the last figures."""

    job_id: str
    job_name: str
    status: str
    error: str | None
    progress: JobProgress


class JobProgressListener:
    """Override the events you want; each does nothing by default."""

    def on_job_started(self, event: JobStartedEvent) -> None:
        """The job started running (its first run opened)."""

    def on_job_progress(self, event: JobProgressEvent) -> None:
        """The job's figures, every ``progress_interval`` seconds while it runs."""

    def on_job_terminated(self, event: JobTerminatedEvent) -> None:
        """The job ended (finished, failed or was stopped); the last event the listener gets."""

"""Where the subtasks of a job run: Flink's slot sharing, over worker processes.

Subtask ``i`` of every vertex goes to slot ``i`` (one slot sharing group), so a slot holds
one subtask of each vertex and a forward chain between vertices of equal parallelism stays
in one process. The slots (as many as the largest parallelism) are spread over the workers
in contiguous blocks; more workers than slots would stay idle, so there are never more.
"""

from __future__ import annotations

from dataclasses import dataclass

from slipstream.datastream.job_spec import JobSpec
from slipstream.errors import InvalidProgramError
from slipstream.runtime.job_graph import EdgeKind, JobGraph


@dataclass(frozen=True)
class Placement:
    """``workers`` processes sharing ``slots`` slots; slot ``s`` is on worker ``s * workers // slots``."""

    workers: int
    slots: int

    def worker_of(self, subtask: int) -> int:
        """The worker running subtask ``subtask`` of any vertex (the one of slot ``subtask``)."""
        return subtask * self.workers // self.slots


def place_subtasks(graph: JobGraph, spec: JobSpec) -> Placement | None:
    """The placement of ``graph`` on ``configure(workers=N)`` processes; None for one process (N = 1,
    or a job whose largest parallelism is 1). Refuses, naming why, a job workers cannot run yet."""
    workers = spec.runtime_options.workers
    slots = max((vertex.parallelism for vertex in graph.vertices), default=1)
    if workers == 1 or slots == 1:
        return None
    _check_runs_on_workers(graph, spec)
    return Placement(min(workers, slots), slots)


def _check_runs_on_workers(graph: JobGraph, spec: JobSpec) -> None:
    """What worker processes cannot run yet is refused at planning, not half run."""
    workers = spec.runtime_options.workers
    for vertex in graph.vertices:
        if any(edge.kind is EdgeKind.FEEDBACK for edge in vertex.in_edges) or \
                vertex.head.transformation.scope.get_level() > 0:
            raise InvalidProgramError(
                f"configure(workers={workers}): '{vertex.name}' is part of a loop or an iteration, which "
                "runs in one process only for now (its termination and snapshot need every task of "
                "its scope in one scheduler); run this job with workers=1")
    clock = spec.runtime_options.clock
    if clock is not None and clock.is_manual():
        raise InvalidProgramError(f"configure(workers={workers}): a manual clock lives in the driver process "
                                  "and cannot drive worker processes; use workers=1 with it")


__all__ = ["Placement", "place_subtasks"]

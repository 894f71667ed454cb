"""Where the subtasks of a job run: Flink's slot sharing, over worker processes.

Subtask ``i`` of every vertex goes to slot ``i`` (one slot sharing group), so a slot holds
one subtask of each vertex and a forward chain between vertices of equal parallelism stays
in one process. The slots (as many as the largest parallelism) are spread over the workers
in contiguous blocks; more workers than slots would stay idle, so there are never more.

A loop (FLIP-15) or an iteration (FLIP-176) is placed whole: every subtask of every vertex
inside its outermost scope — heads, body, feedback tails and the loops nested in it — runs on
one worker. Its termination protocol joins what all its head subtasks (its own and nested
loops') report in one coordinator, which the heads call, and which commands them, as they go
(:mod:`slipstream.runtime.termination`); a task inside an iteration learns that the batons it
aligns are epochs, which hold its channels and reach its listeners, from the iteration heads
among the tasks of its process (:func:`~slipstream.runtime.loop_task.attach_termination`); and
an iteration is checkpointed by snapshotting all its tasks and the channels between them in one
instant (:mod:`slipstream.runtime.checkpoint.iteration_region`). All of that needs the scope's
tasks in one scheduler, where it is exact as in one process. The scope's worker is the one with
the fewest subtasks so far; its way in (from the sources) and out (its exits) are ordinary
channels, which may cross workers. A worker left with nothing to run is not started.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from slipstream.datastream.job_spec import JobSpec
from slipstream.datastream.scope import StreamScope
from slipstream.errors import InvalidProgramError
from slipstream.runtime.job_graph import JobGraph, JobVertex


@dataclass(frozen=True)
class Placement:
    """``workers`` processes sharing ``slots`` slots; slot ``s`` is on worker ``s * workers // slots``,
    except the vertices ``pinned`` to one worker (by vertex id): those of a loop or an iteration."""

    workers: int
    slots: int
    pinned: Mapping[int, int] = field(default_factory=dict)

    def worker_of(self, vertex: int, subtask: int) -> int:
        """The worker running subtask ``subtask`` of vertex ``vertex`` (by its id)."""
        worker = self.pinned.get(vertex)
        return subtask * self.workers // self.slots if worker is None else worker


def place_subtasks(graph: JobGraph, spec: JobSpec) -> Placement | None:
    """The placement of ``graph`` on ``configure(workers=N)`` processes; None for one process (N = 1,
    a job whose largest parallelism is 1, or one that a single worker would run whole). Refuses,
    naming why, a job workers cannot run yet."""
    workers = spec.runtime_options.workers
    slots = max((vertex.parallelism for vertex in graph.vertices), default=1)
    if workers == 1 or slots == 1:
        return None
    _check_runs_on_workers(spec)
    scopes = loop_scopes(graph)
    for count in range(min(workers, slots), 1, -1):
        placement = _placed(graph, scopes, count, slots)
        if len(_load(graph, placement)) == count:
            return placement
    return None


def loop_scopes(graph: JobGraph) -> dict[StreamScope, list[JobVertex]]:
    """The vertices of each outermost loop or iteration scope, in plan order."""
    scopes: dict[StreamScope, list[JobVertex]] = {}
    for vertex in graph.vertices:
        scope = vertex.head.transformation.scope
        if scope.get_level() > 0:
            scopes.setdefault(scope.get_context_for_level(1), []).append(vertex)
    return scopes


def _placed(graph: JobGraph, scopes: dict[StreamScope, list[JobVertex]], workers: int, slots: int) -> Placement:
    """Slots over ``workers`` workers, then each scope on the worker with the fewest subtasks so far
    (the last of equals: worker 0 holds the slot of every parallelism-1 source and sink)."""
    pinned: dict[int, int] = {}
    inside = {vertex.id for members in scopes.values() for vertex in members}
    load = Counter(subtask * workers // slots for vertex in graph.vertices if vertex.id not in inside
                   for subtask in range(vertex.parallelism))
    for members in scopes.values():
        worker = min(range(workers), key=lambda w: (load[w], -w))
        for vertex in members:
            pinned[vertex.id] = worker
            load[worker] += vertex.parallelism
    return Placement(workers, slots, pinned)


def _load(graph: JobGraph, placement: Placement) -> Counter[int]:
    """Subtasks per worker (workers with none are not counted)."""
    return Counter(placement.worker_of(vertex.id, subtask) for vertex in graph.vertices
                   for subtask in range(vertex.parallelism))


def _check_runs_on_workers(spec: JobSpec) -> None:
    """What worker processes cannot run is refused at planning, not half run."""
    clock = spec.runtime_options.clock
    if clock is not None and clock.is_manual():
        raise InvalidProgramError(f"configure(workers={spec.runtime_options.workers}): a manual clock lives in "
                                  "the driver process and cannot drive worker processes; use workers=1 with it")


__all__ = ["Placement", "loop_scopes", "place_subtasks"]

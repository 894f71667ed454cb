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

How many workers: ``configure(workers=N)`` (Flink's ``local.number-taskmanager``), else the
``SLIPSTREAM_WORKERS`` environment variable, else one per core of the machine — never more than
the job's largest parallelism, so a job at parallelism 1 stays in one process. A job that did not
ask for workers but cannot run on them (a manual clock, or something in it that cannot be pickled)
runs in one process, and the log says why.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from slipstream.datastream.job_spec import JobSpec
from slipstream.datastream.scope import StreamScope
from slipstream.errors import InvalidProgramError
from slipstream.runtime.job_graph import JobGraph, JobVertex

_log = logging.getLogger("slipstream.workers")


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


WORKERS_VARIABLE = "SLIPSTREAM_WORKERS"
"""The environment variable that sets the worker count of the jobs that configure none."""


def spec_for_workers(spec: JobSpec) -> JobSpec:
    """The job as its workers get it: without its progress listeners, which watch the job in the
    driver (a worker's copies would report to no one, and a listener need not be picklable)."""
    return dataclasses.replace(spec, runtime_options=dataclasses.replace(spec.runtime_options, progress_listeners=[]))


def default_workers() -> int:
    """The worker count of a job that configures none: ``SLIPSTREAM_WORKERS`` when set, else the
    cores this process may run on (as Flink's local environment takes a slot per core)."""
    return _worker_count(None)[0]


def _worker_count(asked: int | None) -> tuple[int, str]:
    """The worker count for ``configure(workers=asked)`` (None: the default), and where it came from."""
    if asked is not None:
        return asked, f"configure(workers={asked})"
    value = os.environ.get(WORKERS_VARIABLE, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InvalidProgramError(f"{WORKERS_VARIABLE} must be a positive integer, got {value!r}")
        return int(value), f"{WORKERS_VARIABLE}={value}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores, f"one per core, {cores} here"


def place_subtasks(graph: JobGraph, spec: JobSpec) -> Placement | None:
    """The placement of ``graph`` on its worker processes (``configure(workers=N)``, else
    :func:`default_workers`); None for one process: one worker, a job whose largest parallelism is
    1, or one that a single worker would run whole. A job workers cannot run is refused, naming why,
    when it asked for workers, and runs in one process (logged) when it did not."""
    placement, why, fell_back = _decide(graph, spec)
    if fell_back:
        _log.info("job '%s' runs in one process, %s", spec.job_name, why)
    return placement


def describe_placement(graph: JobGraph, spec: JobSpec) -> str:
    """Where the job's subtasks run and why, in a sentence (the end of ``explain()``)."""
    try:
        placement, why, fell_back = _decide(graph, spec)
    except InvalidProgramError as refused:
        return f"Refused on worker processes: {refused}"
    if placement is None:
        return f"Runs in this process{', ' if fell_back else ': '}{why}"
    return f"Runs on {placement.workers} worker processes: {why}"


def _decide(graph: JobGraph, spec: JobSpec) -> tuple[Placement | None, str, bool]:
    """The placement (None: one process), why, and whether the job runs in one process because it
    cannot run on the workers it did not ask for."""
    asked = spec.runtime_options.workers
    workers, count = _worker_count(asked)
    slots = max((vertex.parallelism for vertex in graph.vertices), default=1)
    if workers == 1:
        return None, f"one worker ({count})", False
    if slots == 1:
        return None, f"its largest parallelism is 1 (workers: {count})", False
    reason = _why_not_on_workers(spec, graph, check_travel=asked is None)
    if reason is not None:
        if asked is not None:
            raise InvalidProgramError(f"configure(workers={asked}): {reason}")
        return None, f"not on {min(workers, slots)} worker processes: {reason}", True
    scopes = loop_scopes(graph)
    for used in range(min(workers, slots), 1, -1):
        placement = _placed(graph, scopes, used, slots)
        if len(_load(graph, placement)) == used:
            return placement, (f"{count}, at most the largest parallelism ({slots}); subtask i of every task "
                               "in slot i, each loop or iteration whole on one worker"), False
    return None, "one worker would run every subtask (its loops and iterations hold them all)", False


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


def _why_not_on_workers(spec: JobSpec, graph: JobGraph, check_travel: bool) -> str | None:
    """Why worker processes cannot run this job, if they cannot: a manual clock lives in the driver;
    and (``check_travel``) a job that cannot be pickled (a source holding an open iterator, a
    function holding a lock) cannot be sent. A job that asked for workers learns the latter when
    its run starts, as it is pickled then anyway."""
    clock = spec.runtime_options.clock
    if clock is not None and clock.is_manual():
        return "a manual clock lives in the driver process and cannot drive worker processes; use workers=1 with it"
    in_memory = _in_memory_paths(spec, graph)
    if in_memory:
        return (f"'{in_memory[0]}' is on fsspec's memory file system, which lives in the driver process: worker "
                "processes would not see it; use workers=1 with it")
    if check_travel:
        try:
            cloudpickle.dumps((spec_for_workers(spec), graph), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - whatever pickling raises, the job stays in this process
            return f"it cannot be sent to worker processes ({type(exc).__name__}: {exc})"
    return None


def _in_memory_paths(spec: JobSpec, graph: JobGraph) -> list[str]:
    """The job's file source paths, file sink base paths and checkpoint directory that are on
    fsspec's ``memory://`` file system (one per process)."""
    paths: list[Any] = [spec.checkpoint_config.get_checkpoint_storage_dir()]
    for vertex in graph.vertices:
        for node in vertex.nodes:
            paths += getattr(getattr(node.transformation, "source", None), "paths", None) or []
            paths.append(getattr(getattr(node.transformation, "sink", None), "base_path", None))
    return [path for path in paths if isinstance(path, str) and path.startswith("memory://")]


__all__ = ["WORKERS_VARIABLE", "Placement", "default_workers", "describe_placement", "loop_scopes", "place_subtasks",
           "spec_for_workers"]

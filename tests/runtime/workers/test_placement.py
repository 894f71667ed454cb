"""Subtasks are placed in slots as Flink's slot sharing places them, and slots spread over the workers."""

from __future__ import annotations

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.transformations import Partitioning
from slipstream.errors import InvalidProgramError
from slipstream.runtime.executor import JobRun
from slipstream.runtime.planner import plan_job
from slipstream.runtime.workers.placement import Placement, place_subtasks
from slipstream.testing import ManualClock


def planned(parallelism: int, workers: int, sink_parallelism: int = 1, chaining: bool = True):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    if not chaining:
        env.disable_operator_chaining()
    env.configure(workers=workers)
    env.from_collection([1, 2, 3]).map(lambda x: x).key_by(lambda x: x).map(lambda x: x) \
        .print().set_parallelism(sink_parallelism)
    spec = env._job_spec(list(env._transformations), "placement")
    return plan_job(spec), spec


@pytest.mark.parametrize("slots,workers,expected", [
    (2, 2, [0, 1]),
    (4, 2, [0, 0, 1, 1]),
    (3, 2, [0, 0, 1]),
    (4, 4, [0, 1, 2, 3]),
])
def test_slot_i_is_on_the_worker_of_its_contiguous_block(slots, workers, expected):
    assert [Placement(workers, slots).worker_of(i) for i in range(slots)] == expected


class RecordingLinks:
    """Links of one worker that only note which edges cross to another worker."""

    def __init__(self, placement: Placement, worker: int) -> None:
        self.placement, self.worker = placement, worker
        self.crossing: list = []

    def is_local(self, subtask: int) -> bool:
        return self.placement.worker_of(subtask) == self.worker

    def connect(self, edge, producer, consumer, channel):
        self.crossing.append(edge.partitioning)
        return channel


def test_forward_edges_stay_in_one_worker_and_workers_are_capped_by_the_slots():
    graph, spec = planned(parallelism=4, workers=8, sink_parallelism=4)
    assert place_subtasks(graph, spec) == Placement(workers=4, slots=4)
    graph, spec = planned(parallelism=4, workers=2, sink_parallelism=4, chaining=False)
    placement = place_subtasks(graph, spec)
    assert placement == Placement(workers=2, slots=4)
    links = RecordingLinks(placement, worker=1)
    run = JobRun(spec, graph, links=links)
    assert sorted(task.subtask_index for task in run.tasks if task.name.startswith("Map")) == [2, 2, 3, 3]
    assert Partitioning.HASH in links.crossing  # key_by spreads over both workers
    assert Partitioning.FORWARD not in links.crossing  # a forward edge joins slot i to slot i
    assert any(edge.partitioning is Partitioning.FORWARD for vertex in graph.vertices for edge in vertex.in_edges)


def test_one_worker_or_parallelism_one_runs_in_this_process():
    assert place_subtasks(*planned(parallelism=4, workers=1)) is None
    assert place_subtasks(*planned(parallelism=1, workers=4)) is None


def test_the_number_of_workers_comes_from_flinks_local_task_manager_key():
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(Configuration().set_string("local.number-taskmanager", "3")
                  .set_string("heartbeat.timeout", "2 s").set_string("heartbeat.interval", "50 ms"))
    options = env.runtime_options
    assert (options.workers, options.heartbeat_timeout_ms, options.heartbeat_interval_ms) == (3, 2000, 50)
    with pytest.raises(InvalidProgramError, match=r"local\.number-taskmanager must be at least 1"):
        env.configure(Configuration().set_string("local.number-taskmanager", "0"))
    with pytest.raises(InvalidProgramError, match="workers must be a positive integer"):
        env.configure(workers=0)


def test_a_manual_clock_is_refused_on_workers():
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(workers=2, clock=ManualClock())
    env.from_collection([1, 2]).key_by(lambda x: x).map(lambda x: x).print()
    with pytest.raises(InvalidProgramError, match="manual clock"):
        env.execute("manual")

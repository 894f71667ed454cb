"""Subtasks are placed in slots as Flink's slot sharing places them, and slots spread over the workers."""

from __future__ import annotations

import logging
import os
import threading

import fsspec
import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.formats.base import Encoder, StreamFormat
from slipstream.datastream.transformations import Partitioning
from slipstream.errors import InvalidProgramError
from slipstream.runtime.executor import JobRun
from slipstream.runtime.job_graph import EdgeKind
from slipstream.runtime.planner import plan_job
from slipstream.runtime.workers.placement import Placement, default_workers, loop_scopes, place_subtasks
from slipstream.testing import ManualClock


def planned(parallelism: int, workers: int | None, sink_parallelism: int = 1, chaining: bool = True):
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
    assert [Placement(workers, slots).worker_of(1, i) for i in range(slots)] == expected


class RecordingLinks:
    """Links of one worker that only note which edges cross to another worker."""

    def __init__(self, placement: Placement, worker: int) -> None:
        self.placement, self.worker = placement, worker
        self.crossing: list = []
        self.wakeup = threading.Event()

    def is_local(self, vertex, subtask: int) -> bool:
        return self.placement.worker_of(vertex.id, subtask) == self.worker

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



@pytest.mark.parametrize("where", ["source", "sink", "checkpoints"])
def test_a_job_on_the_memory_file_system_runs_in_this_process_or_is_refused_on_workers(monkeypatch, where):
    """fsspec's ``memory://`` lives in the driver: on workers a file source found nothing there
    ("path does not exist") and a file sink wrote where nobody reads. Asked for workers, the job is
    refused naming the path; with the default worker count it runs here."""
    fs = fsspec.filesystem("memory")
    root = f"memory://placement/{where}"
    fs.pipe_file(f"{root}/in/part-0.txt", b"1\n2\n3\n")
    local = os.path.join(os.path.dirname(__file__), "worker_jobs.py")

    def job(env: StreamExecutionEnvironment) -> None:
        lines = env.from_source(FileSource.for_record_stream_format(
            StreamFormat.text_line_format(), f"{root}/in" if where == "source" else local).build(), None, "lines")
        sink = f"{root}/out" if where == "sink" else os.path.join(os.path.dirname(local), "never-written")
        if where == "checkpoints":
            env.get_checkpoint_config().set_checkpoint_interval(50).set_checkpoint_storage_dir(f"{root}/chk")
        lines.key_by(len).map(str.upper).sink_to(FileSink.for_row_format(sink, Encoder.simple_string_encoder())
                                                   .build())

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).configure(workers=2)
    job(env)
    with pytest.raises(InvalidProgramError, match=f"configure.workers=2.: 'memory:///placement/{where}/.*' is on "
                                                  "fsspec's memory file system"):
        env.execute("memory on workers")
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    job(env)
    assert env.explain().splitlines()[-1].startswith("Runs in this process, not on 2 worker processes: "
                                                     f"'memory:///placement/{where}")


def planned_loops(parallelism: int, workers: int, loops: int = 1, nested: bool = False):
    """Numbers -> ``loops`` loops in sequence (the first with a loop nested in it) -> key_by -> a map."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(workers=workers)

    def countdown(numbers):
        if nested:
            numbers = numbers.iterate(lambda inner: (inner.filter(lambda x: x < 0), inner.map(lambda x: x)))
        stepped = numbers.map(lambda x: x - 1)
        return stepped.filter(lambda x: x > 0), stepped.filter(lambda x: x <= 0)

    stream = env.from_collection([1, 2, 3])
    for _ in range(loops):
        stream = stream.iterate(countdown)
    stream.key_by(lambda x: x).map(lambda x: x).print()
    spec = env._job_spec(list(env._transformations), "loops")
    return plan_job(spec), spec


def test_every_subtask_of_a_loop_and_the_loops_nested_in_it_runs_on_one_worker():
    graph, spec = planned_loops(parallelism=4, workers=2, nested=True)
    placement = place_subtasks(graph, spec)
    (members,) = loop_scopes(graph).values()
    assert {vertex.head.transformation.scope.get_level() for vertex in members} == {1, 2}  # the nested loop too
    assert any(edge.kind is EdgeKind.FEEDBACK for vertex in members for edge in vertex.in_edges)
    assert {placement.worker_of(vertex.id, i) for vertex in members for i in range(vertex.parallelism)} == {1}
    outside = [vertex for vertex in graph.vertices if vertex not in members]
    assert all(vertex.head.transformation.scope.get_level() == 0 for vertex in outside)
    # the rest stays spread by slots, so the job uses both workers
    assert {placement.worker_of(vertex.id, i) for vertex in outside for i in range(vertex.parallelism)} == {0, 1}
    for worker in (0, 1):
        tasks = JobRun(spec, graph, links=RecordingLinks(placement, worker)).tasks
        loop_tasks = [task for task in tasks if task.head.transformation.scope.get_level() > 0]
        assert len(loop_tasks) == (sum(vertex.parallelism for vertex in members) if worker == 1 else 0)


def test_loops_in_sequence_go_to_the_least_loaded_worker_each():
    graph, spec = planned_loops(parallelism=2, workers=2, loops=2)
    placement = place_subtasks(graph, spec)
    scopes = list(loop_scopes(graph).values())
    assert len(scopes) == 2
    workers = [{placement.worker_of(vertex.id, i) for vertex in members for i in range(vertex.parallelism)}
               for members in scopes]
    assert sorted(min(w) for w in workers) == [0, 1] and all(len(w) == 1 for w in workers)


def test_no_worker_is_started_without_a_subtask_to_run():
    """Everything at parallelism 1 but a map inside a loop at 3: the loop on one worker, the rest
    on another; a third would have nothing to run."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(1)
    env.configure(workers=3)

    def body(numbers):
        stepped = numbers.map(lambda x: x - 1).set_parallelism(3)
        return stepped.filter(lambda x: x > 0), stepped.filter(lambda x: x <= 0)

    env.from_collection([1, 2]).iterate(body).map(lambda x: x).set_parallelism(1).print()
    spec = env._job_spec(list(env._transformations), "two")
    graph = plan_job(spec)
    placement = place_subtasks(graph, spec)
    assert placement is not None and placement.workers == 2
    assert {placement.worker_of(vertex.id, i) for vertex in graph.vertices for i in range(vertex.parallelism)} \
        == {0, 1}


def test_without_a_worker_count_a_job_takes_a_worker_per_core_capped_by_its_parallelism(monkeypatch):
    monkeypatch.delenv("SLIPSTREAM_WORKERS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert default_workers() == cores
    graph, spec = planned(parallelism=8, workers=None, sink_parallelism=8)
    expected = min(cores, 8)
    assert (place_subtasks(graph, spec) or Placement(1, 8)).workers == expected
    assert place_subtasks(*planned(parallelism=1, workers=None)) is None  # parallelism 1: this process
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "3")
    assert place_subtasks(*planned(parallelism=8, workers=None, sink_parallelism=8)) == Placement(workers=3, slots=8)
    assert place_subtasks(*planned(parallelism=8, workers=1)) is None  # a count configured wins
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "two")
    with pytest.raises(InvalidProgramError, match="SLIPSTREAM_WORKERS must be a positive integer, got 'two'"):
        place_subtasks(*planned(parallelism=8, workers=None))


def test_a_job_that_did_not_ask_for_workers_and_cannot_run_on_them_runs_in_this_process_and_says_why(
        monkeypatch, caplog):
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(clock=ManualClock())
    results: list[int] = []
    env.from_collection([1, 2, 3]).key_by(lambda x: x).map(lambda x: x * 10).add_sink(results.append)
    with caplog.at_level(logging.INFO, logger="slipstream.workers"):
        env.execute("manual clock, no worker count")
    assert sorted(results) == [10, 20, 30]
    assert any("runs in one process" in r.getMessage() and "manual clock" in r.getMessage() for r in caplog.records)

    lock = threading.Lock()  # a function holding a lock cannot be pickled, so cannot be sent
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    results.clear()
    env.from_collection([1, 2, 3]).key_by(lambda x: x).map(lambda x, held=lock: x + 1).add_sink(results.append)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="slipstream.workers"):
        result = env.execute("a lock, no worker count")
    assert sorted(results) == [2, 3, 4]
    assert "workers_ready_ms" not in result.get_all_accumulator_results().get("job", {})
    assert any("cannot be sent to worker processes" in r.getMessage() for r in caplog.records)



def test_explain_ends_with_where_the_subtasks_run_and_why(monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")

    def last_line(parallelism: int, **options) -> str:
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        env.configure(**options)
        env.from_collection([1, 2, 3]).key_by(lambda x: x).map(lambda x: x).print()
        return env.explain().splitlines()[-1]

    assert last_line(4).startswith("Runs on 2 worker processes: SLIPSTREAM_WORKERS=2, at most the largest "
                                   "parallelism (4)")
    assert last_line(4, workers=3).startswith("Runs on 3 worker processes: configure(workers=3)")
    assert last_line(1) == "Runs in this process: its largest parallelism is 1 (workers: SLIPSTREAM_WORKERS=2)"
    assert last_line(4, workers=1) == "Runs in this process: one worker (configure(workers=1))"
    assert last_line(4, clock=ManualClock()).startswith(
        "Runs in this process, not on 2 worker processes: a manual clock")
    assert last_line(4, workers=2, clock=ManualClock()).startswith("Refused on worker processes: configure(workers=2)")

"""One driver runs every job: ``execute``, ``execute_and_collect`` and ``execute_async`` are its
clients, so they take checkpoints, restart, restore and fail alike, and the job's status and error
are the driver's, the same for the caller, the JobClient and the progress listeners."""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import MapFunction, RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.progress_listener import JobProgressListener, JobTerminatedEvent
from slipstream.errors import UserFunctionError
from slipstream.runtime.job_client import JobStatus

KEYS = 5
N = 3_000


class FailAt(MapFunction):
    """Raises the first ``times`` times it sees ``value``; one instance for every subtask and run."""

    def __init__(self, value: int, times: int = 1) -> None:
        self.value, self.left = value, times

    def __deepcopy__(self, memo: dict) -> FailAt:
        return self

    def map(self, value: int) -> int:
        if value == self.value and self.left > 0:
            self.left -= 1
            raise RuntimeError(f"injected failure at {value}")
        return value


class Counted(MapFunction):
    """Counts the records every subtask of every run reads."""

    def __init__(self) -> None:
        self.seen = 0

    def __deepcopy__(self, memo: dict) -> Counted:
        return self

    def map(self, value: int) -> int:
        self.seen += 1
        return value


class Endings(JobProgressListener):
    def __init__(self) -> None:
        self.events: list[JobTerminatedEvent] = []

    def on_job_terminated(self, event: JobTerminatedEvent) -> None:
        self.events.append(event)


def make_env(parallelism: int, checkpoint_dir: str, restarts: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=parallelism, batch_size=16, channel_capacity=2, backlog_sorting=False,
                  show_progress=False)
    env.get_checkpoint_config().set_checkpoint_interval_records(200)
    env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0))
    return env


def running_counts(env: StreamExecutionEnvironment, *functions: MapFunction) -> Any:
    """Numbers 1..N -> ``functions`` -> a running count per key: (key, 1), (key, 2), ..."""
    numbers = env.from_collection(list(range(1, N + 1))).set_parallelism(env.get_parallelism())
    for function in functions:
        numbers = numbers.map(function)
    return numbers.map(lambda x: (x % KEYS, 1)).key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))


def oracle() -> Counter:
    per_key = Counter(x % KEYS for x in range(1, N + 1))
    return Counter((key, count) for key, total in per_key.items() for count in range(1, total + 1))


def run_with(client: str, env: StreamExecutionEnvironment, stream: Any) -> None:
    """Run the job as ``client`` runs it, to its end or its failure."""
    if client == "execute":
        stream.add_sink(lambda record: None)
        env.execute("job")
    elif client == "collect":
        list(stream.execute_and_collect("job"))
    else:
        stream.add_sink(lambda record: None)
        job = env.execute_async("job")
        try:
            job.get_job_execution_result().result()
        finally:
            assert job.get_job_status().result() is (JobStatus.FAILED if job._driver.error else JobStatus.FINISHED)


@pytest.mark.one_process("it counts the attempts in its injector's attribute, in this process")
@pytest.mark.parametrize("client", ["execute", "collect", "async"])
def test_every_client_fails_the_same_way_after_the_same_restarts(tmp_path: Any, client: str) -> None:
    env = make_env(2, str(tmp_path / "chk"), restarts=2)
    endings = Endings()
    env.add_progress_listener(endings)
    fail = FailAt(N // 2, times=10)
    with pytest.raises(UserFunctionError, match=f"injected failure at {N // 2}"):
        run_with(client, env, running_counts(env, fail))
    assert fail.left == 7  # the first run and two restarts, whichever client ran it
    assert [(event.status, "injected failure" in (event.error or "")) for event in endings.events] == \
        [("FAILED", True)]


@pytest.mark.parametrize("client", ["execute", "collect", "async"])
def test_every_client_takes_checkpoints_and_ends_finished(tmp_path: Any, client: str) -> None:
    directory = str(tmp_path / "chk")
    env = make_env(2, directory, restarts=0)
    endings = Endings()
    env.add_progress_listener(endings)
    run_with(client, env, running_counts(env))
    assert os.listdir(directory)  # the final checkpoint is retained (num_retained 1)
    assert [event.status for event in endings.events] == ["FINISHED"]


@pytest.mark.one_process("its injector fails once by an attribute of its function, which a restarted worker has anew")
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_collect_restores_from_the_latest_checkpoint_after_an_injected_failure(tmp_path: Any,
                                                                             parallelism: int) -> None:
    env = make_env(parallelism, str(tmp_path / "chk"), restarts=1)
    counted, fail = Counted(), FailAt(2 * N // 3)
    got = Counter(running_counts(env, counted, fail).execute_and_collect())
    assert fail.left == 0
    assert got == oracle()  # every running count exactly once across the restart
    # restored, not started over: the second run read only what the latest checkpoint had not
    # (started over, the map would have seen 2N/3 + N records)
    assert N < counted.seen < N + N // 3


def test_a_cancelled_job_ends_cancelled_for_its_client_and_its_listeners(tmp_path: Any) -> None:
    reached, release = threading.Event(), threading.Event()

    def held(value: int) -> int:
        if value == N // 2:
            reached.set()
            release.wait(30)
        return value

    env = make_env(1, str(tmp_path / "chk"), restarts=0)
    endings = Endings()
    env.add_progress_listener(endings)
    running_counts(env, held).add_sink(lambda record: None)
    job = env.execute_async("held")
    assert reached.wait(30)
    stopped = job.cancel()
    assert not stopped.done()  # asked; the job's thread is held inside a turn
    assert job.get_job_status().result() is JobStatus.CANCELLING
    release.set()
    assert stopped.result(timeout=30) is None and job.wait(0)
    assert job.get_job_status().result() is JobStatus.CANCELED is job._driver.status
    assert [event.status for event in endings.events] == ["CANCELED"]

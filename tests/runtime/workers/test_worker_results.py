"""A job on two worker processes writes what it writes in one process, against plain-Python oracles:
keyed state, event-time windows, co_group at the end of input, and the backlog switch."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest
from worker_jobs import (
    backlog_job,
    backlog_totals,
    check_keyed,
    co_group_job,
    co_group_oracle,
    environment,
    keyed_job,
    window_job,
    window_oracle,
    worker_processes,
)

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.progress_listener import JobProgressListener
from slipstream.errors import UserFunctionError
from slipstream.testing import CollectingSink

N = 3000


@pytest.mark.parametrize("parallelism", [2, 4])
def test_keyed_state_on_two_workers_matches_one_process_and_the_oracle(parallelism):
    outputs = []
    for workers in (1, 2):
        sink = CollectingSink()
        env = environment(parallelism, workers)
        keyed_job(env, N, sink)
        env.execute("keyed")
        check_keyed(sink.values, N)
        # running sums depend on how the two sources interleave per key; counts and totals do not
        outputs.append(Counter((key, count) for key, count, _ in sink.values))
    assert outputs[0] == outputs[1]
    assert worker_processes() == []


@pytest.mark.parametrize("job,oracle", [(window_job, window_oracle), (co_group_job, co_group_oracle)],
                         ids=["event-time-windows", "co-group"])
@pytest.mark.parametrize("parallelism", [2, 4])
def test_windows_and_co_group_on_two_workers_match_the_oracle(parallelism, job, oracle):
    for workers in (1, 2):
        sink = CollectingSink()
        env = environment(parallelism, workers)
        job(env, N, sink)
        env.execute(job.__name__)
        assert Counter(sink.values) == oracle(N), f"workers={workers}"


def test_backlog_switch_on_two_workers_matches_one_process():
    outputs = []
    for workers in (1, 2):
        sink = CollectingSink()
        env = environment(2, workers)
        backlog_job(env, N, sink)
        env.execute("backlog")
        last = {key: total for key, total in sink.values}  # each subtask writes a key's sums in order
        assert last == backlog_totals(N), f"workers={workers}"
        outputs.append(Counter(sink.values))
    assert outputs[0] == outputs[1]


def test_collect_on_two_workers_hands_out_every_record():
    env = environment(2, 2)
    stream = env.from_collection(list(range(500))).map(lambda x: x * 3).key_by(lambda x: x % 5).map(lambda x: x + 1)
    with stream.execute_and_collect() as results:
        assert sorted(results) == [x * 3 + 1 for x in range(500)]
    assert worker_processes() == []


def test_a_callable_sink_on_two_workers_is_called_in_the_driver_with_every_record():
    """add_sink(list.append) appends to the driver's list, as in one process: a worker's copy of the
    sink relays its records instead of calling its own copy of the list's append."""
    seen: list[int] = []
    env = environment(2, 2)
    env.from_collection(list(range(600))).key_by(lambda x: x % 7).map(lambda x: x * 2).add_sink(seen.append)
    result = env.execute("callable sink")
    assert result.get_all_accumulator_results()["job"]["workers_ready_ms"] > 0  # it ran on workers
    assert sorted(seen) == [x * 2 for x in range(600)]
    assert worker_processes() == []


def test_a_callable_sink_failing_in_the_driver_names_its_operator_subtask_and_record_as_one_process_does():
    def refuse_41(value: int) -> None:
        if value == 41:
            raise ValueError("no 41 here")

    messages = []
    for workers in (1, 2):
        env = environment(2, workers)
        (env.from_collection(list(range(100))).key_by(lambda x: x % 2).map(lambda x: x)
         .add_sink(refuse_41).name("picky"))
        with pytest.raises(UserFunctionError) as failure:
            env.execute("failing callable sink")
        assert failure.value.record == 41 and isinstance(failure.value.__cause__, ValueError)
        messages.append(str(failure.value))
    assert "operator 'picky'" in messages[0] and "subtask " in messages[0] and "failed on write of 41: ValueError: no 41 here" in messages[0]
    assert messages[1] == messages[0]
    assert worker_processes() == []


def _log_sevens(x: int) -> int:
    if x % 100 == 7:
        logging.getLogger("tests.worker_logs").warning("saw %d", x)
        logging.getLogger("tests.worker_logs").info("info about %d", x)
    return x


def test_what_operators_log_on_workers_reaches_the_driver_s_logging_at_the_driver_s_levels(caplog):
    for level, expected in ((logging.WARNING, ["saw 7", "saw 107", "saw 207"]),
                            (logging.INFO, ["info about 7", "info about 107", "info about 207",
                                            "saw 7", "saw 107", "saw 207"]),
                            (logging.ERROR, [])):
        caplog.clear()
        with caplog.at_level(level, logger="tests.worker_logs"):
            env = environment(2, 2)
            env.from_collection(list(range(300))).key_by(lambda x: x % 3).map(_log_sevens).add_sink(lambda _: None)
            env.execute("logging on workers")
        records = [r for r in caplog.records if r.name == "tests.worker_logs"]
        assert sorted(r.getMessage() for r in records) == sorted(expected), logging.getLevelName(level)
        assert all(r.processName.startswith("worker ") for r in records)
    assert worker_processes() == []


def test_a_job_that_configures_no_worker_count_runs_on_the_default_workers(monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")  # as on a two-core machine with nothing set
    seen: list[int] = []
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_collection(list(range(200))).key_by(lambda x: x % 5).map(lambda x: x * 2).add_sink(seen.append)
    result = env.execute("default workers")
    assert result.get_all_accumulator_results()["job"]["workers_ready_ms"] > 0
    assert sorted(seen) == [x * 2 for x in range(200)]
    assert worker_processes() == []


def test_print_on_two_workers_prints_in_the_driver_as_one_process_does(capsys):
    printed = []
    for workers in (1, 2):
        env = environment(2, workers)
        env.from_collection(list(range(50))).key_by(lambda x: x % 3).map(lambda x: x + 1).print("out")
        env.execute("print")
        lines = capsys.readouterr().out.splitlines()  # sys.stdout of this process: a worker's copy relays
        assert all(line.startswith(("out:1> ", "out:2> ")) for line in lines), lines[:3]
        printed.append(sorted(lines))
    assert sorted(int(line.split("> ")[1]) for line in printed[0]) == list(range(1, 51))
    assert printed[1] == printed[0]  # each key's records on the same subtask, so the same prefixes
    assert worker_processes() == []


class _LockedListener(JobProgressListener):
    """A listener holding a lock, which cannot be pickled: it watches from the driver, never sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended: list[str] = []

    def on_job_terminated(self, event: Any) -> None:
        with self.lock:
            self.ended.append(event.job_name)


def test_a_progress_listener_that_cannot_be_pickled_keeps_a_job_on_the_default_workers(monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")
    listener = _LockedListener()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.add_progress_listener(listener)
    env.from_collection(list(range(100))).key_by(lambda x: x % 3).map(lambda x: x).add_sink(lambda _: None)
    result = env.execute("listened")
    assert result.get_all_accumulator_results()["job"]["workers_ready_ms"] > 0
    assert listener.ended == ["listened"]


def test_a_run_on_workers_ends_when_its_workers_finish_not_a_heartbeat_later():
    """A worker told to shut down goes at once: it used to idle one more heartbeat interval first
    (100 ms by default, on every job run on workers)."""
    env = environment(2, 2).configure(heartbeat_interval_ms=30_000, heartbeat_timeout_ms=120_000)
    sink = CollectingSink()
    env.from_collection(list(range(100))).map(lambda x: x * 2).sink_to(sink)
    started = time.monotonic()
    env.execute("short")
    assert sorted(sink.values) == [x * 2 for x in range(100)]
    # with the idle heartbeat the driver waited for the workers' bye until it killed them (10 s)
    assert time.monotonic() - started < 5

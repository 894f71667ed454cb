"""A background checkpoint writer pauses after each chunk it reads for as long as the chunk cost it
in CPU time, so the job keeps at least half of the interpreter, reads small chunks, and starts each
only while the job is idle (or after a longest deferral); a writer in the job's thread does none of it."""

from __future__ import annotations

import threading
import time

import pytest

from slipstream.runtime.checkpoint import pacing
from slipstream.runtime.checkpoint.pacing import BACKGROUND_CHUNK_ROWS, background_writer, chunk_rows, paced
from slipstream.runtime.clock import SystemClock
from slipstream.runtime.scheduler import Scheduler
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
from slipstream.datastream.state import ValueStateDescriptor


def burn(cpu_seconds: float) -> None:
    """Spend ``cpu_seconds`` of this thread's CPU time."""
    until = time.thread_time() + cpu_seconds
    while time.thread_time() < until:
        pass


def read_all(chunks, pauses: list[float], monkeypatch: pytest.MonkeyPatch, per_chunk: float) -> int:  # noqa: ANN001
    monkeypatch.setattr(pacing.time, "sleep", pauses.append)
    count = 0
    for _ in chunks:
        burn(per_chunk)
        count += 1
    return count


def test_a_background_writer_pauses_as_long_as_each_chunk_cost_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    counted: list[int] = []

    def writer() -> None:
        with background_writer():
            counted.append(read_all(paced(iter(range(4))), pauses, monkeypatch, per_chunk=0.01))

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    assert counted == [4]
    assert len(pauses) == 4 and all(pause >= 0.01 for pause in pauses)


def test_a_writer_in_the_jobs_thread_does_not_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    assert read_all(paced(iter(range(4))), pauses, monkeypatch, per_chunk=0.002) == 4
    assert pauses == []


def test_a_frozen_heap_state_is_read_paced_by_a_background_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heap backend's frozen view, which a checkpoint writer thread reads while the job goes on,
    goes through the pacing: every chunk of entries is followed by a pause in a writer's thread."""
    backend = HeapKeyedStateBackend(128)
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in range(10):
        backend.set_current_key(key)
        state.update(key * 2)
    view = backend.freeze()
    pauses: list[float] = []
    chunks: list[tuple[list, list]] = []
    monkeypatch.setattr(pacing.time, "sleep", pauses.append)

    def writer() -> None:
        with background_writer():
            chunks.extend(view.entries("v").chunks(4))

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    backend.release()
    assert [len(keys) for keys, _ in chunks] == [4, 4, 2]
    assert sorted(value for _, values in chunks for value in values) == [k * 2 for k in range(10)]
    assert len(pauses) == 3


def in_writer_thread(job_idle: threading.Event | None, read: list[float], chunks: int = 3) -> threading.Thread:
    """A background writer thread reading ``chunks`` chunks, noting when it got each."""

    def writer() -> None:
        with background_writer(job_idle):
            for _ in paced(iter(range(chunks))):
                read.append(time.perf_counter())

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    return thread


def test_a_background_writer_reads_only_while_the_job_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "SHORTEST_DEFERRAL_S", 30.0)
    monkeypatch.setattr(pacing, "LONGEST_DEFERRAL_S", 30.0)
    job_idle, read = threading.Event(), []
    thread = in_writer_thread(job_idle, read)
    time.sleep(0.3)
    assert read == []  # the job is busy: the writer waits
    job_idle.set()
    thread.join(10)
    assert len(read) == 3


def test_a_job_that_is_never_idle_still_gets_its_checkpoint_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "SHORTEST_DEFERRAL_S", 0.05)
    monkeypatch.setattr(pacing, "LONGEST_DEFERRAL_S", 0.05)
    read: list[float] = []
    started = time.perf_counter()
    in_writer_thread(threading.Event(), read).join(10)
    assert len(read) == 3
    assert read[0] - started >= 0.05  # each chunk waited the shortest deferral first


def test_a_busy_job_defers_the_writer_by_as_long_as_its_last_step_within_bounds() -> None:
    assert pacing.deferral(0.0) == pacing.SHORTEST_DEFERRAL_S
    assert pacing.deferral(0.004) == pytest.approx(0.004)
    assert pacing.deferral(1.0) == pacing.LONGEST_DEFERRAL_S


def test_a_background_writer_reads_small_chunks() -> None:
    assert chunk_rows(4096) == 4096
    sizes: list[int] = []

    def writer() -> None:
        with background_writer():
            sizes.extend([chunk_rows(4096), chunk_rows(100)])

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    assert sizes == [BACKGROUND_CHUNK_ROWS, 100] and BACKGROUND_CHUNK_ROWS < 4096


def test_the_scheduler_is_idle_exactly_while_it_waits_for_the_outside_world() -> None:
    scheduler = Scheduler([], SystemClock(), seed=0)
    seen: list[bool] = []

    def wake_later() -> None:
        time.sleep(0.1)
        seen.append(scheduler.idle.is_set())
        scheduler.wake()

    assert not scheduler.idle.is_set()
    thread = threading.Thread(target=wake_later)
    thread.start()
    scheduler.idle_wait(0, 10.0)
    thread.join()
    assert seen == [True] and not scheduler.idle.is_set()

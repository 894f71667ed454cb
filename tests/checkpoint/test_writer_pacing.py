"""A background checkpoint writer pauses after each chunk it reads for as long as the chunk cost it
in CPU time, so the job keeps at least half of the interpreter; a writer in the job's thread does not."""

from __future__ import annotations

import threading
import time

import pytest

from slipstream.runtime.checkpoint import pacing
from slipstream.runtime.checkpoint.pacing import background_writer, paced
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

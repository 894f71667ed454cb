"""A background checkpoint writer's share of the interpreter: the job's idle time, in small steps.

A writer thread encoding heap state walks Python objects, holding the interpreter lock the
job's thread needs for every record. Left alone it takes the interpreter whenever it can: on
a 2.5 GHz Xeon the first full checkpoint of ``latency.py``'s 10^6 profiles took 6.5 s of it,
and the job, which needs about a third of the interpreter at 10^4 records/s, fell behind
(p99 190 ms). So a writer running in a thread of its own (:func:`background_writer`):

* starts each step while the job's scheduler waits for input (its ``idle`` event), so that a
  record arriving meanwhile waits for at most the rest of one step, not for turns of the
  interpreter lock against a writer working through its chunk; a busy job makes it wait at
  most as long as its last step cost (:func:`deferral`), so that it still gets a third of the
  interpreter and a job that is never idle still gets its checkpoints;
* reads :data:`BACKGROUND_CHUNK_ROWS` entries a step (:func:`chunk_rows`), about 0.6 ms of
  work there, most of it the fixed cost of a step: a record waits for less, and the writer
  spends about three times the CPU per entry that 4,096-entry chunks cost it;
* sleeps after each step as long as the step cost it in CPU time, so that it never takes more
  than half of the interpreter even when the job is idle (the job's source threads need it to
  hand over the next record).

Measured there with ``latency.py`` (10^6 keys, 10^4 records/s, a checkpoint every second, median
of three 10 s runs): p99 54 ms and p99.9 69 ms when every step started at once and read 4,096
entries; 16.6 and 38.6 ms with steps started in idle time; 4.3-4.7 and 7.6-9.1 ms with 128-entry
steps. Over 30 s, which always hold the full write of the 10^6 entries and the folding back of the
changes made meanwhile, 512-entry steps gave p99 19 ms and 128-entry steps 7.4-8.8 ms. A writer in the
job's own thread (the final checkpoint, a savepoint at stop) does none of this: nothing waits
for the interpreter meanwhile. Encoding in a forked child instead was tried and measured worse
on a 2-core machine, p99 48 ms: the fork stalls the job, and the child's work and the
copy-on-write faults compete with it for the cores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

BACKGROUND_CHUNK_ROWS = 128
"""Entries a background writer reads per step."""

DEFERRAL_PER_CPU = 1.0
"""How long a background writer waits for a busy job to go idle, per CPU second its last step cost."""

SHORTEST_DEFERRAL_S, LONGEST_DEFERRAL_S = 0.001, 0.01
"""The bounds of that wait."""

_writer = threading.local()


@contextmanager
def background_writer(job_idle: threading.Event | None = None) -> Iterator[None]:
    """Mark the current thread as a background checkpoint writer while the block runs; ``job_idle``
    is set while the job's scheduler has nothing to run (None: pace by CPU time only)."""
    _writer.background, _writer.job_idle = True, job_idle
    try:
        yield
    finally:
        _writer.background, _writer.job_idle = False, None


def chunk_rows(size: int) -> int:
    """How many entries to read per step: ``size``, or fewer in a background writer."""
    return min(size, BACKGROUND_CHUNK_ROWS) if getattr(_writer, "background", False) else size


def paced(chunks: Iterator[T]) -> Iterator[T]:
    """``chunks`` as they are; in a background writer, each one read and used in the job's idle
    time, then a pause as long as that cost the thread in CPU time (see the module docstring)."""
    if not getattr(_writer, "background", False):
        yield from chunks
        return
    job_idle: threading.Event | None = _writer.job_idle
    cost = 0.0
    while True:
        if job_idle is not None:
            job_idle.wait(deferral(cost))
        worked_from = time.thread_time()
        chunk = next(chunks, None)
        if chunk is None:
            return
        yield chunk
        cost = time.thread_time() - worked_from
        time.sleep(cost)


def deferral(cost: float) -> float:
    """How long a background writer waits for the job to go idle after a step that cost it ``cost``
    CPU seconds."""
    return min(LONGEST_DEFERRAL_S, max(SHORTEST_DEFERRAL_S, DEFERRAL_PER_CPU * cost))


__all__ = ["BACKGROUND_CHUNK_ROWS", "DEFERRAL_PER_CPU", "LONGEST_DEFERRAL_S", "SHORTEST_DEFERRAL_S",
           "background_writer", "chunk_rows", "deferral", "paced"]

"""Python's cyclic garbage collector while jobs run: a full collection walks what is new, not the whole heap.

A full (generation 2) collection walks every container object of the process, and
stops the job while it does. Once a backlog is installed as keyed state that is
millions of objects (a profile ``Row`` is three), so each full collection is a pause
of hundreds of milliseconds — the longest in streaming. While a job runs, the
survivors of each full collection are therefore moved to the interpreter's permanent
generation (``gc.freeze()``), so the next full collection walks only what was created
since. Young collections are not affected.

Frozen objects are still freed by reference counting as soon as nothing refers to
them; only garbage in reference cycles among them waits. So that this stays bounded,
once the frozen heap has grown by a quarter since it was last walked whole (the ratio
Python schedules full collections by), it is unfrozen, and the next full collection
walks — and cleans — everything. When the last running job ends, everything is
unfrozen. A process that froze objects itself (a server before ``fork``) keeps its own
arrangement: then slipstream leaves the collector alone.

The one whole walk a streaming job cannot avoid is done at the moment it chooses: when
it switches from its backlog to streaming (:func:`collect_now`), within the pause the
switch makes anyway, rather than at a random moment of the live stream.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

_lock = threading.Lock()
_jobs = 0  # running jobs that asked for the policy; it is installed while there is one
_walk_whole_above = 0  # frozen objects beyond which the next full collection walks everything


def _after_collection(phase: str, info: dict[str, Any]) -> None:
    """A ``gc.callbacks`` hook: freeze the survivors of each full collection, or unfreeze all
    once the frozen heap grew by a quarter since it was last walked whole."""
    global _walk_whole_above
    if phase != "stop" or info["generation"] != 2:
        return
    walked_whole = gc.get_freeze_count() == 0
    gc.freeze()
    frozen = gc.get_freeze_count()
    if walked_whole:
        _walk_whole_above = frozen + frozen // 4
    elif frozen > _walk_whole_above:
        gc.unfreeze()


def job_started() -> bool:
    """A job starts running: install the policy unless the process froze objects itself.
    Whether it did; a job for which it did calls :func:`job_ended` when it ends."""
    global _jobs
    with _lock:
        if _jobs == 0:
            if gc.get_freeze_count():
                return False
            gc.callbacks.append(_after_collection)
        _jobs += 1
        return True


def collect_now() -> None:
    """Walk the whole heap now and freeze what survives (only while a job has the policy)."""
    gc.unfreeze()
    gc.collect()  # _after_collection freezes the survivors


def job_ended() -> None:
    """A job for which :func:`job_started` installed the policy ended; the last one unfreezes everything."""
    global _jobs
    with _lock:
        _jobs -= 1
        if _jobs == 0:
            gc.callbacks.remove(_after_collection)
            gc.unfreeze()

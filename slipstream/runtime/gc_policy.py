"""Python's cyclic garbage collector while jobs run: a full collection walks what is new, not the whole heap.

A full (generation 2) collection walks every container object of the process, and
stops the job while it does. Once a backlog is installed as keyed state that is
millions of objects (a profile ``Row`` is two), so each full collection is a pause
of hundreds of milliseconds — the longest in streaming. While a job runs, the
survivors of each full collection and of each generation 1 collection are therefore
moved to the interpreter's permanent generation (``gc.freeze()``), so a full
collection walks only what was promoted since the last generation 1 collection: next
to nothing. Without the second, a streaming job's full collections still walked what
its state had gained since the previous one — values copied on write during a
checkpoint, the sets of changed keys — 3·10^4 objects and 8–48 ms every few seconds
at 10^4 records/s (``benchmarks/latency.py``). Young collections are not affected.

Frozen objects are still freed by reference counting as soon as nothing refers to
them; only garbage in reference cycles among them waits. So that this stays bounded,
once the heap has grown by a quarter since it was last walked whole (the ratio Python
schedules full collections by; measured in allocated memory blocks, which costs
nothing to read, where counting frozen objects would walk them), it is unfrozen, and
the next full collection walks — and cleans — everything. When the last running job
ends, everything is unfrozen. A process that froze objects itself (a server before
``fork``) keeps its own arrangement: then slipstream leaves the collector alone — except
in a worker process, whose fork server froze its imports for it (:func:`adopt_inherited_freeze`):
a worker's run follows the policy as a driver's does.

When a job starts, what the process holds then (its imports, the job itself) is frozen:
otherwise the first full collection of a run walked all of it — in a fresh worker process
22–25 ms, after about 1.5 s of a stream at 10^4 records/s, a worker's longest pause
(``benchmarks/scaling.py``'s latency runs). When a job switches from its backlog to
streaming, everything is frozen at once again (:func:`freeze_now`, which costs nothing)
and the quarter's growth is counted from there: the state the backlog built is never
walked while the job streams, at the price of keeping the backlog's cyclic garbage, if it
left any, until that growth.
"""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

_lock = threading.Lock()
_jobs = 0  # running jobs that asked for the policy; it is installed while there is one
_walk_whole_above = 0  # allocated blocks beyond which the next full collection walks everything
_walking_whole = True  # nothing is frozen: the next full collection walks everything
_inherited_freeze = False  # what is frozen was frozen for this process, by slipstream's fork server


def _after_collection(phase: str, info: dict[str, Any]) -> None:
    """A ``gc.callbacks`` hook: freeze the survivors of each full and generation 1 collection, or
    unfreeze all once the heap grew by a quarter since it was last walked whole."""
    global _walking_whole
    if phase != "stop" or info["generation"] == 0:
        return
    if info["generation"] == 1:  # its survivors, now the only objects in generation 2
        if not _walking_whole:  # else they wait for the whole walk
            gc.freeze()
        return
    if _walking_whole:  # this one walked everything
        freeze_now()
    elif sys.getallocatedblocks() > _walk_whole_above:
        gc.unfreeze()
        _walking_whole = True
    else:
        gc.freeze()


def freeze_now() -> None:
    """Freeze everything now and count the quarter's growth from here (only while a job has the policy)."""
    global _walk_whole_above, _walking_whole
    gc.freeze()
    blocks = sys.getallocatedblocks()
    _walk_whole_above = blocks + blocks // 4
    _walking_whole = False


def adopt_inherited_freeze() -> None:
    """This process was forked by slipstream's fork server, which froze its imports: they are this
    process's to manage, so its runs follow the policy (a worker's state is walked by full collections
    otherwise, as a driver's would be). Also spares counting the frozen objects, which walks them all:
    4-5 ms in a worker, at every run."""
    global _inherited_freeze
    _inherited_freeze = True


def job_started() -> bool:
    """A job starts running: install the policy unless the process froze objects itself.
    Whether it did; a job for which it did calls :func:`job_ended` when it ends."""
    global _jobs, _walking_whole, _walk_whole_above
    with _lock:
        if _jobs == 0:
            if not _inherited_freeze and gc.get_freeze_count():  # nothing frozen: costs nothing to count
                return False
            _walking_whole, _walk_whole_above = True, 0
            gc.callbacks.append(_after_collection)
        _jobs += 1
        return True


def job_ended() -> None:
    """A job for which :func:`job_started` installed the policy ended; the last one unfreezes everything."""
    global _jobs
    with _lock:
        _jobs -= 1
        if _jobs == 0:
            gc.callbacks.remove(_after_collection)
            gc.unfreeze()

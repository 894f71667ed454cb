"""Checkpoints and recovery: barriers, alignment, the coordinator, storage and restore.

Modules: :mod:`barriers` (the barrier element and per-task alignment), :mod:`snapshot`
(what a task's state becomes on disk and how it comes back, also at another
parallelism), :mod:`coordinator` (triggers, acknowledgements, completion, FLIP-327
rules), :mod:`storage` and :mod:`manifest` (the on-disk format and its verification),
:mod:`fs` (the file layer, with a fault-injecting variant for tests),
:mod:`feedback_log` (a FLIP-15 loop's head logging what goes round, FLINK-3257),
:mod:`iteration_region` (a FLIP-176 iteration snapshotted whole) and
:mod:`recovery` (running a job with restarts and restores).
"""

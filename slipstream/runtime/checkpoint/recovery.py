"""Running a job with checkpoints, restarts and restores.

``execute_with_recovery`` plans the job once and runs it; when a task fails and the
restart strategy allows another attempt, it builds the job afresh and restores it
from the latest completed checkpoint (from the start when there is none). A job
started with ``restore_from`` first restores from the given checkpoint — ``"latest"``
picks the newest complete one in the storage directory, falling back to an older
one if the newest fails verification (a sink that committed output past the older
one refuses the fallback, so nothing is silently produced twice).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING

from slipstream.datastream.checkpoint_config import ExternalizedCheckpointCleanup
from slipstream.errors import CheckpointError, CorruptCheckpointError, InvalidProgramError
from slipstream.runtime.checkpoint.coordinator import CheckpointCoordinator
from slipstream.runtime.checkpoint.fs import FileSystem
from slipstream.runtime.checkpoint.iteration_region import restore_iteration_regions
from slipstream.runtime.checkpoint.snapshot import job_fingerprint, restore_tasks
from slipstream.runtime.checkpoint.storage import CheckpointStorage, VerifiedCheckpoint

if TYPE_CHECKING:
    from slipstream.datastream.environment import JobExecutionResult, StreamExecutionEnvironment
    from slipstream.datastream.transformations import Transformation

log = logging.getLogger("slipstream.checkpoint")

LATEST = "latest"

NOT_RESTARTABLE = (InvalidProgramError, CheckpointError)
"""Failures a restart cannot cure: a wrong program, a checkpoint that cannot be read or used."""


def find_restore_point(storage: CheckpointStorage, restore_from: str, fingerprint: str) -> VerifiedCheckpoint | None:
    """The verified checkpoint to restore from, or None for a fresh start (``latest`` of an empty
    directory). An explicit path must verify; ``latest`` falls back over damaged checkpoints and
    fails with the newest one's error when none verifies."""
    if restore_from != LATEST:
        return storage.read_verified(restore_from, fingerprint)
    complete = storage.complete_ids()
    first_error: CorruptCheckpointError | None = None
    for checkpoint_id in reversed(complete):
        try:
            return storage.read_verified(storage.path_of(checkpoint_id), fingerprint)
        except CorruptCheckpointError as error:
            log.warning("checkpoint %s cannot be used, trying an older one: %s",
                        storage.path_of(checkpoint_id), error)
            first_error = first_error or error
    if first_error is not None:
        raise first_error
    incomplete = [i for i in storage.checkpoint_ids() if i not in complete]
    if incomplete:
        log.warning("no complete checkpoint in %s (only incomplete ones: %s); starting afresh",
                    storage.directory, incomplete)
    return None


def execute_with_recovery(env: StreamExecutionEnvironment, transformations: list[Transformation], job_name: str,
                          restore_from: str | None, fs: FileSystem | None = None) -> JobExecutionResult:
    from slipstream.runtime.executor import JobRun
    from slipstream.runtime.planner import plan_job

    graph = plan_job(env, transformations)
    config = env.get_checkpoint_config()
    enabled = config.is_checkpointing_enabled()
    strategy = env.get_restart_strategy()
    max_restarts = strategy.max_restarts() if strategy is not None else 0
    fingerprint = job_fingerprint(graph)
    directory = config.get_checkpoint_storage_dir()
    temporary = None
    if directory is None:
        if restore_from is not None and restore_from != LATEST:
            directory = os.path.dirname(os.path.abspath(restore_from))
        elif restore_from is not None:
            raise InvalidProgramError("restore_from='latest' needs a checkpoint directory: "
                                      "env.get_checkpoint_config().set_checkpoint_storage_dir(...)")
        else:
            directory = temporary = tempfile.mkdtemp(prefix="slipstream-checkpoints-")
    storage = CheckpointStorage(directory, config.get_num_retained_checkpoints(), fs)
    storage.ensure_directory()
    restore = None if restore_from is None else find_restore_point(storage, restore_from, fingerprint)
    storage.remove_incomplete()
    attempt = 0
    try:
        while True:
            run = JobRun(env, graph, job_name)
            coordinator = None
            try:
                for task in run.tasks:
                    for operator in task.operators:
                        operator.ctx.attempt_number = attempt
                if enabled:
                    existing = storage.checkpoint_ids()
                    coordinator = CheckpointCoordinator(run.tasks, config, storage, fingerprint, job_name,
                                                        run.clock, (max(existing) + 1) if existing else 1)
                if restore is not None:
                    ended = restore_iteration_regions(run.tasks, restore.manifest, restore.files, restore.path)
                    restore_tasks([task for task in run.tasks if task not in ended], restore.manifest,
                                  restore.files, restore.path)
                    log.info("restored job '%s' from %s", job_name, restore.path)
                run.open()
                scheduler = run.scheduler
                if coordinator is None:
                    scheduler.run()
                else:
                    clock = run.clock
                    on_turn = coordinator.on_turn
                    while True:
                        on_turn(clock.now_ms())
                        if not scheduler.run_turn():
                            break
                    coordinator.final_checkpoint()
            except BaseException as exc:
                run.close_quietly()
                if not isinstance(exc, Exception) or isinstance(exc, NOT_RESTARTABLE) or attempt >= max_restarts:
                    raise
                attempt += 1
                log.warning("job '%s' failed (%s: %s); restart %d of %d", job_name, type(exc).__name__, exc,
                            attempt, max_restarts)
                time.sleep(strategy.delay_ms() / 1000 if strategy is not None else 0)
                restore = find_restore_point(storage, LATEST, fingerprint) if enabled else restore
                continue
            run.close()
            if coordinator is not None:
                run.metrics["checkpoints"] = dict(coordinator.metrics, restarts=attempt,
                                                  directory=storage.directory,
                                                  restored_from=None if restore is None else restore.path)
            result = run.result()
            if temporary is None and config.get_externalized_checkpoint_cleanup() is \
                    ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION:
                storage.remove_all()
            return result
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)


__all__ = ["LATEST", "execute_with_recovery", "find_restore_point"]

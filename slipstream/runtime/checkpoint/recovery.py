"""Checkpoints, restarts and restores of a job's runs.

:class:`Recovery` is what the driver (:mod:`slipstream.runtime.driver`) consults around
every run: when a task fails and the restart strategy allows another attempt, the job is
built afresh and restored from the latest completed checkpoint (from the start when
there is none). A job started with ``restore_from`` first restores from the given
checkpoint — ``"latest"`` picks the newest complete one in the storage directory,
falling back to an older one if the newest fails verification (a sink that committed
output past the older one refuses the fallback, so nothing is silently produced twice).
A restore is checked whole before it is applied: every operator sees its state and may
refuse it before any task opens, so a refused restore deletes or renames nothing.
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
from slipstream.filesystem import normalize
from slipstream.runtime.checkpoint.coordinator import CheckpointCoordinator
from slipstream.runtime.checkpoint.fs import FileSystem
from slipstream.runtime.checkpoint.snapshot import job_fingerprint
from slipstream.runtime.checkpoint.storage import CheckpointStorage, VerifiedCheckpoint

if TYPE_CHECKING:
    from slipstream.datastream.job_spec import JobExecutionResult, JobSpec
    from slipstream.runtime.executor import Run
    from slipstream.runtime.job_graph import JobGraph

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


class Recovery:
    """What the runs of one job share: its checkpoint storage, the checkpoint the next run
    restores from, and the restarts its strategy has left.

    The driver (:mod:`slipstream.runtime.driver`) calls :meth:`open` once, :meth:`prepare`
    before every run, :meth:`restart_after` when a run failed, :meth:`finish` when one
    succeeded and :meth:`release` at the very end, whatever happened.
    """

    def __init__(self, spec: JobSpec, graph: JobGraph, restore_from: str | None,
                 fs: FileSystem | None = None) -> None:
        self.config = spec.checkpoint_config
        self.enabled = self.config.is_checkpointing_enabled()
        self.strategy = spec.restart_strategy
        self.failures: list[float] = []  # when runs failed (time.monotonic()), for the strategy to judge
        self.job_name = spec.job_name
        self.restore_from = restore_from
        self.fingerprint = job_fingerprint(graph) if self.enabled or restore_from is not None else ""
        self.storage: CheckpointStorage | None = None
        self.restore: VerifiedCheckpoint | None = None
        self.attempt = 0
        self._fs = fs
        self._temporary: str | None = None

    def open(self) -> None:
        """Find (or make) the checkpoint storage and the checkpoint the first run restores
        from; a job that neither takes checkpoints nor restores needs none."""
        if not self.enabled and self.restore_from is None:
            return
        restore_from = self.restore_from
        directory = self.config.get_checkpoint_storage_dir()
        if directory is None:
            if restore_from is not None and restore_from != LATEST:
                directory = os.path.dirname(normalize(restore_from, "restore_from"))
            elif restore_from is not None:
                raise InvalidProgramError("restore_from='latest' needs a checkpoint directory: "
                                          "env.get_checkpoint_config().set_checkpoint_storage_dir(...)")
            else:
                directory = self._temporary = tempfile.mkdtemp(prefix="slipstream-checkpoints-")
        storage = self.storage = CheckpointStorage(directory, self.config.get_num_retained_checkpoints(), self._fs)
        storage.ensure_directory()
        self.restore = None if restore_from is None else find_restore_point(storage, restore_from, self.fingerprint)
        storage.remove_incomplete()

    def prepare(self, run: Run) -> CheckpointCoordinator | None:
        """Before ``run`` opens: number its attempt, attach the checkpoint coordinator (None
        without checkpoints) and restore it from the checkpoint found for it."""
        run.set_attempt(self.attempt)
        coordinator = None
        if self.enabled:
            assert self.storage is not None
            existing = self.storage.checkpoint_ids()
            coordinator = CheckpointCoordinator(run.checkpoint_participants(), self.config, self.storage,
                                                self.fingerprint, self.job_name, run.clock,
                                                (max(existing) + 1) if existing else 1)
            coordinator.wakeup = run.wake
            coordinator.job_idle = run.idle
            run.on_idle(coordinator.merge_idle)
            run.checkpoint_coordinator = coordinator
        restore = self.restore
        if restore is not None:
            run.restore(restore)
            log.info("restored job '%s' from %s", self.job_name, restore.path)
        return coordinator

    def restart_after(self, failure: BaseException) -> bool:
        """Whether a run that failed with ``failure`` is followed by another; if so, wait the
        strategy's delay and find what it restores from: the latest checkpoint (without
        checkpoints, what the first run restored from)."""
        self.failures.append(time.monotonic())
        if not isinstance(failure, Exception) or isinstance(failure, NOT_RESTARTABLE) or \
                self.strategy is None or not self.strategy.allows_restart(self.failures):
            return False
        self.attempt += 1
        limit = self.strategy.max_restarts()
        log.warning("job '%s' failed (%s: %s); restart %d%s", self.job_name, type(failure).__name__, failure,
                    self.attempt, f" of {limit}" if limit else f" ({self.strategy.get_description()})")
        time.sleep(self.strategy.delay_ms() / 1000)
        if self.enabled:
            assert self.storage is not None
            self.restore = find_restore_point(self.storage, LATEST, self.fingerprint)
        return True

    def finish(self, run: Run, coordinator: CheckpointCoordinator | None,
               keep_checkpoints: bool = False) -> JobExecutionResult:
        """The result of the run that succeeded (or stopped with a savepoint: ``keep_checkpoints``),
        with the checkpoints' figures; checkpoints the configuration does not retain are deleted."""
        storage = self.storage
        if coordinator is not None:
            assert storage is not None
            run.metrics["checkpoints"] = dict(coordinator.metrics, restarts=self.attempt,
                                              directory=storage.directory,
                                              restored_from=None if self.restore is None else self.restore.path)
        result = run.result()
        cleanup = self.config.get_externalized_checkpoint_cleanup()
        if storage is not None and self._temporary is None and not keep_checkpoints and \
                cleanup is ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION:
            storage.remove_all()
        return result

    def release(self) -> None:
        """Delete the checkpoint directory made for this job alone (none was configured)."""
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None


__all__ = ["LATEST", "Recovery", "find_restore_point"]

"""Running a job script under the command line: the execution contexts of ``run`` and ``explain``.

The script runs as ``__main__`` (as ``python job.py`` would run it) inside an
:class:`~slipstream.datastream.context.ExecutionContext`, so the command line's options
apply to every environment it creates, and its ``execute()`` is the command line's:
``run`` runs the job on its own thread and turns Ctrl-C into a stop with a savepoint;
``explain`` renders the plan and stops the script before anything runs.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import NoReturn

import click

from slipstream.cli.control import SAVEPOINT_DIR, ControlFile
from slipstream.datastream.checkpoint_config import RESTORE_ENV_VAR
from slipstream.datastream.context import execution_context
from slipstream.datastream.environment import StreamExecutionEnvironment
from slipstream.datastream.job_spec import JobExecutionResult
from slipstream.runtime.job_client import JobClient

SIGNAL_POLL_S = 0.2
"""How often the main thread wakes while the job runs: a Ctrl-C the kernel hands to another of the
process's threads reaches Python only when the main thread wakes, and a wait without a timeout
might not wake until the job ends."""

CANCEL_GRACE_S = 2.0
"""How long a second Ctrl-C waits for the job's current turn to end before the process exits anyway."""


class PlanShown(BaseException):
    """Stops an ``explain``-ed script where it submits its job (a BaseException, so the script's
    own ``except Exception`` cannot swallow it)."""

    def __init__(self, plan: str) -> None:
        super().__init__(plan)
        self.plan = plan


class JobStopped(BaseException):
    """Stops a ``run`` script after Ctrl-C stopped its job; ``savepoint`` is where it can resume from."""

    def __init__(self, savepoint: str | None) -> None:
        super().__init__(savepoint)
        self.savepoint = savepoint


@dataclass
class Settings:
    """Command-line settings every environment of the script starts with (its own calls override them)."""

    parallelism: int | None = None
    checkpoint_dir: str | None = None
    ui_port: int | None = None
    metrics_port: int | None = None
    workers: int | None = None

    def configure(self, env: StreamExecutionEnvironment) -> None:
        env.configure(ui_port=self.ui_port, metrics_port=self.metrics_port, workers=self.workers)
        if self.parallelism is not None:
            env.set_parallelism(self.parallelism)
        if self.checkpoint_dir is not None:
            env.get_checkpoint_config().set_checkpoint_storage_dir(self.checkpoint_dir)


@dataclass
class ExplainContext:
    """``slipstream explain``: the first job the script submits is rendered in ``format``, not run."""

    format: str
    settings: Settings = field(default_factory=Settings)

    def configure(self, env: StreamExecutionEnvironment) -> None:
        self.settings.configure(env)

    def execute(self, env: StreamExecutionEnvironment, job_name: str | None,
                restore_from: str | None) -> JobExecutionResult:
        self.submit(env)

    def submit(self, env: StreamExecutionEnvironment) -> NoReturn:
        raise PlanShown(env.explain(self.format))


@dataclass
class RunContext:
    """``slipstream run``: jobs run on their own thread while the main thread waits for Ctrl-C
    (or ``slipstream stop``, which finds the job through the ``control`` file and sends the same signal)."""

    settings: Settings = field(default_factory=Settings)
    control: ControlFile | None = None

    def configure(self, env: StreamExecutionEnvironment) -> None:
        self.settings.configure(env)

    def execute(self, env: StreamExecutionEnvironment, job_name: str | None,
                restore_from: str | None) -> JobExecutionResult:
        listen_for_ctrl_c()
        client = env.execute_async(job_name, restore_from)
        if self.control is not None:
            self.control.started(env, client)
        try:
            result = wait_for_result(client)
        except BaseException:
            self._ended()
            raise
        if result is None:
            raise JobStopped(stop_gracefully(env, client))
        self._ended()
        return result

    def _ended(self) -> None:
        if self.control is not None:
            self.control.remove()

    def submit(self, env: StreamExecutionEnvironment) -> None:
        """``execute_async`` and ``execute_and_collect`` run as the script drives them."""


def listen_for_ctrl_c() -> None:
    """Make Ctrl-C (SIGINT, what ``slipstream stop`` sends) raise KeyboardInterrupt here even when
    this process was started with it ignored, as a shell starts a background job (``&``): else
    nothing could stop the job with a savepoint."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def wait_for_result(client: JobClient) -> JobExecutionResult | None:
    """The job's result (or the error it failed with), or None when Ctrl-C came while it ran. The
    wait wakes every ``SIGNAL_POLL_S`` so Ctrl-C is seen at once; a Ctrl-C just as the job ended
    leaves its result standing."""
    try:
        while not client.wait(SIGNAL_POLL_S):
            pass
    except KeyboardInterrupt:
        if not client.wait(0):
            return None
        click.echo("Ctrl-C: the job had just finished", err=True)
    return client.get_job_execution_result().result()


def stop_gracefully(env: StreamExecutionEnvironment, client: JobClient) -> str | None:
    """After a first Ctrl-C: stop the job with a savepoint (when it checkpoints) and return its
    path; a second Ctrl-C cancels the job at once (None)."""
    config = env.get_checkpoint_config()
    try:
        if not config.is_checkpointing_enabled():
            click.echo("Ctrl-C: cancelling the job (it does not checkpoint, so there is no savepoint; "
                       "Ctrl-C again to exit at once)", err=True)
            client.cancel()
            return None
        click.echo("Ctrl-C: stopping the job with a savepoint (Ctrl-C again to stop at once, without one)",
                   err=True)
        keeps_checkpoints = config.get_checkpoint_storage_dir() is not None or env.get_default_savepoint_directory()
        target = None if keeps_checkpoints else os.path.abspath(SAVEPOINT_DIR)  # None: the job's own place
        return client.stop_with_savepoint(savepoint_directory=target).result()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        click.echo("Ctrl-C again: stopping at once, without a savepoint", err=True)
        client.cancel()
        client.wait(CANCEL_GRACE_S)
        return None


def run_script(script: str, argv: list[str], context: RunContext | ExplainContext,
               restore: str | None = None) -> None:
    """Run ``script`` as ``__main__`` with ``argv`` inside ``context``; ``restore`` is the default
    ``restore_from`` of its jobs (through ``SLIPSTREAM_RESTORE_FROM``, as a script run by hand reads it)."""
    path = os.path.abspath(script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))
    if restore is not None:
        os.environ[RESTORE_ENV_VAR] = restore
    try:
        with execution_context(context):
            runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path

"""The control file through which ``slipstream stop`` finds and stops a job ``slipstream run`` started.

While its job runs, ``slipstream run`` keeps ``slipstream-run.json`` in the job's checkpoint
directory (or, without one, in ``slipstream-savepoints`` of the working directory, where its
savepoint goes): the process id, the script, the job's name and id, and where its web view and
metrics are served. ``slipstream stop DIR`` sends that process the same signal as Ctrl-C, so
the job stops with a savepoint; the run writes the savepoint and the command that resumes from
it into the file before it exits, and ``stop`` prints them. A run that ends by itself removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import click

from slipstream.datastream.environment import StreamExecutionEnvironment
from slipstream.runtime.job_client import JobClient

CONTROL_NAME = "slipstream-run.json"

SAVEPOINT_DIR = "slipstream-savepoints"
"""Where Ctrl-C's savepoint goes (in the working directory) when the job has no checkpoint directory."""


def control_directory(env: StreamExecutionEnvironment) -> str:
    """Where a run of ``env``'s job keeps its control file: its checkpoint directory, else the savepoint one."""
    return os.path.abspath(env.get_checkpoint_config().get_checkpoint_storage_dir() or SAVEPOINT_DIR)


def _write(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` so a reader sees the old or the new file, never half of one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(record, handle, indent=1)
    os.replace(temporary, path)


def read_control(directory: str) -> dict[str, Any]:
    """The control record in ``directory``; a ClickException when there is none."""
    path = os.path.join(os.path.abspath(directory), CONTROL_NAME)
    try:
        with open(path) as handle:
            record: dict[str, Any] = json.load(handle)
            return record
    except FileNotFoundError:
        raise click.ClickException(f"no job started by `slipstream run` is known in {directory} "
                                   f"(no {CONTROL_NAME}: give its checkpoint directory)") from None


@dataclass
class ControlFile:
    """The run's side: publish the running job, then its savepoint or its end."""

    script: str
    path: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    made_directory: bool = False  # the control file's directory did not exist before the run

    def started(self, env: StreamExecutionEnvironment, client: JobClient) -> None:
        directory = control_directory(env)
        self.made_directory = not os.path.isdir(directory)
        self.path = os.path.join(directory, CONTROL_NAME)
        self.record = {"pid": os.getpid(), "script": self.script, "job_id": client.get_job_id().to_hex_string(),
                       "started": time.time(), "urls": client.get_urls(), "state": "RUNNING"}
        _write(self.path, self.record)

    def stopped(self, savepoint: str | None, resume: str | None) -> None:
        """The job stopped (after Ctrl-C or ``slipstream stop``): say with which savepoint, and how to resume."""
        if self.path is not None:
            _write(self.path, {**self.record, "state": "STOPPED", "savepoint": savepoint, "resume": resume})

    def remove(self) -> None:
        """The job ended by itself: nothing left to stop, and no empty directory left where the run
        made one for its control file (``slipstream-savepoints`` in the working directory)."""
        if self.path is not None and os.path.exists(self.path):
            os.remove(self.path)
            if self.made_directory:
                with contextlib.suppress(OSError):  # not empty: savepoints or another run's file
                    os.rmdir(os.path.dirname(self.path))
        self.path = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_if_present(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as handle:
            record: dict[str, Any] = json.load(handle)
            return record
    except FileNotFoundError:
        return None


def stop_job(directory: str, timeout: float) -> dict[str, Any]:
    """Stop the job whose control file is in ``directory`` as Ctrl-C would, wait up to ``timeout``
    seconds until its run says it stopped (or ended, or its process is gone), and return the run's
    last record (with its savepoint, if it took one)."""
    record = read_control(directory)
    path = os.path.join(os.path.abspath(directory), CONTROL_NAME)
    pid = record["pid"]
    if record["state"] != "RUNNING":  # a run Ctrl-C stopped earlier left its record: nothing to stop now
        os.remove(path)
        earlier = (f"; its savepoint: {record['savepoint']}, resume with: {record['resume']}"
                   if record.get("savepoint") else "")
        raise click.ClickException(f"no job is running there: the run of {record['script']} had already "
                                   f"stopped{earlier}")
    if not _alive(pid):
        os.remove(path)
        raise click.ClickException(f"the run of {record['script']} (process {pid}) is gone without "
                                   "stopping its job; its checkpoints are in place for --restore latest")
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while record["state"] == "RUNNING" and _alive(pid):
        if time.monotonic() > deadline:
            raise click.ClickException(f"process {pid} is still stopping its job after {timeout:.0f} s "
                                       "(a savepoint waits for the backlog's sorted batch work to end)")
        time.sleep(0.05)
        current = _read_if_present(path)
        if current is None:  # the job ended by itself meanwhile
            return {**record, "state": "FINISHED"}
        record = current
    os.remove(path)
    return record


__all__ = ["CONTROL_NAME", "SAVEPOINT_DIR", "ControlFile", "control_directory", "read_control", "stop_job"]

"""The context a launcher runs job scripts in, as Flink's context environment under ``flink run``.

A launcher (the ``slipstream`` command line) installs an :class:`ExecutionContext` around a
job script it runs; every :class:`~slipstream.datastream.environment.StreamExecutionEnvironment`
the script creates is configured by it (its settings are defaults: the script's own calls
override them, as ``flink run -p`` does), and every job the script submits goes through it,
which may run it (and, say, stop it with a savepoint on Ctrl-C) or only show its plan.
Outside a launcher there is no context and environments run jobs themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from slipstream.datastream.environment import StreamExecutionEnvironment
    from slipstream.datastream.job_spec import JobExecutionResult


class ExecutionContext(Protocol):
    """What a launcher does to the environments of the script it runs."""

    def configure(self, env: StreamExecutionEnvironment) -> None:
        """Apply the launcher's settings to a newly created environment."""

    def execute(self, env: StreamExecutionEnvironment, job_name: str | None,
                restore_from: str | None) -> JobExecutionResult:
        """Take the place of ``env.execute(job_name, restore_from)``."""

    def submit(self, env: StreamExecutionEnvironment) -> None:
        """Called before ``env`` hands a job to ``execute_async`` or ``execute_and_collect``; may
        refuse (raise) to run it."""


_current: list[ExecutionContext] = []


def current_context() -> ExecutionContext | None:
    """The context installed by the launcher running this script, or None."""
    return _current[-1] if _current else None


@contextlib.contextmanager
def execution_context(context: ExecutionContext) -> Iterator[ExecutionContext]:
    """Install ``context`` for the duration of the block (the run of one job script)."""
    _current.append(context)
    try:
        yield context
    finally:
        _current.remove(context)


__all__ = ["ExecutionContext", "current_context", "execution_context"]

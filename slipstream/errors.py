"""The error hierarchy: one root class, so callers can catch everything slipstream raises."""

from __future__ import annotations


class SlipstreamError(Exception):
    """Root of every error slipstream raises on its own account."""


class InvalidProgramError(SlipstreamError, ValueError):
    """A job was built wrongly: bad arguments, wrong arity, an impossible graph.

    Raised at graph-building time, before anything runs.
    """


class JobExecutionError(SlipstreamError):
    """A running job failed; the message names the operator, subtask and record."""


class UserFunctionError(JobExecutionError):
    """A user function raised: names the operator (name and uid), subtask and record."""

    def __init__(self, operator_name: str, subtask_index: int, parallelism: int,
                 record: object, cause: BaseException, uid: str | None = None,
                 what: str = "record") -> None:
        self.operator_name = operator_name
        self.subtask_index = subtask_index
        self.record = record
        self.uid = uid
        shown = repr(record)
        if len(shown) > 300:
            shown = shown[:297] + "..."
        where = f"operator '{operator_name}'" + (f" (uid '{uid}')" if uid else "")
        message = (f"{where}, subtask {subtask_index + 1}/{parallelism}, failed on "
                   f"{what} {shown}: {type(cause).__name__}: {cause}")
        super().__init__(message)


class DeadlockError(JobExecutionError):
    """No task can make progress and nothing outside the job can wake one up."""

"""The error hierarchy: one root class, so callers can catch everything slipstream raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, Protocol


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
        self._arguments = (operator_name, subtask_index, parallelism, record, cause, uid, what)
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
        self.__cause__ = cause  # also where it is unpickled (a worker process's failure in the driver)

    def __reduce__(self) -> tuple[type[UserFunctionError], tuple[object, ...]]:
        """Pickled with its arguments, so a worker process's failure reaches the driver as it was raised."""
        return type(self), self._arguments


class DeadlockError(JobExecutionError):
    """No task can make progress and nothing outside the job can wake one up."""


class WorkerLostError(JobExecutionError):
    """A worker process died, stopped answering (no heartbeat) or failed in a way it could not
    report; the job fails over by its restart strategy, as from any task failure."""


class CheckpointError(JobExecutionError):
    """A checkpoint could not be taken, written or restored."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint on disk fails verification: detected before anything in it is deserialised.

    ``checkpoint`` is the checkpoint directory, ``file`` the file at fault (or None when the
    checkpoint as a whole is unusable); ``expected``/``actual`` the checksums or sizes compared.
    """

    def __init__(self, message: str, *, checkpoint: str, file: str | None = None,
                 expected: str | None = None, actual: str | None = None) -> None:
        self.checkpoint = checkpoint
        self.file = file
        self.expected = expected
        self.actual = actual
        where = f"checkpoint '{checkpoint}'" + (f", file '{file}'" if file else "")
        detail = f" (expected {expected}, got {actual})" if expected is not None or actual is not None else ""
        super().__init__(f"{where}: {message}{detail}")


class DiskFullError(JobExecutionError, OSError):
    """The disk filled up while writing a checkpoint, a spill file or a sink file; names the path."""

    def __init__(self, path: str, what: str, cause: OSError | None = None) -> None:
        self.path = path
        self.what = what
        super().__init__(f"no space left on device while writing {what} '{path}'"
                         + (f": {cause.strerror or cause}" if cause is not None else ""))
        self.errno = 28  # ENOSPC, so `except OSError` handlers that check errno still see it

    def __str__(self) -> str:
        return str(self.args[0])


class MemoryBudgetError(JobExecutionError):
    """An operator's memory use passed its budget (:mod:`slipstream.operators.memory`); names the
    operator, what grew and the budget, so the job fails clearly instead of being killed by the OS."""


class JobCancelledError(JobExecutionError):
    """The job was cancelled (``JobClient.cancel``) before it ended: it has no result."""


def unhashable_key(key: object) -> TypeError:
    """What a key that cannot be hashed fails with: keyed state, routing and timers hash keys."""
    return TypeError(f"the key {key!r} is not hashable: a key selector must return a hashable value "
                     f"(a tuple rather than a list), got a {type(key).__name__}")


def key_cause(exc: Exception, key: object) -> Exception:
    """``exc``, or :func:`unhashable_key` when ``key`` cannot be hashed (a dict lookup's bare
    "unhashable type" would not say that the key selector's result is the problem)."""
    try:
        hash(key)
    except TypeError:
        return unhashable_key(key)
    return exc


class NamesUserErrors(Protocol):
    """What names a failure in user code: an operator subtask (``StreamOperator.user_error``)."""

    def user_error(self, record: object, cause: BaseException, what: str = "record") -> UserFunctionError: ...


class UserCode:
    """The guard :func:`user_code` returns: a context manager, cheap to enter once per batch."""

    __slots__ = ("_explain", "_operator", "_record", "_what")

    def __init__(self, operator: NamesUserErrors, record: Callable[[], object], what: str | Callable[[], str],
                 explain: Callable[[Exception], BaseException] | None) -> None:
        self._operator = operator
        self._record = record
        self._what = what
        self._explain = explain

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: object) -> None:
        if isinstance(exc, Exception):
            raise_user_error(self._operator, exc, self._record, self._what, self._explain)


def raise_user_error(operator: NamesUserErrors, exc: Exception, record: Callable[[], object],
                     what: str | Callable[[], str] = "record",
                     explain: Callable[[Exception], BaseException] | None = None) -> NoReturn:
    """Raise ``exc`` from user code as ``operator.user_error``, naming ``record()``; slipstream's own
    errors go on unchanged (they name what they are about).

    :class:`UserCode` calls it as a block exits; a path that runs per record or per one-record batch
    calls it from ``except Exception`` instead, since a ``try`` costs nothing until it fails and a
    guard built per call costs about 0.4 µs.
    """
    if isinstance(exc, SlipstreamError):
        raise exc
    cause = exc if explain is None else explain(exc)
    raise operator.user_error(record(), cause, what=what if isinstance(what, str) else what()) from exc


def user_code(operator: NamesUserErrors, record: Callable[[], object], what: str | Callable[[], str] = "record",
              explain: Callable[[Exception], BaseException] | None = None) -> UserCode:
    """Run a block that calls user code so that its failure names the operator and the record.

    ``with user_code(self, lambda: value):`` around a loop over records turns an exception from a
    user function into ``operator.user_error(record(), cause, what=what)``, raised ``from`` the
    original (bytewax's and Flink's rule: say which operator, subtask and record). ``record`` and a
    callable ``what`` are read when the block fails, so a loop's current record is the one named;
    ``explain`` may replace the cause the message shows (with what the function must return, say).
    slipstream's own errors pass unchanged.
    """
    return UserCode(operator, record, what, explain)

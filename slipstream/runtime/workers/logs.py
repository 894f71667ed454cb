"""Log records of worker processes, handed to the driver's logging.

A warning an operator logs in a worker (a late record dropped, a record sent to a dead letter)
reaches the driver's handlers, as it would in one process, rather than only the worker's stderr:
a run gives its workers the levels set in the driver, and a handler on each worker's root
logger sends the records that pass them to the driver, which hands each to its logger of the same
name (its level and handlers decide, as for the driver's own records).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slipstream.operators.base import WARNED_ONCE
from slipstream.runtime.workers.wire import FromWorker

_PLAIN = (str, int, float, bool, type(None))


def driver_levels() -> dict[str, int]:
    """The levels set in this process: the root logger's, and each named logger's that has one."""
    levels = {"": logging.getLogger().level}
    for name, logger in logging.root.manager.loggerDict.items():
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            levels[name] = logger.level
    return levels


def apply_levels(levels: dict[str, int]) -> None:
    """Set the driver's levels (:func:`driver_levels`) in a worker."""
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)


def portable(record: logging.LogRecord, worker: int) -> dict[str, Any]:
    """``record``'s fields, its message formatted and its traceback as text (arguments and exceptions
    may not unpickle in the driver), named as coming from worker ``worker``."""
    fields = {name: value if isinstance(value, _PLAIN) else repr(value) for name, value in record.__dict__.items()
              if name not in ("args", "exc_info", "msg", "message")}
    fields["msg"] = record.getMessage()
    if record.exc_info and not record.exc_text:
        fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
    fields["processName"] = f"worker {worker}"
    return fields


class ToDriver(logging.Handler):
    """A worker's root handler: every record that passes the worker's levels goes to the driver."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None], worker: int) -> None:
        super().__init__()
        self._send = send
        self._worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send((FromWorker.LOG, portable(record, self._worker)))
        except Exception:  # noqa: BLE001 - logging must never fail the job: reported as logging does
            self.handleError(record)


def log_in_driver(fields: dict[str, Any], warned: set[str]) -> None:
    """Hand a worker's record (:func:`portable`) to the driver's logger of its name; a warning given
    once per operator (:data:`~slipstream.operators.base.WARNED_ONCE`) only if no worker of this run
    gave it yet (``warned``: what the run's workers gave), as one process gives it once."""
    once = fields.get(WARNED_ONCE)
    if once is not None:
        if once in warned:
            return
        warned.add(once)
    record = logging.makeLogRecord(fields)
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


__all__ = ["ToDriver", "apply_levels", "driver_levels", "log_in_driver", "portable"]

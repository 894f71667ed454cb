"""``CompletableFuture``: what PyFlink's ``JobClient`` returns for work that ends later.

It is a :class:`concurrent.futures.Future`, so besides PyFlink's ``result()``, ``exception()``,
``done()``, ``cancel()``, ``cancelled()``, ``set_result()`` and ``set_exception()`` it takes a
timeout in ``result(timeout)`` and callbacks in ``add_done_callback``.

Examples:
    >>> future = CompletableFuture.completed("done")
    >>> future.done(), future.result()
    (True, 'done')
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class CompletableFuture(Future[T]):
    """A result that a job's thread completes (or fails) later."""

    @staticmethod
    def completed(value: Any) -> CompletableFuture[Any]:
        """A future that already holds ``value``."""
        future: CompletableFuture[Any] = CompletableFuture()
        future.set_result(value)
        return future


__all__ = ["CompletableFuture"]

"""``pyflink.common.completable_future``: ``CompletableFuture``
(see :mod:`slipstream.datastream.completable_future`)."""

from slipstream.datastream.completable_future import CompletableFuture

__all__ = ["CompletableFuture"]

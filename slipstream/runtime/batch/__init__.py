"""Batch engines: the implementations of :class:`slipstream.operators.batch_engine.BatchEngine`.

:func:`make_batch_engine` turns the choice made with ``env.set_batch_engine`` into an engine.
The Spark engine's module is imported only when Spark is chosen, so pyspark stays optional.
"""

from __future__ import annotations

from typing import Any


def make_batch_engine(choice: Any = "polars", options: dict[str, Any] | None = None) -> Any:
    """The engine for ``choice``: "polars", "spark" (``options``: ``master``, ``session``), or an
    engine object, returned as it is."""
    if choice == "polars":
        from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
        return PolarsBatchEngine()
    if choice == "spark":
        from slipstream.runtime.batch.spark_engine import SparkBatchEngine
        return SparkBatchEngine(**(options or {}))
    if isinstance(choice, str):
        raise ValueError(f"unknown batch engine {choice!r}; expected 'polars' or 'spark'")
    return choice

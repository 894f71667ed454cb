"""``KeyedStateBootstrapFunction``: keyed state bootstrapped from a backlog in one vectorised call.

Flink's State Processor API bootstraps an operator's keyed state from historical data
(``OperatorTransformation.bootstrapWith(data).keyBy(...).transform(KeyedStateBootstrapFunction)``,
written into a savepoint under the operator's uid) with a function called once per record.
Here the backlog is that historical data, and the function is called with many keys' records
at once: a ``KeyedProcessFunction`` that also derives from :class:`KeyedStateBootstrapFunction`
gets its backlog as a polars DataFrame in :meth:`~KeyedStateBootstrapFunction.process_backlog`
— instead of a ``process_element`` call per backlog record — and returns each key's state,
which its operator (by its ``uid``, like any keyed state) installs before the stream goes on
record by record.

>>> import polars as pl
>>> from slipstream.datastream.functions import KeyedProcessFunction
>>> from slipstream.datastream.state import ValueStateDescriptor
>>> class Totals(KeyedProcessFunction, KeyedStateBootstrapFunction):
...     def open(self, runtime_context):
...         self.total = runtime_context.get_state(ValueStateDescriptor("total"))
...     def process_backlog(self, frame):
...         return frame.group_by("user").agg(pl.col("amount").sum().alias("total"))
...     def process_element(self, value, ctx):
...         total = (self.total.value() or 0) + value["amount"]
...         self.total.update(total)
...         yield value["user"], total

The stream must be keyed by a field (``key_by("user")``): the frame's key column is that field.
The frame holds the records of the backlog this subtask received (every record of each of its
keys), in arrival order; the result has one row per key — the key column, then one column per
``ValueState`` of the function, named by its descriptor (a null leaves the key's state unset) —
and only keys of that backlog. Backlog records cause no output and no timers: what the function
wants to remember of them, it returns as state. During a backlog with ``backlog_sorting``
disabled (or without a batch engine), records go through ``process_element`` as usual.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


class KeyedStateBootstrapFunction(ABC):
    """Mixed into a ``KeyedProcessFunction``: its backlog arrives as one DataFrame, and it returns
    each key's state (see the module docstring)."""

    @abstractmethod
    def process_backlog(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Many keys' backlog records in, one row per key out: the key column and a column per ``ValueState``."""


__all__ = ["KeyedStateBootstrapFunction"]

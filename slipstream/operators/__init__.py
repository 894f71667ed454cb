"""Physical operators, one class per kind; each registers the transformation it implements.

Importing this package registers every operator with :class:`StreamOperator`.
"""

from slipstream.operators import (
    broadcast,
    co_group,
    co_process,
    iteration,
    loops,
    map,
    process,
    reduce,
    sink,
    source,
    timestamps,
    window,
)
from slipstream.operators.base import StreamOperator

__all__ = ["StreamOperator", "broadcast", "co_group", "co_process", "iteration", "loops", "map", "process", "reduce",
           "sink", "source", "timestamps", "window"]

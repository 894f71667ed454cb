"""The built-in aggregations of one field, as Flink's ``org.apache.flink.streaming.api.functions.aggregation``.

``KeyedStream.sum/min/max/min_by/max_by`` and ``WindowedStream.sum/min/max/min_by/max_by``
(Java Flink's; PyFlink has only the keyed ones) reduce with these functions, and they can be
given to ``reduce`` directly. Being declared rather than arbitrary Python, an operator can run
them over a backlog as one polars query instead of calling them record by record.

* :class:`SumAggregator` — the sum of the field; the other fields come from the first record;
* :class:`ComparableAggregator` with :class:`AggregationType` ``MIN``/``MAX`` — the smallest or
  largest value of the field, the other fields from the first record; ``MIN_BY``/``MAX_BY`` — the
  whole record holding the smallest or largest value, the first such record on ties (Flink's
  ``minBy(field)``/``maxBy(field)``, whose ``first`` defaults to true).

>>> SumAggregator(1).reduce(("a", 2), ("b", 3))
('a', 5)
>>> ComparableAggregator("v", AggregationType.MAX_BY).reduce({"v": 4, "id": 1}, {"v": 4, "id": 2})
{'v': 4, 'id': 1}
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from slipstream.datastream.fields import get_field, replace_field
from slipstream.datastream.functions import ReduceFunction
from slipstream.errors import InvalidProgramError


class AggregationType(Enum):
    """Which built-in aggregation (Flink's ``AggregationFunction.AggregationType``)."""

    SUM = "sum"
    MIN = "min"
    MAX = "max"
    MIN_BY = "min_by"
    MAX_BY = "max_by"


class AggregationFunction(ReduceFunction[Any]):
    """A built-in aggregation of ``field`` (a position or a name); :attr:`aggregation` says which."""

    def __init__(self, field: int | str, aggregation_type: AggregationType) -> None:
        if not isinstance(field, (int, str)) or isinstance(field, bool):
            raise InvalidProgramError(f"{aggregation_type.value} expects a field position or name, got {field!r}")
        self.field = field
        self.aggregation_type = aggregation_type

    @property
    def aggregation(self) -> tuple[str, int | str]:
        """``(kind, field)``: what an operator vectorises, e.g. ``("sum", 1)``."""
        return self.aggregation_type.value, self.field

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.aggregation_type.value}, {self.field!r})"


class SumAggregator(AggregationFunction):
    """The running sum of ``field``; the other fields come from the first record."""

    def __init__(self, field: int | str) -> None:
        super().__init__(field, AggregationType.SUM)

    def reduce(self, value1: Any, value2: Any) -> Any:
        field = self.field
        return replace_field(value1, field, get_field(value1, field) + get_field(value2, field))


class ComparableAggregator(AggregationFunction):
    """``MIN``/``MAX`` of ``field`` (other fields from the first record) or the ``MIN_BY``/``MAX_BY``
    record (the first on ties)."""

    def __init__(self, field: int | str, aggregation_type: AggregationType) -> None:
        if aggregation_type is AggregationType.SUM:
            raise InvalidProgramError("ComparableAggregator compares; use SumAggregator for a sum")
        super().__init__(field, aggregation_type)
        self._smaller = aggregation_type in (AggregationType.MIN, AggregationType.MIN_BY)
        self._by = aggregation_type in (AggregationType.MIN_BY, AggregationType.MAX_BY)

    def reduce(self, value1: Any, value2: Any) -> Any:
        field = self.field
        first, second = get_field(value1, field), get_field(value2, field)
        if first <= second if self._smaller else first >= second:
            return value1
        return value2 if self._by else replace_field(value1, field, second)


def aggregator(kind: str, field: int | str) -> AggregationFunction:
    """The built-in function for ``kind`` ("sum", "min", "max", "min_by", "max_by") over ``field``."""
    aggregation_type = AggregationType(kind)
    if aggregation_type is AggregationType.SUM:
        return SumAggregator(field)
    return ComparableAggregator(field, aggregation_type)


__all__ = ["AggregationFunction", "AggregationType", "ComparableAggregator", "SumAggregator", "aggregator"]

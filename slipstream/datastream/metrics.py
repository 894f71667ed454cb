"""User metrics, as ``pyflink.metrics``: ``MetricGroup`` with counters, gauges, meters and distributions.

A function gets its operator subtask's group from ``runtime_context.get_metrics_group()``
in ``open``. What it registers is reported per operator in the job result, under
the operator's ``"metrics"`` entry, keyed by the metric's name within its groups
(``add_group("db").counter("errors")`` is ``"db.errors"``), summed over the
operator's subtasks:

* a counter (and a meter's count) as an ``int``;
* a meter as ``{"count": …, "rate": …}``, the rate in events per second over its
  time span (or the time since it was registered, when shorter);
* a distribution as ``{"count", "sum", "min", "max", "mean"}``;
* a gauge as the list of its subtasks' values (index = subtask), read when the
  operator closes.

Examples:
    >>> report = {}
    >>> group = OperatorMetricGroup(report, "Map", 0, 1)
    >>> group.add_group("db").counter("errors").inc(2)
    >>> report
    {'metrics': {'db.errors': 2}}
"""

from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any

from slipstream.errors import InvalidProgramError

__all__ = ["Counter", "Distribution", "Gauge", "Meter", "Metric", "MetricGroup", "OperatorMetricGroup", "merge_reports"]

REPORT_KEY = "metrics"
"""Where an operator's user metrics are reported in its entry of the job result."""


class Metric:
    """Base of the metric kinds."""

    kind = "metric"


class Counter(Metric):
    """A count that goes up (and down): ``inc(n)``, ``dec(n)``."""

    kind = "counter"

    def __init__(self, report: dict[str, Any], key: str) -> None:
        self._report = report
        self._key = key
        self._count = 0
        report.setdefault(key, 0)

    def inc(self, n: int = 1) -> None:
        self._count += n
        self._report[self._key] += n

    def dec(self, n: int = 1) -> None:
        self.inc(-n)

    def get_count(self) -> int:
        """This subtask's count (the job result sums the subtasks')."""
        return self._count


class Gauge(Metric):
    """A value read from a function when asked (and when the operator closes, for the report)."""

    kind = "gauge"

    def __init__(self, report: dict[str, Any], key: str, obj: Callable[[], Any], subtask: int,
                 parallelism: int) -> None:
        self._report = report
        self._key = key
        self._obj = obj
        self._subtask = subtask
        report.setdefault(key, [None] * parallelism)

    def get_value(self) -> Any:
        return self._obj()

    def report(self) -> None:
        """Put the current value into this subtask's place of the report."""
        self._report[self._key][self._subtask] = self._obj()


class Meter(Metric):
    """Events and their rate: ``mark_event(n)``, ``get_count()``, ``get_rate()`` (events per second
    over the last ``time_span_in_seconds``)."""

    kind = "meter"

    def __init__(self, report: dict[str, Any], key: str, time_span_in_seconds: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(time_span_in_seconds, int) or time_span_in_seconds < 1:
            raise InvalidProgramError(f"meter {key!r}: the time span must be whole seconds >= 1, "
                                      f"got {time_span_in_seconds!r}")
        self._report = report
        self._key = key
        self._span = time_span_in_seconds
        self._clock = clock
        self._created = clock()
        self._count = 0
        self._marks: deque[tuple[float, int]] = deque()
        self._reported_rate = 0.0
        report.setdefault(key, {"count": 0, "rate": 0.0})

    def mark_event(self, value: int = 1) -> None:
        now = self._clock()
        self._count += value
        self._report[self._key]["count"] += value
        second = int(now)
        if self._marks and self._marks[-1][0] == second:
            self._marks[-1] = (second, self._marks[-1][1] + value)
        else:
            self._marks.append((second, value))

    def get_count(self) -> int:
        return self._count

    def get_rate(self) -> float:
        now = self._clock()
        while self._marks and self._marks[0][0] <= now - self._span:
            self._marks.popleft()
        window = min(float(self._span), max(now - self._created, 1e-9))
        return sum(count for _, count in self._marks) / window

    def report(self) -> None:
        """Replace this subtask's share of the reported (summed) rate with its current rate."""
        rate = self.get_rate()
        self._report[self._key]["rate"] += rate - self._reported_rate
        self._reported_rate = rate


class Distribution(Metric):
    """Statistics of a value: ``update(value)``; count, sum, min, max and mean."""

    kind = "distribution"

    def __init__(self, report: dict[str, Any], key: str) -> None:
        self._report = report
        self._key = key
        self._count = 0
        self._sum: int | float = 0
        self._min: Any = None
        self._max: Any = None
        report.setdefault(key, {"count": 0, "sum": 0, "min": None, "max": None, "mean": None})

    def update(self, value: int | float) -> None:
        self._count += 1
        self._sum += value
        self._min = value if self._min is None or value < self._min else self._min
        self._max = value if self._max is None or value > self._max else self._max
        entry = self._report[self._key]
        entry["count"] += 1
        entry["sum"] += value
        entry["min"] = value if entry["min"] is None or value < entry["min"] else entry["min"]
        entry["max"] = value if entry["max"] is None or value > entry["max"] else entry["max"]
        entry["mean"] = entry["sum"] / entry["count"]

    def get_count(self) -> int:
        return self._count

    def get_sum(self) -> int | float:
        return self._sum

    def get_min(self) -> Any:
        return self._min

    def get_max(self) -> Any:
        return self._max

    def get_mean(self) -> float | None:
        return None if not self._count else self._sum / self._count


class MetricGroup(ABC):
    """A named container of metrics and of further groups, as ``pyflink.metrics.MetricGroup``."""

    @abstractmethod
    def add_group(self, name: str, extra: str | None = None) -> MetricGroup:
        """A subgroup ``name``; with ``extra``, a key group ``name`` holding the value group ``extra``
        (which defines the variable ``name`` = ``extra``)."""

    @abstractmethod
    def counter(self, name: str) -> Counter: ...

    @abstractmethod
    def gauge(self, name: str, obj: Callable[[], Any]) -> None: ...

    @abstractmethod
    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter: ...

    @abstractmethod
    def distribution(self, name: str) -> Distribution: ...

    @abstractmethod
    def get_scope_components(self) -> list[str]: ...

    @abstractmethod
    def get_all_variables(self) -> dict[str, str]: ...

    @abstractmethod
    def get_metric_identifier(self, metric_name: str) -> str: ...


class _Registry:
    """The metrics one operator subtask registered, by key, and the operator's shared report."""

    def __init__(self, operator_entry: dict[str, Any], operator: str, subtask: int, parallelism: int) -> None:
        self.report: dict[str, Any] = operator_entry.setdefault(REPORT_KEY, {})
        self.operator = operator
        self.subtask = subtask
        self.parallelism = parallelism
        self.metrics: dict[str, Metric] = {}

    def register(self, key: str, kind: str, make: Callable[[], Metric]) -> Metric:
        """The metric under ``key``: the one already registered by this subtask, or a new one;
        a name taken by a metric of another kind is refused."""
        existing = self.metrics.get(key)
        taken = existing.kind if existing is not None else \
            None if key not in self.report else _report_kind(self.report[key])
        if taken is not None and taken != kind:
            raise InvalidProgramError(f"operator '{self.operator}': metric {key!r} is already registered as a "
                                      f"{taken}, cannot register it as a {kind}")
        if existing is None:
            existing = self.metrics[key] = make()
        return existing


def merge_reports(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One operator's user metrics as two processes reported them (each for its own subtasks),
    as one process reporting every subtask would: counters, meters' counts and rates and
    distributions' figures combined, each gauge's list holding every subtask's value."""
    merged = dict(first)
    for key, value in second.items():
        mine = merged.get(key)
        if mine is None:
            merged[key] = copy.deepcopy(value)
            continue
        kind = _report_kind(value)
        if kind == "gauge":
            merged[key] = [theirs if theirs is not None else ours for ours, theirs in zip(mine, value)]
        elif kind == "meter":
            merged[key] = {"count": mine["count"] + value["count"], "rate": mine["rate"] + value["rate"]}
        elif kind == "distribution":
            count, total = mine["count"] + value["count"], mine["sum"] + value["sum"]
            lows = [low for low in (mine["min"], value["min"]) if low is not None]
            highs = [high for high in (mine["max"], value["max"]) if high is not None]
            merged[key] = {"count": count, "sum": total, "min": min(lows, default=None),
                           "max": max(highs, default=None), "mean": total / count if count else None}
        else:
            merged[key] = mine + value
    return merged


def _report_kind(value: Any) -> str:
    if isinstance(value, list):
        return "gauge"
    if isinstance(value, dict):
        return "meter" if "rate" in value else "distribution"
    return "counter"


class OperatorMetricGroup(MetricGroup):
    """The group of one operator subtask, or a subgroup of it (``add_group``).

    ``operator_entry`` is the operator's entry of the job result's metrics, shared by its subtasks.
    """

    def __init__(self, operator_entry: dict[str, Any], operator_name: str, subtask: int, parallelism: int) -> None:
        self._registry = _Registry(operator_entry, operator_name, subtask, parallelism)
        self._operator = operator_name
        self._names: tuple[str, ...] = ()
        self._variables = {"<operator_name>": operator_name, "<subtask_index>": str(subtask)}

    def _child(self, name: str, variables: dict[str, str]) -> OperatorMetricGroup:
        if not isinstance(name, str) or not name:
            raise InvalidProgramError(f"a metric group name must be a non-empty string, got {name!r}")
        child = copy.copy(self)
        child._names = (*self._names, name)
        child._variables = variables
        return child

    def add_group(self, name: str, extra: str | None = None) -> OperatorMetricGroup:
        if extra is None:
            return self._child(name, self._variables)
        return self._child(name, self._variables)._child(extra, {**self._variables, name: extra})

    def _key(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise InvalidProgramError(f"a metric name must be a non-empty string, got {name!r}")
        return ".".join((*self._names, name))

    def counter(self, name: str) -> Counter:
        key = self._key(name)
        registry = self._registry
        return registry.register(key, Counter.kind, lambda: Counter(registry.report, key))  # type: ignore[return-value]

    def gauge(self, name: str, obj: Callable[[], Any]) -> None:
        if not callable(obj):
            raise InvalidProgramError(f"gauge {name!r} needs a function returning its value, got {obj!r}")
        key = self._key(name)
        registry = self._registry
        registry.register(key, Gauge.kind,
                          lambda: Gauge(registry.report, key, obj, registry.subtask, registry.parallelism))

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        key = self._key(name)
        registry = self._registry
        return registry.register(key, Meter.kind,  # type: ignore[return-value]
                                 lambda: Meter(registry.report, key, time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        key = self._key(name)
        registry = self._registry
        return registry.register(key, Distribution.kind,  # type: ignore[return-value]
                                 lambda: Distribution(registry.report, key))

    def get_scope_components(self) -> list[str]:
        return [self._operator, str(self._registry.subtask), *self._names]

    def get_all_variables(self) -> dict[str, str]:
        return dict(self._variables)

    def get_metric_identifier(self, metric_name: str) -> str:
        return ".".join([*self.get_scope_components(), metric_name])

    def report(self) -> None:
        """Read this subtask's gauges and meter rates into the report (called when the operator closes)."""
        for metric in self._registry.metrics.values():
            reporter = getattr(metric, "report", None)
            if reporter is not None:
                reporter()

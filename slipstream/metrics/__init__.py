"""``pyflink.metrics``: the metric group a function gets from ``runtime_context.get_metrics_group()``.

The classes live in :mod:`slipstream.datastream.metrics`; this package gives them PyFlink's import path.
"""

from slipstream.datastream.metrics import Counter, Distribution, Gauge, Meter, Metric, MetricGroup

__all__ = ["Counter", "Distribution", "Gauge", "Meter", "Metric", "MetricGroup"]

"""``pyflink.metrics.metricbase`` (see :mod:`slipstream.datastream.metrics`)."""

from slipstream.datastream.metrics import Counter, Distribution, Gauge, Meter, Metric, MetricGroup

__all__ = ["Counter", "Distribution", "Gauge", "Meter", "Metric", "MetricGroup"]

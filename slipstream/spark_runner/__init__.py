"""The Spark runner: a slipstream job as one Spark Structured Streaming query.

``env.set_runner("spark")`` (or ``env.execute(runner=SparkRunner(...))``) runs the job on the
active SparkSession instead of the embedded runtime; ``env.explain()`` then shows the Spark
plan. See :mod:`slipstream.spark_runner.runner` for how a job runs and resumes, and
:mod:`slipstream.spark_runner.plan` for what maps to what and what is refused. pyspark is
imported only when a job runs or is explained on Spark.
"""

from __future__ import annotations

from slipstream.spark_runner.plan import SparkPlanningError
from slipstream.spark_runner.runner import SparkRunner

__all__ = ["SparkPlanningError", "SparkRunner"]

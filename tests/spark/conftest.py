"""One local SparkSession (``local[2]``) for every Spark test: a JVM start costs seconds.

The tests here need pyspark (``pip install -e '.[test,spark]'``, what ``make test`` does)
and Java 17; without pyspark they are skipped.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the Spark tests need pyspark: pip install -e '.[test,spark]'")


@pytest.fixture(scope="session")
def spark() -> Any:
    from slipstream.runtime.batch.spark_engine import start_session
    # functions defined in these test modules are pickled by reference: Spark's Python
    # workers (started by the JVM, with this environment) must be able to import the modules
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    session = start_session("local[2]", app_name="slipstream-tests", **{
        "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2",
        "spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()

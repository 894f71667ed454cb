"""The Spark tests share the one local SparkSession of tests/conftest.py's ``spark`` fixture.

The tests here need pyspark (``pip install -e '.[test,spark]'``, what ``make test`` does)
and Java 17; without pyspark they are skipped.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the Spark tests need pyspark: pip install -e '.[test,spark]'")

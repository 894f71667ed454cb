"""``SparkBatchEngine``: the :class:`~slipstream.operators.batch_engine.BatchEngine` on Apache Spark.

The backlog work of sorting operators runs as Spark jobs: tables go to Spark as Arrow
(``SparkSession.createDataFrame(pyarrow.Table)``) and come back as Arrow
(``DataFrame.toArrow()``); per-key and vectorised co-group functions run in Spark's Python
workers through Spark's grouped co-group (``groupBy().cogroup().applyInArrow``), keys spread
over ``buckets`` groups so that a worker makes one call per group of keys, not per key.
Results are identical to :class:`~slipstream.runtime.batch.polars_engine.PolarsBatchEngine`'s
(``tests/spark`` asserts it), so a job gives the same answer on either engine.

The session:

* ``session`` given: that one;
* else, inside a running Spark application: the active ``SparkSession`` (so slipstream
  imported into a PySpark ETL job runs its backlog on that job's cluster);
* else a session is started on first use with ``master`` (default ``local[*]``), the Spark
  UI off; it stays up for the next job of the process (a JVM start costs seconds).

pyspark is imported only here and only when the engine is used: the rest of slipstream
imports without it. Needs ``pip install 'slipstream[spark]'`` (pyspark >= 4.0, for
``toArrow``, Arrow input to ``createDataFrame`` and ``cogroup().applyInArrow``) and Java 17.
Functions given to the co-group methods, and the records they see, are pickled to Spark's
workers: on a cluster, slipstream must be installed where the executors run Python. Before
the first such function is sent, one small job checks that the workers' interpreter imports
slipstream, pyarrow and polars (:func:`check_python_workers`), and says what to do if not.

Example (not a doctest: it starts a Spark session; ``tests/spark`` runs the engine)::

    engine = SparkBatchEngine(master="local[2]")
    engine.sort(pa.table({"k": [2, 1]}), ["k"]).column("k").to_pylist()  # [1, 2]
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from slipstream.datastream.connectors.spark import spark_compatible
from slipstream.errors import SlipstreamError
from slipstream.operators.batch_engine import (
    CO_GROUP_COLUMNS,
    KEY_COLUMN,
    Aggregation,
    CoGroupFunctionError,
    check_aggregations,
    empty_co_group_result,
    run_co_group,
    run_co_group_vectorized,
)

BUCKET_COLUMN = "__slipstream_bucket"
_RESULT_SCHEMA = "bucket long, result binary, error binary"


def pyspark_modules() -> tuple[Any, Any, Any]:
    """``(SparkSession, functions, Window)``, or a clear error when pyspark is missing."""
    try:
        from pyspark.sql import SparkSession, Window, functions
    except ImportError as exc:
        raise SlipstreamError("the Spark batch engine needs pyspark: pip install 'slipstream[spark]' "
                              "(and Java 17 on the machine)") from exc
    return SparkSession, functions, Window


def start_session(master: str | None = None, app_name: str = "slipstream", **conf: str) -> Any:
    """The active SparkSession, or a new one on ``master`` (``local[*]`` by default), UI off.

    Workers run this interpreter (``PYSPARK_PYTHON`` unless set), so they import the same
    slipstream and pyarrow as the driver.
    """
    SparkSession, _, _ = pyspark_modules()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.execution.arrow.pyspark.enabled": "true", "spark.sql.session.timeZone": "UTC", **conf}
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


_WORKERS_CHECKED: set[str] = set()
"""The Python interpreters of Spark's workers found able to run slipstream's functions."""


def check_python_workers(session: Any) -> None:
    """Fail with what to do when Spark's Python workers cannot import what slipstream's functions
    need there (slipstream, pyarrow, polars): one small job per worker interpreter, before the
    first function is sent, instead of a worker's traceback in the middle of the job."""
    # a Spark Connect session has no SparkContext here: its server chose the workers' interpreter
    executable = session.sparkContext.pythonExec if hasattr(session, "_jsc") else "the Connect server's python"
    if executable in _WORKERS_CHECKED:
        return

    def missing_modules(batches: Any) -> Any:  # nested: pickled by value, needs nothing of slipstream
        missing = []
        for name in ("slipstream", "pyarrow", "polars"):
            try:
                __import__(name)
            except ImportError as error:
                missing.append(f"{name} ({error})")
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"missing": ["; ".join(missing)]})

    try:
        found = session.range(1).mapInArrow(missing_modules, "missing string").toArrow()
    except Exception as exc:
        raise SlipstreamError(_workers_advice(executable, f"a worker failed: {str(exc).strip()[:500]}")) from exc
    missing = found.column("missing")[0].as_py()
    if missing:
        raise SlipstreamError(_workers_advice(executable, f"it cannot import {missing}"))
    _WORKERS_CHECKED.add(executable)


def _workers_advice(executable: str, problem: str) -> str:
    return (f"Spark's Python workers cannot run slipstream's functions: they run {executable!r} "
            f"(PYSPARK_PYTHON when the SparkContext started) and {problem}. Set PYSPARK_PYTHON to an "
            f"interpreter with slipstream installed (this driver runs {sys.executable!r}) before the "
            "SparkSession starts (slipstream's start_session does), or install 'slipstream[spark]' where "
            "the executors run (on a cluster: spark.pyspark.python)")


class SparkBatchEngine:
    """Sorts, aggregates and co-groups Arrow tables as Spark jobs (see the module docstring).

    Args:
        master: where to start a session when none is active (``local[*]``, ``spark://…``).
        session: use this SparkSession.
        buckets: groups of keys the co-group functions are called per (default: the session's
            ``spark.sql.shuffle.partitions``).
    """

    name = "spark"
    in_process = False

    def __init__(self, master: str | None = None, session: Any = None, *, buckets: int | None = None) -> None:
        if buckets is not None and (not isinstance(buckets, int) or buckets < 1):
            raise ValueError(f"buckets must be a positive integer, got {buckets!r}")
        self.master = master
        self._session = session
        self.buckets = buckets
        self.startup_seconds = 0.0
        """Seconds spent starting a SparkSession for this engine (0 when one was running)."""

    def __repr__(self) -> str:
        return f"SparkBatchEngine(master={self.master!r})"

    @property
    def session(self) -> Any:
        """The SparkSession this engine runs on (found or started on first use)."""
        if self._session is None:
            started = time.perf_counter()
            SparkSession, _, _ = pyspark_modules()
            active = SparkSession.getActiveSession()
            self._session = active if active is not None else start_session(self.master)
            if active is None:
                self.startup_seconds = time.perf_counter() - started
        return self._session

    # -- Arrow in and out ---------------------------------------------------------------------------
    def to_spark(self, table: pa.Table) -> Any:
        """A Spark DataFrame of ``table`` (large string/binary columns as Spark's string/binary)."""
        return self.session.createDataFrame(spark_compatible(table))

    @staticmethod
    def to_arrow(frame: Any) -> pa.Table:
        return frame.toArrow()

    # -- the protocol -------------------------------------------------------------------------------
    def sort(self, table: pa.Table, by: Sequence[str], *,
             descending: Sequence[bool] | None = None) -> pa.Table:
        if not by or table.num_rows < 2:
            return table
        frame = self.to_spark(table)
        flags = list(descending) if descending is not None else [False] * len(by)
        order = [frame[name].desc_nulls_first() if flag else frame[name].asc_nulls_first()
                 for name, flag in zip(by, flags)]
        return _like(frame.orderBy(*order).toArrow(), table.schema)

    def group_aggregate(self, table: pa.Table, keys: Sequence[str], aggregations: Sequence[Aggregation], *,
                        order_by: Sequence[str] = (),
                        descending: Sequence[bool] | None = None) -> pa.Table:
        check_aggregations(aggregations, order_by)
        _, F, Window = pyspark_modules()
        expected = _polars_result_schema(table, keys, aggregations, order_by, descending)
        frame = self.to_spark(table)
        keys = list(keys)
        flags = list(descending) if descending is not None else [False] * len(order_by)
        ops = {aggregation.op for aggregation in aggregations}
        if ops & {"first", "last"}:
            forward = [F.col(c).desc_nulls_first() if d else F.col(c).asc_nulls_first()
                       for c, d in zip(order_by, flags)]
            backward = [F.col(c).asc_nulls_last() if d else F.col(c).desc_nulls_last()
                        for c, d in zip(order_by, flags)]  # the reverse order: its first row is the last
            group = Window.partitionBy(*[F.col(k) for k in keys])
            frame = frame.withColumn("__first", F.row_number().over(group.orderBy(*forward)))
            frame = frame.withColumn("__last", F.row_number().over(group.orderBy(*backward)))
        expressions = []
        for aggregation in aggregations:
            column = F.col(aggregation.column)
            if aggregation.op in ("first", "last"):
                marker = "__first" if aggregation.op == "first" else "__last"
                expression = F.first(F.when(F.col(marker) == 1, column), ignorenulls=True)
            elif aggregation.op == "count":
                expression = F.count(column)
            else:
                expression = getattr(F, aggregation.op)(column)
            expressions.append(expression.alias(aggregation.name))
        result = frame.groupBy(*keys).agg(*expressions).orderBy(*[F.col(k).asc_nulls_first() for k in keys])
        return _like(result.toArrow(), expected)

    def co_group(self, first: pa.Table, second: pa.Table, function: Any) -> pa.Table:
        if not first.num_rows and not second.num_rows:
            return empty_co_group_result()
        _, F, _ = pyspark_modules()
        buckets = self._bucket_count()
        frames = [self.to_spark(table.select(list(CO_GROUP_COLUMNS)))
                  .withColumn(BUCKET_COLUMN, F.pmod(F.col("key"), F.lit(buckets))) for table in (first, second)]

        def run_bucket(left: pa.Table, right: pa.Table) -> pa.Table:
            bucket = (left if left.num_rows else right).column(BUCKET_COLUMN)[0].as_py()
            result, error = run_co_group(left.drop_columns([BUCKET_COLUMN]), right.drop_columns([BUCKET_COLUMN]),
                                         function)
            return _bucket_result(bucket, result, error)

        parts = self._run_buckets(frames, run_bucket, function)
        if not parts:
            return empty_co_group_result()
        import pyarrow.compute as pc
        table = pa.concat_tables(parts)
        return table.take(pc.sort_indices(table, sort_keys=[("key", "ascending")]))  # stable: keeps output order

    def co_group_vectorized(self, first: pa.Table, second: pa.Table, function: Any, *,
                            key: str = KEY_COLUMN) -> pa.Table | None:
        _, F, _ = pyspark_modules()
        buckets = self._bucket_count()
        frames = [self.to_spark(table).withColumn(BUCKET_COLUMN, F.pmod(F.col(key), F.lit(buckets)))
                  for table in (first, second)]
        return self.co_group_frames(frames[0], frames[1], function, key=key, bucket_column=BUCKET_COLUMN)

    # -- Spark DataFrames in --------------------------------------------------------------------------
    def co_group_frames(self, first: Any, second: Any, function: Any, *, key: str | None = None,
                        bucket_column: str | None = None, first_key: str | None = None,
                        second_key: str | None = None) -> pa.Table | None:
        """The vectorised co-group over two Spark DataFrames (the data stays in Spark until the
        function's results come back as Arrow).

        Either ``bucket_column`` names a bucket both frames already have (and ``key`` a column
        dropped before the call), or ``first_key``/``second_key`` name the key columns, which
        are hashed into buckets (and kept: they are the records' own fields).
        """
        _, F, _ = pyspark_modules()
        drop = [key] if key else []
        if bucket_column is None:
            buckets = self._bucket_count()
            bucket_column = BUCKET_COLUMN
            first = first.withColumn(bucket_column, F.pmod(F.hash(F.col(first_key)), F.lit(buckets)))
            second = second.withColumn(bucket_column, F.pmod(F.hash(F.col(second_key)), F.lit(buckets)))
        column = bucket_column

        def run_bucket(left: pa.Table, right: pa.Table) -> pa.Table:
            bucket = (left if left.num_rows else right).column(column)[0].as_py()
            left, right = left.drop_columns([column]), right.drop_columns([column])
            if not drop:  # the keys are the records' own columns: a constant key column for the error
                left = left.append_column(KEY_COLUMN, pa.repeat(pa.scalar(bucket, pa.int64()), left.num_rows))
                right = right.append_column(KEY_COLUMN, pa.repeat(pa.scalar(bucket, pa.int64()), right.num_rows))
            result, error = run_co_group_vectorized(left, right, function, drop[0] if drop else KEY_COLUMN)
            return _bucket_result(bucket, result, error)

        parts = self._run_buckets([first, second], run_bucket, function, bucket_column=column)
        parts = [part for part in parts if part is not None]
        if not parts:
            return None
        return pa.concat_tables(parts, promote_options="permissive")

    # -- helpers -----------------------------------------------------------------------------------
    def _bucket_count(self) -> int:
        if self.buckets is not None:
            return self.buckets
        return max(1, int(self.session.conf.get("spark.sql.shuffle.partitions", "8")))

    def _run_buckets(self, frames: list[Any], run_bucket: Any, function: Any,
                     bucket_column: str = BUCKET_COLUMN) -> list[Any]:
        """Run ``run_bucket`` per bucket of both frames in Spark; the buckets' results in bucket
        order, or the first failure raised as a :class:`CoGroupFunctionError`."""
        check_python_workers(self.session)
        left, right = frames
        grouped = left.groupBy(bucket_column).cogroup(right.groupBy(bucket_column))
        try:
            collected = grouped.applyInArrow(run_bucket, schema=_RESULT_SCHEMA).toArrow()
        except pickle.PicklingError as exc:
            raise SlipstreamError(f"the co-group function {function!r} cannot be sent to Spark's workers: "
                                  f"{exc}; make it picklable (no open files, locks or sessions in it) or "
                                  "use the polars batch engine") from exc
        except Exception as exc:
            if "pickle" in type(exc).__name__.lower() or "pickl" in str(exc)[:300].lower():
                raise SlipstreamError(f"the co-group function {function!r} cannot be sent to Spark's "
                                      f"workers: {exc}") from exc
            raise
        collected = collected.sort_by([("bucket", "ascending")])
        results = []
        errors = [blob for blob in collected.column("error").to_pylist() if blob is not None]
        if errors:
            raise _load_error(errors[0])
        for blob in collected.column("result").to_pylist():
            results.append(None if blob is None else _from_ipc(blob))
        return results


def _bucket_result(bucket: int, result: pa.Table | None, error: CoGroupFunctionError | None) -> pa.Table:
    """One bucket's answer as one row: the result as Arrow IPC bytes, or the pickled error."""
    return pa.table({"bucket": pa.array([bucket], pa.int64()),
                     "result": pa.array([None if result is None or error is not None else _to_ipc(result)],
                                        pa.binary()),
                     "error": pa.array([None if error is None else _dump_error(error)], pa.binary())})


def _to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def _dump_error(error: CoGroupFunctionError) -> bytes:
    try:
        return pickle.dumps(error.key_ids) + b"\0SLIPSTREAM\0" + pickle.dumps(error.cause)
    except Exception:  # noqa: BLE001 - an exception that cannot be pickled travels as its text
        import traceback
        text = "".join(traceback.format_exception(error.cause))
        cause = RuntimeError(f"{type(error.cause).__name__}: {error.cause}\n(in a Spark worker)\n{text}")
        return pickle.dumps(error.key_ids) + b"\0SLIPSTREAM\0" + pickle.dumps(cause)


def _load_error(blob: bytes) -> CoGroupFunctionError:
    keys, _, cause = blob.partition(b"\0SLIPSTREAM\0")
    try:
        loaded = pickle.loads(cause)
    except Exception as exc:  # noqa: BLE001
        loaded = RuntimeError(f"a co-group function failed in a Spark worker (its error could not be "
                              f"read back: {exc})")
    return CoGroupFunctionError(pickle.loads(keys), loaded)


def _like(result: pa.Table, schema: pa.Schema) -> pa.Table:
    """``result`` cast to ``schema`` (the types the polars engine returns), column for column."""
    if result.schema.equals(schema):
        return result
    if result.num_rows == 0:
        return schema.empty_table()
    return result.cast(schema)


def _polars_result_schema(table: pa.Table, keys: Sequence[str], aggregations: Sequence[Aggregation],
                          order_by: Sequence[str], descending: Sequence[bool] | None) -> pa.Schema:
    """The schema polars gives :meth:`group_aggregate` of ``table`` (computed on no rows)."""
    from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
    empty = PolarsBatchEngine().group_aggregate(table.slice(0, 0), keys, aggregations,
                                                order_by=order_by, descending=descending)
    return empty.schema

"""``SparkRunner``: runs a job's :class:`JobSpec` as one Spark Structured Streaming query.

``env.set_runner("spark")`` or ``env.execute(runner=SparkRunner(...))`` hands the frozen job to
:meth:`SparkRunner.execute`: it plans it (:mod:`.plan`, refusing what Spark cannot run), builds
the query on the SparkSession (the one given, else the active one, else one started on
``master``), starts it and waits for it:

* a job whose sources are bounded (or a runner made with ``available_now=True``) runs with
  Spark's ``availableNow`` trigger: every file present is read, then the query stops;
* else it streams until stopped, one micro-batch per checkpoint interval
  (``enable_checkpointing``), or one after the other without it.

The query's ``checkpointLocation`` is the runner's ``checkpoint_location``, else
``<checkpoint storage dir>/spark-<job name>``, else a temporary directory removed after the
run. Started again with the same location, a killed query resumes where its last committed
micro-batch ended: the files read, the keyed state and timers, and the file sink's committed
files are all in that location, so the file sink's output is exactly-once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from slipstream.datastream.columnar import unfit_field
from slipstream.datastream.connectors.base import RecordWriteError
from slipstream.datastream.formats.parquet import parquet_row
from slipstream.datastream.job_spec import JobExecutionResult, JobSpec
from slipstream.errors import JobExecutionError, SlipstreamError
from slipstream.spark_runner.feed import FeedWriter
from slipstream.spark_runner.frames import (
    FrameBuilder,
    end_of_input_directory,
    feed_directory,
    write_end_of_input,
    write_frame,
)
from slipstream.spark_runner.plan import (
    PROCESSING_TIME,
    DataFrameNode,
    FeedNode,
    FileStreamNode,
    KeyedNode,
    SinkNode,
    SparkPlan,
    plan_spark_job,
)
from slipstream.spark_runner.records import ORDER, TAG, TIMESTAMP, VALUE, encode_line, loads

STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class SparkRunner:
    """Runs jobs on Spark Structured Streaming (see the module docstring).

    Args:
        session: the SparkSession to run on; default the active one, else one started on ``master``
            with one shuffle partition (keyed partition) per core.
        master: where to start a session when there is none (``local[*]`` by default).
        checkpoint_location: the query's checkpoint location (see the module docstring).
        available_now: read what the sources hold now, then stop (Spark's ``availableNow`` trigger),
            even when they are watched directories; a later run with the same location reads on.
        max_files_per_trigger: at most this many new files of a directory per micro-batch
            (Spark's ``maxFilesPerTrigger``); default: every file found.
    """

    name = "spark"

    def __init__(self, session: Any = None, *, master: str | None = None, checkpoint_location: str | None = None,
                 available_now: bool = False, max_files_per_trigger: int | None = None) -> None:
        self._session = session
        self.max_files_per_trigger = max_files_per_trigger
        self.master = master
        self.checkpoint_location = checkpoint_location
        self.available_now = available_now
        self.last_query: Any = None
        """The last query started."""

    def __repr__(self) -> str:
        return f"SparkRunner(master={self.master!r}, checkpoint_location={self.checkpoint_location!r})"

    @property
    def session(self) -> Any:
        if self._session is None:
            from pyspark.sql import SparkSession

            from slipstream.runtime.batch.spark_engine import start_session
            started = SparkSession.getActiveSession() is None
            self._session = start_session(self.master)
            self._session.conf.set("spark.sql.streaming.stateStore.providerClass", STATE_STORE)
            if started:  # one keyed partition per core, not Spark's 200: each is a task with its own
                # state store and Python state server in every micro-batch (a user's session is left as it is)
                self._session.conf.set("spark.sql.shuffle.partitions",
                                       str(self._session.sparkContext.defaultParallelism))
        return self._session

    def plan(self, spec: JobSpec) -> SparkPlan:
        """The Spark plan of ``spec`` (refusing, naming the operator, what Spark cannot run)."""
        partitions = int(self.session.conf.get("spark.sql.shuffle.partitions"))
        return plan_spark_job(spec, self.checkpoint_location, partitions, self.available_now)

    def explain(self, spec: JobSpec) -> str:
        """The Spark plan as text: which operator runs where, the query, the state schema, the trigger."""
        from slipstream.spark_runner.explain import explain_plan
        return explain_plan(self.plan(spec))

    def execute(self, spec: JobSpec, restore_from: str | None = None) -> JobExecutionResult:
        """Run the job's query to its end (bounded input) or until it is stopped; return its metrics."""
        if restore_from not in (None, "latest"):
            raise SlipstreamError(f"the Spark runner resumes from its checkpoint location, not a checkpoint path: "
                                  f"got restore_from={restore_from!r}; give SparkRunner(checkpoint_location=...)")
        plan = self.plan(spec)
        temporary = tempfile.mkdtemp(prefix="slipstream-spark-") if plan.checkpoint_location is None else None
        watch = QueryWatch()
        try:
            self.run(plan, plan.checkpoint_location or temporary or "", watch)
        except KeyboardInterrupt:
            if self.last_query is not None:
                self.last_query.stop()
            raise
        except JobExecutionError:
            raise
        except Exception as exc:
            raise JobExecutionError(f"the Spark query of job '{plan.job_name}' failed: {_user_error(exc)}") from exc
        finally:
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
        return JobExecutionResult(watch.query_id, plan.job_name, watch.elapsed_ms(), {"job": watch.metrics()})

    def start(self, plan: SparkPlan, checkpoint_location: str) -> Any:
        """Build ``plan``'s query and start it; return the ``StreamingQuery``."""
        session = self.session
        session.conf.set("spark.sql.streaming.stateStore.providerClass", STATE_STORE)
        # several watermarks (one per input of the event-time operator): the smallest, as Flink's
        session.conf.set("spark.sql.streaming.multipleWatermarkPolicy", "min")
        if plan.end_of_input:
            os.makedirs(end_of_input_directory(checkpoint_location), exist_ok=True)
        builder = FrameBuilder(session, plan, checkpoint_location, self.max_files_per_trigger)
        if plan.sink.encoded_by_keyed:
            frame = builder.keyed(plan.sink.input, encoder=plan.sink.transformation.sink.encoder)
        else:
            frame = builder.records(plan.sink.input)
        writer = sink_writer(plan.sink, frame).option("checkpointLocation", checkpoint_location) \
            .queryName(_query_name(plan.job_name))
        if plan.bounded:
            writer = writer.trigger(availableNow=True)
        elif plan.trigger_ms is not None:
            writer = writer.trigger(processingTime=f"{plan.trigger_ms} milliseconds")
        return writer.start()

    def run(self, plan: SparkPlan, checkpoint_location: str, watch: QueryWatch) -> None:
        """Start the feeds and the query, and wait for the query's end: when the feeds are all of its
        unbounded input, it ends once they have and it has read what they wrote. A bounded
        event-time job runs its query twice: over the input, then over the end-of-input marker
        alone, whose watermark fires every timer left (read with the input, it would make the
        input late)."""
        feeds = [FeedWriter(node.source, feed_directory(checkpoint_location, node), node.transformation.name)
                 for node in plan.nodes() if isinstance(node, FeedNode)]
        watched = any(isinstance(node, FileStreamNode) and not node.bounded for node in plan.nodes())
        ends_with_feeds = bool(feeds) and not watched and not plan.bounded
        # a processing-time operator makes Spark run micro-batches even without new data, so an
        # availableNow query with one never ends by itself: it is stopped once it read its input
        ends_when_idle = plan.bounded and any(isinstance(node, KeyedNode) and node.time_mode == PROCESSING_TIME
                                              for node in plan.nodes())
        for node in plan.nodes():
            if isinstance(node, DataFrameNode):
                write_frame(checkpoint_location, node)
        for feed in feeds:
            feed.start()
        try:
            for ending in ([False, True] if plan.end_of_input else [False]):
                if ending:
                    write_end_of_input(checkpoint_location)
                query = self.last_query = self.start(plan, checkpoint_location)
                watch.query_id = str(query.id)
                while not query.awaitTermination(0.05):
                    watch.poll(query)
                    if ends_with_feeds and not any(feed.alive() for feed in feeds):
                        self._end(query, feeds)
                    elif ends_when_idle and watch.idle(query):
                        query.stop()
                watch.poll(query)
        finally:
            for feed in feeds:
                feed.stop()

    @staticmethod
    def _end(query: Any, feeds: list[FeedWriter]) -> None:
        """The feeds ended: fail as the first failed one did, else read what they wrote and stop."""
        failed = next((feed for feed in feeds if feed.error is not None), None)
        if failed is not None:
            query.stop()
            raise JobExecutionError(f"source '{failed.name}' failed: {failed.error!r}") from failed.error
        query.processAllAvailable()
        query.stop()


class QueryWatch:
    """Every micro-batch's progress, gathered while the query runs (Spark keeps only the last 100),
    and when the first one ended: the time the job took to reach streaming."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.query_id = ""
        self.progress: dict[int, Any] = {}
        self.first_batch_ms: int | None = None

    def poll(self, query: Any) -> None:
        for progress in query.recentProgress:
            if progress is not None and progress.batchId not in self.progress:
                self.progress[progress.batchId] = progress
                if self.first_batch_ms is None:
                    self.first_batch_ms = self.elapsed_ms()

    def idle(self, query: Any) -> bool:
        """Whether the query's last micro-batch read nothing and no input is left to read."""
        last = query.lastProgress
        return last is not None and last.numInputRows == 0 and not query.status["isDataAvailable"]

    def elapsed_ms(self) -> int:
        return int((time.perf_counter() - self.started) * 1000)

    def metrics(self) -> dict[str, Any]:
        """The micro-batches' count, input records and durations (ms), and ``switched_ms``."""
        batches = [self.progress[batch] for batch in sorted(self.progress)]
        return {"batches": len(batches), "records_in": sum(p.numInputRows for p in batches),
                "batch_ms": [p.durationMs.get("triggerExecution", 0) for p in batches],
                "switched_ms": self.first_batch_ms, "query_id": self.query_id}


def _query_name(job_name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in job_name)


class TextEncoding:
    """A row-format ``FileSink``'s encoder run in the workers: each record as one line of text
    (the encoder's trailing newline is Spark's text sink's own)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa
        for batch in batches:
            lines = [encode_line(self.encoder, loads(data)) for data in batch.column(VALUE).to_pylist()]
            yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], names=["value"])


class ParquetEncoding:
    """A Parquet ``FileSink``'s records as rows of its schema, in the workers: each record as
    slipstream's Parquet writer takes it (a dict, a named Row, a tuple in the schema's order);
    one that does not fit fails naming the sink and the record."""

    def __init__(self, schema: Any, sink_name: str) -> None:
        self.schema = schema
        self.sink_name = sink_name

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa
        for batch in batches:
            records = [loads(data) for data in batch.column(VALUE).to_pylist()]
            try:
                yield pa.RecordBatch.from_pylist([parquet_row(r, self.schema) for r in records], schema=self.schema)
            except RecordWriteError as exc:
                raise self.unfit(exc.record, str(exc)) from exc
            except (pa.ArrowException, TypeError, ValueError) as exc:
                record, problem = next(((r, why) for r in records if (why := unfit_field(self.schema, parquet_row(
                    r, self.schema)))), (None, str(exc)))
                raise self.unfit(record, problem) from exc

    def unfit(self, record: Any, problem: str) -> SlipstreamError:
        return SlipstreamError(f"sink '{self.sink_name}': record {record!r} does not fit its Parquet schema: {problem}")


class DriverSink:
    """``foreachBatch``: each micro-batch's records, in read order, through the sink's own writer
    on the driver (committed per micro-batch when the writer commits in two phases)."""

    def __init__(self, sink: Any) -> None:
        self.writer = sink.create_writer()
        self.writer.open(0, 1)
        self.two_phase = self.writer.supports_two_phase_commit()
        if self.two_phase:
            self.writer.begin_two_phase_commit()

    def __call__(self, frame: Any, batch_id: int) -> None:
        import pyarrow.compute as pc
        table = frame.select(VALUE, TIMESTAMP, ORDER).toArrow()
        table = table.take(pc.sort_indices(table, sort_keys=[(ORDER, "ascending")]))
        values = [loads(data) for data in table.column(VALUE).to_pylist()]
        if values:
            self.writer.write(values, table.column(TIMESTAMP).to_pylist())
        self.writer.flush()
        if self.two_phase:
            self.writer.prepare_commit(batch_id)
            self.writer.commit(batch_id)


def sink_writer(node: SinkNode, frame: Any) -> Any:
    """The ``DataStreamWriter`` of the job's sink over ``frame`` (the sink's lines already, when
    the keyed operator before it encoded them)."""
    from pyspark.sql import functions as F
    sink = node.transformation.sink
    if node.encoded_by_keyed:
        return frame.writeStream.format("text").option("path", sink.base_path).outputMode("append")
    selected = frame.filter(F.col(VALUE).isNotNull() & F.col(TAG).isNull())
    if node.file_format == "text":
        lines = selected.select(VALUE).mapInArrow(TextEncoding(sink.encoder), "value string")
        return lines.writeStream.format("text").option("path", sink.base_path).outputMode("append")
    if node.file_format == "parquet":
        from pyspark.sql.pandas.types import from_arrow_schema
        rows = selected.select(VALUE).mapInArrow(ParquetEncoding(node.schema, node.transformation.name),
                                                 from_arrow_schema(node.schema))
        return rows.writeStream.format("parquet").option("path", sink.base_path).outputMode("append")
    return selected.writeStream.foreachBatch(DriverSink(sink))


def _user_error(exc: Exception) -> str:
    """The slipstream error inside a Spark failure (its Python worker's traceback), else the failure."""
    text = str(exc)
    for marker in ("UserFunctionError: ", "SlipstreamError: ", "SourceFormatError: "):
        if marker in text:
            return text[text.rindex(marker) + len(marker):].splitlines()[0]
    return text.splitlines()[0] if text else type(exc).__name__

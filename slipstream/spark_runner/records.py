"""How slipstream records travel through a Spark query, and the stateless steps that run on them.

A record is one row of four columns: ``value`` (the record, pickled: a slipstream record is any
Python object, so no Spark type can hold every one exactly), ``ts`` (its event timestamp in
ms, null before a timestamp assigner), ``ord`` (where it came from, as bytes that sort in the
order one embedded reader reads: the file's path, then the record's index in it, then the
index among what each function made of it) and ``tag`` (null on the main output, the
``OutputTag``'s id on a side output). Before a keyed stage a ``key`` column (the key, pickled)
is added. These functions run in Spark's Python workers inside ``mapInArrow``.
"""

from __future__ import annotations

import copy
import os
import pickle
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from slipstream.datastream.functions import Function, RuntimeContext
from slipstream.datastream.metrics import MetricGroup, OperatorMetricGroup
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import MIN_TIMESTAMP
from slipstream.datastream.transformations import (
    FilterTransformation,
    FlatMapTransformation,
    MapTransformation,
    ProcessTransformation,
    TimestampsAndWatermarksTransformation,
    Transformation,
)
from slipstream.errors import SlipstreamError, UserFunctionError

VALUE, TIMESTAMP, ORDER, TAG, KEY, EVENT_TIME_COLUMN = "value", "ts", "ord", "tag", "key", "et"
RECORD_FIELDS = [pa.field(VALUE, pa.binary()), pa.field(TIMESTAMP, pa.int64()), pa.field(ORDER, pa.binary()),
                 pa.field(TAG, pa.string())]
RECORD_SCHEMA = pa.schema(RECORD_FIELDS)
KEYED_SCHEMA = pa.schema([*RECORD_FIELDS, pa.field(KEY, pa.binary())])
RECORD_DDL = "value binary, ts long, ord binary, tag string"
KEYED_DDL = RECORD_DDL + ", key binary"
PICKLE_PROTOCOL = 5
END_OF_INPUT_TIMESTAMP = 253_402_300_799_999  # the last ms Spark's timestamps hold (9999-12-31)
"""The event time of the end-of-input row: the row with no value a bounded event-time job's query
reads last, so the watermark passes every timer, as the end of a bounded input does in Flink."""


def dumps(value: Any) -> bytes:
    """A record or key as the bytes a Spark column holds (equal keys of the usual types, ints,
    strings and tuples of them, pickle to equal bytes, which Spark groups by)."""
    return pickle.dumps(value, protocol=PICKLE_PROTOCOL)


def loads(data: bytes) -> Any:
    return pickle.loads(data)


def encode_line(encoder: Any, value: Any) -> str:
    """A row-format ``FileSink``'s line for ``value``, without the encoder's trailing newline
    (Spark's text sink writes its own)."""
    text: str = encoder.encode(value).decode("utf-8")
    return text[:-1] if text.endswith("\n") else text


def detached(transformation: Transformation) -> Transformation:
    """A copy of ``transformation`` without its inputs: what a Spark worker gets (pickled), so
    the upstream graph (sources, their tables and factories) stays on the driver."""
    copied = copy.copy(transformation)
    copied.inputs = []
    return copied


def child_order(parent: bytes, index: int) -> bytes:
    """The order of the ``index``-th record made from the record ordered ``parent``."""
    return parent + struct.pack(">I", index)


def file_order(path: str, part: int, index: int) -> bytes:
    """The order of record ``index`` of part ``part`` of ``path``: by path, part, index."""
    return path.encode() + b"\x00" + struct.pack(">qq", part, index)


@dataclass
class Rows:
    """Records being built into one Arrow batch of the record schema."""

    values: list[bytes | None] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)
    orders: list[bytes] = field(default_factory=list)
    tags: list[str | None] = field(default_factory=list)
    keys: list[bytes] | None = None

    def add(self, value: Any, timestamp: int | None, order: bytes, tag: str | None = None) -> None:
        self.values.append(dumps(value))
        self.timestamps.append(timestamp)
        self.orders.append(order)
        self.tags.append(tag)

    def add_end_of_input(self, ts: int, order: bytes) -> None:
        """The end-of-input row (no value), unchanged."""
        self.values.append(None)
        self.timestamps.append(ts)
        self.orders.append(order)
        self.tags.append(None)
        if self.keys is not None:
            self.keys.append(dumps(None))

    def batch(self) -> pa.RecordBatch:
        columns: list[Any] = [self.values, self.timestamps, self.orders, self.tags]
        if self.keys is None:
            return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)
        return pa.RecordBatch.from_arrays([*columns, self.keys], schema=KEYED_SCHEMA)


class SparkRuntimeContext(RuntimeContext):
    """What a function's ``open`` sees in a Spark worker: its operator, this task, the job's
    parameters. Keyed state is given by the keyed stage's context (:mod:`.keyed`); here it is refused."""

    def __init__(self, name: str, parallelism: int, job_parameters: dict[str, str]) -> None:
        self._name = name
        self._parallelism = parallelism
        self._job_parameters = job_parameters

    def get_task_name(self) -> str:
        return self._name

    def get_number_of_parallel_subtasks(self) -> int:
        return self._parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._parallelism

    def get_index_of_this_subtask(self) -> int:
        from pyspark import TaskContext
        context = TaskContext.get()
        return context.partitionId() % self._parallelism if context is not None else 0

    def get_attempt_number(self) -> int:
        from pyspark import TaskContext
        context = TaskContext.get()
        return context.attemptNumber() if context is not None else 0

    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None:
        return self._job_parameters.get(key, default_value)

    def get_metrics_group(self) -> MetricGroup:
        """A metric group whose metrics stay in this Spark worker: the Spark runner reports the
        query's progress, not user metrics."""
        return OperatorMetricGroup({}, self._name, self.get_index_of_this_subtask(), self._parallelism)

    def _no_keyed_state(self, state_descriptor: Any) -> Any:
        raise SlipstreamError(f"operator '{self._name}': keyed state ({state_descriptor!r}) needs a keyed "
                              "stream (key_by before it)")

    get_state = get_list_state = get_map_state = get_reducing_state = get_aggregating_state = _no_keyed_state


class RecordContext:
    """What a process function's context holds for the record at hand: its timestamp and the
    side outputs given to ``ctx.output``; on an unkeyed stream, that is all of it."""

    def __init__(self) -> None:
        self.current_timestamp: int | None = None
        self.side: list[tuple[OutputTag, Any]] = []

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def output(self, output_tag: OutputTag, value: Any) -> None:
        if not isinstance(output_tag, OutputTag):
            raise TypeError(f"ctx.output expects an OutputTag, got {output_tag!r}")
        self.side.append((output_tag, value))

    def is_backlog(self) -> bool:
        return False

    def timer_service(self) -> Any:
        raise SlipstreamError("timers can only be used on a keyed stream (key_by before process)")


Emitted = list[tuple[Any, int | None, str | None]]
"""What one step makes of one record: (value, timestamp, side-output tag id or None)."""


def split_results(results: Any, timestamp: int | None, side: list[tuple[OutputTag, Any]]) -> Emitted:
    """A process function's yielded results (``(tag, value)`` pairs go to side outputs) and
    what it gave ``ctx.output``, as emitted records."""
    out: Emitted = []
    for result in results or ():
        if type(result) is tuple and len(result) == 2 and isinstance(result[0], OutputTag):
            out.append((result[1], timestamp, result[0].tag_id))
        else:
            out.append((result, timestamp, None))
    out.extend((value, timestamp, tag.tag_id) for tag, value in side)
    side.clear()
    return out


Step = Callable[[Any, int | None], Emitted]


def step_of(transformation: Transformation) -> Step:
    """The per-record function of one stateless transformation (opened already)."""
    function: Any = getattr(transformation, "function", None)
    if isinstance(transformation, MapTransformation):
        method = function.map
        return lambda value, ts: [(method(value), ts, None)]
    if isinstance(transformation, FlatMapTransformation):
        method = function.flat_map
        return lambda value, ts: [(out, ts, None) for out in method(value) or ()]
    if isinstance(transformation, FilterTransformation):
        method = function.filter
        return lambda value, ts: [(value, ts, None)] if method(value) else []
    if isinstance(transformation, TimestampsAndWatermarksTransformation):
        extract = transformation.watermark_strategy.create_timestamp_assigner().extract_timestamp
        name = transformation.name

        def stamped(value: Any, ts: int | None) -> Emitted:
            timestamp = extract(value, MIN_TIMESTAMP if ts is None else ts)
            if timestamp < 0:
                raise SlipstreamError(
                    f"operator '{name}' gave record {value!r} the event time {timestamp} ms, before 1970: Spark's "
                    "watermark starts at 0, so the Spark runner would drop it as late, and it stops the query "
                    "instead (the embedded runtime runs such event times)")
            return [(value, timestamp, None)]
        return stamped
    if isinstance(transformation, ProcessTransformation):
        context = RecordContext()
        process = function.process_element

        def run(value: Any, ts: int | None) -> Emitted:
            context.current_timestamp = ts
            return split_results(process(value, context), ts, context.side)
        return run
    raise SlipstreamError(f"operator '{transformation.name}' is not a stateless step")  # the planner refuses it


@dataclass
class Chain:
    """Stateless transformations run one after another on each record (one ``mapInArrow``),
    then, before a keyed stage, its key selector: a chain is picklable, opened in the worker."""

    steps: list[Transformation]
    key_selector: Callable[[Any], Any] | None
    key_operator: str | None
    parallelism: int
    job_parameters: dict[str, str]

    def functions(self) -> list[Function]:
        functions = [getattr(t, "function", None) for t in self.steps]
        return [function for function in functions if isinstance(function, Function)]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for transformation in self.steps:
            function = getattr(transformation, "function", None)
            if isinstance(function, Function):
                function.open(SparkRuntimeContext(transformation.name, self.parallelism, self.job_parameters))
        steps = [(t, step_of(t)) for t in self.steps]
        try:
            for batch in batches:
                yield self.run(batch, steps)
        finally:
            for function in self.functions():
                function.close()

    def run(self, batch: pa.RecordBatch, steps: list[tuple[Transformation, Step]]) -> pa.RecordBatch:
        rows = Rows(keys=[] if self.key_selector is not None else None)
        columns = batch.to_pydict()
        for data, ts, order, tag in zip(columns[VALUE], columns[TIMESTAMP], columns[ORDER], columns[TAG]):
            if data is None:  # the end of input passes every step untouched
                rows.add_end_of_input(ts, order)
                continue
            records: Emitted = [(loads(data), ts, tag)]
            for transformation, step in steps:
                records = [out for value, stamp, side in records if side is None
                           for out in self._call(transformation, step, value, stamp)] + \
                          [record for record in records if record[2] is not None]
            for index, (value, stamp, side) in enumerate(records):
                self._add(rows, value, stamp, child_order(order, index), side)
        return rows.batch()

    @staticmethod
    def _call(transformation: Transformation, step: Step, value: Any, ts: int | None) -> Emitted:
        try:
            return step(value, ts)
        except Exception as exc:
            raise UserFunctionError(transformation.name, 0, 1, value, exc, uid=transformation.uid) from exc

    def _add(self, rows: Rows, value: Any, ts: int | None, order: bytes, tag: str | None) -> None:
        rows.add(value, ts, order, tag)
        if rows.keys is not None:
            selector = self.key_selector
            assert selector is not None
            try:
                key = selector(value) if tag is None else None
            except Exception as exc:
                raise UserFunctionError(self.key_operator or "key_by", 0, 1, value, exc,
                                        what="the key selector's record") from exc
            rows.keys.append(dumps(key))


def local_path(uri: str) -> str:
    """The path Spark's file source names ``uri`` by, as slipstream's readers open it."""
    from urllib.parse import unquote, urlparse
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


@dataclass
class FileReading:
    """Reads the files a Spark file stream source found (their paths, one per row) with the
    slipstream source's own format, so records are exactly what the embedded reader makes of them."""

    reader_format: Any
    source_name: str
    order_prefix: bytes = b""  # a HybridSource's part number: its records sort before the next part's
    batch_size: int = 4096
    skip: frozenset[str] = frozenset()  # absolute paths of files another query reads (a bootstrap's backlog)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for uri in sorted(batch.column("path").to_pylist()):
                path = local_path(uri)
                if os.path.abspath(path) not in self.skip:
                    yield from self.read_file(path)

    def read_file(self, path: str) -> Iterator[pa.RecordBatch]:
        for part_index, part in enumerate(self.reader_format.split_file(path)):
            reader = self.reader_format.create_reader(path, part, None)
            index = 0
            try:
                while (read := reader.read_batch(self.batch_size)) is not None:
                    rows = Rows()
                    timestamps = read.timestamps or [None] * len(read.values)
                    for value, timestamp in zip(read.values, timestamps):
                        rows.add(value, timestamp, self.order_prefix + file_order(path, part_index, index))
                        index += 1
                    if rows.values:
                        yield rows.batch()
            except SlipstreamError:
                raise
            except Exception as exc:
                raise SlipstreamError(f"{self.source_name}: cannot read '{path}': {type(exc).__name__}: {exc}") \
                    from exc
            finally:
                reader.close()


def end_of_input(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The end-of-input marker file as the row that carries the watermark past every timer."""
    for batch in batches:
        count = batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [pa.nulls(count, pa.binary()), pa.array([END_OF_INPUT_TIMESTAMP] * count, pa.int64()),
             pa.array([b"\xff"] * count, pa.binary()), pa.nulls(count, pa.string())], schema=RECORD_SCHEMA)

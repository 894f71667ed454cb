"""The stream handles users chain calls on: ``DataStream``, ``KeyedStream``, ``ConnectedStreams``.

Each method is a thin builder (CONVENTIONS 1): it validates its arguments, turns a
plain callable into a function object, appends one transformation to the
environment's graph and returns a new handle. Nothing runs until ``execute``.
Names, argument order and behaviour follow ``pyflink.datastream.DataStream``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, cast

from slipstream.attributes import Boundedness
from slipstream.datastream.aggregation import AggregationFunction, aggregator
from slipstream.datastream.bootstrap import KeyedStateBootstrapFunction
from slipstream.datastream.cache import CacheSink, CacheTransformation
from slipstream.datastream.fields import FieldKey, Projection, as_item_getter
from slipstream.datastream.functions import (
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    as_function,
)
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.python_dependencies import warn_not_applied
from slipstream.datastream.slot_sharing_group import NOT_APPLIED, SlotSharingGroup
from slipstream.datastream.state import MapStateDescriptor
from slipstream.datastream.transformations import (
    BroadcastProcessTransformation,
    CoProcessTransformation,
    FilterTransformation,
    FlatMapTransformation,
    KeyedProcessTransformation,
    LoopHeadTransformation,
    MapTransformation,
    Partitioning,
    PartitionTransformation,
    ProcessTransformation,
    ReduceTransformation,
    SideOutputTransformation,
    SinkTransformation,
    SourceTransformation,
    TimestampsAndWatermarksTransformation,
    Transformation,
    UnionTransformation,
)
from slipstream.datastream.typeinfo import TupleTypeInfo, Types
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.connectors.base import Sink
    from slipstream.datastream.environment import StreamExecutionEnvironment
    from slipstream.datastream.execution_config import ExecutionConfig

T = TypeVar("T")


def _key_selector(key_selector: Any, what: str) -> Callable[[Any], Any]:
    """Accept a ``KeySelector``, a callable, a field position or a field name."""
    if isinstance(key_selector, KeySelector):
        return key_selector.get_key
    if isinstance(key_selector, (int, str)) and not isinstance(key_selector, bool):
        return FieldKey(key_selector, what)  # says its field, so columnar operators can read the column
    if callable(key_selector) and not isinstance(key_selector, type):
        get_key = as_function(key_selector, KeySelector, "get_key", 1, what).get_key
        return as_item_getter(cast("Callable[[Any], Any]", get_key))
    raise InvalidProgramError(f"{what} expects a KeySelector, a callable, a field position or a "
                              f"field name, got {key_selector!r}")


_UID_HASH = re.compile(r"[0-9A-Fa-f]{32}")


class _OperatorSettings:
    """What names, identifies and describes the operator behind a handle (a stream or a sink)."""

    _env: StreamExecutionEnvironment
    _transformation: Transformation

    def get_name(self) -> str:
        return self._transformation.name

    def name(self, name: str) -> Self:
        """Name the operator (shown in plans and errors)."""
        if not isinstance(name, str) or not name:
            raise InvalidProgramError(f"name() needs a non-empty string, got {name!r}")
        self._transformation.name = name
        return self

    def uid(self, uid: str) -> Self:
        """A stable id for this operator; state is restored by it."""
        if not isinstance(uid, str) or not uid:
            raise InvalidProgramError(f"uid() needs a non-empty string, got {uid!r}")
        self._env._claim_uid(uid, self._transformation)
        self._transformation.uid = uid
        return self

    def set_uid_hash(self, uid_hash: str) -> Self:
        """Flink's user-provided operator hash (32 hex digits): without a ``uid``, state is matched
        on restore by this hash as it is, instead of by the operator's place in the graph."""
        if not isinstance(uid_hash, str) or not _UID_HASH.fullmatch(uid_hash):
            raise InvalidProgramError(f"set_uid_hash() needs 32 hexadecimal digits, got {uid_hash!r}")
        self._env._claim_uid(uid_hash, self._transformation)
        self._transformation.uid_hash = uid_hash
        return self

    def set_description(self, description: str) -> Self:
        """A description of the operator, shown under its name in ``explain()`` and in the JSON plan."""
        if not isinstance(description, str):
            raise InvalidProgramError(f"set_description() needs a string, got {description!r}")
        self._transformation.description = description
        return self

    def disable_chaining(self) -> Self:
        self._transformation.chaining = "never"
        return self

    def slot_sharing_group(self, slot_sharing_group: str | SlotSharingGroup) -> Self:
        """Kept on the operator (``get_execution_plan`` shows it) and warned about: it places nothing
        (see :mod:`slipstream.datastream.slot_sharing_group`)."""
        name = slot_sharing_group.get_name() if isinstance(slot_sharing_group, SlotSharingGroup) \
            else slot_sharing_group
        if not isinstance(name, str) or not name:
            raise InvalidProgramError(f"slot_sharing_group expects a name or a SlotSharingGroup, "
                                      f"got {slot_sharing_group!r}")
        warn_not_applied(f"slot sharing group {name!r} of '{self.get_name()}'", NOT_APPLIED)
        self._transformation.slot_sharing_group = name
        return self


class DataStream(_OperatorSettings, Generic[T]):
    """A stream of records of type ``T``, as ``pyflink.datastream.DataStream``."""

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation) -> None:
        self._env = env
        self._transformation = transformation

    def get_type(self) -> Any:
        return self._transformation.output_type

    def get_transformation(self) -> Transformation:
        """The logical-graph node behind this stream (its attributes, parallelism, scope)."""
        return self._transformation

    def get_execution_environment(self) -> StreamExecutionEnvironment:
        return self._env

    def get_execution_config(self) -> ExecutionConfig:
        """The environment's ``ExecutionConfig`` (``env.get_config()``)."""
        return self._env.get_config()

    def get_parallelism(self) -> int:
        return self._transformation.parallelism or self._env.get_parallelism()

    def set_parallelism(self, parallelism: int) -> DataStream[T]:
        if self._transformation.is_virtual:
            raise InvalidProgramError("set_parallelism() applies to an operator, not to a "
                                      f"partitioning, union or side output ({self.get_name()})")
        if not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidProgramError(f"parallelism must be a positive integer, got {parallelism!r}")
        fixed_max = self._transformation.max_parallelism
        if fixed_max is not None and parallelism > fixed_max:
            raise InvalidProgramError(f"operator '{self.get_name()}' runs at most at parallelism "
                                      f"{fixed_max} (e.g. a window_all), asked for {parallelism}")
        source_max = getattr(getattr(self._transformation, "source", None), "max_parallelism", None)
        limit = source_max() if callable(source_max) else None
        if limit is not None and parallelism > limit:
            raise InvalidProgramError(f"source '{self.get_name()}' supports at most parallelism "
                                      f"{limit}, asked for {parallelism}")
        self._transformation.parallelism = parallelism
        self._transformation.parallelism_fixed = True
        return self

    def set_max_parallelism(self, max_parallelism: int) -> DataStream[T]:
        if not isinstance(max_parallelism, int) or max_parallelism < 1:
            raise InvalidProgramError(f"max parallelism must be a positive integer, got {max_parallelism!r}")
        self._transformation.max_parallelism = max_parallelism
        return self

    def force_non_parallel(self) -> DataStream[T]:
        return self.set_parallelism(1)

    def start_new_chain(self) -> DataStream[T]:
        self._transformation.chaining = "head"
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> DataStream[T]:
        """Accepted and warned about: a task flushes its output after every scheduler turn."""
        if not isinstance(timeout_millis, int) or isinstance(timeout_millis, bool) or timeout_millis < -1:
            raise InvalidProgramError(f"the buffer timeout must be milliseconds >= -1, got {timeout_millis!r}")
        warn_not_applied(f"set_buffer_timeout({timeout_millis}) on '{self.get_name()}'",
                         "a task flushes its output after every scheduler turn")
        return self

    def get_scope(self) -> Any:
        """The loop scope this stream belongs to (the root scope outside loops)."""
        return self._transformation.scope

    # -- one-input operations ------------------------------------------------------------------
    def _append(self, cls: type[Transformation], name: str, inputs: list[Transformation] | None = None,
                output_type: Any = None, **fields: Any) -> Transformation:
        return self._env._add_transformation(
            cls, name, inputs if inputs is not None else [self._transformation],
            output_type=output_type, key_selectors=self._key_selectors(), **fields)

    def _key_selectors(self) -> list[Callable[[Any], Any] | None]:
        return []

    def map(self, func: MapFunction[Any, Any] | Callable[[T], Any], output_type: Any = None) -> DataStream[Any]:
        """Apply ``func`` to every record and emit its result."""
        function = as_function(func, MapFunction, "map", 1, "DataStream.map")
        return DataStream(self._env, self._append(MapTransformation, "Map", output_type=output_type,
                                                  function=function))

    def project(self, *field_indexes: int) -> DataStream[Any]:
        """The fields at ``field_indexes`` of each record, as a tuple of them in that order (an
        operator named ``Projection``). As PyFlink's, only a stream of ``Types.TUPLE`` records can
        be projected; the result is of the tuple type of the fields picked."""
        output = self.get_type()
        if not isinstance(output, TupleTypeInfo):
            raise InvalidProgramError(f"only a stream of Types.TUPLE records can be projected; '{self.get_name()}' "
                                      f"has output type {output!r} (give it output_type=Types.TUPLE([...]))")
        types = output.get_field_types()
        for index in field_indexes:
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(types):
                raise InvalidProgramError(f"project(): field index {index!r} is not one of the {len(types)} "
                                          f"fields of {output!r}")
        if not field_indexes:
            raise InvalidProgramError("project() needs at least one field index")
        picked = Types.TUPLE([types[index] for index in field_indexes])
        return DataStream(self._env, self._append(MapTransformation, "Projection", output_type=picked,
                                                  function=as_function(Projection(field_indexes), MapFunction,
                                                                       "map", 1, "DataStream.project")))

    def flat_map(self, func: FlatMapFunction[Any, Any] | Callable[[T], Any],
                 output_type: Any = None) -> DataStream[Any]:
        """Apply ``func`` to every record and emit each element of what it returns or yields."""
        function = as_function(func, FlatMapFunction, "flat_map", 1, "DataStream.flat_map")
        return DataStream(self._env, self._append(FlatMapTransformation, "FlatMap",
                                                  output_type=output_type, function=function))

    def filter(self, func: FilterFunction[Any] | Callable[[T], bool]) -> DataStream[T]:
        """Keep the records for which ``func`` returns true."""
        function = as_function(func, FilterFunction, "filter", 1, "DataStream.filter")
        return DataStream(self._env, self._append(FilterTransformation, "Filter",
                                                  output_type=self.get_type(), function=function))

    def process(self, func: ProcessFunction[Any, Any], output_type: Any = None) -> DataStream[Any]:
        """Run a ``ProcessFunction`` (yielding outputs, side outputs via ``yield tag, value``)."""
        if not isinstance(func, ProcessFunction):
            raise InvalidProgramError(f"DataStream.process expects a ProcessFunction, got {func!r}"
                                      + (" (a KeyedProcessFunction needs key_by first)"
                                         if isinstance(func, KeyedProcessFunction) else ""))
        return DataStream(self._env, self._append(ProcessTransformation, "Process",
                                                  output_type=output_type, function=func))

    def assign_timestamps_and_watermarks(self, watermark_strategy: Any) -> DataStream[T]:
        """Give records event timestamps and emit watermarks, as ``watermark_strategy`` says."""
        if not hasattr(watermark_strategy, "create_watermark_generator"):
            raise InvalidProgramError("assign_timestamps_and_watermarks expects a WatermarkStrategy, "
                                      f"got {watermark_strategy!r}")
        return DataStream(self._env, self._append(
            TimestampsAndWatermarksTransformation, "Timestamps/Watermarks",
            output_type=self.get_type(), watermark_strategy=watermark_strategy))

    def get_side_output(self, output_tag: OutputTag) -> DataStream[Any]:
        """The records the operator of this stream emitted to ``output_tag``."""
        if not isinstance(output_tag, OutputTag):
            raise InvalidProgramError(f"get_side_output expects an OutputTag, got {output_tag!r}")
        return DataStream(self._env, self._env._add_transformation(
            SideOutputTransformation, f"SideOutput({output_tag.tag_id})", [self._transformation],
            output_type=output_tag.type_info, tag=output_tag))

    # -- partitioning --------------------------------------------------------------------------
    def key_by(self, key_selector: KeySelector[Any, Any] | Callable[[T], Any] | int | str,
               key_type: Any = None) -> KeyedStream[T]:
        """Partition by key: records with equal keys go to the same subtask and share keyed state."""
        selector = _key_selector(key_selector, "DataStream.key_by")
        partition = self._env._add_transformation(
            PartitionTransformation, "KeyBy", [self._transformation], output_type=self.get_type(),
            partitioning=Partitioning.HASH, key_selector=selector)
        return KeyedStream(self._env, partition, selector, key_type)

    def _partition(self, partitioning: Partitioning, **fields: Any) -> DataStream[T]:
        partition = self._env._add_transformation(
            PartitionTransformation, partitioning.value.capitalize(), [self._transformation],
            output_type=self.get_type(), partitioning=partitioning, **fields)
        return DataStream(self._env, partition)

    def forward(self) -> DataStream[T]:
        """Send each record to the downstream subtask of the same index (equal parallelism)."""
        return self._partition(Partitioning.FORWARD)

    def rebalance(self) -> DataStream[T]:
        """Distribute records round-robin over all downstream subtasks."""
        return self._partition(Partitioning.REBALANCE)

    def rescale(self) -> DataStream[T]:
        """Distribute records round-robin over a local group of downstream subtasks."""
        return self._partition(Partitioning.RESCALE)

    def shuffle(self) -> DataStream[T]:
        """Distribute records uniformly at random (seeded, so runs repeat)."""
        return self._partition(Partitioning.SHUFFLE)

    def broadcast(self, broadcast_state_descriptor: MapStateDescriptor | None = None,
                  *other_broadcast_state_descriptors: MapStateDescriptor) -> DataStream[T] | BroadcastStream:
        """Send every record to every downstream subtask.

        Given ``MapStateDescriptor``s, returns a :class:`BroadcastStream` with a broadcast state
        for each, to ``connect`` a data stream to (as PyFlink's ``broadcast``)."""
        if broadcast_state_descriptor is None:
            if other_broadcast_state_descriptors:
                raise InvalidProgramError("DataStream.broadcast: the first MapStateDescriptor is None")
            return self._partition(Partitioning.BROADCAST)
        descriptors = [broadcast_state_descriptor, *other_broadcast_state_descriptors]
        for descriptor in descriptors:
            if not isinstance(descriptor, MapStateDescriptor):
                raise InvalidProgramError(f"DataStream.broadcast expects MapStateDescriptors (broadcast state "
                                          f"is map state), got {descriptor!r}")
        names = [descriptor.name for descriptor in descriptors]
        if len(set(names)) != len(names):
            raise InvalidProgramError(f"DataStream.broadcast: two broadcast states have the same name ({names})")
        return BroadcastStream(self._partition(Partitioning.BROADCAST), descriptors)

    def global_(self) -> DataStream[T]:
        """Send every record to the first downstream subtask."""
        return self._partition(Partitioning.GLOBAL)

    def partition_custom(self, partitioner: Partitioner[Any] | Callable[[Any, int], int],
                         key_selector: KeySelector[Any, Any] | Callable[[T], Any] | int | str) -> DataStream[T]:
        """Choose the downstream subtask with ``partitioner(key, num_partitions)``."""
        function = as_function(partitioner, Partitioner, "partition", 2, "DataStream.partition_custom")
        return self._partition(Partitioning.CUSTOM, partitioner=function,
                               key_selector=_key_selector(key_selector, "DataStream.partition_custom"))

    # -- several inputs ------------------------------------------------------------------------
    def union(self, *streams: DataStream[T]) -> DataStream[T]:
        """Merge this stream with ``streams`` of the same type."""
        for stream in streams:
            if not isinstance(stream, DataStream):
                raise InvalidProgramError(f"DataStream.union expects DataStreams, got {stream!r}")
            self._env._check_same_environment(stream, "union")
        inputs = [self._transformation] + [s._transformation for s in streams]
        self._env._check_same_scope(inputs, "union")
        return DataStream(self._env, self._env._add_transformation(
            UnionTransformation, "Union", inputs, output_type=self.get_type()))

    def connect(self, ds: DataStream[Any] | BroadcastStream) -> ConnectedStreams | BroadcastConnectedStream:
        """Connect with another stream (possibly of another type) for a two-input function, or with
        a :class:`BroadcastStream` for a (keyed) broadcast process function."""
        other = ds.input_stream if isinstance(ds, BroadcastStream) else ds
        if not isinstance(other, DataStream):
            raise InvalidProgramError(f"DataStream.connect expects a DataStream or a BroadcastStream, got {ds!r}")
        self._env._check_same_environment(other, "connect")
        self._env._check_same_scope([self._transformation, other._transformation], "connect")
        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds, ds.broadcast_state_descriptors)
        return ConnectedStreams(self, ds)

    def co_group(self, other: DataStream[Any]) -> Any:
        """Group this stream and ``other`` by key and window: returns ``CoGroupedStreams``
        (``.where(k1).equal_to(k2).window(assigner).apply(fn)``)."""
        from slipstream.datastream.co_group import CoGroupedStreams
        return CoGroupedStreams(self, other)

    def join(self, other: DataStream[Any]) -> Any:
        """Join this stream with ``other`` by key within windows: returns ``JoinedStreams``
        (``.where(k1).equal_to(k2).window(assigner).apply(join_fn)``)."""
        from slipstream.datastream.co_group import JoinedStreams
        return JoinedStreams(self, other)

    # -- loops (FLIP-15) ------------------------------------------------------------------------
    def iterate(self, loop_fn: Any) -> DataStream[Any]:
        """A loop over this stream: ``loop_fn(input_stream)`` returns ``(feedback_stream,
        output_stream)``; records of the first go round again, and the result is the second,
        back in this stream's scope. ``loop_fn`` is a ``LoopFunction`` or a callable; loops
        nest. The loop ends, without any timeout, once its input ended and no record is left
        in it (see :mod:`slipstream.datastream.loops`)."""
        from slipstream.datastream.loops import iterate
        return iterate(self, loop_fn)

    def iterate_with_feedback(self, co_loop_fn: Any, feedback_type: Any = None) -> DataStream[Any]:
        """A loop whose feedback may have another type: ``co_loop_fn(connected_streams)`` gets
        this stream connected with what comes back (``stream1``/``stream2``) and returns
        ``(feedback_stream, output_stream)``; the result is the output stream."""
        from slipstream.datastream.loops import iterate_with_feedback
        return iterate_with_feedback(self, co_loop_fn, feedback_type)

    # -- windows -------------------------------------------------------------------------------
    def window_all(self, window_assigner: Any) -> Any:
        """Window the whole stream (one subtask): returns an ``AllWindowedStream``."""
        from slipstream.datastream.windowed_stream import AllWindowedStream
        return AllWindowedStream(self, window_assigner)

    def count_window_all(self, size: int, slide: int | None = None) -> Any:
        from slipstream.datastream.windowed_stream import AllWindowedStream
        return AllWindowedStream.count(self, size, slide)

    # -- sinks ---------------------------------------------------------------------------------
    def sink_to(self, sink: Sink) -> DataStreamSink:
        """Write this stream to ``sink`` (a ``Sink`` such as ``FileSink``)."""
        from slipstream.datastream.connectors.base import Sink as SinkBase
        if not isinstance(sink, SinkBase):
            raise InvalidProgramError(f"sink_to expects a Sink, got {sink!r}")
        return DataStreamSink(self._env, self._env._add_transformation(
            SinkTransformation, f"Sink: {sink.default_name()}", [self._transformation],
            sink=sink.for_input_type(self.get_type())))

    def add_sink(self, sink_func: Any) -> DataStreamSink:
        """Write this stream with a sink function: a ``Sink``, or a callable called per record."""
        from slipstream.datastream.connectors.base import Sink as SinkBase
        from slipstream.datastream.connectors.sinks import FunctionSink
        if isinstance(sink_func, SinkBase):
            return self.sink_to(sink_func)
        if not callable(sink_func):
            raise InvalidProgramError(f"add_sink expects a Sink or a callable, got {sink_func!r}")
        return self.sink_to(FunctionSink(sink_func))

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        """Print every record to standard output, prefixed like Flink's print sink; a record of a
        declared output type as Flink writes its Java value (a row ``+I[1, a]``, a tuple ``(1,a)``),
        any other with ``str``, as PyFlink does."""
        from slipstream.datastream.connectors.sinks import PrintSink
        return self.sink_to(PrintSink(sink_identifier))

    def cache(self) -> CachedDataStream[T]:
        """This bounded stream's records, kept once a job computed them: later jobs of this environment
        that use the returned stream read them instead of computing them again (BATCH mode, as
        Flink's; see :mod:`slipstream.datastream.cache`). ``invalidate()`` drops them, and so does the
        environment's ``close()``."""
        env = self._env
        directory = env._cache_directory()
        cache = cast(CacheTransformation, self._append(CacheTransformation, "Cache", output_type=self.get_type(),
                                                       directory=directory))
        cache.upstream = self._transformation
        cache.writer = SinkTransformation(id=next(env._ids), name=f"Cache Sink: {self.get_name()}", inputs=[cache],
                                          scope=cache.scope, sink=CacheSink(directory), uid=f"cache-sink-{cache.id}")
        return CachedDataStream(env, cache)

    def execute_and_collect(self, job_execution_name: str | None = None,
                            limit: int | None = None) -> Any:
        """Run the job and return its records: an iterator (a context manager too), or a list of
        at most ``limit`` records when ``limit`` is given.

        The job checkpoints and restarts as with ``execute``. With checkpoints a record is
        handed out once the checkpoint after it completes, exactly once across restarts;
        without, at once, and a restart starts the job over (at-least-once)."""
        from slipstream.datastream.connectors.sinks import CollectSink
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidProgramError(f"limit must be a non-negative integer, got {limit!r}")
        sink = CollectSink()
        self.sink_to(sink).name("Collect").set_parallelism(1)  # one subtask, as Flink's collect sink
        iterator = self._env._execute_collecting(sink, job_execution_name)
        if limit is None:
            return iterator
        with iterator:
            return [record for _, record in zip(range(limit), iterator)]

    def to_spark(self, session: Any = None, job_name: str | None = None) -> Any:
        """Run the job and return this stream's records as a Spark DataFrame.

        Columnar results (Arrow batches) stay columnar; Python records become columns by the
        stream's declared row or tuple type, else by field name (named Rows, dicts) or as
        ``f0``, ``f1``, … (tuples). ``session``: the SparkSession to create the DataFrame in
        (default: the Spark batch engine's, else the active one). Needs pyspark.
        """
        from slipstream.datastream.connectors.spark import stream_to_spark
        return stream_to_spark(self, session, job_name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.get_name()!r})"


setattr(DataStream, "global", DataStream.global_)


class DataStreamSink(_OperatorSettings):
    """What ``sink_to``/``print`` return: lets the sink be named, identified and sized."""

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation) -> None:
        self._env = env
        self._transformation = transformation

    def set_parallelism(self, parallelism: int) -> DataStreamSink:
        if not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidProgramError(f"parallelism must be a positive integer, got {parallelism!r}")
        self._transformation.parallelism = parallelism
        self._transformation.parallelism_fixed = True
        return self


class CachedDataStream(DataStream[T]):
    """A stream whose records are kept once computed (``DataStream.cache()``), as PyFlink's."""

    def invalidate(self) -> None:
        """Drop the kept records; the next job that uses this stream computes them again."""
        cast(CacheTransformation, self._transformation).invalidate()

    def _not_settable(self, call: str) -> InvalidProgramError:
        return InvalidProgramError(f"CachedDataStream.{call} is not supported (nor in PyFlink): set it on the "
                                   "stream before cache()")

    def set_parallelism(self, parallelism: int) -> DataStream[T]:
        raise self._not_settable("set_parallelism()")

    def set_max_parallelism(self, max_parallelism: int) -> DataStream[T]:
        raise self._not_settable("set_max_parallelism()")


class KeyedStream(DataStream[T]):
    """A stream partitioned by key, as ``pyflink.datastream.KeyedStream``.

    Operators applied to it run keyed: they may use keyed state and timers.
    """

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation,
                 key_selector: Callable[[Any], Any], key_type: Any = None) -> None:
        super().__init__(env, transformation)
        self._key_selector_fn = key_selector
        self._key_type = key_type

    def get_key_type(self) -> Any:
        return self._key_type

    def _key_selectors(self) -> list[Callable[[Any], Any] | None]:
        return [self._key_selector_fn]

    # -- what PyFlink's KeyedStream refuses: it is a partitioning, not an operator --------------------
    def _not_an_operator(self, call: str) -> InvalidProgramError:
        return InvalidProgramError(f"KeyedStream.{call} is not supported (nor in PyFlink): a KeyedStream is the "
                                   "key partitioning, not an operator; call it on the operator that follows "
                                   "key_by")

    def _keeps_its_partitioning(self, call: str) -> InvalidProgramError:
        return InvalidProgramError(f"KeyedStream.{call} is not supported (nor in PyFlink): it would drop the key "
                                   "partitioning; re-partition before key_by, or after an operator that follows it")

    def set_parallelism(self, parallelism: int) -> DataStream[T]:
        raise self._not_an_operator("set_parallelism()")

    def name(self, name: str) -> Self:
        raise self._not_an_operator("name()")

    def uid(self, uid: str) -> Self:
        raise self._not_an_operator("uid()")

    def set_uid_hash(self, uid_hash: str) -> Self:
        raise self._not_an_operator("set_uid_hash()")

    def set_description(self, description: str) -> Self:
        raise self._not_an_operator("set_description()")

    def set_max_parallelism(self, max_parallelism: int) -> DataStream[T]:
        raise self._not_an_operator("set_max_parallelism()")

    def force_non_parallel(self) -> DataStream[T]:
        raise self._not_an_operator("force_non_parallel()")

    def set_buffer_timeout(self, timeout_millis: int) -> DataStream[T]:
        raise self._not_an_operator("set_buffer_timeout()")

    def start_new_chain(self) -> DataStream[T]:
        raise self._not_an_operator("start_new_chain()")

    def disable_chaining(self) -> Self:
        raise self._not_an_operator("disable_chaining()")

    def slot_sharing_group(self, slot_sharing_group: str | SlotSharingGroup) -> Self:
        raise self._not_an_operator("slot_sharing_group()")

    def shuffle(self) -> DataStream[T]:
        raise self._keeps_its_partitioning("shuffle()")

    def rebalance(self) -> DataStream[T]:
        raise self._keeps_its_partitioning("rebalance()")

    def rescale(self) -> DataStream[T]:
        raise self._keeps_its_partitioning("rescale()")

    def forward(self) -> DataStream[T]:
        raise self._keeps_its_partitioning("forward()")

    def broadcast(self, *args: Any) -> DataStream[T]:
        raise self._keeps_its_partitioning("broadcast()")

    def global_(self) -> DataStream[T]:
        raise self._keeps_its_partitioning("global()")

    def cache(self) -> CachedDataStream[T]:
        raise self._not_an_operator("cache()")

    def partition_custom(self, partitioner: Any, key_selector: Any) -> DataStream[T]:
        raise self._keeps_its_partitioning("partition_custom()")

    def process(self, func: KeyedProcessFunction[Any, Any, Any] | ProcessFunction[Any, Any],
                output_type: Any = None) -> DataStream[Any]:
        """Run a ``KeyedProcessFunction`` with keyed state and timers."""
        if isinstance(func, ProcessFunction):
            return super().process(func, output_type)
        if not isinstance(func, KeyedProcessFunction):
            raise InvalidProgramError(f"KeyedStream.process expects a KeyedProcessFunction, got {func!r}")
        if isinstance(func, KeyedStateBootstrapFunction) and not isinstance(self._key_selector_fn, FieldKey):
            raise InvalidProgramError(f"KeyedStream.process: {func!r} is a KeyedStateBootstrapFunction, whose backlog "
                                      "frame needs a key column: key the stream by a field (key_by('name'))")
        return DataStream(self._env, self._append(KeyedProcessTransformation, "KeyedProcess",
                                                  output_type=output_type, function=func))

    def reduce(self, func: ReduceFunction[Any] | Callable[[T, T], T]) -> DataStream[T]:
        """A rolling reduce per key: emits the combined value after every record. A built-in
        :class:`~slipstream.datastream.aggregation.AggregationFunction` runs vectorised on a backlog."""
        function = as_function(func, ReduceFunction, "reduce", 2, "KeyedStream.reduce")
        if isinstance(function, AggregationFunction):
            kind, field = function.aggregation
            return self._aggregate(kind, field)
        return DataStream(self._env, self._append(ReduceTransformation, "Keyed Reduce",
                                                  output_type=self.get_type(), function=function))

    def _aggregate(self, kind: str, field: int | str) -> DataStream[T]:
        if not isinstance(field, (int, str)) or isinstance(field, bool):
            raise InvalidProgramError(f"KeyedStream.{kind} expects a field position or name, got {field!r}")
        return DataStream(self._env, self._append(
            ReduceTransformation, f"Keyed {kind.capitalize()}({field})", output_type=self.get_type(),
            function=aggregator(kind, field), aggregation=(kind, field)))

    def sum(self, position_to_sum: int | str = 0) -> DataStream[T]:
        """Rolling sum of a field per key; other fields come from the key's first record."""
        return self._aggregate("sum", position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream[T]:
        """Rolling minimum of a field per key; other fields come from the key's first record."""
        return self._aggregate("min", position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream[T]:
        """Rolling maximum of a field per key; other fields come from the key's first record."""
        return self._aggregate("max", position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream[T]:
        """Rolling record with the smallest field per key (the first such record on ties)."""
        return self._aggregate("min_by", position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream[T]:
        """Rolling record with the largest field per key (the first such record on ties)."""
        return self._aggregate("max_by", position_to_max_by)

    def window(self, window_assigner: Any) -> Any:
        """Window each key's records: returns a ``WindowedStream``."""
        from slipstream.datastream.windowed_stream import WindowedStream
        return WindowedStream(self, window_assigner)

    def count_window(self, size: int, slide: int | None = None) -> Any:
        """Windows of ``size`` records per key (sliding by ``slide`` when given)."""
        from slipstream.datastream.windowed_stream import WindowedStream
        return WindowedStream.count(self, size, slide)


setattr(KeyedStream, "global", KeyedStream.global_)


def __getattr__(name: str) -> Any:
    """PyFlink keeps ``WindowedStream`` and ``AllWindowedStream`` in this module too; they are defined
    in :mod:`slipstream.datastream.windowed_stream` (which imports this module, hence the lazy look-up)."""
    if name in ("WindowedStream", "AllWindowedStream"):
        from slipstream.datastream import windowed_stream
        return getattr(windowed_stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ConnectedStreams:
    """Two streams joined for a two-input function, as ``pyflink.datastream.ConnectedStreams``."""

    def __init__(self, stream1: DataStream[Any], stream2: DataStream[Any]) -> None:
        self.stream1 = stream1
        self.stream2 = stream2

    def _keyed(self) -> bool:
        return isinstance(self.stream1, KeyedStream) and isinstance(self.stream2, KeyedStream)

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: Any = None) -> ConnectedStreams:
        """Key both inputs, so records with equal keys meet in the same subtask and state."""
        return ConnectedStreams(self.stream1.key_by(key_selector1, key_type),
                                self.stream2.key_by(key_selector2, key_type))

    def _append(self, kind: str, function: Any, name: str, output_type: Any) -> DataStream[Any]:
        if isinstance(self.stream1, KeyedStream) != isinstance(self.stream2, KeyedStream):
            raise InvalidProgramError("ConnectedStreams: either both inputs are keyed or neither is")
        env = self.stream1._env
        selectors = [self.stream1._key_selectors()[0], self.stream2._key_selectors()[0]] \
            if self._keyed() else []
        transformation = env._add_transformation(
            CoProcessTransformation, name, [self.stream1._transformation, self.stream2._transformation],
            output_type=output_type, key_selectors=selectors, function=function, kind=kind)
        return DataStream(env, transformation)

    def map(self, func: CoMapFunction, output_type: Any = None) -> DataStream[Any]:
        """Apply ``map1`` to the first input's records and ``map2`` to the second's."""
        if not isinstance(func, CoMapFunction):
            raise InvalidProgramError(f"ConnectedStreams.map expects a CoMapFunction, got {func!r}")
        return self._append("map", func, "Co-Map", output_type)

    def flat_map(self, func: CoFlatMapFunction, output_type: Any = None) -> DataStream[Any]:
        """Apply ``flat_map1``/``flat_map2`` and emit every element they yield."""
        if not isinstance(func, CoFlatMapFunction):
            raise InvalidProgramError(f"ConnectedStreams.flat_map expects a CoFlatMapFunction, got {func!r}")
        return self._append("flat_map", func, "Co-Flat Map", output_type)

    def process(self, func: CoProcessFunction | KeyedCoProcessFunction, output_type: Any = None) -> DataStream[Any]:
        """Run a ``CoProcessFunction`` or, on keyed inputs, a ``KeyedCoProcessFunction``."""
        if isinstance(func, KeyedCoProcessFunction):
            if not self._keyed():
                raise InvalidProgramError("a KeyedCoProcessFunction needs both inputs keyed "
                                          "(ConnectedStreams.key_by)")
            return self._append("keyed_process", func, "Keyed Co-Process", output_type)
        if isinstance(func, CoProcessFunction):
            return self._append("process", func, "Co-Process", output_type)
        raise InvalidProgramError("ConnectedStreams.process expects a CoProcessFunction or a "
                                  f"KeyedCoProcessFunction, got {func!r}")


class BroadcastStream:
    """A stream whose every record reaches every parallel instance of the operator it is connected
    to, with broadcast state for it to keep them in, as PyFlink's ``BroadcastStream``. Made by
    ``DataStream.broadcast(descriptor, ...)``; its one use is ``data_stream.connect(broadcast_stream)``."""

    def __init__(self, input_stream: DataStream[Any], broadcast_state_descriptors: list[MapStateDescriptor]) -> None:
        self.input_stream = input_stream
        self.broadcast_state_descriptors = broadcast_state_descriptors

    def get_execution_environment(self) -> StreamExecutionEnvironment:
        return self.input_stream.get_execution_environment()

    def __repr__(self) -> str:
        names = [d.name for d in self.broadcast_state_descriptors]
        return f"BroadcastStream({self.input_stream.get_name()!r}, {names})"


def _all_bounded(transformation: Transformation) -> bool:
    """Whether every source upstream of ``transformation`` is bounded, so that what it carries is
    backlog from the start to its end; False where a loop feeds it (no source decides its end)."""
    seen: set[int] = set()
    sources: list[Any] = []
    pending = [transformation]
    while pending:
        current = pending.pop()
        if current.id in seen:
            continue
        seen.add(current.id)
        if isinstance(current, LoopHeadTransformation):
            return False
        if isinstance(current, SourceTransformation):
            sources.append(current.source)
        pending.extend(current.inputs)
    return bool(sources) and all(source.get_boundedness() is Boundedness.BOUNDED for source in sources)


class BroadcastConnectedStream:
    """A data stream (keyed or not) connected with a :class:`BroadcastStream`, as PyFlink's
    ``BroadcastConnectedStream``: ``process`` applies a ``BroadcastProcessFunction`` (non-keyed
    data stream) or a ``KeyedBroadcastProcessFunction`` (keyed data stream)."""

    def __init__(self, non_broadcast_stream: DataStream[Any], broadcast_stream: BroadcastStream,
                 broadcast_state_descriptors: list[MapStateDescriptor]) -> None:
        self.non_broadcast_stream = non_broadcast_stream
        self.broadcast_stream = broadcast_stream
        self.broadcast_state_descriptors = broadcast_state_descriptors

    def _is_keyed_stream(self) -> bool:
        return isinstance(self.non_broadcast_stream, KeyedStream)

    def process(self, func: BroadcastProcessFunction[Any, Any, Any] | KeyedBroadcastProcessFunction[Any, Any, Any, Any],
                output_type: Any = None) -> DataStream[Any]:
        """Run ``func``: ``process_element`` on the data stream's records (read-only broadcast state;
        keyed state and timers when keyed), ``process_broadcast_element`` on every broadcast element
        in every parallel instance (writable broadcast state)."""
        keyed = self._is_keyed_stream()
        if isinstance(func, BroadcastProcessFunction) and keyed:
            raise InvalidProgramError("a BroadcastProcessFunction applies to a non-keyed DataStream; on a "
                                      "KeyedStream use a KeyedBroadcastProcessFunction")
        if isinstance(func, KeyedBroadcastProcessFunction) and not keyed:
            raise InvalidProgramError("a KeyedBroadcastProcessFunction applies to a KeyedStream (key_by before "
                                      "connect); on a non-keyed DataStream use a BroadcastProcessFunction")
        if not isinstance(func, (BroadcastProcessFunction, KeyedBroadcastProcessFunction)):
            raise InvalidProgramError("BroadcastConnectedStream.process expects a BroadcastProcessFunction or a "
                                      f"KeyedBroadcastProcessFunction, got {func!r}")
        data, broadcast = self.non_broadcast_stream, self.broadcast_stream.input_stream
        env = data._env
        selectors = [data._key_selectors()[0], None] if keyed else []
        transformation = env._add_transformation(
            BroadcastProcessTransformation, "Keyed-Co-Process-Broadcast" if keyed else "Co-Process-Broadcast",
            [data._transformation, broadcast._transformation], output_type=output_type, key_selectors=selectors,
            function=func, descriptors=list(self.broadcast_state_descriptors),
            broadcast_bounded=_all_bounded(broadcast._transformation))
        return DataStream(env, transformation)


class CloseableIterator(Iterator[T]):
    """The iterator ``execute_and_collect`` returns; closing it cancels the job."""

    def __init__(self, records: Iterator[T], close: Callable[[], None]) -> None:
        self._records = records
        self._close = close
        self._closed = False

    def __iter__(self) -> CloseableIterator[T]:
        return self

    def __next__(self) -> T:
        if self._closed:
            raise StopIteration
        try:
            return next(self._records)
        except BaseException:
            self.close()
            raise

    def next(self) -> T:
        """The next record (PyFlink's name for ``next(iterator)``)."""
        return self.__next__()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> CloseableIterator[T]:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()



"""The user API: a PyFlink-style DataStream API (``pyflink.datastream`` names and behaviour)."""

from slipstream.datastream.data_stream import (
    CloseableIterator,
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    KeyedStream,
)
from slipstream.datastream.environment import (
    ExecutionConfig,
    JobExecutionResult,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from slipstream.datastream.functions import (
    AggregateFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessFunction,
    ReduceFunction,
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.scope import StreamScope
from slipstream.datastream.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from slipstream.datastream.time import Duration, Time, Watermark

__all__ = [
    "AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "CloseableIterator",
    "CoFlatMapFunction", "CoMapFunction", "CoProcessFunction", "ConnectedStreams", "DataStream",
    "DataStreamSink", "Duration", "ExecutionConfig", "FilterFunction", "FlatMapFunction",
    "JobExecutionResult", "KeySelector", "KeyedCoProcessFunction", "KeyedProcessFunction", "KeyedStream",
    "ListState", "ListStateDescriptor", "MapFunction", "MapState", "MapStateDescriptor", "OutputTag",
    "Partitioner", "ProcessFunction", "ReduceFunction", "ReducingState", "ReducingStateDescriptor",
    "RuntimeContext", "RuntimeExecutionMode", "StateTtlConfig", "StreamExecutionEnvironment",
    "StreamScope", "Time", "TimeDomain", "TimerService", "ValueState", "ValueStateDescriptor",
    "Watermark",
]

"""The user API: a PyFlink-style DataStream API (``pyflink.datastream`` names and behaviour)."""

from slipstream.datastream.data_stream import (
    CloseableIterator,
    ConnectedStreams,
    DataStream,
    DataStreamSink,
    KeyedStream,
)
from slipstream.datastream.co_group import (
    CoGroupedStreams,
    CoGroupFunction,
    FlatJoinFunction,
    JoinedStreams,
    JoinFunction,
    VectorizedCoGroupFunction,
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
from slipstream.datastream.loops import CoLoopFunction, LoopFunction
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
from slipstream.datastream.checkpoint_config import (
    CheckpointConfig,
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    FileSystemCheckpointStorage,
)
from slipstream.datastream.restart_strategy import RestartStrategies

__all__ = [
    "CheckpointConfig", "CheckpointingMode", "ExternalizedCheckpointCleanup", "FileSystemCheckpointStorage",
    "RestartStrategies",
]

__all__ += [
    "AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "CloseableIterator",
    "CoFlatMapFunction", "CoGroupFunction", "CoGroupedStreams", "FlatJoinFunction", "JoinFunction",
    "JoinedStreams", "VectorizedCoGroupFunction", "CoMapFunction", "CoProcessFunction", "ConnectedStreams", "DataStream",
    "DataStreamSink", "Duration", "ExecutionConfig", "FilterFunction", "FlatMapFunction",
    "JobExecutionResult", "KeySelector", "KeyedCoProcessFunction", "KeyedProcessFunction", "KeyedStream",
    "ListState", "ListStateDescriptor", "MapFunction", "MapState", "MapStateDescriptor", "OutputTag",
    "Partitioner", "ProcessFunction", "ReduceFunction", "ReducingState", "ReducingStateDescriptor",
    "RuntimeContext", "RuntimeExecutionMode", "StateTtlConfig", "StreamExecutionEnvironment",
    "StreamScope", "Time", "TimeDomain", "TimerService", "ValueState", "ValueStateDescriptor",
    "Watermark",
]

__all__ += ["CoLoopFunction", "LoopFunction"]

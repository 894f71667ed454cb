"""The user API: a PyFlink-style DataStream API (``pyflink.datastream`` names and behaviour)."""

from slipstream.datastream.checkpoint_config import (
    CheckpointConfig,
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    FileSystemCheckpointStorage,
)
from slipstream.datastream.co_group import (
    CoGroupedStreams,
    CoGroupFunction,
    FlatJoinFunction,
    JoinedStreams,
    JoinFunction,
    VectorizedCoGroupFunction,
)
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
from slipstream.datastream.loops import CoLoopFunction, LoopFunction
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.restart_strategy import RestartStrategies
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
from slipstream.datastream.window import (
    AllWindowFunction,
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    CountWindow,
    EndOfStreamWindows,
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WindowAssigner,
    WindowFunction,
)
from slipstream.datastream.windowed_stream import AllWindowedStream, WindowedStream

__all__ = [
    "AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "AllWindowFunction",
    "AllWindowedStream", "CheckpointConfig", "CheckpointingMode", "CloseableIterator",
    "CoFlatMapFunction", "CoGroupFunction", "CoGroupedStreams", "CoLoopFunction", "CoMapFunction",
    "CoProcessFunction", "ConnectedStreams", "CountSlidingWindowAssigner",
    "CountTumblingWindowAssigner", "CountWindow", "DataStream", "DataStreamSink", "Duration",
    "EndOfStreamWindows", "EventTimeSessionWindows", "ExecutionConfig",
    "ExternalizedCheckpointCleanup", "FileSystemCheckpointStorage", "FilterFunction",
    "FlatJoinFunction", "FlatMapFunction", "GlobalWindow", "GlobalWindows", "JobExecutionResult",
    "JoinFunction", "JoinedStreams", "KeySelector", "KeyedCoProcessFunction",
    "KeyedProcessFunction", "KeyedStream", "ListState", "ListStateDescriptor", "LoopFunction",
    "MapFunction", "MapState", "MapStateDescriptor", "OutputTag", "Partitioner",
    "ProcessAllWindowFunction", "ProcessFunction", "ProcessWindowFunction",
    "ProcessingTimeSessionWindows", "ReduceFunction", "ReducingState", "ReducingStateDescriptor",
    "RestartStrategies", "RuntimeContext", "RuntimeExecutionMode", "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows", "StateTtlConfig", "StreamExecutionEnvironment", "StreamScope",
    "Time", "TimeDomain", "TimeWindow", "TimerService", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "ValueState", "ValueStateDescriptor",
    "VectorizedCoGroupFunction", "Watermark", "WindowAssigner", "WindowFunction", "WindowedStream",
]

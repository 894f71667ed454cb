"""The user API: a PyFlink-style DataStream API (``pyflink.datastream`` names and behaviour)."""

from slipstream.datastream.checkpoint_config import (
    CheckpointConfig,
    CheckpointingMode,
    CheckpointStorage,
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
    BroadcastConnectedStream,
    BroadcastStream,
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
    RuntimeContext,
    TimeDomain,
    TimerService,
)
from slipstream.datastream.loops import CoLoopFunction, LoopFunction
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.restart_strategy import RestartStrategies
from slipstream.datastream.scope import StreamScope
from slipstream.datastream.slot_sharing_group import MemorySize, SlotSharingGroup
from slipstream.datastream.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReadOnlyBroadcastState,
    ReducingState,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from slipstream.datastream.state_backend import (
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
    PredefinedOptions,
    RocksDBStateBackend,
    StateBackend,
)
from slipstream.datastream.time import Duration, Time, Watermark
from slipstream.datastream.time_characteristic import TimeCharacteristic
from slipstream.datastream.window import (
    AllWindowFunction,
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    CountWindow,
    EndOfStreamWindows,
    EventTimeSessionWindows,
    GlobalWindow,
    GlobalWindows,
    MergingWindowAssigner,
    ProcessAllWindowFunction,
    ProcessingTimeSessionWindows,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    Window,
    WindowAssigner,
    WindowFunction,
)
from slipstream.datastream.windowed_stream import AllWindowedStream, WindowedStream

__all__ = [
    "AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "AllWindowedStream", "AllWindowFunction",
    "BroadcastConnectedStream", "BroadcastProcessFunction", "BroadcastState", "BroadcastStream", "CheckpointConfig",
    "CheckpointingMode", "CheckpointStorage", "CloseableIterator", "CoFlatMapFunction", "CoGroupedStreams",
    "CoGroupFunction", "CoLoopFunction", "CoMapFunction", "ConnectedStreams", "CoProcessFunction",
    "CountSlidingWindowAssigner", "CountTumblingWindowAssigner", "CountWindow", "DataStream", "DataStreamSink",
    "Duration", "EmbeddedRocksDBStateBackend", "EndOfStreamWindows", "EventTimeSessionWindows", "ExecutionConfig",
    "ExternalizedCheckpointCleanup", "FileSystemCheckpointStorage", "FilterFunction", "FlatJoinFunction",
    "FlatMapFunction", "FsStateBackend", "GlobalWindow", "GlobalWindows", "HashMapStateBackend",
    "JobExecutionResult", "JoinedStreams", "JoinFunction", "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction", "KeyedProcessFunction", "KeyedStream", "KeySelector", "ListState",
    "ListStateDescriptor", "LoopFunction", "MapFunction", "MapState", "MapStateDescriptor", "MemorySize",
    "MemoryStateBackend", "MergingWindowAssigner", "OutputTag", "Partitioner", "PredefinedOptions",
    "ProcessAllWindowFunction", "ProcessFunction", "ProcessingTimeSessionWindows", "ProcessWindowFunction",
    "ReadOnlyBroadcastState", "ReduceFunction", "ReducingState", "ReducingStateDescriptor", "RestartStrategies",
    "RocksDBStateBackend", "RuntimeContext", "RuntimeExecutionMode", "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows", "SlotSharingGroup", "StateBackend", "StateTtlConfig",
    "StreamExecutionEnvironment", "StreamScope", "Time", "TimeCharacteristic", "TimeDomain", "TimerService",
    "TimeWindow", "Trigger", "TriggerResult", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows",
    "ValueState", "ValueStateDescriptor", "VectorizedCoGroupFunction", "Watermark", "Window", "WindowAssigner",
    "WindowedStream", "WindowFunction"
]

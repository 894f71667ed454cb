"""Every name a PyFlink DataStream job imports is importable from the same module under ``slipstream``.

The pairs are PyFlink's (``pyflink.<module>``, name), from the ``__all__`` lists and test imports of
``pyflink.common``, ``pyflink.datastream`` and ``pyflink.metrics``; the names slipstream does not provide
(JVM-only classes, the job client) are listed with their reason in the README's
porting section, and :data:`NOT_PROVIDED` holds them so that a name cannot be silently dropped.
"""

from __future__ import annotations

import importlib

import pytest

PYFLINK_NAMES: dict[str, list[str]] = {
    "common": ["Configuration", "Duration", "ExecutionConfig", "JobExecutionResult", "RestartStrategies",
               "RestartStrategyConfiguration", "Row", "RowKind", "Time", "TypeInformation", "Types",
               "WatermarkStrategy", "SerializationSchema", "DeserializationSchema", "SimpleStringSchema", "Encoder",
               "CompletableFuture", "JobClient", "JobID", "JobStatus", "TypeSerializer"],
    "common.serializer": ["TypeSerializer"],
    "common.completable_future": ["CompletableFuture"],
    "common.job_client": ["JobClient"],
    "common.job_id": ["JobID"],
    "common.job_status": ["JobStatus"],
    "common.configuration": ["Configuration"],
    "common.serialization": ["SerializationSchema", "DeserializationSchema", "SimpleStringSchema", "ByteArraySchema",
                             "Encoder", "BulkWriterFactory"],
    "common.execution_config": ["ExecutionConfig"],
    "common.job_execution_result": ["JobExecutionResult"],
    "common.restart_strategy": ["RestartStrategies", "RestartStrategyConfiguration"],
    "common.time": ["Duration", "Time"],
    "common.typeinfo": ["Types", "TypeInformation", "RowTypeInfo", "TupleTypeInfo", "BasicTypeInfo",
                        "BasicType", "PickledBytesTypeInfo", "ListTypeInfo", "MapTypeInfo"],
    "common.types": ["Row", "RowKind"],
    "common.watermark_strategy": ["WatermarkStrategy", "TimestampAssigner"],
    "datastream": ["StreamExecutionEnvironment", "DataStream", "KeyedStream", "WindowedStream", "ConnectedStreams",
                   "DataStreamSink", "MapFunction", "CoMapFunction", "FlatMapFunction", "CoFlatMapFunction",
                   "ReduceFunction", "FilterFunction", "ProcessFunction", "KeyedProcessFunction", "CoProcessFunction",
                   "KeyedCoProcessFunction", "WindowFunction", "ProcessWindowFunction", "AggregateFunction",
                   "RuntimeContext", "TimerService", "CheckpointingMode", "CheckpointConfig",
                   "ExternalizedCheckpointCleanup", "StateBackend", "HashMapStateBackend",
                   "EmbeddedRocksDBStateBackend", "MemoryStateBackend", "RocksDBStateBackend", "FsStateBackend",
                   "PredefinedOptions", "CheckpointStorage", "FileSystemCheckpointStorage", "RuntimeExecutionMode",
                   "Window", "TimeWindow", "CountWindow", "GlobalWindow", "WindowAssigner", "MergingWindowAssigner",
                   "TriggerResult", "Trigger", "TimeCharacteristic", "TimeDomain", "KeySelector", "Partitioner",
                   "SlotSharingGroup", "MemorySize", "OutputTag", "BroadcastStream", "BroadcastConnectedStream",
                   "BroadcastProcessFunction", "KeyedBroadcastProcessFunction"],
    "datastream.checkpoint_config": ["CheckpointConfig", "ExternalizedCheckpointCleanup"],
    "datastream.checkpoint_storage": ["CheckpointStorage", "FileSystemCheckpointStorage"],
    "datastream.checkpointing_mode": ["CheckpointingMode"],
    "datastream.data_stream": ["DataStream", "KeyedStream", "ConnectedStreams", "WindowedStream",
                               "AllWindowedStream", "DataStreamSink", "CloseableIterator", "BroadcastStream",
                               "BroadcastConnectedStream"],
    "datastream.execution_mode": ["RuntimeExecutionMode"],
    "datastream.functions": ["RuntimeContext", "Function", "MapFunction", "CoMapFunction", "FlatMapFunction",
                             "CoFlatMapFunction", "ReduceFunction", "AggregateFunction", "KeySelector",
                             "FilterFunction", "Partitioner", "ProcessFunction", "KeyedProcessFunction",
                             "CoProcessFunction", "KeyedCoProcessFunction", "TimerService", "WindowFunction",
                             "AllWindowFunction", "ProcessWindowFunction", "ProcessAllWindowFunction",
                             "KeyedStateStore", "BaseBroadcastProcessFunction", "BroadcastProcessFunction",
                             "KeyedBroadcastProcessFunction"],
    "datastream.output_tag": ["OutputTag"],
    "datastream.slot_sharing_group": ["MemorySize", "SlotSharingGroup"],
    "datastream.state": ["ValueStateDescriptor", "ListStateDescriptor", "MapStateDescriptor",
                         "ReducingStateDescriptor", "AggregatingStateDescriptor", "ValueState", "ListState",
                         "MapState", "ReducingState", "AggregatingState", "StateTtlConfig", "BroadcastState",
                         "ReadOnlyBroadcastState", "State", "AppendingState", "MergingState"],
    "datastream.state_backend": ["StateBackend", "HashMapStateBackend", "EmbeddedRocksDBStateBackend",
                                 "MemoryStateBackend", "FsStateBackend", "RocksDBStateBackend", "PredefinedOptions"],
    "datastream.stream_execution_environment": ["StreamExecutionEnvironment"],
    "datastream.time_characteristic": ["TimeCharacteristic"],
    "datastream.time_domain": ["TimeDomain"],
    "datastream.timerservice": ["TimerService"],
    "datastream.window": ["TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "SlidingEventTimeWindows",
                          "SlidingProcessingTimeWindows", "EventTimeSessionWindows", "ProcessingTimeSessionWindows",
                          "CountTumblingWindowAssigner", "CountSlidingWindowAssigner", "SessionWindowTimeGapExtractor",
                          "GlobalWindows", "CountWindow", "TimeWindow", "GlobalWindow", "PurgingTrigger",
                          "EventTimeTrigger", "ProcessingTimeTrigger", "CountTrigger", "Trigger", "TriggerResult",
                          "WindowAssigner", "MergingWindowAssigner", "CountEvictor", "TimeEvictor",
                          "TimeWindowSerializer", "CountWindowSerializer", "GlobalWindowSerializer",
                          "MAX_LONG_VALUE", "MIN_LONG_VALUE"],
    "metrics": ["MetricGroup"],
    "metrics.metricbase": ["MetricGroup", "Metric", "Counter", "Meter", "Distribution"],
}

NOT_PROVIDED: dict[str, list[str]] = {
    "common": ["ExecutionMode", "InputDependencyConstraint",  # the DataSet API's
               "Instant"],
    "datastream": ["SourceFunction", "SinkFunction", "CustomStateBackend", "CustomCheckpointStorage",  # Java classes
                   "JobManagerCheckpointStorage", "ExternalizedCheckpointRetention"],
}


def _pairs() -> list[tuple[str, str]]:
    return [(module, name) for module, names in PYFLINK_NAMES.items() for name in names]


@pytest.mark.parametrize("module,name", _pairs(), ids=lambda value: value)
def test_a_pyflink_name_imports_from_the_same_module_of_slipstream(module: str, name: str) -> None:
    imported = importlib.import_module(f"slipstream.{module}")
    assert getattr(imported, name) is not None


def test_a_name_exported_by_several_modules_is_one_object() -> None:
    seen: dict[str, object] = {}
    for module, name in _pairs():
        value = getattr(importlib.import_module(f"slipstream.{module}"), name)
        assert seen.setdefault(name, value) is value, f"slipstream.{module}.{name} is another object"


def test_the_names_not_provided_are_absent_and_listed_in_the_readme() -> None:
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for module, names in NOT_PROVIDED.items():
        imported = importlib.import_module(f"slipstream.{module}")
        for name in names:
            assert not hasattr(imported, name), f"slipstream.{module}.{name} now exists: move it to PYFLINK_NAMES"
            assert f"`{name}`" in readme, f"the README's porting section does not say why {name} is missing"


def test_metrics_also_export_a_gauge() -> None:
    from slipstream.metrics import Gauge, MetricGroup
    assert issubclass(Gauge, importlib.import_module("slipstream.metrics").Metric) and MetricGroup


def test_the_state_interfaces_nest_as_pyflinks() -> None:
    from slipstream.datastream.state import AggregatingState, AppendingState, ListState, MergingState, ReducingState
    assert all(issubclass(kind, MergingState) for kind in (ListState, ReducingState, AggregatingState))
    assert issubclass(MergingState, AppendingState)

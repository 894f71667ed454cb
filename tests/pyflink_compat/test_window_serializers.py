"""A custom window assigner written for PyFlink names its windows' serializer
(``get_window_serializer``, returning ``TimeWindowSerializer()``): it ports, and the serializers
write windows as Flink does."""

from __future__ import annotations

import io
import struct
from collections.abc import Collection
from typing import Any

from slipstream.common import Duration, Types, WatermarkStrategy
from slipstream.common.serializer import TypeSerializer
from slipstream.common.watermark_strategy import TimestampAssigner
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.window import (
    MAX_LONG_VALUE,
    MIN_LONG_VALUE,
    CountTumblingWindowAssigner,
    CountWindow,
    CountWindowSerializer,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    GlobalWindowSerializer,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TimeWindowSerializer,
    TumblingEventTimeWindows,
    WindowAssigner,
)


def round_trip(serializer: Any, window: Any) -> tuple[bytes, Any]:
    stream = io.BytesIO()
    serializer.serialize(window, stream)
    data = stream.getvalue()
    return data, serializer.deserialize(io.BytesIO(data))


def test_windows_are_written_as_flink_writes_them() -> None:
    data, back = round_trip(TimeWindowSerializer(), TimeWindow(-5, 1_000))
    assert data == struct.pack(">qq", -5, 1_000) and back == TimeWindow(-5, 1_000)
    data, back = round_trip(CountWindowSerializer(), CountWindow(7))
    assert data == struct.pack(">q", 7) and back == CountWindow(7)
    data, back = round_trip(GlobalWindowSerializer(), GlobalWindow.get())
    assert data == b"\x00" and back is GlobalWindow.get()
    assert (MIN_LONG_VALUE, MAX_LONG_VALUE) == (-(2 ** 63), 2 ** 63 - 1)
    assert all(isinstance(serializer, TypeSerializer)
               for serializer in (TimeWindowSerializer(), CountWindowSerializer(), GlobalWindowSerializer()))


def test_each_built_in_assigner_names_its_serializer() -> None:
    assert isinstance(TumblingEventTimeWindows.of(Duration.of_seconds(1)).get_window_serializer(), TimeWindowSerializer)
    assert isinstance(SlidingProcessingTimeWindows.of(Duration.of_seconds(2), Duration.of_seconds(1))
                      .get_window_serializer(), TimeWindowSerializer)
    assert isinstance(CountTumblingWindowAssigner.of(3).get_window_serializer(), CountWindowSerializer)
    assert isinstance(GlobalWindows.create().get_window_serializer(), GlobalWindowSerializer)


class EvenOddWindows(WindowAssigner[tuple, TimeWindow]):
    """A PyFlink-style custom assigner: windows of 10 ms, and an odd value also in the next one."""

    def assign_windows(self, element: tuple, timestamp: int, context: Any) -> Collection[TimeWindow]:
        start = timestamp - timestamp % 10
        windows = [TimeWindow(start, start + 10)]
        if element[1] % 2:
            windows.append(TimeWindow(start + 10, start + 20))
        return windows

    def get_default_trigger(self, env: Any = None) -> EventTimeTrigger:
        return EventTimeTrigger.create()

    def get_window_serializer(self) -> TimeWindowSerializer:
        return TimeWindowSerializer()

    def is_event_time(self) -> bool:
        return True


class ByValue(TimestampAssigner):
    def extract_timestamp(self, value: tuple, record_timestamp: int) -> int:
        return value[1]


def test_a_custom_assigner_written_for_pyflink_runs() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    records = [("a", 1), ("a", 4), ("a", 13), ("b", 15), ("a", 22)]
    stream = env.from_collection(records, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
    sums = (stream.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByValue()))
        .key_by(lambda r: r[0]).window(EvenOddWindows()).reduce(lambda a, b: (a[0], a[1] + b[1])))
    got = sorted(sums.execute_and_collect())
    oracle: dict[tuple[str, int], int] = {}
    for key, value in records:
        start = value - value % 10
        for window in [start] + ([start + 10] if value % 2 else []):
            oracle[(key, window)] = oracle.get((key, window), 0) + value
    assert got == sorted((key, total) for (key, _), total in oracle.items())

"""The test kit's TestStream in real jobs: watermarks and processing time advanced in band, the
backlog ended by a marker, and a failure marker that makes the job restart once (exactly once
with checkpoints)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import (
    KeyedProcessFunction,
    RestartStrategies,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from slipstream.datastream.connectors.base import END_OF_INPUT, NOTHING_AVAILABLE, SourceReaderContext
from slipstream.errors import InvalidProgramError, UserFunctionError
from slipstream.testing import (
    AdvanceWatermark,
    CollectingSink,
    EndOfBacklog,
    FailHere,
    ManualClock,
    TestingSource,
    TestStream,
    TimestampedValue,
)


class SeeWatermark(KeyedProcessFunction):
    """Emits each record with the watermark its operator had reached when the record came."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value, ctx.timer_service().current_watermark()


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_every_record_sees_the_watermarks_that_came_before_it_in_the_stream(env: StreamExecutionEnvironment) -> None:
    stream = TestStream([TimestampedValue("a", 1), TimestampedValue("b", 3), AdvanceWatermark(5),
                         TimestampedValue("c", 6), AdvanceWatermark(9), TimestampedValue("d", 10)])
    sink = CollectingSink()
    env.from_source(stream, None, "events").key_by(lambda v: v).process(SeeWatermark()).sink_to(sink)
    env.execute()
    seen = dict(sink.values)
    assert seen["a"] < 5 and seen["b"] < 5
    assert seen["c"] == 5 and seen["d"] == 9


def test_event_time_windows_close_at_the_streams_watermarks_in_every_mode(env: StreamExecutionEnvironment) -> None:
    events = [(key, ts) for ts in range(0, 60, 3) for key in "xy"]
    stream = TestStream()
    for start in range(0, 60, 20):
        stream.add_elements(*(TimestampedValue((k, 1), ts) for k, ts in events if start <= ts < start + 20))
        stream.advance_watermark_to(start + 19)
    sink = CollectingSink()
    (env.from_source(stream, None, "events").key_by(lambda r: r[0])
     .window(TumblingEventTimeWindows.of(10)).reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink))
    env.execute()
    oracle = Counter((k, ts // 10) for k, ts in events)
    assert sorted((v, ts // 10) for v, ts in sink.timestamped()) == \
        sorted(((k, n), w) for (k, w), n in oracle.items())


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.seeds(0, 1, 2)
def test_processing_time_advances_after_the_records_before_it_are_processed(env: StreamExecutionEnvironment) -> None:
    clock = ManualClock(start_ms=1_000)
    env.configure(clock=clock)
    stream = (TestStream(clock=clock).add_elements(*(("k", i) for i in range(5)))
              .advance_processing_time(100).add_elements(*(("k", i) for i in range(5, 8)))
              .advance_processing_time(100).add_elements(("k", 8)))
    sink = CollectingSink()
    (env.from_source(stream, None, "events").key_by(lambda r: r[0])
     .window(TumblingProcessingTimeWindows.of(100)).reduce(lambda a, b: (a[0], a[1] + b[1])).sink_to(sink))
    env.execute()
    assert sink.values == [("k", sum(range(5))), ("k", 5 + 6 + 7), ("k", 8)]
    assert clock.now_ms() == 1_200


def test_the_backlog_ends_at_its_marker() -> None:
    stream = TestStream([1, 2, EndOfBacklog(), 3])
    reader = stream.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    assert reader.is_backlog() is True
    assert reader.poll(10).values == [1, 2] and reader.is_backlog() is True
    assert reader.poll(10).values == [3] and reader.is_backlog() is False
    assert reader.poll(10) is END_OF_INPUT
    assert TestStream([1]).create_reader(0, 1).is_backlog() is False  # no marker: live from the start


def test_a_reader_stops_at_each_marker_and_resumes_from_its_position() -> None:
    clock = ManualClock()
    stream = TestStream([TimestampedValue(1, 10), 2, AdvanceWatermark(10), 3], clock=clock)
    stream.advance_processing_time(5).add_elements(4)
    reader = stream.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1, current_processing_time=clock.now_ms))
    batch = reader.poll(10)
    assert (batch.values, batch.timestamps, batch.watermark) == ([1, 2], [10, None], 10)
    assert reader.poll(10).values == [3]
    assert reader.poll(10) is NOTHING_AVAILABLE and clock.on_idle() and clock.now_ms() == 5
    position = reader.snapshot_position()
    again = stream.create_reader(0, 1)
    again.restore_position(position)
    again.open(SourceReaderContext(0, 1, current_processing_time=clock.now_ms))
    assert again.poll(10).values == [4] and again.records_remaining() == 0


def test_bad_streams_are_refused_when_built() -> None:
    with pytest.raises(InvalidProgramError, match="watermark must advance"):
        TestStream().advance_watermark_to(5).advance_watermark_to(5)
    with pytest.raises(InvalidProgramError, match="needs the job's clock"):
        TestStream().advance_processing_time(10)
    with pytest.raises(InvalidProgramError, match="must advance"):
        TestStream(clock=ManualClock()).advance_processing_time(0)


def test_a_stream_whose_clock_is_not_the_jobs_is_refused_when_the_job_starts() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().configure(clock=ManualClock())
    stream = TestStream([1], clock=ManualClock()).advance_processing_time(10)
    env.from_source(stream, None, "numbers").sink_to(CollectingSink())
    with pytest.raises(InvalidProgramError, match="its clock is not the job's"):
        env.execute()


def running_counts(env: StreamExecutionEnvironment, stream: TestStream, sink: CollectingSink) -> None:
    (env.from_source(stream, None, "numbers").uid("numbers").map(lambda n: (n % 3, 1)).uid("pairs")
     .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("counts").sink_to(sink).uid("sink"))


def counts_oracle(numbers: list[int]) -> list[tuple[int, int]]:
    seen: Counter = Counter()
    result = []
    for n in numbers:
        seen[n % 3] += 1
        result.append((n % 3, seen[n % 3]))
    return sorted(result)


@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_a_failure_marker_restarts_the_job_once_and_checkpoints_keep_the_output_exactly_once(
        env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    numbers = list(range(300))
    stream = TestingSource([*numbers[:200], FailHere("boom"), *numbers[200:]])
    env.configure(batch_size=16)  # checkpoints between the source's polls, before the failure
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval_records(50)
    config.set_checkpoint_storage_dir(str(tmp_path))
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    sink = CollectingSink()
    running_counts(env, stream, sink)
    result = env.execute()
    checkpoints = result.get_accumulator_result("checkpoints")
    assert checkpoints["restarts"] == 1 and checkpoints["restored_from"] is not None
    assert sorted(sink.values) == counts_oracle(numbers)


def test_without_checkpoints_the_restart_runs_the_stream_again_from_its_start() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 0))
    clock = ManualClock()
    env.configure(clock=clock)
    numbers = list(range(40))
    sink = CollectingSink()
    # The processing-time advance waits until the first 20 records reached the sink.
    stream = TestStream(numbers[:20], clock=clock).advance_processing_time(1).fail_here()
    running_counts(env, stream.add_elements(*numbers[20:]), sink)
    env.execute()
    assert sorted(sink.values) == sorted(counts_oracle(numbers[:20]) + counts_oracle(numbers))


def test_a_failure_marker_without_a_restart_strategy_fails_the_job_naming_the_source() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_restart_strategy(RestartStrategies.no_restart())
    env.from_source(TestStream([1, FailHere("injected at 1")]), None, "numbers").sink_to(CollectingSink())
    with pytest.raises(UserFunctionError, match="numbers") as raised:
        env.execute()
    assert "injected at 1" in str(raised.value)

"""BATCH mode fires every timer once the input has ended, as Flink's batch execution does: a key's
event-time timers at the end of its run, then its processing-time timers (processing time jumps to
the end of time), each domain in timestamp order; a timer registered while they fire is ignored, so a
timer that registers the next one ends."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from slipstream.common import WatermarkStrategy
from slipstream.common.watermark_strategy import TimestampAssigner
from slipstream.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment

FAR = 10 ** 13  # processing time in the year 2286: never reached by the clock while a test runs
RECORDS = [("a", 30), ("b", 10), ("a", 10), ("c", 50), ("b", 20), ("a", 20), ("c", 5)]


class ByTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value[1]


class BothTimers(KeyedProcessFunction):
    """An event-time timer 5 ms after each record and a processing-time timer far ahead."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(value[1] + 5)
        ctx.timer_service().register_processing_time_timer(FAR + value[1])
        yield "record", value[0], value[1]

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.time_domain().name, ctx.get_current_key(), timestamp


class Chained(BothTimers):
    """Each timer registers the next one of its domain: only Flink's quiescing ends such a job."""

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        ctx.timer_service().register_event_time_timer(timestamp + 1_000)
        ctx.timer_service().register_processing_time_timer(timestamp + 1_000)
        yield from super().on_timer(timestamp, ctx)


def run(function: KeyedProcessFunction, parallelism: int, sorting: bool = True) -> list[tuple[str, str, int]]:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.configure(backlog_sorting=sorting, show_progress=False)
    stream = env.from_collection(RECORDS).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(ByTime()))
    return list(stream.key_by(lambda r: r[0]).process(function).execute_and_collect())


def per_key_oracle() -> dict[str, list[tuple[str, str, int]]]:
    """Each key's outputs in Flink's batch order: its records by time, then its event-time timers,
    then its processing-time timers."""
    oracle = {}
    for key in sorted({k for k, _ in RECORDS}):
        times = sorted(t for k, t in RECORDS if k == key)
        oracle[key] = ([("record", key, t) for t in times] + [("EVENT_TIME", key, t + 5) for t in times]
                       + [("PROCESSING_TIME", key, FAR + t) for t in times])
    return oracle


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_sorted_batch_fires_each_keys_processing_timers_after_its_event_timers(parallelism: int) -> None:
    got = run(BothTimers(), parallelism)
    assert {key: [out for out in got if out[1] == key] for key in per_key_oracle()} == per_key_oracle()


def test_a_batch_streamed_record_by_record_fires_processing_timers_at_the_end() -> None:
    got = run(BothTimers(), 1, sorting=False)
    expected = [out for outs in per_key_oracle().values() for out in outs]
    assert sorted(got) == sorted(expected)
    processing = [i for i, out in enumerate(got) if out[0] == "PROCESSING_TIME"]
    assert processing == list(range(len(got) - len(processing), len(got)))  # after everything else
    assert [got[i][2] for i in processing] == sorted(got[i][2] for i in processing)


def test_a_timer_registering_the_next_one_ends_in_a_sorted_batch(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="slipstream.timers"):
        got = run(Chained(), 1)
    assert sorted(got) == sorted(out for outs in per_key_oracle().values() for out in outs)
    assert "ignored, as Flink's batch execution ignores it" in caplog.text


def test_a_timer_registering_the_next_one_ends_in_a_batch_streamed_record_by_record() -> None:
    """Streamed, the generator's watermarks before the last fire timers as they come, and what those
    register counts; the last watermark's and the end's registrations are ignored, so the job ends."""
    got = run(Chained(), 1, sorting=False)
    assert not set(out for outs in per_key_oracle().values() for out in outs) - set(got)
    assert max(timestamp for domain, _, timestamp in got if domain == "EVENT_TIME") < FAR


@pytest.mark.parametrize("mode", [RuntimeExecutionMode.BATCH, RuntimeExecutionMode.STREAMING])
def test_processing_time_windows_left_at_the_end_go_through_their_trigger(mode: RuntimeExecutionMode) -> None:
    """An hour-long processing-time window ends with the input: its cleanup timer fires through the
    trigger — the default one fires the window; a count trigger fires only full windows (Flink's)."""
    from slipstream.datastream.time import Time
    from slipstream.datastream.window import CountTrigger, TumblingProcessingTimeWindows

    def counts(trigger: Any) -> list[tuple[str, int]]:
        env = StreamExecutionEnvironment.get_execution_environment().set_runtime_mode(mode)
        windowed = (env.from_collection([("a", 1), ("b", 1), ("a", 1), ("a", 1), ("b", 1)]).key_by(lambda r: r[0])
                    .window(TumblingProcessingTimeWindows.of(Time.hours(1))))
        if trigger is not None:
            windowed = windowed.trigger(trigger)
        return sorted(windowed.reduce(lambda x, y: (x[0], x[1] + y[1])).execute_and_collect())

    assert counts(None) == [("a", 3), ("b", 2)]
    assert counts(CountTrigger.of(3)) == [("a", 3)]  # b's window of two is cleared unfired

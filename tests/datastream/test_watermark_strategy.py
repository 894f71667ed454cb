"""WatermarkStrategy, the built-in generators and timestamp assigners."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.datastream.time import MIN_TIMESTAMP, Duration, Time, Watermark
from slipstream.datastream.watermark_strategy import (AscendingTimestampsWatermarks,
                                                      BoundedOutOfOrdernessWatermarks,
                                                      NoWatermarksGenerator,
                                                      RecordTimestampAssigner, TimestampAssigner,
                                                      WatermarkGenerator, WatermarkOutput,
                                                      WatermarksWithIdleness, WatermarkStrategy)
from slipstream.errors import InvalidProgramError


class ListOutput(WatermarkOutput):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def emit_watermark(self, watermark: Watermark) -> None:
        self.events.append(watermark.timestamp)

    def mark_idle(self) -> None:
        self.events.append("idle")

    def mark_active(self) -> None:
        self.events.append("active")


class FieldAssigner(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return value["ts"]


def test_bounded_out_of_orderness_emits_max_minus_bound_minus_one() -> None:
    generator = BoundedOutOfOrdernessWatermarks(Duration.of_millis(10))
    out = ListOutput()
    generator.on_periodic_emit(out)            # nothing seen yet: the lowest watermark, no overflow
    for ts in (100, 95, 130, 120):
        generator.on_event(None, ts, out)
    generator.on_periodic_emit(out)
    assert out.events == [MIN_TIMESTAMP, 130 - 10 - 1]


def test_ascending_timestamps_have_a_zero_bound() -> None:
    generator = AscendingTimestampsWatermarks()
    out = ListOutput()
    generator.on_event(None, 41, out)
    generator.on_periodic_emit(out)
    assert out.events == [40]


def test_no_watermarks_generator_is_silent() -> None:
    generator = NoWatermarksGenerator()
    out = ListOutput()
    generator.on_event(None, 5, out)
    generator.on_periodic_emit(out)
    assert out.events == []


@given(st.lists(st.integers(-2**40, 2**40), min_size=1), st.integers(0, 10**6))
def test_bounded_watermark_matches_the_formula(timestamps: list[int], bound: int) -> None:
    generator = BoundedOutOfOrdernessWatermarks(bound)
    out = ListOutput()
    for ts in timestamps:
        generator.on_event(None, ts, out)
    generator.on_periodic_emit(out)
    assert out.events == [max(timestamps) - bound - 1]


def test_idleness_wrapper_goes_idle_after_the_timeout_and_active_on_an_event() -> None:
    now = [0]
    generator = WatermarksWithIdleness(AscendingTimestampsWatermarks(), Duration.of_millis(50),
                                       lambda: now[0])
    out = ListOutput()
    generator.on_event(None, 10, out)
    now[0] = 49
    generator.on_periodic_emit(out)            # within the timeout: the wrapped generator speaks
    now[0] = 99
    generator.on_periodic_emit(out)            # more than 50 ms after the last event (at 0): idle
    now[0] = 200
    generator.on_periodic_emit(out)            # already idle: said once
    generator.on_event(None, 20, out)
    generator.on_periodic_emit(out)
    assert out.events == [9, "idle", "active", 19]


def test_strategies_are_immutable() -> None:
    base = WatermarkStrategy.for_monotonous_timestamps()
    with_assigner = base.with_timestamp_assigner(FieldAssigner())
    with_idleness = with_assigner.with_idleness(Duration.of_seconds(1))
    assert base.timestamp_assigner is None and base.get_idle_timeout() is None
    assert isinstance(with_assigner.create_timestamp_assigner(), FieldAssigner)
    assert with_assigner.get_idle_timeout() is None
    # Unlike PyFlink, adding idleness keeps the assigner.
    assert with_idleness.timestamp_assigner is with_assigner.timestamp_assigner
    assert with_idleness.get_idle_timeout() == 1000


def test_a_plain_callable_is_an_assigner() -> None:
    strategy = WatermarkStrategy.no_watermarks().with_timestamp_assigner(
        lambda value, record_timestamp: value * 10 + (record_timestamp > 0))
    assigner = strategy.create_timestamp_assigner()
    assert isinstance(assigner, TimestampAssigner)
    assert assigner.extract_timestamp(4, 1) == 41


def test_without_an_assigner_the_record_timestamp_is_kept() -> None:
    assigner = WatermarkStrategy.for_monotonous_timestamps().create_timestamp_assigner()
    assert isinstance(assigner, RecordTimestampAssigner)
    assert assigner.extract_timestamp("x", 77) == 77


@pytest.mark.parametrize("bad", [lambda value: 1, 42, "field"])
def test_a_bad_assigner_is_refused_when_the_job_is_built(bad: Any) -> None:
    with pytest.raises(InvalidProgramError, match="with_timestamp_assigner"):
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(bad)


def test_bounds_and_timeouts_are_checked() -> None:
    with pytest.raises(InvalidProgramError, match="negative"):
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(-1))
    with pytest.raises(InvalidProgramError, match="positive"):
        WatermarkStrategy.no_watermarks().with_idleness(Duration.zero())
    with pytest.raises(TypeError, match="max_out_of_orderness"):
        WatermarkStrategy.for_bounded_out_of_orderness(1.5)  # type: ignore[arg-type]


def test_durations_times_and_millis_are_all_accepted() -> None:
    out = ListOutput()
    for bound in (Duration.of_seconds(2), Time.seconds(2), 2000):
        generator = WatermarkStrategy.for_bounded_out_of_orderness(bound).create_watermark_generator()
        generator.on_event(None, 10_000, out)
        generator.on_periodic_emit(out)
    assert out.events == [7999, 7999, 7999]


def test_each_subtask_gets_a_fresh_generator() -> None:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
    first, second = strategy.create_watermark_generator(), strategy.create_watermark_generator()
    assert first is not second
    out = ListOutput()
    first.on_event(None, 100, out)
    second.on_periodic_emit(out)
    assert out.events == [MIN_TIMESTAMP]


def test_idleness_wraps_the_generator_with_the_given_clock() -> None:
    now = [1_000]
    generator = (WatermarkStrategy.for_monotonous_timestamps().with_idleness(Duration.of_millis(5))
                 .create_watermark_generator(lambda: now[0]))
    assert isinstance(generator, WatermarksWithIdleness)
    out = ListOutput()
    now[0] = 1_005
    generator.on_periodic_emit(out)
    assert out.events == ["idle"]


def test_for_generator_uses_the_supplier_and_checks_what_it_returns() -> None:
    class Every(WatermarkGenerator):
        def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
            output.emit_watermark(Watermark(event_timestamp))

        def on_periodic_emit(self, output: WatermarkOutput) -> None:
            pass

    assert isinstance(WatermarkStrategy.for_generator(Every).create_watermark_generator(), Every)
    with pytest.raises(InvalidProgramError, match="not a WatermarkGenerator"):
        WatermarkStrategy.for_generator(lambda: "nope").create_watermark_generator()
    with pytest.raises(InvalidProgramError, match="callable"):
        WatermarkStrategy.for_generator(Every())  # type: ignore[arg-type]


def test_built_in_strategies_pickle() -> None:
    strategy = (WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(3))
                .with_timestamp_assigner(FieldAssigner()).with_idleness(Duration.of_seconds(1)))
    copy = pickle.loads(pickle.dumps(strategy))
    assert copy.get_idle_timeout() == 1000
    generator = copy.create_watermark_generator(lambda: 0)
    out = ListOutput()
    generator.on_event(None, 10, out)
    generator.on_periodic_emit(out)
    assert out.events == [6]
    assert copy.create_timestamp_assigner().extract_timestamp({"ts": 5}, 0) == 5

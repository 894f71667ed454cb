"""The keyed process operator's timers: what the event-time timers one watermark fires emit goes
downstream as one batch per output, in firing order, before that watermark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from slipstream.datastream.functions import KeyedProcessFunction
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import Watermark
from slipstream.operators.elements import RecordBatch
from slipstream.testing import OperatorHarness
from slipstream.testing.harness import Record, SideRecord

EVENS = OutputTag("even")


class RemindAt(KeyedProcessFunction):
    """A timer at each record's value; it fires with the key, twice when the time is even (once to
    the side output)."""

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> None:
        ctx.timer_service().register_event_time_timer(value[1])

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterator[Any]:
        yield ctx.get_current_key(), timestamp
        if timestamp % 2 == 0:
            yield EVENS, (ctx.get_current_key(), timestamp)


def test_the_timers_a_watermark_fires_emit_one_batch_in_firing_order_before_it() -> None:
    driver = OperatorHarness.of(lambda env: env.from_collection([]).key_by(lambda r: r[0]).process(RemindAt()))
    driver.process_elements([(("a", 12), 1), (("b", 10), 1), (("a", 11), 1), (("c", 30), 1)])
    batches: list[RecordBatch] = []
    collect = driver.output.collect_batch

    def counting(batch: RecordBatch) -> None:
        batches.append(batch)
        collect(batch)

    driver.output.collect_batch = counting  # type: ignore[method-assign]
    driver.process_watermark(20)
    assert driver.output.events == [Record(("b", 10), 10), Record(("a", 11), 11), Record(("a", 12), 12),
                                    SideRecord("even", ("b", 10), 10), SideRecord("even", ("a", 12), 12),
                                    Watermark(20)]
    assert len(batches) == 1
    driver.process_watermark(40)
    assert driver.output.events[-3:] == [Record(("c", 30), 30), SideRecord("even", ("c", 30), 30), Watermark(40)]

"""Card-transaction features: the flagship example of `make run`.

A stream of card transactions arrives with event timestamps, out of order by up to
three seconds. The job computes, per card:

* spend per one-minute event-time window (a window ``aggregate`` with a
  ``ProcessWindowFunction`` that adds the window's bounds),
* burst alerts: five or more transactions within ten seconds (a
  ``KeyedProcessFunction`` with ``ListState`` and event-time timers that expire
  old entries), with unusually large single transactions routed to a side output.

It prints the job graph, the figures, a few alerts, and how fast it ran.
"""

from __future__ import annotations

import random
import time
from functools import partial
from typing import Any, Iterable, Iterator

from slipstream.datastream import (
    AggregateFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    OutputTag,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.time import Duration, Time
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import ProcessWindowFunction, TumblingEventTimeWindows

CARDS = 500
TRANSACTIONS = 200_000
BURST_COUNT = 5
BURST_WINDOW_MS = 10_000
LARGE_AMOUNT = 950.0
LARGE = OutputTag("large-transactions")


def transactions(count: int = TRANSACTIONS, seed: int = 7) -> Iterator[dict[str, Any]]:
    """Deterministic transactions: about one per 20 ms, each up to 3 s late."""
    rng = random.Random(seed)
    start = 1_700_000_000_000
    for i in range(count):
        yield {"id": i, "card": rng.randrange(CARDS), "amount": round(rng.expovariate(1 / 80), 2),
               "ts": start + i * 20 - rng.randrange(3_000)}


class Spend(AggregateFunction):
    """(count, total) of a window's transactions."""

    def create_accumulator(self) -> tuple[int, float]:
        return (0, 0.0)

    def add(self, value: dict[str, Any], accumulator: tuple[int, float]) -> tuple[int, float]:
        return (accumulator[0] + 1, accumulator[1] + value["amount"])

    def get_result(self, accumulator: tuple[int, float]) -> tuple[int, float]:
        return accumulator

    def merge(self, a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
        return (a[0] + b[0], a[1] + b[1])


class WithWindow(ProcessWindowFunction):
    """Adds the card and the window's end to the window's (count, total)."""

    def process(self, key: int, context: ProcessWindowFunction.Context,
                elements: Iterable[tuple[int, float]]) -> Iterator[tuple[int, int, int, float]]:
        for count, total in elements:
            yield (key, context.window().end, count, round(total, 2))


class BurstDetector(KeyedProcessFunction):
    """Alerts when a card has BURST_COUNT transactions within BURST_WINDOW_MS of event time."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))

    def process_element(self, value: dict[str, Any], ctx: KeyedProcessFunction.Context):
        if value["amount"] >= LARGE_AMOUNT:
            yield LARGE, value
        now = ctx.timestamp()
        recent = [ts for ts in self.recent.get() if ts > now - BURST_WINDOW_MS] + [now]
        self.recent.update(recent)
        ctx.timer_service().register_event_time_timer(now + BURST_WINDOW_MS)
        if len(recent) == BURST_COUNT:
            yield ("burst", ctx.get_current_key(), now)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        self.recent.update([ts for ts in self.recent.get() if ts > timestamp - BURST_WINDOW_MS])
        return ()


def main(count: int = TRANSACTIONS) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(3)) \
        .with_timestamp_assigner(lambda txn, _: txn["ts"])
    txns = env.from_source(IteratorSource(partial(transactions, count)), strategy, "transactions")
    by_card = txns.key_by(lambda txn: txn["card"])

    features: list[tuple[int, int, int, float]] = []
    alerts: list[tuple[str, int, int]] = []
    large: list[dict[str, Any]] = []
    by_card.window(TumblingEventTimeWindows.of(Time.minutes(1))) \
        .aggregate(Spend(), WithWindow()).name("spend per minute").add_sink(features.append).name("features")
    detected = by_card.process(BurstDetector()).name("burst detector").uid("burst-detector")
    detected.add_sink(alerts.append).name("alerts")
    detected.get_side_output(LARGE).add_sink(large.append).name("large transactions")

    print(env.explain())
    started = time.perf_counter()
    result = env.execute("card features")
    seconds = time.perf_counter() - started

    print(f"\n{count:,} transactions of {CARDS} cards in {seconds:.2f} s "
          f"({count / seconds:,.0f} records/s, parallelism {env.get_parallelism()})")
    print(f"per-minute spend features: {len(features):,}")
    print(f"burst alerts (>= {BURST_COUNT} in {BURST_WINDOW_MS // 1000} s): {len(alerts):,}; "
          f"large transactions (>= {LARGE_AMOUNT}): {len(large):,}")
    for alert in sorted(alerts, key=lambda a: a[2])[:3]:
        print(f"  alert: card {alert[1]} at event time {alert[2]}")
    busiest = max(features, key=lambda f: f[3])
    print(f"  largest spend in a minute: card {busiest[0]}, window ending {busiest[1]}: "
          f"{busiest[2]} transactions, {busiest[3]:.2f}")
    for name, metrics in result.get_all_accumulator_results().items():
        if "records_in" in metrics:  # an operator's (beside the job's own entries, e.g. workers_ready_ms)
            print(f"  {name}: {metrics['records_in']:,} records in, {metrics['records_out']:,} out")


if __name__ == "__main__":
    main()

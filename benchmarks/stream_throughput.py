"""Streaming throughput: map -> key_by -> keyed running sum, and a KeyedProcessFunction with ValueState.

Prints records/s for slipstream streaming record by record at parallelism 1 and 2, and
with the bounded input sorted as backlog first (FLIP-327, the default for bounded
sources), and, in the same run, for a hand-written Python loop calling the same
functions over the same records, so the ratio is what counts. Then the keyed running sum fed by a
streaming source (read by a thread, as a live one is), with latency markers off
(``metrics.latency.interval`` 0), at the default 500 ms and at every 10 ms, each run
``--repeat`` times in alternation, so the cost of the markers is what the rates differ by.
Run: `python benchmarks/stream_throughput.py [--records N]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any, Callable

from slipstream.datastream import (
    KeyedProcessFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.sinks import FunctionSink

KEYS = 1000


def make_records(n: int) -> list[int]:
    return list(range(n))


def to_pair(i: int) -> tuple[int, int]:
    return (i % KEYS, 1)


def key_of(pair: tuple[int, int]) -> int:
    return pair[0]


def add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (a[0], a[1] + b[1])


class RunningSum(KeyedProcessFunction):
    """The same running sum, written with ValueState."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value: tuple[int, int], ctx: KeyedProcessFunction.Context):
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        yield (value[0], total)


def baseline_reduce(records: list[int], sink: Callable[[Any], None]) -> None:
    """The hand-written loop: the same functions, a dict for the per-key state."""
    state: dict[int, tuple[int, int]] = {}
    for record in records:
        pair = to_pair(record)
        key = key_of(pair)
        current = state.get(key)
        current = pair if current is None else add(current, pair)
        state[key] = current
        sink(current)


class DictValueState:
    """The least a hand-written loop needs to call the same RunningSum: a dict per key."""

    def __init__(self) -> None:
        self.table: dict[Any, Any] = {}
        self.key: Any = None

    def value(self) -> Any:
        return self.table.get(self.key)

    def update(self, value: Any) -> None:
        self.table[self.key] = value

    def clear(self) -> None:
        self.table.pop(self.key, None)


class _LoopContext:
    """Stands in for the runtime context and the process-function context."""

    def __init__(self, state: DictValueState) -> None:
        self.state = state

    def get_state(self, _descriptor: Any) -> DictValueState:
        return self.state


def baseline_process(records: list[int], sink: Callable[[Any], None]) -> None:
    """The hand-written loop: the same RunningSum.process_element over a dict-backed state."""
    state = DictValueState()
    context = _LoopContext(state)
    function = RunningSum()
    function.open(context)  # type: ignore[arg-type]
    process = function.process_element
    for record in records:
        pair = to_pair(record)
        state.key = key_of(pair)
        for out in process(pair, context):  # type: ignore[arg-type]
            sink(out)


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, _value: Any) -> None:
        self.count += 1


def run_slipstream(records: list[int], parallelism: int, use_process: bool,
                   backlog_sorting: bool) -> tuple[float, int]:
    """One run; ``backlog_sorting`` False streams the bounded input record by record, True lets
    the keyed operator buffer it as backlog and replay it sorted by key (FLIP-327's default)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(backlog_sorting=backlog_sorting)
    counter = Counter()
    keyed = env.from_collection(records).set_parallelism(parallelism).map(to_pair).key_by(key_of)
    result = keyed.process(RunningSum()) if use_process else keyed.reduce(add)
    result.add_sink(FunctionSink(counter)).set_parallelism(1)
    start = time.perf_counter()
    env.execute("throughput")
    return time.perf_counter() - start, counter.count


def run_streaming(records: list[int], parallelism: int, latency_interval_ms: int) -> tuple[float, int, float | None]:
    """The running sum over a streaming (not backlog) source with latency markers every
    ``latency_interval_ms`` (0: none); returns seconds, records out and the sink's latency p99."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(show_progress=False)
    env.get_config().set_latency_tracking_interval(latency_interval_ms)
    counter = Counter()
    (env.from_source(IteratorSource(lambda: iter(records), bounded=False), None, "numbers").map(to_pair)
     .key_by(key_of).reduce(add).add_sink(FunctionSink(counter)).name("sink").set_parallelism(1))
    start = time.perf_counter()
    result = env.execute("throughput with latency markers")
    latency = result.get_all_accumulator_results()["sink"].get("latency")
    return time.perf_counter() - start, counter.count, latency["p99"] if latency else None


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--markers-only", action="store_true", help="only the latency markers' rows")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each latency marker setting")
    args = parser.parse_args()
    records = make_records(args.records)
    n = len(records)
    print(f"stream_throughput: {n:,} records, {KEYS} keys, Python {platform.python_version()}, "
          f"{platform.machine()}")
    if not args.markers_only:
        compare_with_loops(records)
    compare_latency_markers(records, args.repeat)


def compare_with_loops(records: list[int]) -> None:
    """Each job against the hand-written loop, streamed at p=1 and 2 and sorted as backlog."""
    n = len(records)
    print(f"{'job':<44}{'records/s':>14}{'vs loop':>10}")
    for label, use_process, baseline in (("map -> key_by -> reduce (running sum)", False, baseline_reduce),
                                         ("map -> key_by -> KeyedProcessFunction+ValueState", True,
                                          baseline_process)):
        counter = Counter()
        loop_seconds = timed(lambda: baseline(records, counter))
        assert counter.count == n
        loop_rate = n / loop_seconds
        print(f"  {'hand-written loop: ' + label:<42}{loop_rate:>14,.0f}{1.0:>10.2f}")
        for parallelism, sorting in ((1, False), (2, False), (1, True)):
            seconds, count = run_slipstream(records, parallelism, use_process, sorting)
            assert count == n, f"slipstream emitted {count} records, expected {n}"
            rate = n / seconds
            how = f"slipstream p={parallelism}{' sorted backlog' if sorting else ''}: "
            print(f"  {how + label:<42}{rate:>14,.0f}{rate / loop_rate:>10.2f}")


def compare_latency_markers(records: list[int], repeat: int) -> None:
    """The running sum over a streaming source with latency markers off, every 500 ms and every 10 ms."""
    n = len(records)
    print(f"load average {os.getloadavg()[0]:.2f}; a streaming source, map -> key_by -> reduce, latency markers:")
    print(f"{'job':<44}{'records/s':>14}{'vs off':>10}{'sink p99 ms':>14}")
    for parallelism in (1, 2):
        rates: dict[int, list[float]] = {0: [], 500: [], 10: []}
        p99: dict[int, float | None] = {}
        for _ in range(repeat):
            for interval, measured in rates.items():
                seconds, count, p99[interval] = run_streaming(records, parallelism, interval)
                assert count == n, f"slipstream emitted {count} records, expected {n}"
                measured.append(n / seconds)
        off = max(rates[0])
        for interval, measured in rates.items():
            how = f"p={parallelism}, markers {'off' if not interval else f'every {interval} ms'} (best of {repeat})"
            late = "" if p99[interval] is None else f"{p99[interval]:,.1f}"
            print(f"  {how:<42}{max(measured):>14,.0f}{max(measured) / off:>10.3f}{late:>14}")


if __name__ == "__main__":
    main()

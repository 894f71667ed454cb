"""Speed-up on worker processes: the same jobs at workers = 1, 2 and 4, against a plain loop.

Three jobs over ``--records`` numbers (from a number sequence source at the job's parallelism):

* keyed    map -> key_by -> a KeyedProcessFunction keeping a running count and sum per key
           (``--keys`` keys) in value state, each record written to a discarding sink;
* co_group the numbers co-grouped per key with their doubles (the end-of-input window): each key's
           two groups counted and summed;
* window   numbers as event time -> tumbling event-time windows of 1,000 ms per key, summed (reduce).

Each runs at parallelism = workers (one slot per worker), for each of ``--workers`` (default
1,2,4), and, for more than one worker, at the same parallelism in one process first, so what the
parallelism costs (records hashed to their subtask) shows apart from what the processes add. Per run it prints records/s by wall time, the CPU seconds of the driver and its workers
together (the machine may be shared: CPU time says what the work cost), and the speed-up over
workers = 1. The plain loop does the keyed job's work in one Python loop over a dict, in the
same run, alone and then in as many processes at once as workers: the work those do together,
against one alone, is the speed-up this machine allows at all. On a machine with fewer cores than workers the speed-up is bounded by the cores:
the figures for more workers are a projection of how the job partitions, not of a faster machine.

Then the latency aim's half (``--latency-rate``, records/s; 0 skips it): the keyed job fed at that fixed
rate for ``--latency-seconds`` from one unbounded source, at parallelism 1 and 2 in one process and at
parallelism 2 on two workers (the source's records cross to the other worker by key; parallelism 2 in
one process has the same exchanges without the sockets). Each record
carries the instant it was due; the sink writes how long ago that was when the record reached it
(wall clock, which both processes share) to a file per subtask, and the run prints p50, p99, p99.9
and max over every record after the first second.

A run on workers takes the spare processes the run before it left (``configure(worker_spares=N)``,
:mod:`slipstream.runtime.workers.spares`); a pause before each lets them finish starting, as
between a driver's jobs, and the time a driver's first run waits for fresh processes is printed apart.

Run: ``python benchmarks/scaling.py [--records N] [--keys K] [--workers 1,2,4] [--jobs keyed,co_group,window]
[--latency-rate R] [--latency-seconds S]``
(defaults are small, for a quick run; the figures in the README come from ``--records 2000000``).
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from slipstream.datastream import (
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.base import Sink, SinkWriter
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.time import Time
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import EndOfStreamWindows, TumblingEventTimeWindows
from slipstream.runtime.latency import quantile
from slipstream.runtime.workers.fork_server import ended_workers_cpu_seconds


class Discard(Sink):
    """Counts nothing, keeps nothing: the sink costs the same in every run."""

    def default_name(self) -> str:
        return "Discard"

    def create_writer(self) -> SinkWriter:
        return _DiscardWriter()


class _DiscardWriter(SinkWriter):
    def write(self, values: list, timestamps: list | None) -> None:
        pass


class CountAndSum(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("count-sum"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count, total = self.state.value() or (0, 0)
        self.state.update((count + 1, total + value[1]))
        yield value[0], count + 1


def count_sides(first: Any, second: Any) -> Any:
    first, second = list(first), list(second)
    yield len(first), len(second), sum(first) + sum(second)


def keyed(env: StreamExecutionEnvironment, records: int, keys: int) -> None:
    (env.from_source(NumberSequenceSource(1, records), None, "numbers")
     .map(lambda x: (x % keys, x)).key_by(lambda p: p[0]).process(CountAndSum()).sink_to(Discard()))


def co_group(env: StreamExecutionEnvironment, records: int, keys: int) -> None:
    numbers = env.from_source(NumberSequenceSource(1, records // 2), None, "numbers")
    doubles = env.from_source(NumberSequenceSource(1, records // 2), None, "doubles").map(lambda x: 2 * x)
    (numbers.co_group(doubles).where(lambda x: x % keys).equal_to(lambda x: x % keys)
     .window(EndOfStreamWindows.get()).apply(count_sides).sink_to(Discard()))


def window(env: StreamExecutionEnvironment, records: int, keys: int) -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda value, _: value)
    (env.from_source(NumberSequenceSource(1, records), strategy, "numbers")
     .key_by(lambda x: x % keys).window(TumblingEventTimeWindows.of(Time.milliseconds(1000)))
     .reduce(lambda a, b: a + b).sink_to(Discard()))


JOBS: dict[str, Callable[[StreamExecutionEnvironment, int, int], None]] = {
    "keyed": keyed, "co_group": co_group, "window": window}


def cpu_seconds() -> float:
    """CPU time of this process, its children that ended, and the workers of finished runs (the
    children of its fork server, which reports what each used)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + ended_workers_cpu_seconds()


def measure(job: str, records: int, keys: int, workers: int, parallelism: int) -> tuple[float, float, float]:
    """Wall and CPU seconds of one run of ``job`` on ``workers`` workers at ``parallelism``, and the
    seconds its workers took to be ready (0 in one process)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(workers=workers, worker_spares=workers if workers > 1 else 0, backlog_sorting=False,
                  show_progress=False)
    JOBS[job](env, records, keys)
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = env.execute(f"scaling-{job}-{workers}")
    ready_ms = result.get_all_accumulator_results().get("job", {}).get("workers_ready_ms", 0.0)
    return time.perf_counter() - wall, cpu_seconds() - cpu, ready_ms / 1000


def start_up(workers: int) -> tuple[float, float]:
    """Seconds until ``workers`` workers are ready: on fresh processes (a driver's first run), then on
    the spares that run left (every later run, once they are up: the pause lets them start)."""
    fresh = measure("keyed", 1, 1, workers, workers)[2]
    time.sleep(SPARES_START_S)
    return fresh, measure("keyed", 1, 1, workers, workers)[2]


SPARES_START_S = 3.0
"""A pause after a run, in which the spares it left start up (as between a driver's jobs)."""


def plain_loop(records: int, keys: int) -> tuple[float, float]:
    """The keyed job's work in one loop: a running count and sum per key in a dict."""
    wall, cpu = time.perf_counter(), time.process_time()
    state: dict[int, tuple[int, int]] = {}
    out = []
    for x in range(1, records + 1):
        key = x % keys
        count, total = state.get(key, (0, 0))
        state[key] = (count + 1, total + x)
        out.append((key, count + 1))
    return time.perf_counter() - wall, time.process_time() - cpu


def _timed_loop(records: int, keys: int, start: Any, walls: Any) -> None:
    """The plain loop in a process of its own, started with the others at ``start``."""
    start.wait()
    walls.put(plain_loop(records, keys)[0])


def machine_ceiling(records: int, keys: int, processes: int) -> float:
    """How much more plain-loop work ``processes`` processes do at once than one alone: the most any
    runtime can gain from that many workers here (virtual cores may share a physical one)."""
    one, _ = plain_loop(records, keys)
    context = multiprocessing.get_context("spawn")
    start, walls = context.Barrier(processes), context.Queue()
    loops = [context.Process(target=_timed_loop, args=(records, keys, start, walls)) for _ in range(processes)]
    for loop in loops:
        loop.start()
    slowest = max(walls.get() for _ in loops)  # each one's wall from the common start, not its start-up
    for loop in loops:
        loop.join()
    return processes * one / slowest


class Paced:
    """An unbounded source's iterator factory: ``rate`` numbered records a second for ``seconds``,
    each ``(number, the wall-clock ns it was due)`` — a producer held up does not hide a delay."""

    def __init__(self, rate: int, seconds: float) -> None:
        self.rate, self.seconds = rate, seconds

    def __call__(self) -> Iterator[tuple[int, int]]:
        start, step = time.time_ns(), 1_000_000_000 // self.rate
        for number in range(int(self.rate * self.seconds)):
            due = start + number * step
            wait = due - time.time_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            yield number, due


class LatencySink(Sink):
    """Writes each record's age on arrival (ms since it was due) to a file per subtask in ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def default_name(self) -> str:
        return "Latency"

    def create_writer(self) -> SinkWriter:
        return _LatencyWriter(self.directory)


class _LatencyWriter(SinkWriter):
    def __init__(self, directory: str) -> None:
        self.directory, self.ages_ms, self.subtask = directory, [], 0

    def open(self, subtask_index: int, parallelism: int) -> None:
        self.subtask = subtask_index

    def write(self, values: list, timestamps: list | None) -> None:
        now = time.time_ns()
        self.ages_ms.extend(((now - due) / 1e6, number) for number, due in values)

    def close(self) -> None:
        with open(os.path.join(self.directory, f"ages-{self.subtask}.txt"), "w") as out:
            out.writelines(f"{age} {number}\n" for age, number in self.ages_ms)


class AgeOf(KeyedProcessFunction):
    """The keyed job's work (a running count and sum per key in value state) on a timed record."""

    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("count-sum"))

    def process_element(self, value: Any, ctx: Any) -> Any:
        count, total = self.state.value() or (0, 0)
        self.state.update((count + 1, total + value[1][0]))
        yield value[1]


def latency_run(rate: int, seconds: float, keys: int, parallelism: int, workers: int) -> list[float]:
    """Each record's ms from due to sink in one paced run of the keyed job, the first second left out."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(workers=workers, worker_spares=workers if workers > 1 else 0, show_progress=False)
    with tempfile.TemporaryDirectory(prefix="slipstream-scaling-") as directory:
        (env.from_source(IteratorSource(Paced(rate, seconds), bounded=False), None, "paced").set_parallelism(1)
         .map(lambda r: (r[0] % keys, r)).key_by(lambda p: p[0]).process(AgeOf()).sink_to(LatencySink(directory)))
        env.execute(f"latency-{workers}")
        rows = [line.split() for path in glob.glob(os.path.join(directory, "ages-*.txt"))
                for line in Path(path).read_text().splitlines()]
    return sorted(float(age) for age, number in rows if int(number) >= rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--latency-rate", type=int, default=10_000, help="records/s of the latency runs; 0: none")
    parser.add_argument("--latency-seconds", type=float, default=6.0)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    wall, cpu = plain_loop(args.records, args.keys)
    print(f"plain loop (keyed work): {args.records / wall:12,.0f} rec/s  wall {wall:6.2f} s  cpu {cpu:6.2f} s")
    for workers in counts[1:]:
        ceiling = machine_ceiling(args.records, args.keys, workers)
        print(f"plain loop in {workers} processes at once: {ceiling:4.2f}x the work of one (this machine's ceiling)")
    for workers in counts[1:]:
        fresh, spare = start_up(workers)
        print(f"{workers} workers ready in {fresh:5.2f} s on fresh processes (a driver's first run), "
              f"{spare:5.2f} s on the spares a run leaves")
    for job in args.jobs.split(","):
        base = None
        for workers in counts:
            # one process at the same parallelism first: what the parallelism costs, apart from the processes
            for in_process in ([1] if workers > 1 else []) + [workers]:
                if in_process > 1:
                    time.sleep(SPARES_START_S)  # the spares of the last run are up, as between a driver's jobs
                wall, cpu, ready = measure(job, args.records, args.keys, in_process, workers)
                base = base or wall
                print(f"{job:9s} p={workers} workers={in_process}: {args.records / wall:12,.0f} rec/s  "
                      f"wall {wall:6.2f} s  cpu {cpu:6.2f} s  speed-up {base / wall:4.2f}x"
                      + (f"  (workers ready after {ready:4.2f} s)" if in_process > 1 else ""))
    if args.latency_rate:
        for parallelism, workers in ((1, 1), (2, 1), (2, 2)):  # p=2 in one process: the same exchanges, no sockets
            time.sleep(SPARES_START_S)
            ages = latency_run(args.latency_rate, args.latency_seconds, args.keys, parallelism, workers)
            print(f"latency at {args.latency_rate:,} rec/s, p={parallelism} workers={workers}: "
                  + "  ".join(f"{name} {quantile(ages, q):7.2f} ms" for name, q in
                              (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0)))
                  + f"  ({len(ages):,} records)")


if __name__ == "__main__":
    main()

"""Loops (FLIP-15): termination latency and throughput of records that go round k times.

1. Termination latency: for nested loops of depth 1, 2 and 3, the time from the last
   record reaching the sink (it has left every loop) to the job's end, with the number
   of termination attempts it took. Printed beside the same figure for a job of the
   same shape without loops (the runtime's own end-of-job latency), so the difference
   is what deciding termination costs.
2. Throughput: records that go round a loop k times (k = 1, 10, 100), in record-rounds
   per second, against a hand-written Python loop applying the same functions to the
   same records in the same run.

Run: ``python benchmarks/loops.py [--records N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.runtime.executor import JobRun
from slipstream.runtime.planner import plan_job


def step(record: tuple) -> tuple:
    return (record[0], record[1] - 1) + record[2:]


def again(record: tuple[int, int]) -> bool:
    return record[1] > 0


def done(record: tuple[int, int]) -> bool:
    return record[1] <= 0


def countdown(numbers: Any) -> tuple[Any, Any]:
    stepped = numbers.map(step)
    return stepped.filter(again), stepped.filter(done)


def nested(depth: int, rounds: int) -> Callable[[Any], tuple[Any, Any]]:
    """A loop of ``depth`` levels; every level sends each record round ``rounds`` times."""

    def body(records: Any) -> tuple[Any, Any]:
        if depth > 1:
            # records are (id, remaining rounds of each level, innermost first): push, loop, pop
            records = records.map(lambda r: (r[0], rounds) + r[1:]).iterate(nested(depth - 1, rounds)) \
                .map(lambda r: (r[0],) + r[2:])
        return countdown(records)

    return body


def run_job(build: Callable[[StreamExecutionEnvironment, list[float]], None], parallelism: int
            ) -> tuple[float, float, int]:
    """Run a job built by ``build``; (end-of-job latency after the sink's last record, total seconds,
    termination attempts)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    arrivals: list[float] = []
    build(env, arrivals)
    run = JobRun(spec := env._take_job("benchmark"), plan_job(spec))
    started = time.perf_counter()
    run.open()
    run.scheduler.run()
    ended = time.perf_counter()
    run.close()
    return ended - arrivals[-1], ended - started, len(run.termination.history)


def latency(records: int, repeat: int, parallelism: int) -> None:
    print(f"termination latency: {records} records, each going round 3 times per level, "
          f"parallelism {parallelism}, median of {repeat}")
    print(f"  {'depth':>5}  {'with loops':>11}  {'no loops':>9}  {'attempts':>8}  {'job total':>9}")
    inputs = [(i, 3) for i in range(records)]

    def sink(arrivals: list[float]) -> Callable[[Any], None]:
        return lambda _: arrivals.append(time.perf_counter())

    for depth in (1, 2, 3):
        def looping(env: StreamExecutionEnvironment, arrivals: list[float], depth: int = depth) -> None:
            env.from_collection(inputs).set_parallelism(parallelism).iterate(nested(depth, 3)).add_sink(sink(arrivals))

        def straight(env: StreamExecutionEnvironment, arrivals: list[float], depth: int = depth) -> None:
            stream = env.from_collection(inputs).set_parallelism(parallelism)
            for _ in range(depth):
                stream = stream.map(step).filter(lambda r: True)
            stream.add_sink(sink(arrivals))

        with_loops = [run_job(looping, parallelism) for _ in range(repeat)]
        without = [run_job(straight, parallelism) for _ in range(repeat)]
        print(f"  {depth:>5}  {statistics.median(r[0] for r in with_loops) * 1000:>8.2f} ms"
              f"  {statistics.median(r[0] for r in without) * 1000:>6.2f} ms"
              f"  {statistics.median(r[2] for r in with_loops):>8.0f}"
              f"  {statistics.median(r[1] for r in with_loops) * 1000:>6.0f} ms")


def python_loop(records: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The baseline: the same functions, a record at a time, round and round."""
    out = []
    for record in records:
        while True:
            record = step(record)
            if again(record):
                continue
            if done(record):
                out.append(record)
            break
    return out


def throughput(records: int, repeat: int) -> None:
    print(f"throughput: records going round k times (record-rounds/s), parallelism 1, best of {repeat}")
    print(f"  {'k':>4}  {'slipstream':>12}  {'python loop':>12}  {'ratio':>6}  {'attempts':>8}")
    for k in (1, 10, 100):
        n = max(records // k, 1000)
        inputs = [(i, k) for i in range(n)]
        best_job, best_py, attempts = float("inf"), float("inf"), 0
        for _ in range(repeat):
            out: list[Any] = []

            def build(env: StreamExecutionEnvironment, arrivals: list[float],
                      inputs: list[tuple[int, int]] = inputs, out: list[Any] = out) -> None:
                env.from_collection(inputs).iterate(countdown).add_sink(out.append)
                arrivals.append(0.0)

            _, seconds, attempts = run_job(build, 1)
            assert len(out) == n
            best_job = min(best_job, seconds)
            started = time.perf_counter()
            assert len(python_loop(inputs)) == n
            best_py = min(best_py, time.perf_counter() - started)
        rounds = n * k
        print(f"  {k:>4}  {rounds / best_job:>12,.0f}  {rounds / best_py:>12,.0f}  "
              f"{best_py / best_job:>6.3f}  {attempts:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="record-rounds per throughput run")
    parser.add_argument("--latency-records", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}")
    latency(args.latency_records, args.repeat, 1)
    latency(args.latency_records, args.repeat, 4)
    throughput(args.records, args.repeat)


if __name__ == "__main__":
    main()

"""Checkpoint overhead: streaming throughput with a 1 s checkpoint interval against the same job
without checkpoints, in the same run; and how long a checkpoint takes as keyed state grows.

The job: a number sequence -> map to (key, 1) -> key_by -> running count (keyed state)
-> a discarding sink, at parallelism 1, processing its input record by record (backlog
sorting off, so checkpoints are not skipped under FLIP-327's rules). The figure that counts
is the ratio of the two throughputs (aim: at least 90 %).

Run: ``python benchmarks/checkpoint_overhead.py [--records N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import platform
import shutil
import tempfile
import time

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.number_seq import NumberSequenceSource

KEYS = 1000


def discard(_value) -> None:
    pass


def build(records: int, keys: int, checkpoint_dir: str | None, interval_ms: int | None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(backlog_sorting=False)
    if checkpoint_dir is not None:
        env.get_checkpoint_config().set_checkpoint_storage_dir(checkpoint_dir)
        if interval_ms is not None:
            env.enable_checkpointing(interval_ms)
        else:  # only the final checkpoint: a long interval
            env.enable_checkpointing(10 ** 9)
    (env.from_source(NumberSequenceSource(1, records), None, "numbers")
     .map(lambda x: (x % keys, 1))
     .key_by(lambda pair: pair[0])
     .reduce(lambda a, b: (a[0], a[1] + b[1]))
     .add_sink(discard))
    return env


def timed_run(records: int, checkpoints: bool) -> tuple[float, dict | None]:
    directory = tempfile.mkdtemp(prefix="slipstream-bench-") if checkpoints else None
    try:
        env = build(records, KEYS, directory, 1000 if checkpoints else None)
        started = time.perf_counter()
        result = env.execute("checkpoint overhead")
        elapsed = time.perf_counter() - started
        return elapsed, result.get_accumulator_result("checkpoints")
    finally:
        if directory:
            shutil.rmtree(directory, ignore_errors=True)


def state_size_run(keys: int) -> dict:
    directory = tempfile.mkdtemp(prefix="slipstream-bench-")
    try:
        result = build(2 * keys, keys, directory, None).execute("checkpoint size")
        return result.get_accumulator_result("checkpoints")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=12_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {args.records:,} records, {KEYS} keys")
    best = {False: float("inf"), True: float("inf")}
    stats = None
    for _ in range(args.repeat):
        for checkpoints in (False, True):  # interleaved, so drift affects both alike
            elapsed, run_stats = timed_run(args.records, checkpoints)
            best[checkpoints] = min(best[checkpoints], elapsed)
            if checkpoints:
                stats = run_stats
    without, with_ = args.records / best[False], args.records / best[True]
    print(f"{'no checkpoints':<28}{without:>14,.0f} records/s")
    print(f"{'checkpoint every 1 s':<28}{with_:>14,.0f} records/s   "
          f"({with_ / without:.1%} of no checkpoints; {stats['completed']} checkpoints, "
          f"last {stats['last_duration_ms']:.1f} ms)")
    print()
    print(f"{'keys in state':>14}{'checkpoint size':>18}{'duration (ms)':>16}{'of which writing':>18}")
    for keys in (1_000, 10_000, 100_000, 1_000_000):
        run_stats = state_size_run(keys)
        print(f"{keys:>14,}{run_stats['last_size_bytes']:>16,} B{run_stats['last_duration_ms']:>16.1f}"
              f"{run_stats['last_write_ms']:>18.1f}")


if __name__ == "__main__":
    main()

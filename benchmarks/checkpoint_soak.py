"""Soak test of exactly-once recovery: hundreds of SIGKILL/restart cycles across several jobs.

Each round runs one job of ``tests/checkpoint/crash_job.py`` in a child process with a
file sink and checkpoints, SIGKILLs it at a random moment: a fifth of the kills at a delay
from the start (during imports, restore and the first records), the rest at a delay from the
first checkpoint the start completed (so they land in a running job that restored the last one:
during backlog, streaming, checkpoint writes and commits; a job's first checkpoint comes a second
or two after its start, most of it imports), restarts it from its checkpoint directory
(``SLIPSTREAM_RESTORE_FROM=latest``)
and repeats a random number of times before letting it finish; then the committed output
is compared with the job's oracle: nothing lost, nothing duplicated. Rounds cycle through
the jobs until the time is up.

Usage::

    python benchmarks/checkpoint_soak.py --minutes 6 [--seed 1] [--jobs counts,union,windows,bad,hybrid,iteration,iteration_loop]

Prints one line per round and a summary (kills, those that hit a running job — one that
completed a checkpoint since its start —, restarts, input records, committed output lines,
verification); exits 1 if any round's output differed from its oracle.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests", "checkpoint")
sys.path.insert(0, TESTS)

from crash_job import newest_complete_id, oracle  # noqa: E402

JOB = os.path.join(TESTS, "crash_job.py")
SIZES = {"counts": 1_000_000, "union": 500_000, "windows": 150_000, "bad": 200_000, "hybrid": 1_000_000,
         "iteration": 300_000, "iteration_loop": 100_000}
"""Input records per job: each runs 5-15 s uninterrupted, so a round survives many kills."""


def committed_output(directory: str) -> Counter:
    lines: Counter = Counter()
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            if not name.startswith((".", "_")):
                with open(os.path.join(directory, name)) as handle:
                    lines.update(handle.read().splitlines())
    return lines


def run_round(kind: str, n: int, workdir: str, rng: random.Random, kills_wanted: int) -> dict:
    """Run ``kind`` to completion with ``kills_wanted`` SIGKILLs on the way; the figures of the round."""
    out, checkpoints = os.path.join(workdir, "out"), os.path.join(workdir, "chk")
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest")
    kills = starts = running_kills = 0
    started = time.perf_counter()
    while True:
        starts += 1
        baseline = newest_complete_id(checkpoints)
        process = subprocess.Popen([sys.executable, JOB, kind, out, checkpoints, str(n)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if kills < kills_wanted:
            # A fifth during start-up and restore; the rest once the start took a checkpoint, mostly soon after it,
            # sometimes late.
            in_start_up = rng.random() < 0.2
            if in_start_up:
                delay = rng.uniform(0.05, 2.0)
            else:
                while process.poll() is None and newest_complete_id(checkpoints) <= baseline:
                    time.sleep(0.01)
                delay = rng.uniform(0.0, 0.8) if rng.random() < 0.9 else rng.uniform(0.8, 3.0)
            try:
                process.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                running = newest_complete_id(checkpoints) > baseline
                process.send_signal(signal.SIGKILL)
                process.communicate()
                kills += 1
                running_kills += running
                continue
        _, stderr = process.communicate(timeout=600)
        if process.returncode != 0:
            return {"kind": kind, "kills": kills, "running_kills": running_kills, "starts": starts, "ok": False,
                    "records": n, "lines": 0,
                    "seconds": time.perf_counter() - started,
                    "error": stderr.decode(errors="replace").strip().splitlines()[-1:]}
        got, expected = committed_output(out), oracle(kind, n)
        missing, extra = expected - got, got - expected
        return {"kind": kind, "kills": kills, "running_kills": running_kills, "starts": starts,
                "ok": not missing and not extra,
                "records": n, "lines": sum(got.values()), "seconds": time.perf_counter() - started,
                "error": None if not missing and not extra else
                f"{sum(missing.values())} lost, {sum(extra.values())} duplicated"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=6.0, help="how long to soak (default 6)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", default=",".join(SIZES), help="comma-separated crash_job kinds")
    parser.add_argument("--max-kills-per-round", type=int, default=12)
    args = parser.parse_args()
    kinds = args.jobs.split(",")
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.minutes * 60
    root = tempfile.mkdtemp(prefix="slipstream-soak-")
    rounds: list[dict] = []
    try:
        while time.monotonic() < deadline:
            kind = kinds[len(rounds) % len(kinds)]
            workdir = os.path.join(root, f"round{len(rounds)}")
            result = run_round(kind, SIZES[kind], workdir, rng, rng.randint(2, args.max_kills_per_round))
            rounds.append(result)
            print(f"round {len(rounds):3d} {kind:8s} kills {result['kills']:2d} restarts {result['starts'] - 1:2d} "
                  f"{result['seconds']:6.1f} s  {'ok' if result['ok'] else 'FAILED: ' + str(result['error'])}",
                  flush=True)
            if result["ok"]:
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        if all(r["ok"] for r in rounds):
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"failed rounds kept in {root}")
    print()
    print(f"{'job':8s} {'rounds':>6s} {'kills':>6s} {'running':>8s} {'restarts':>8s} {'input records':>14s} "
          f"{'output lines':>13s} {'verified':>9s}")
    for kind in kinds:
        mine = [r for r in rounds if r["kind"] == kind]
        if mine:
            print(f"{kind:8s} {len(mine):6d} {sum(r['kills'] for r in mine):6d} "
                  f"{sum(r['running_kills'] for r in mine):8d} "
                  f"{sum(r['starts'] - 1 for r in mine):8d} {sum(r['records'] for r in mine):14,d} "
                  f"{sum(r['lines'] for r in mine):13,d} {sum(r['ok'] for r in mine):4d}/{len(mine):<4d}")
    total_kills = sum(r["kills"] for r in rounds)
    failed = [r for r in rounds if not r["ok"]]
    running = sum(r["running_kills"] for r in rounds)
    print(f"\n{len(rounds)} rounds, {total_kills} SIGKILLs ({running} of a job that had completed a checkpoint since "
          f"its start), {sum(r['starts'] - 1 for r in rounds)} restarts from "
          f"checkpoints, {sum(r['records'] for r in rounds):,} input records: "
          + ("every committed output equals its oracle (nothing lost, nothing duplicated)" if not failed
             else f"{len(failed)} round(s) FAILED"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

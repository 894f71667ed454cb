"""Jobs the worker-process tests run, each with a plain-Python oracle, and a check for orphans.

Every job reads numbers 1..n and keys them by ``x % KEYS``; what it writes goes to a
``CollectingSink``. Helpers here are imported by reference into the worker processes (their
module is on the driver's ``sys.path``, which the workers get).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

from slipstream.datastream import (
    KeyedProcessFunction,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.time import Time
from slipstream.datastream.watermark_strategy import TimestampAssigner, WatermarkStrategy
from slipstream.datastream.window import EndOfStreamWindows, TumblingEventTimeWindows
from slipstream.runtime.workers.fork_server import SERVER_NAME, WORKER_NAME
from slipstream.testing import CollectingSink, TestStream

KEYS = 7
WINDOW = 100


def environment(parallelism: int, workers: int, seed: int = 0) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    return env.configure(workers=workers, batch_size=32, scheduler_seed=seed)


# -- keyed streaming: a running count and sum per key ---------------------------------------------
class CountAndSum(KeyedProcessFunction):
    def open(self, runtime_context: Any) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("count-sum"))

    def process_element(self, value: int, ctx: Any) -> Any:
        count, total = self.state.value() or (0, 0)
        count, total = count + 1, total + value
        self.state.update((count, total))
        yield ctx.get_current_key(), count, total


def keyed_job(env: StreamExecutionEnvironment, n: int, sink: CollectingSink, hook: Any = None) -> None:
    numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
    if hook is not None:
        numbers = numbers.map(hook).uid("hook")
    numbers.key_by(lambda x: x % KEYS).process(CountAndSum()).uid("count").sink_to(sink).uid("sink")


def check_keyed(values: list[tuple[int, int, int]], n: int) -> None:
    """Each key's counts 1..c once each; its last count carries the key's total (order-free oracle)."""
    totals, counts = Counter(), Counter()
    for x in range(1, n + 1):
        totals[x % KEYS] += x
        counts[x % KEYS] += 1
    assert Counter((key, count) for key, count, _ in values) == \
        Counter((key, c) for key in counts for c in range(1, counts[key] + 1))
    assert {key: total for key, count, total in values if count == counts[key]} == dict(totals)


# -- event-time windows: a sum per key and tumbling window ------------------------------------------
class Stamp(TimestampAssigner):
    def extract_timestamp(self, value: int, record_timestamp: int) -> int:
        return value


class WindowSum(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield key, context.window().start, sum(elements)


def window_job(env: StreamExecutionEnvironment, n: int, sink: CollectingSink) -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp())
    (env.from_source(NumberSequenceSource(1, n), strategy, "numbers").uid("numbers")
     .key_by(lambda x: x % KEYS).window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW)))
     .process(WindowSum()).uid("windows").sink_to(sink).uid("sink"))


def window_oracle(n: int) -> Counter:
    sums: Counter = Counter()
    for x in range(1, n + 1):
        sums[(x % KEYS, x - x % WINDOW)] += x
    return Counter((key, start, total) for (key, start), total in sums.items())


# -- co_group: per key, how many of each side and their sum ------------------------------------------
def count_sides(first: Any, second: Any) -> Any:
    first, second = list(first), list(second)
    key = (first or second)[0] % KEYS
    yield key, len(first), len(second), sum(first) + sum(second)


def co_group_job(env: StreamExecutionEnvironment, n: int, sink: CollectingSink) -> None:
    numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
    evens = env.from_source(NumberSequenceSource(1, n // 2), None, "halves").uid("halves").map(lambda x: 2 * x)
    (numbers.co_group(evens).where(lambda x: x % KEYS).equal_to(lambda x: x % KEYS)
     .window(EndOfStreamWindows.get()).apply(count_sides).uid("co-group").sink_to(sink).uid("sink"))


def co_group_oracle(n: int) -> Counter:
    first = Counter(x % KEYS for x in range(1, n + 1))
    second = Counter(2 * x % KEYS for x in range(1, n // 2 + 1))
    sums = Counter()
    for x in range(1, n + 1):
        sums[x % KEYS] += x
    for x in range(1, n // 2 + 1):
        sums[2 * x % KEYS] += 2 * x
    return Counter((key, first[key], second[key], sums[key]) for key in range(KEYS))


# -- the backlog switch: history sorted per key, then live records one by one ----------------------
def backlog_job(env: StreamExecutionEnvironment, n: int, sink: CollectingSink) -> None:
    stream = TestStream().add_elements(*range(1, n // 2 + 1)).end_of_backlog().add_elements(*range(n // 2 + 1, n + 1))
    # the pairs at the source's parallelism (1): each key's records keep their order, so do its sums
    (env.from_source(stream, None, "numbers").uid("numbers").map(lambda x: (x % KEYS, x)).uid("pairs")
     .set_parallelism(1).key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sum").sink_to(sink).uid("sink"))


def backlog_totals(n: int) -> dict[int, int]:
    totals: Counter = Counter()
    for x in range(1, n + 1):
        totals[x % KEYS] += x
    return dict(totals)


# -- faults ------------------------------------------------------------------------------------------
class Fault:
    """At ``value`` or the first record after it once ``checkpoints`` holds a completed checkpoint,
    the first time only (a marker file remembers it across processes and restarts): ``kill``
    SIGKILLs the worker process it runs in, ``hang`` stops it answering, ``memory`` raises
    MemoryError there. Until then, with ``checkpoints``, each record takes a millisecond, so the job
    lives long enough to checkpoint."""

    def __init__(self, value: int, marker: str, how: str, checkpoints: str | None = None) -> None:
        self.value, self.marker, self.how, self.checkpoints = value, marker, how, checkpoints

    def _due(self, x: int) -> bool:
        if self.checkpoints is None:
            return x == self.value
        time.sleep(0.001)
        return x >= self.value and any(os.path.exists(os.path.join(self.checkpoints, name, "_manifest.json"))
                                       for name in os.listdir(self.checkpoints))

    def __call__(self, x: int) -> int:
        if self._due(x) and not os.path.exists(self.marker):
            with open(self.marker, "w") as file:
                file.write(str(os.getpid()))
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.how == "hang":
                time.sleep(3600)
            else:
                raise MemoryError("injected: out of memory")
        return x


def _slipstream_processes() -> dict[int, tuple[str, int, bytes]]:
    """Every process a fork server of slipstream's is or forked (zombies too), from /proc: its
    name, its parent and its environment."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", "rb") as comm:
                name = comm.read().strip()
            if name not in (WORKER_NAME, SERVER_NAME):
                continue
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as environ:
                variables = environ.read()
        except OSError:
            continue
        found[int(entry)] = (name.decode(), ppid, variables)
    return found


def worker_processes(parent: int | None = None, marker: str | None = None, servers: bool = False) -> list[int]:
    """The pids of worker processes that still exist: those this process's fork server forked, or
    (``marker``) those whose environment holds ``marker``, whoever their parent is now; with
    ``servers``, the fork servers too (a driver's lives as long as the driver). A child forked a
    moment ago may still bear its server's name: a server's child is a worker whatever its name."""
    parent = os.getpid() if parent is None and marker is None else parent
    processes = _slipstream_processes()
    server = SERVER_NAME.decode()

    def is_server(pid: int) -> bool:
        name, ppid, _ = processes[pid]
        return name == server and processes.get(ppid, ("", 0, b""))[0] != server

    return [pid for pid, (_, ppid, variables) in processes.items()
            if (servers or not is_server(pid)) and (marker is None or marker.encode() in variables)
            and (parent is None or ppid == parent or processes.get(ppid, ("", 0, b""))[1] == parent)]


def workers_left(marker: str, within_s: float = 10.0) -> list[int]:
    """The worker processes and fork servers whose environment holds ``marker`` still there after
    waiting up to ``within_s`` for them to end (they end by themselves once their driver's socket
    closes)."""
    deadline = time.monotonic() + within_s
    while worker_processes(marker=marker, servers=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    return worker_processes(marker=marker, servers=True)

"""FLIP-15 loops inside FLIP-176 iteration bodies: an epoch goes past a loop only once nothing of
it goes round the loop any more, so listeners after the loop (and inside it) see each epoch
whole — across parallelism, scheduler seeds and feedback budgets, against a plain-Python oracle;
and with checkpoints, a restart mid-iteration (records going round both cycles) changes nothing."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_iteration_checkpoints import FailOnce, assert_same, committed, make_env, sink

from slipstream.datastream import (
    KeyedProcessFunction,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
)
from slipstream.datastream.checkpoint_config import ExternalizedCheckpointCleanup
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    IterationListener,
    iterate_bounded_streams_until_termination,
)
from slipstream.errors import UserFunctionError

PARTIALS = OutputTag("partials")
DONE = OutputTag("done")
KEYS = 5


def rounds(x: int) -> int:
    """Epochs number ``x`` goes round the iteration."""
    return x % 4 + 1


def laps(x: int, left: int) -> int:
    """Times ``x`` goes round the inner loop in the epoch where ``left`` rounds are left."""
    return (x + left) % 3 + 1


def oracle(n: int) -> Counter:
    """``epoch,e,count,sum,laps`` per epoch; ``r,x`` as each number leaves."""
    lines = [f"r,{x}" for x in range(n)]
    for epoch in range(1, max(rounds(x) for x in range(n)) + 1):
        alive = [(x, rounds(x) - epoch + 1) for x in range(n) if rounds(x) >= epoch]
        lines.append(f"epoch,{epoch},{len(alive)},{sum(x for x, _ in alive)},"
                     f"{sum(laps(x, left) for x, left in alive)}")
    return Counter(lines)


class Lap(ProcessFunction, IterationListener):
    """Inside the loop: ``(x, left, laps to go, laps done)`` once more round; counts the laps of each
    epoch, which it reports at its epoch watermark — after every lap of the epoch."""

    def __init__(self) -> None:
        self.laps = 0

    def process_element(self, value: tuple, ctx: Any) -> Any:
        x, left, to_go, done = value
        self.laps += 1
        return [(x, left, to_go - 1, done + 1)]

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        collector.collect(("laps", epoch_watermark, self.laps))
        self.laps = 0


class Step(KeyedProcessFunction, IterationListener):
    """After the loop, sync: holds the epoch's numbers, then sends them round and reports them."""

    def __init__(self) -> None:
        self.waiting: list[tuple[int, int, int]] = []

    def process_element(self, value: tuple, ctx: Any) -> None:
        self.waiting.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        for x, left, done in self.waiting:
            if left > 1:
                collector.collect((x, left - 1))
            else:
                context.output(DONE, f"r,{x}")
        if self.waiting:
            context.output(PARTIALS, (epoch_watermark, len(self.waiting), sum(x for x, _, _ in self.waiting),
                                      sum(done for _, _, done in self.waiting)))
        self.waiting = []


class Epochs(ProcessFunction, IterationListener):
    """At parallelism 1: one line per epoch from the partials and the laps counted inside the loop."""

    def __init__(self) -> None:
        self.parts: list[tuple] = []
        self.laps: Counter = Counter()

    def process_element(self, value: tuple, ctx: Any) -> None:
        if value[0] == "laps":
            self.laps[value[1]] += value[2]
        else:
            self.parts.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        due = [p for p in self.parts if p[0] <= epoch_watermark]
        assert all(p[0] == epoch_watermark for p in due), (due, epoch_watermark)
        self.parts = [p for p in self.parts if p[0] > epoch_watermark]
        if due:
            laps_seen = sum(p[3] for p in due)
            assert laps_seen == self.laps.pop(epoch_watermark), "the loop's listener saw the epoch's laps"
            collector.collect(f"epoch,{epoch_watermark},{sum(p[1] for p in due)},{sum(p[2] for p in due)},"
                              f"{laps_seen}")


def build(env: StreamExecutionEnvironment, n: int, budget: int, fail: Any = None) -> Any:
    """The job's output stream (each number's ``r,x`` and a line per epoch); ``fail``, a map in
    front of the loop."""
    env.runtime_options.channel_memory_budget = budget

    def inner(records: Any) -> tuple[Any, Any]:
        lapped = records.process(Lap())
        again = lapped.filter(lambda r: r[0] != "laps" and r[2] > 0).rebalance()
        out = lapped.filter(lambda r: r[0] == "laps" or r[2] == 0)
        return again, out

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        variable = variables.get(0) if fail is None else variables.get(0).map(fail)
        entering = variable.map(lambda r: (r[0], r[1], laps(r[0], r[1]), 0))
        left_loop = entering.iterate(inner)
        laps_counted = left_loop.filter(lambda r: r[0] == "laps")
        stepped = (left_loop.filter(lambda r: r[0] != "laps").map(lambda r: (r[0], r[1], r[3]))
                   .key_by(lambda r: r[0] % KEYS).process(Step()))
        epochs = stepped.get_side_output(PARTIALS).union(laps_counted).global_().process(Epochs()).set_parallelism(1)
        return IterationBodyResult([stepped], [stepped.get_side_output(DONE), epochs])

    numbers = env.from_collection([(x, rounds(x)) for x in range(n)]).set_parallelism(env.get_parallelism())
    outputs = iterate_bounded_streams_until_termination(DataStreamList.of(numbers), DataStreamList.of(), body)
    return outputs.get(0).union(outputs.get(1))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 150), parallelism=st.integers(1, 4), seed=st.integers(0, 10_000),
       budget=st.sampled_from([1, 4, 100_000]))
def test_every_epoch_leaves_the_loop_whole(n: int, parallelism: int, seed: int, budget: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, batch_size=3, channel_capacity=2, quantum=2)
    assert Counter(build(env, n, budget).execute_and_collect()) == oracle(n)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(parallelism=st.integers(1, 3), seed=st.integers(0, 10_000), fail_x=st.integers(0, 299),
       fail_epoch=st.integers(2, 4), budget=st.sampled_from([2, 100_000]))
def test_a_restart_with_records_in_both_cycles_gives_the_oracle(tmp_path_factory: pytest.TempPathFactory,
                                                                parallelism: int, seed: int, fail_x: int,
                                                                fail_epoch: int, budget: int) -> None:
    """A failure in a later epoch restarts the job from its latest checkpoint, taken while numbers went
    round the loop and the iteration (held epochs, quiet checks in flight and all): each epoch's line
    is committed once, as the oracle's."""
    FailOnce.failures = FailOnce.seen = 0
    tmp_path = tmp_path_factory.mktemp("nested")
    n = 300
    env = make_env(tmp_path, parallelism, seed, interval=15, records=None)
    failing = (fail_x, rounds(fail_x) - fail_epoch + 1)  # (x, rounds left): its epoch fail_epoch, if it has one
    sink(build(env, n, budget, FailOnce(lambda r: r == failing)), tmp_path)
    stats = env.execute("loop in iteration").get_accumulator_result("checkpoints")
    assert stats["restarts"] == FailOnce.failures
    assert_same(committed(tmp_path), oracle(n))


def test_a_rebuilt_job_restores_the_loop_and_the_iteration_with_its_own_scopes(tmp_path: Path) -> None:
    """The job fails without restarting; built again (its loop and iteration get new scope numbers,
    as in a new process that built other jobs first) it restores from the latest checkpoint, whose
    batons and held epochs name the old scopes, and commits the oracle's output."""
    FailOnce.failures = FailOnce.seen = 0
    n = 300
    failing = (170, rounds(170) - 2)  # 170 goes round 3 epochs: it fails in its third
    env = make_env(tmp_path, 2, 4, interval=15, records=None, restarts=0)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    sink(build(env, n, 2, FailOnce(lambda r: r == failing)), tmp_path)
    with pytest.raises(UserFunctionError, match="injected failure"):
        env.execute("first")
    env = make_env(tmp_path, 2, 4, interval=15, records=None)
    sink(build(env, n, 2, FailOnce(lambda r: r == failing)), tmp_path)  # the same job: it failed once already
    stats = env.execute("again", restore_from="latest").get_accumulator_result("checkpoints")
    assert stats["restored_from"] is not None
    assert_same(committed(tmp_path), oracle(n))

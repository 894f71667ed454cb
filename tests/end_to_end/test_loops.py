"""Loops end to end (FLIP-15), checked against plain-Python oracles.

Records go round a data-dependent number of times (Collatz steps, count-downs),
loops nest to depth 3, follow one another and sit beside other operators; a
hypothesis test builds random loop programs and checks that every record leaves
exactly once and that the job ends — and ends only once the last record is out.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slipstream.datastream import (
    CoLoopFunction,
    CoMapFunction,
    KeyedProcessFunction,
    LoopFunction,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.time import Time
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import TumblingEventTimeWindows

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 7]


pytestmark = pytest.mark.configure(batch_size=3, channel_capacity=2, quantum=2)

ON_WORKERS = pytest.mark.parametrize("workers", [1, 2], ids=["w1", "w2"])
"""The job runs in one process and on two worker processes (a loop is placed whole on one of them)."""


def collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def collatz_step(record: tuple[int, int, int]) -> tuple[int, int, int]:
    start, n, steps = record
    return (start, n // 2 if n % 2 == 0 else 3 * n + 1, steps + 1)


# -- loops with data-dependent round counts ------------------------------------------------------------
@ON_WORKERS
@pytest.mark.modes(RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH)
@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
def test_decrement_until_zero(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)

    def countdown(numbers):  # type: ignore[no-untyped-def]
        stepped = numbers.map(lambda r: (r[0], r[1] - 1, r[2] + 1))
        return stepped.filter(lambda r: r[1] > 0), stepped.filter(lambda r: r[1] <= 0)

    records = [(i, (i * 13) % 17, 0) for i in range(120)]
    got = list(env.from_collection(records).iterate(countdown).execute_and_collect())
    # a record goes round at least once: n rounds down to 0, or one round from 0 to -1
    assert Counter(got) == Counter((i, 0 if n > 0 else -1, max(n, 1)) for i, n, _ in records)


class Collatz(LoopFunction):
    def loop(self, input_stream):  # type: ignore[no-untyped-def]
        stepped = input_stream.map(lambda r: r if r[1] == 1 else collatz_step(r))
        return stepped.filter(lambda r: r[1] != 1).rebalance(), stepped.filter(lambda r: r[1] == 1)


@ON_WORKERS
@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_collatz_steps_with_a_loop_function(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    numbers = range(1, 200)
    got = list(env.from_collection([(n, n, 0) for n in numbers]).iterate(Collatz()).execute_and_collect())
    assert sorted(got) == [(n, 1, collatz_steps(n)) for n in numbers]


class ParseFeedback(CoMapFunction):
    """The input is ints; what comes back is text: the loop's feedback has another type."""

    def map1(self, value):  # type: ignore[no-untyped-def]
        return (value, value, 0)

    def map2(self, value):  # type: ignore[no-untyped-def]
        start, n, steps = (int(part) for part in value.split(":"))
        return (start, n, steps)


class CollatzAsText(CoLoopFunction):
    def co_loop(self, connected_streams):  # type: ignore[no-untyped-def]
        stepped = connected_streams.map(ParseFeedback()).map(lambda r: r if r[1] == 1 else collatz_step(r))
        feedback = stepped.filter(lambda r: r[1] != 1).map(lambda r: f"{r[0]}:{r[1]}:{r[2]}")
        return feedback, stepped.filter(lambda r: r[1] == 1)


@ON_WORKERS
@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_iterate_with_feedback_of_another_type(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    got = list(env.from_collection(list(range(1, 120))).iterate_with_feedback(CollatzAsText(), feedback_type=str)
               .execute_and_collect())
    assert sorted(got) == [(n, 1, collatz_steps(n)) for n in range(1, 120)]


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(3)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_iterate_with_feedback_takes_a_plain_callable_and_keyed_inputs(env: StreamExecutionEnvironment) -> None:

    def body(connected):  # type: ignore[no-untyped-def]
        stepped = connected.key_by(lambda n: n, lambda text: int(text.split(":")[0])).map(ParseFeedback()) \
            .map(lambda r: (r[0], r[1] - 1, r[2]))
        return stepped.filter(lambda r: r[1] > 0).map(lambda r: f"{r[0]}:{r[1]}:{r[2]}"), \
            stepped.filter(lambda r: r[1] <= 0)

    got = list(env.from_collection([3, 1, 4]).iterate_with_feedback(body).execute_and_collect())
    assert sorted(got) == [(1, 0, 0), (3, 0, 0), (4, 0, 0)]


# -- nesting and sequences -------------------------------------------------------------------------------
def _nested_collatz(depth: int) -> Callable[[Any], Any]:
    """Depth d: each round of the level-d loop runs the level-(d+1) loop to its end first."""

    def body(records):  # type: ignore[no-untyped-def]
        if depth < 3:
            records = records.map(lambda r: r + ((r[1] % 3) + 1,)).iterate(_nested_collatz(depth + 1)) \
                .map(lambda r: r[:-1])
        stepped = records.map(lambda r: r[:2] + (r[2] + 1,) + r[3:-1] + (r[-1] - 1,))
        return stepped.filter(lambda r: r[-1] > 0), stepped.filter(lambda r: r[-1] <= 0)

    return body


def _nested_oracle(record: tuple, depth: int) -> tuple:
    while True:
        if depth < 3:
            inner = _nested_oracle(record + ((record[1] % 3) + 1,), depth + 1)
            record = inner[:-1]
        record = record[:2] + (record[2] + 1,) + record[3:-1] + (record[-1] - 1,)
        if record[-1] <= 0:
            return record


@ON_WORKERS
@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_nested_loops_to_depth_three(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    records = [(i, i, 0, i % 3 + 1) for i in range(40)]
    got = list(env.from_collection(records).iterate(_nested_collatz(1)).execute_and_collect())
    assert Counter(got) == Counter(_nested_oracle(r, 1) for r in records)


@ON_WORKERS
@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(4)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_loops_in_sequence_next_to_other_operators(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)

    def halve(numbers):  # type: ignore[no-untyped-def]
        halved = numbers.map(lambda r: (r[0], r[1] // 2))
        return halved.filter(lambda r: r[1] > 0), halved.filter(lambda r: r[1] == 0)

    got = list(env.from_collection([(i % 5, i * 37) for i in range(100)])
               .iterate(halve)
               .map(lambda r: (r[0], r[0] * 7 + 1, 0))
               .iterate(Collatz())
               .key_by(lambda r: r[0])
               .reduce(lambda a, b: (a[0], a[1], a[2] + b[2]))
               .execute_and_collect())
    totals: Counter = Counter()
    for key in (i % 5 for i in range(100)):
        totals[key] += collatz_steps(key * 7 + 1)
    finals = {}
    for key, _, total in got:
        finals[key] = max(finals.get(key, 0), total)
    assert finals == dict(totals)


class CountRounds(KeyedProcessFunction):
    """Keyed state inside a loop: counts each record's rounds (its key is the record)."""

    def open(self, runtime_context):  # type: ignore[no-untyped-def]
        self.rounds = runtime_context.get_state(ValueStateDescriptor("rounds", int))

    def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
        rounds = (self.rounds.value() or 0) + 1
        self.rounds.update(rounds)
        yield (value[0], value[1], rounds)


@ON_WORKERS
@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(2)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_keyed_state_inside_a_loop(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    # backlog sorting is on by default: a loop body still streams

    def body(records):  # type: ignore[no-untyped-def]
        counted = records.key_by(lambda r: r[0]).process(CountRounds())
        return counted.filter(lambda r: r[2] < r[1]).map(lambda r: (r[0], r[1])), \
            counted.filter(lambda r: r[2] >= r[1])

    got = list(env.from_collection([(i, i % 6 + 1) for i in range(60)]).iterate(body).execute_and_collect())
    assert sorted(got) == [(i, i % 6 + 1, i % 6 + 1) for i in range(60)]


@ON_WORKERS
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(1)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_an_event_time_window_after_a_loop_sees_every_record(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda r, _ts: r[1])
    events = [(i % 3, i * 10, i % 4 + 1) for i in range(60)]

    def countdown(records):  # type: ignore[no-untyped-def]
        stepped = records.map(lambda r: (r[0], r[1], r[2] - 1))
        return stepped.filter(lambda r: r[2] > 0), stepped.filter(lambda r: r[2] <= 0)

    got = list(env.from_collection(events).assign_timestamps_and_watermarks(strategy)
               .iterate(countdown)
               .map(lambda r: (r[0], 1))
               .key_by(lambda r: r[0])
               .window(TumblingEventTimeWindows.of(Time.milliseconds(1000)))
               .reduce(lambda a, b: (a[0], a[1] + b[1]))
               .execute_and_collect())
    assert sorted(got) == sorted(Counter(e[0] for e in events).items())


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(5)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_a_loop_body_may_hold_a_sink_and_a_branch_that_only_leaves(env: StreamExecutionEnvironment) -> None:
    seen: list[Any] = []

    def body(records):  # type: ignore[no-untyped-def]
        stepped = records.map(lambda r: (r[0], r[1] - 1))
        stepped.add_sink(seen.append)
        report = stepped.filter(lambda r: r[1] == 0).map(lambda r: ("done", r[0]))
        return stepped.filter(lambda r: r[1] > 0), report.union(stepped.filter(lambda r: r[1] < 0))

    got = list(env.from_collection([(i, i % 4) for i in range(20)]).iterate(body).execute_and_collect())
    assert sorted(x for x in got if x[0] == "done") == [("done", i) for i in range(20) if i % 4]
    assert sorted(x for x in got if x[0] != "done") == [(i, -1) for i in range(20) if i % 4 == 0]
    assert len(seen) == sum(max(i % 4, 1) for i in range(20))


@ON_WORKERS
@pytest.mark.modes(*list(RuntimeExecutionMode))
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(1)
def test_loops_run_in_every_mode(env: StreamExecutionEnvironment, workers: int) -> None:
    env.configure(workers=workers)
    got = list(env.from_collection([(n, n, 0) for n in range(1, 50)]).iterate(Collatz())
               .execute_and_collect())
    assert sorted(got) == [(n, 1, collatz_steps(n)) for n in range(1, 50)]


# -- randomised loop programs ---------------------------------------------------------------------------
# A program is a list of stages: ("map", k, parallelism) or ("loop", m, body, kind, feedback, parallelism).
# Records are (id, value, counters): a loop pushes a counter of (id * 7 + m) % 4 + 1 rounds on entry,
# runs its body and decrements it each round, and pops it on leaving.

def _rounds(record: tuple, m: int) -> int:
    return (record[0] * 7 + m) % 4 + 1


def _map_stage(k: int) -> Callable[[tuple], tuple]:
    return lambda r: (r[0], (r[1] * 3 + k) % 1_000_003, r[2])


def _after_round(r: tuple) -> tuple:
    return (r[0], r[1] + 1, r[2][:-1] + (r[2][-1] - 1,))


def oracle(record: tuple, program: list) -> tuple:
    for stage in program:
        if stage[0] == "map":
            record = _map_stage(stage[1])(record)
            continue
        _, m, body = stage[:3]
        record = (record[0], record[1], record[2] + (_rounds(record, m),))
        while True:
            record = _after_round(oracle(record, body))
            if record[2][-1] <= 0:
                record = (record[0], record[1], record[2][:-1])
                break
    return record


class ProgramLoop(LoopFunction):
    def __init__(self, body: list, feedback: str) -> None:
        self.body = body
        self.feedback = feedback

    def loop(self, input_stream):  # type: ignore[no-untyped-def]
        return _close(build(input_stream, self.body), self.feedback)


class Decode(CoMapFunction):
    def map1(self, value):  # type: ignore[no-untyped-def]
        return value

    def map2(self, value):  # type: ignore[no-untyped-def]
        return ast.literal_eval(value)


def _close(stream: Any, feedback: str) -> tuple[Any, Any]:
    stepped = stream.map(_after_round)
    again = stepped.filter(lambda r: r[2][-1] > 0)
    if feedback == "rebalance":
        again = again.rebalance()
    elif feedback == "key_by":
        again = again.key_by(lambda r: r[0])
    return again, stepped.filter(lambda r: r[2][-1] <= 0).map(lambda r: (r[0], r[1], r[2][:-1]))


def build(stream: Any, program: list) -> Any:
    for stage in program:
        if stage[0] == "map":
            stream = stream.map(_map_stage(stage[1])).set_parallelism(stage[2])
            continue
        _, m, body, kind, feedback, parallelism = stage
        stream = stream.map(lambda r, m=m: (r[0], r[1], r[2] + (_rounds(r, m),))).set_parallelism(parallelism)
        if kind == "class":
            stream = stream.iterate(ProgramLoop(body, feedback))
        elif kind == "callable":
            stream = stream.iterate(lambda s, body=body, feedback=feedback: _close(build(s, body), feedback))
        else:
            def co_loop(connected, body=body, feedback=feedback):  # type: ignore[no-untyped-def]
                again, out = _close(build(connected.map(Decode()), body), feedback)
                return again.map(repr), out
            stream = stream.iterate_with_feedback(co_loop, feedback_type=str)
    return stream


@st.composite
def programs(draw: Any, depth: int = 1) -> list:
    stages = []
    for _ in range(draw(st.integers(1, 2 if depth > 1 else 3))):
        if depth <= 3 and draw(st.integers(0, 2)) > 0:
            stages.append(("loop", draw(st.integers(0, 9)), draw(programs(depth + 1)),
                           draw(st.sampled_from(["class", "callable", "co"])),
                           draw(st.sampled_from(["forward", "rebalance", "key_by"])), draw(st.integers(1, 4))))
        else:
            stages.append(("map", draw(st.integers(0, 9)), draw(st.integers(1, 4))))
    return stages


def _depth(program: list) -> int:
    return max((1 + _depth(stage[2]) for stage in program if stage[0] == "loop"), default=0)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(), parallelism=st.integers(1, 4), seed=st.integers(0, 10_000),
       records=st.integers(0, 25), batch_size=st.integers(1, 4), capacity=st.integers(1, 3),
       mode=st.sampled_from([RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH]))
def test_random_loop_programs_deliver_every_record_exactly_once_and_end(
        program: list, parallelism: int, seed: int, records: int, batch_size: int, capacity: int,
        mode: RuntimeExecutionMode) -> None:
    assert _depth(program) <= 3
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism).set_runtime_mode(mode)
    env.configure(scheduler_seed=seed, batch_size=batch_size, channel_capacity=capacity, quantum=2)
    inputs = [(i, i * 11, ()) for i in range(records)]
    expected = Counter(oracle(r, program) for r in inputs)
    arrivals: list[Any] = []
    build(env.from_collection(inputs), program).add_sink(arrivals.append)
    env.execute()      # returns only once the job ended: no hang, no DeadlockError
    assert Counter(arrivals) == expected     # every record exactly once: nothing lost to an early end


@ON_WORKERS
@pytest.mark.parallelisms(1, 4)
@pytest.mark.seeds(9)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_the_job_ends_only_after_the_last_record_left_the_loops(env: StreamExecutionEnvironment, workers: int) -> None:
    """Pull records one by one: the iterator ends exactly after the expected count, never before."""
    env.configure(workers=workers)
    program = [("loop", 1, [("loop", 2, [("loop", 3, [("map", 1, 2)], "co", "key_by", 3)],
                             "class", "rebalance", 2)], "callable", "forward", 1)]
    inputs = [(i, i, ()) for i in range(30)]
    expected = Counter(oracle(r, program) for r in inputs)
    iterator = build(env.from_collection(inputs), program).execute_and_collect()
    got = Counter()
    for _ in range(sum(expected.values())):
        got[next(iterator)] += 1
    with pytest.raises(StopIteration):
        next(iterator)
    assert got == expected

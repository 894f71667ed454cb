"""Several inputs and partitioning end to end: union, connect with co-functions, keyed
co-processing with shared state, and where each partitioner sends records."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterator

import pytest

from slipstream.datastream import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    ListStateDescriptor,
    MapFunction,
    OutputTag,
    Partitioner,
    RuntimeContext,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.errors import InvalidProgramError
from slipstream.testing import CollectingSink

SEEDS = [0, 6, 13]

pytestmark = pytest.mark.configure(batch_size=3, channel_capacity=2)


# -- union ------------------------------------------------------------------------------------------
@pytest.mark.workers(1, 2)
def test_union_of_three_streams(env: StreamExecutionEnvironment) -> None:
    a = env.from_collection(list(range(40)))
    b = env.from_collection(list(range(100, 130))).map(lambda x: x * 2)
    c = env.from_collection(list(range(-20, 0))).filter(lambda x: x % 3 == 0).set_parallelism(1)
    got = list(a.union(b, c).map(lambda x: x + 1).execute_and_collect())
    expected = [x + 1 for x in range(40)] + [x * 2 + 1 for x in range(100, 130)] + \
        [x + 1 for x in range(-20, 0) if x % 3 == 0]
    assert Counter(got) == Counter(expected)


@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(1)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_union_with_itself_duplicates_every_record(env: StreamExecutionEnvironment) -> None:
    s = env.from_collection(list(range(10)))
    assert Counter(s.union(s).execute_and_collect()) == Counter(list(range(10)) * 2)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(2)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_union_keeps_per_source_order_into_one_subtask(env: StreamExecutionEnvironment) -> None:
    a = env.from_collection([("a", i) for i in range(30)])
    b = env.from_collection([("b", i) for i in range(30)])
    got = list(a.union(b).execute_and_collect())
    for tag in "ab":
        assert [i for t, i in got if t == tag] == list(range(30))


# -- connect ------------------------------------------------------------------------------------------
class Doubler(CoMapFunction):
    def map1(self, value: int) -> Any:
        return ("num", value * 2)

    def map2(self, value: str) -> Any:
        return ("str", value.upper())


class Expander(CoFlatMapFunction):
    def flat_map1(self, value: int) -> Iterator[Any]:
        yield from [value] * (value % 3)

    def flat_map2(self, value: str) -> Iterator[Any]:
        yield from value.split()


def test_connect_co_map_and_co_flat_map(env: StreamExecutionEnvironment) -> None:
    numbers = list(range(25))
    words = ["alpha beta", "gamma", "", "delta epsilon zeta"] * 3
    mapped, flat = CollectingSink(), CollectingSink()
    env.from_collection(numbers).connect(env.from_collection(words)).map(Doubler()).sink_to(mapped)
    env.from_collection(numbers).connect(env.from_collection(words)).flat_map(Expander()).sink_to(flat)
    env.execute()
    assert Counter(mapped.values) == Counter([("num", n * 2) for n in numbers] + [("str", w.upper()) for w in words])
    assert Counter(flat.values) == \
        Counter([n for n in numbers for _ in range(n % 3)] + [w for line in words for w in line.split()])


REJECTED = OutputTag("rejected")


class Tagger(CoProcessFunction):
    """Input 1 carries event timestamps, input 2 none: ``ctx.timestamp()`` must say so per record."""

    def process_element1(self, value: tuple[str, int], ctx: CoProcessFunction.Context) -> Iterator[Any]:
        if value[1] % 5 == 0:
            yield REJECTED, ("first", value, ctx.timestamp())
        else:
            yield ("first", value, ctx.timestamp())

    def process_element2(self, value: str, ctx: CoProcessFunction.Context) -> Iterator[Any]:
        if value.startswith("x"):
            ctx.output(REJECTED, ("second", value, ctx.timestamp()))
        else:
            yield ("second", value, ctx.timestamp())


def test_co_process_function_timestamps_and_side_outputs(env: StreamExecutionEnvironment) -> None:
    events = [("e", t) for t in range(0, 60, 2)]
    labels = [f"{c}{i}" for i in range(15) for c in "xy"]
    timed = env.from_collection(events).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda e, ts: e[1] + 1000))
    main = timed.connect(env.from_collection(labels)).process(Tagger())
    rejected = CollectingSink()
    main.get_side_output(REJECTED).add_sink(rejected)
    got = list(main.execute_and_collect())
    first = [("first", e, e[1] + 1000) for e in events]
    second = [("second", label, None) for label in labels]
    assert Counter(got) == Counter([r for r in first if r[1][1] % 5] + [r for r in second if r[1][0] == "y"])
    assert Counter(rejected.values) == Counter([r for r in first if r[1][1] % 5 == 0] +
                                        [r for r in second if r[1][0] == "x"])


# -- keyed co-process: enrichment with shared keyed state -------------------------------------------------
class Enrich(KeyedCoProcessFunction):
    """Input 1: orders (customer, order id). Input 2: customers (customer, name).

    Orders wait in list state until their customer's name arrives; both inputs share the
    key's state. Orders still waiting at the end are reported by an event-time timer,
    which the end of input (the final watermark) fires.
    """

    def open(self, runtime_context: RuntimeContext) -> None:
        self.name = runtime_context.get_state(ValueStateDescriptor("name"))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting"))

    def process_element1(self, order: tuple[str, int], ctx: KeyedCoProcessFunction.Context) -> Iterator[Any]:
        assert ctx.get_current_key() == order[0]
        name = self.name.value()
        if name is None:
            self.waiting.add(order)
            ctx.timer_service().register_event_time_timer(10**15)
        else:
            yield ("joined", order[1], name)

    def process_element2(self, customer: tuple[str, str], ctx: KeyedCoProcessFunction.Context) -> Iterator[Any]:
        assert ctx.get_current_key() == customer[0]
        self.name.update(customer[1])
        for order in self.waiting.get():
            yield ("joined", order[1], customer[1])
        self.waiting.clear()

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> Iterator[Any]:
        for order in self.waiting.get():
            yield ("unmatched", order[1], ctx.get_current_key())


@pytest.mark.seeds(*SEEDS[:2])
@pytest.mark.workers(1, 2)
def test_keyed_co_process_enrichment(env: StreamExecutionEnvironment) -> None:
    customers = [(f"c{i}", f"name-{i}") for i in range(0, 12, 2)] + [("c11", "late-eleven")]
    orders = [(f"c{i % 13}", n) for n, i in enumerate(range(0, 200, 7))]
    joined = (env.from_collection(orders).connect(env.from_collection(customers))
              .key_by(lambda o: o[0], lambda c: c[0]).process(Enrich()))
    got = list(joined.execute_and_collect())
    names = dict(customers)
    expected = [("joined", n, names[c]) if c in names else ("unmatched", n, c) for c, n in orders]
    assert Counter(got) == Counter(expected)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_connected_streams_need_both_keyed_for_keyed_co_process(env: StreamExecutionEnvironment) -> None:
    connected = env.from_collection([1]).connect(env.from_collection([2]))
    with pytest.raises(InvalidProgramError):
        connected.process(Enrich())


# -- partitioners -----------------------------------------------------------------------------------------
class WhereAmI(MapFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.index = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()

    def map(self, value: Any) -> Any:
        return (self.index, value)


def placement(pairs: list) -> dict[int, list]:
    where: dict[int, list] = defaultdict(list)
    for index, value in pairs:
        where[index].append(value)
    return dict(where)


N = 60


@pytest.mark.seeds(*SEEDS)
@pytest.mark.parallelisms(4)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_rebalance_round_robins_over_all_subtasks(env: StreamExecutionEnvironment) -> None:
    got = list(env.from_collection(list(range(N))).set_parallelism(1).rebalance().map(WhereAmI())
               .execute_and_collect())
    where = placement(got)
    assert sorted(where) == [0, 1, 2, 3]
    assert all(len(values) == N // 4 for values in where.values())
    assert sorted(v for values in where.values() for v in values) == list(range(N))
    # round robin from one upstream subtask: consecutive records go to consecutive subtasks
    assert len({tuple(v % 4 for v in values) for values in where.values()}) == 4
    assert all(len({v % 4 for v in values}) == 1 for values in where.values())


@pytest.mark.seeds(*SEEDS)
@pytest.mark.parallelisms(4)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_rescale_keeps_records_within_the_local_group(env: StreamExecutionEnvironment) -> None:
    got = list(env.from_collection(list(range(N))).set_parallelism(2).rescale().map(WhereAmI())
               .execute_and_collect())
    where = placement(got)
    # source subtask 0 reads the first half, and feeds only subtasks 0 and 1; subtask 1 feeds 2 and 3
    assert sorted(v for i in (0, 1) for v in where.get(i, [])) == list(range(N // 2))
    assert sorted(v for i in (2, 3) for v in where.get(i, [])) == list(range(N // 2, N))
    assert all(len(where.get(i, [])) == N // 4 for i in range(4))


@pytest.mark.seeds(*SEEDS)
@pytest.mark.parallelisms(4)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_shuffle_delivers_everything_somewhere(env: StreamExecutionEnvironment) -> None:
    got = list(env.from_collection(list(range(N))).shuffle().map(WhereAmI()).execute_and_collect())
    where = placement(got)
    assert sorted(v for values in where.values() for v in values) == list(range(N))
    assert len(where) > 1 and set(where) <= {0, 1, 2, 3}


@pytest.mark.parallelisms(2, 3)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.workers(1, 2)
def test_broadcast_sends_every_record_to_every_subtask(env: StreamExecutionEnvironment) -> None:
    parallelism = env.get_parallelism()
    got = list(env.from_collection(list(range(N))).broadcast().map(WhereAmI()).execute_and_collect())
    where = placement(got)
    assert sorted(where) == list(range(parallelism))
    assert all(sorted(values) == list(range(N)) for values in where.values())


@pytest.mark.seeds(*SEEDS)
@pytest.mark.parallelisms(4)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_global_sends_everything_to_subtask_zero(env: StreamExecutionEnvironment) -> None:
    got = list(env.from_collection(list(range(N))).global_().map(WhereAmI()).execute_and_collect())
    assert placement(got) == {0: list(range(N))} or (set(placement(got)) == {0} and
                                                    sorted(placement(got)[0]) == list(range(N)))


@pytest.mark.seeds(*SEEDS)
@pytest.mark.parallelisms(3)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_forward_keeps_records_in_their_subtask(env: StreamExecutionEnvironment) -> None:
    first = env.from_collection(list(range(N))).set_parallelism(3).map(WhereAmI())
    got = list(first.forward().map(WhereAmI()).execute_and_collect())
    assert len(got) == N
    assert all(outer == inner for outer, (inner, _) in got)
    # a parallel collection source gives subtask i the i-th contiguous slice
    for outer, (_, value) in got:
        assert value * 3 // N == outer


class ModuloPartitioner(Partitioner):
    def partition(self, key: int, num_partitions: int) -> int:
        return key % num_partitions


@pytest.mark.parallelisms(2, 4)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.parametrize("as_class", [True, False])
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_partition_custom_goes_where_the_partitioner_says(env: StreamExecutionEnvironment, as_class: bool) -> None:
    parallelism = env.get_parallelism()
    partitioner = ModuloPartitioner() if as_class else (lambda key, n: (key * 7) % n)
    records = [{"id": i, "payload": str(i)} for i in range(N)]
    got = list(env.from_collection(records).partition_custom(partitioner, "id").map(WhereAmI())
               .execute_and_collect())
    assert len(got) == N
    for index, record in got:
        expected = record["id"] % parallelism if as_class else (record["id"] * 7) % parallelism
        assert index == expected


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_forward_with_mismatched_parallelism_is_refused_at_plan_time(env: StreamExecutionEnvironment) -> None:
    env.from_collection(list(range(5))).forward().map(lambda x: x).set_parallelism(3).print()
    with pytest.raises(InvalidProgramError, match="forward"):
        env.explain()
    with pytest.raises(InvalidProgramError, match="forward"):
        env.execute()


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_partitioning_has_no_parallelism_of_its_own(env: StreamExecutionEnvironment) -> None:
    with pytest.raises(InvalidProgramError):
        env.from_collection([1, 2]).rebalance().set_parallelism(3)

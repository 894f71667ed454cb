"""Broadcast state end to end (PyFlink's ``broadcast(MapStateDescriptor)``, ``BroadcastProcessFunction``,
``KeyedBroadcastProcessFunction``), checked against plain-Python oracles at parallelism 1, 2 and 4 over
scheduler seeds, in STREAMING and BATCH mode.

Bounded inputs are backlog, and the broadcast side comes first while it is backlog (Flink's BATCH rule,
here in both modes): every data record sees the broadcast state the whole broadcast stream built, so the
oracle applies every rule, then every record.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slipstream.common import Types
from slipstream.datastream import (
    BroadcastProcessFunction,
    BroadcastStream,
    KeyedBroadcastProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    OutputTag,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
)
from slipstream.datastream.watermark_strategy import TimestampAssigner, WatermarkStrategy
from slipstream.errors import InvalidProgramError, SlipstreamError

PARALLELISMS = [1, 2, 4]
SEEDS = [0, 6, 13]
MODES = [RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH]
RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())
UNMATCHED = OutputTag("unmatched", Types.STRING())


SMALL_BATCHES = {"batch_size": 3, "channel_capacity": 2}
pytestmark = pytest.mark.configure(**SMALL_BATCHES)


class ApplyRules(BroadcastProcessFunction):
    """Rules ``(word, factor)`` update the broadcast state in every instance (each says so with its
    subtask index); a word is emitted with its factor, or to a side output when it has none."""

    def open(self, runtime_context):
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        yield ("rule", self.subtask, value[0], value[1])

    def process_element(self, value, ctx):
        factor = ctx.get_broadcast_state(RULES).get(value)
        if factor is None:
            yield UNMATCHED, value
        else:
            yield ("word", value, factor)


def run_rules(env, rules, words):
    broadcast = env.from_collection(rules).broadcast(RULES)
    assert isinstance(broadcast, BroadcastStream)
    applied = env.from_collection(words).connect(broadcast).process(ApplyRules())
    unmatched = applied.get_side_output(UNMATCHED).map(lambda w: ("unmatched", w))
    return Counter(applied.union(unmatched).execute_and_collect())


def rules_oracle(rules, words, parallelism):
    final = dict(rules)
    expected = Counter(("rule", i, word, factor) for i in range(parallelism) for word, factor in rules)
    expected.update(("word", w, final[w]) if w in final else ("unmatched", w) for w in words)
    return expected


WORDS = st.sampled_from(["a", "b", "c", "d", "e"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(st.tuples(WORDS, st.integers(-5, 5)), max_size=8),
       words=st.lists(WORDS, max_size=30), parallelism=st.sampled_from(PARALLELISMS),
       seed=st.integers(0, 1000), mode=st.sampled_from(MODES))
def test_every_record_sees_the_state_all_rules_built_and_every_instance_gets_every_rule(
        rules, words, parallelism, seed, mode):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism).set_runtime_mode(mode)
    env.configure(scheduler_seed=seed, **SMALL_BATCHES)
    assert run_rules(env, rules, words) == rules_oracle(rules, words, parallelism)


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(*MODES)
def test_the_broadcast_side_comes_first_while_it_is_backlog(env):
    """The last rule for a word overrides the first, and the data side is far longer than the rules:
    had a record gone before the rules ended, it would show an older factor or none."""
    rules = [("a", 1), ("b", 2), ("a", 3)] + [(f"x{i}", i) for i in range(40)] + [("b", 4)]
    words = ["a", "b", "c"] * 50
    assert run_rules(env, rules, words) == rules_oracle(rules, words, env.get_parallelism())


# -- keyed: keyed state, timers, side outputs ----------------------------------------------------------
class Stamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


class WeightedSums(KeyedBroadcastProcessFunction):
    """Per key, keeps its records in list state and, 5 ms after each, emits the sum of the values up to
    then times the key's weight from the broadcast state (a key without a weight goes to a side output)."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen", Types.TUPLE([Types.LONG(), Types.INT()])))

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        return ()

    def process_element(self, value, ctx):
        assert ctx.get_current_key() == value[0]
        if not ctx.get_broadcast_state(RULES).contains(value[0]):
            yield UNMATCHED, value[0]
            return
        self.seen.add((ctx.timestamp(), value[1]))
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5)

    def on_timer(self, timestamp, ctx):
        weight = ctx.get_broadcast_state(RULES).get(ctx.get_current_key())
        total = sum(v for ts, v in self.seen.get() if ts <= timestamp)
        yield (ctx.get_current_key(), timestamp, total * weight)


def weighted_oracle(rules, events):
    weights = dict(rules)
    expected, unmatched = Counter(), Counter()
    by_key = defaultdict(list)
    for key, value, ts in events:
        if key in weights:
            by_key[key].append((ts, value))
        else:
            unmatched[("unmatched", key)] += 1
    for key, seen in by_key.items():
        for timer in {ts + 5 for ts, _ in seen}:
            expected[(key, timer, weights[key] * sum(v for ts, v in seen if ts <= timer))] += 1
    return expected + unmatched


@pytest.mark.parallelisms(*PARALLELISMS)
@pytest.mark.seeds(*SEEDS)
@pytest.mark.modes(*MODES)
@pytest.mark.workers(1, 2)
def test_keyed_broadcast_function_with_keyed_state_timers_and_side_output(env: StreamExecutionEnvironment) -> None:
    rules = [("k0", 1), ("k1", 10), ("k2", 100), ("k1", 20)]
    events = [(f"k{i % 4}", i % 7, i * 3) for i in range(120)]  # k3 has no weight
    timed = env.from_collection(events).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp()))
    sums = timed.key_by(lambda e: e[0]).connect(env.from_collection(rules).broadcast(RULES)) \
        .process(WeightedSums())
    unmatched = sums.get_side_output(UNMATCHED).map(lambda k: ("unmatched", k))
    assert Counter(sums.union(unmatched).execute_and_collect()) == weighted_oracle(rules, events)


# -- misuse ---------------------------------------------------------------------------------------------
class ChangesStateOnTheDataSide(BroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        return ()

    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value, 1)
        return ()


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_changing_broadcast_state_on_the_data_side_is_refused_naming_the_operator(
        env: StreamExecutionEnvironment) -> None:
    rules = env.from_collection([("a", 1)]).broadcast(RULES)
    stream = env.from_collection(["a"]).connect(rules).process(ChangesStateOnTheDataSide())
    with pytest.raises(SlipstreamError, match=r"'Co-Process-Broadcast'.*'rules' is read-only in process_element"):
        list(stream.execute_and_collect())


class AsksForAnUndeclaredState(BroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(MapStateDescriptor("other", Types.STRING(), Types.INT())).put(value, 1)
        return ()

    def process_element(self, value, ctx):
        return ()


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_a_broadcast_state_broadcast_did_not_declare_is_refused(env: StreamExecutionEnvironment) -> None:
    stream = env.from_collection(["a"]).connect(env.from_collection(["r"]).broadcast(RULES)) \
        .process(AsksForAnUndeclaredState())
    with pytest.raises(SlipstreamError, match=r"no broadcast state 'other'; broadcast\(\) declared \['rules'\]"):
        list(stream.execute_and_collect())


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_misuse_is_refused_while_building_the_graph(env: StreamExecutionEnvironment) -> None:
    rules = env.from_collection([("a", 1)])
    data = env.from_collection(["a"])
    with pytest.raises(InvalidProgramError, match="MapStateDescriptor"):
        rules.broadcast(ListStateDescriptor("l", Types.INT()))
    with pytest.raises(InvalidProgramError, match="same name"):
        rules.broadcast(RULES, MapStateDescriptor("rules", Types.STRING(), Types.LONG()))
    with pytest.raises(InvalidProgramError, match="KeyedBroadcastProcessFunction applies to a KeyedStream"):
        data.connect(rules.broadcast(RULES)).process(WeightedSums())
    with pytest.raises(InvalidProgramError, match="BroadcastProcessFunction applies to a non-keyed"):
        data.key_by(lambda w: w).connect(rules.broadcast(RULES)).process(ApplyRules())
    with pytest.raises(InvalidProgramError, match="expects a BroadcastProcessFunction"):
        data.connect(rules.broadcast(RULES)).process(lambda v, ctx: ())
    with pytest.raises(InvalidProgramError, match="KeyedStream.broadcast"):
        data.key_by(lambda w: w).broadcast(RULES)
    assert not isinstance(rules.broadcast(), BroadcastStream)  # without descriptors: a partitioning


# -- the plan --------------------------------------------------------------------------------------------
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_explain_and_the_json_plan_show_the_broadcast_edge(env: StreamExecutionEnvironment) -> None:
    rules = env.from_collection([("a", 1)]).name("rules source").broadcast(RULES)
    env.from_collection(["a"]).name("words").key_by(lambda w: w).connect(rules).process(WeightedSums()).print()
    plan = env.explain()
    assert "input 1: BROADCAST PIPELINED" in plan
    assert "Keyed-Co-Process-Broadcast: broadcast state ['rules']; input 1 is broadcast and read first" in plan
    nodes = {node["type"]: node for node in json.loads(env.get_execution_plan())["nodes"]}
    strategies = [p["ship_strategy"] for p in nodes["Keyed-Co-Process-Broadcast"]["predecessors"]]
    assert strategies == ["HASH", "BROADCAST"]

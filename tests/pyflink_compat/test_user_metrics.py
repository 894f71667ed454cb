"""``get_metrics_group()`` gives a real metric group; what functions count is in the job result, per operator."""

from __future__ import annotations

from typing import Any

import pytest

from slipstream.datastream import KeyedProcessFunction, MapFunction, RuntimeContext, StreamExecutionEnvironment
from slipstream.datastream.metrics import OperatorMetricGroup
from slipstream.errors import InvalidProgramError
from slipstream.metrics import Counter, Distribution, Meter, MetricGroup


class Measured(MapFunction):
    """Counts records, the even ones in a subgroup, their values' distribution, a meter and a gauge."""

    def open(self, runtime_context: RuntimeContext) -> None:
        group = runtime_context.get_metrics_group()
        self.seen = group.counter("seen")
        self.even = group.add_group("parity").counter("even")
        self.values = group.distribution("values")
        self.events = group.meter("events", time_span_in_seconds=60)
        self.last = None
        group.gauge("last", lambda: self.last)
        self.subtask = runtime_context.get_index_of_this_subtask()

    def map(self, value: int) -> tuple[int, int]:
        self.seen.inc()
        if value % 2 == 0:
            self.even.inc()
        self.values.update(value)
        self.events.mark_event()
        self.last = value
        return self.subtask, value


@pytest.mark.parametrize("parallelism,seed,workers", [(1, 0, 1), (2, 3, 1), (4, 7, 1), (2, 3, 2), (4, 7, 2)])
def test_counters_distributions_meters_and_gauges_are_reported_per_operator(parallelism: int, seed: int,
                                                                            workers: int) -> None:
    """In one process and on two worker processes (each reports its subtasks; the driver combines them)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism) \
        .configure(scheduler_seed=seed, batch_size=7, workers=workers)
    data = list(range(1, 101))
    out: list[tuple[int, int]] = []
    env.from_collection(data).map(Measured()).name("measured").add_sink(out.append)
    metrics = env.execute("metrics").get_accumulator_result("measured")["metrics"]
    last_per_subtask = {subtask: value for subtask, value in out}  # the sink sees each subtask's records in order
    assert metrics["seen"] == len(data)
    assert metrics["parity.even"] == sum(1 for x in data if x % 2 == 0)
    assert metrics["values"] == {"count": 100, "sum": sum(data), "min": 1, "max": 100, "mean": sum(data) / 100}
    assert metrics["events"]["count"] == 100 and metrics["events"]["rate"] > 0
    assert metrics["last"] == [last_per_subtask.get(i) for i in range(parallelism)]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_keyed_process_function_counts_too(workers: int) -> None:
    class PerKey(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.keys = runtime_context.get_metrics_group().add_group("key", "all").counter("records")

        def process_element(self, value: Any, ctx: Any) -> Any:
            self.keys.inc(2)
            self.keys.dec()
            yield value

    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2).configure(workers=workers)
    env.from_collection(["a", "b", "a"]).key_by(lambda v: v).process(PerKey()).name("per key").print()
    assert env.execute().get_accumulator_result("per key")["metrics"] == {"key.all.records": 3}


def test_operators_without_user_metrics_report_none() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).map(lambda x: x).name("plain").print()
    assert "metrics" not in env.execute().get_accumulator_result("plain")


def test_scope_variables_and_identifiers_of_groups() -> None:
    report: dict = {}
    group = OperatorMetricGroup(report, "Map", 1, 2)
    assert isinstance(group, MetricGroup)
    assert group.get_scope_components() == ["Map", "1"]
    assert group.get_all_variables() == {"<operator_name>": "Map", "<subtask_index>": "1"}
    plain = group.add_group("my_group")
    assert plain.get_scope_components() == ["Map", "1", "my_group"]
    assert plain.get_metric_identifier("my_metric") == "Map.1.my_group.my_metric"
    keyed = group.add_group("my_key_group", "my_value_group")
    assert keyed.get_all_variables()["my_key_group"] == "my_value_group"
    assert keyed.get_scope_components() == ["Map", "1", "my_key_group", "my_value_group"]
    replaced = keyed.add_group("my_key_group", "new_value")
    assert replaced.get_all_variables()["my_key_group"] == "new_value"
    assert replaced.get_metric_identifier("m") == "Map.1.my_key_group.my_value_group.my_key_group.new_value.m"


def test_a_metric_of_a_subtask_reads_its_own_values() -> None:
    report: dict = {}
    first, second = OperatorMetricGroup(report, "op", 0, 2), OperatorMetricGroup(report, "op", 1, 2)
    a, b = first.counter("c"), second.counter("c")
    assert isinstance(a, Counter) and a is first.counter("c")  # registering again gives the same counter
    a.inc(3)
    b.inc()
    assert (a.get_count(), b.get_count(), report["metrics"]["c"]) == (3, 1, 4)
    values = first.distribution("d")
    assert isinstance(values, Distribution)
    for value in (4, 1, 7):
        values.update(value)
    assert (values.get_count(), values.get_sum(), values.get_min(), values.get_max(), values.get_mean()) == (3, 12, 1, 7, 4)


def test_a_meters_rate_counts_the_events_of_its_time_span() -> None:
    clock = [100.0]
    meter = Meter({}, "m", 10, clock=lambda: clock[0])
    meter.mark_event(5)
    clock[0] = 105.0
    assert meter.get_rate() == 1.0  # 5 events over the 5 s since it was made
    clock[0] = 125.0
    meter.mark_event(20)
    assert meter.get_count() == 25 and meter.get_rate() == 2.0  # the first 5 left the 10 s span


def test_a_name_registered_as_another_kind_is_refused_also_across_subtasks() -> None:
    operator_entry: dict = {}
    first, second = OperatorMetricGroup(operator_entry, "op", 0, 2), OperatorMetricGroup(operator_entry, "op", 1, 2)
    first.counter("x")
    with pytest.raises(InvalidProgramError, match="operator 'op': metric 'x' is already registered as a counter"):
        first.distribution("x")
    with pytest.raises(InvalidProgramError, match="metric 'x' is already registered as a counter"):
        second.gauge("x", lambda: 1)


def test_a_metric_misuse_in_open_names_the_operator() -> None:
    class Twice(MapFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.get_metrics_group().counter("n")
            runtime_context.get_metrics_group().meter("n")

        def map(self, value: Any) -> Any:
            return value

    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).map(Twice()).name("twice").print()
    with pytest.raises(InvalidProgramError, match="operator 'twice': metric 'n' is already registered as a counter"):
        env.execute()

"""The seam between the user API and the runtime: the environment freezes a job into a JobSpec,
and the runtime runs a JobSpec whatever built it, never reading the environment."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from slipstream.datastream import MapFunction, StreamExecutionEnvironment
from slipstream.datastream.connectors.iterator import CollectionSource
from slipstream.datastream.connectors.sinks import CollectSink
from slipstream.datastream.job_spec import JobSpec, RuntimeExecutionMode, RuntimeOptions
from slipstream.datastream.transformations import MapTransformation, SinkTransformation, SourceTransformation
from slipstream.runtime import entry


def test_a_spec_keeps_the_settings_of_when_it_was_taken() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(3)
    env.configure(batch_size=7).enable_checkpointing(500)
    env.get_config().set_global_job_parameters({"k": "v"})
    env.from_collection([1, 2]).map(lambda x: x).print()
    spec = env._take_job("frozen")
    env.set_parallelism(1).configure(batch_size=9).enable_checkpointing(900)
    env.get_config().set_global_job_parameters({"k": "changed"})
    env.runtime_options.progress_listeners.append(object())
    assert (spec.job_name, spec.parallelism, spec.runtime_options.batch_size) == ("frozen", 3, 7)
    assert spec.checkpoint_config.get_checkpoint_interval() == 500
    assert dict(spec.job_parameters) == {"k": "v"} and spec.runtime_options.progress_listeners == []
    assert [t.name for t in spec.transformations] == ["Collection Source", "Map", "Sink: Print to Std. Out"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.parallelism = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.job_parameters["k"] = "x"  # type: ignore[index]


class Doubled(MapFunction):
    def open(self, runtime_context: Any) -> None:
        self.factor = int(runtime_context.get_job_parameter("factor", "0"))

    def map(self, value: int) -> int:
        return value * self.factor


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_the_runtime_runs_a_hand_built_spec_without_any_environment(parallelism: int) -> None:
    sink = CollectSink()
    numbers = SourceTransformation(id=1, name="numbers", source=CollectionSource(list(range(50))))
    doubled = MapTransformation(id=2, name="doubled", inputs=[numbers], function=Doubled())
    collect = SinkTransformation(id=3, name="collect", inputs=[doubled], sink=sink, parallelism=1)
    spec = JobSpec(job_name="by hand", transformations=(numbers, doubled, collect), parallelism=parallelism,
                   runtime_mode=RuntimeExecutionMode.BATCH, job_parameters={"factor": "2"},
                   runtime_options=RuntimeOptions(scheduler_seed=parallelism, batch_size=4, show_progress=False))
    result = entry.execute(spec)
    assert sorted(sink.buffer) == [2 * x for x in range(50)]
    assert result.job_name == "by hand" and result.get_accumulator_result("doubled")["records_in"] == 50
    assert f"[1] numbers -> doubled{' -> collect' if parallelism == 1 else ''}  (parallelism {parallelism})" \
        in entry.explain(spec)


def test_changing_the_environment_while_its_job_runs_changes_nothing_of_the_job() -> None:
    gate = threading.Event()
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(batch_size=1, show_progress=False)

    def held(value: int) -> int:
        gate.wait(10)
        return value

    env.from_collection(list(range(20))).map(held).name("held").add_sink(lambda value: None)
    client = env.execute_async("running")
    env.set_parallelism(4).configure(batch_size=100).disable_operator_chaining()
    gate.set()
    metrics = client.get_job_execution_result().result().get_all_accumulator_results()
    assert metrics["held"]["records_in"] == 20
    assert client._driver.graph.vertices[1].parallelism == 2 and len(client._driver.graph.vertices) == 2

"""Memory budgets in bytes with Flink's names: keyed state past its share of the task heap fails the
job naming the operator and the budget (before the OS would kill it), a replay cache past its share
of managed memory spills and gives the same output, channels get their share of network memory,
and usage is reported per operator."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_channel_memory_budget import countdown, countdown_oracle, run_watching

from slipstream.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from slipstream.datastream.configuration import Configuration
from slipstream.datastream.state import ListStateDescriptor
from slipstream.errors import InvalidProgramError, MemoryBudgetError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import iteration_kmeans as kmeans  # noqa: E402

PAYLOAD = 1_000


class Accumulate(KeyedProcessFunction):
    """Keeps every record of its key with a payload of PAYLOAD bytes; emits the key's count."""

    def open(self, runtime_context: Any) -> None:
        self.kept = runtime_context.get_list_state(ListStateDescriptor("kept"))

    def process_element(self, value: int, ctx: Any) -> Any:
        self.kept.add(str(value).ljust(PAYLOAD, "x"))
        yield value % 10, len(self.kept.get())


def accumulating_job(n: int, parallelism: int, seed: int = 0, **memory: Any) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, backlog_sorting=False, **memory)
    out: list = []
    env.from_collection(list(range(n))).key_by(lambda x: x % 10).process(Accumulate()).name("Accumulate") \
        .add_sink(out.append)
    env.out = out  # type: ignore[attr-defined]
    return env


@pytest.mark.one_process("the budget is one task manager's task heap; each worker process has its own")
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_keyed_state_past_its_task_heap_budget_fails_naming_the_operator_and_the_budget(parallelism):
    env = accumulating_job(20_000, parallelism, task_heap_memory="2 mb")
    with pytest.raises(MemoryBudgetError) as caught:
        env.execute("over the heap budget")
    message = str(caught.value)
    share = (2 << 20) // parallelism
    assert "operator 'Accumulate'" in message and "taskmanager.memory.task.heap.size" in message
    assert f"budget of {share:,} bytes" in message and "keyed state" in message


@pytest.mark.parametrize("parallelism,seed", [(1, 0), (2, 1), (4, 2)])
def test_keyed_state_within_its_budget_runs_and_reports_its_usage(parallelism, seed):
    env = accumulating_job(2_000, parallelism, seed, task_heap_memory="64 mb")
    result = env.execute("within the heap budget")
    expected = Counter()
    counts: Counter = Counter()
    for value in range(2_000):
        counts[value % 10] += 1
        expected[(value % 10, counts[value % 10])] += 1
    assert Counter(env.out) == expected  # type: ignore[attr-defined]
    used = result.get_accumulator_result("Accumulate")["memory_bytes.task_heap"]
    kept = 2_000 * PAYLOAD
    assert kept * 0.5 < used < kept * 2  # over the subtasks


def test_progress_reports_each_operators_memory_against_the_budgets():
    from test_progress_listener import Recorder
    listener = Recorder()
    env = accumulating_job(2_000, 2, task_heap_memory="64 mb")
    env.configure(show_progress=False, progress_interval=0.01)
    env.add_progress_listener(listener)
    env.execute("reported")
    final = listener.events[-1][1]
    memory = {op.name: op.memory_bytes for op in final.progress.operators}
    assert 0.5 * 2_000 * PAYLOAD < memory["Accumulate"] < 2 * 2_000 * PAYLOAD
    assert all(not used for name, used in memory.items() if name != "Accumulate")


def test_no_out_of_memory_kill_under_an_address_space_limit(tmp_path):
    """With the process limited to what it has plus 600 MB of address space, a job that would keep
    2 GB of state fails with the budget's error, not with the OS's (or Python's) out of memory."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_memory_budgets import accumulating_job
        from slipstream.errors import MemoryBudgetError
        size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (600 << 20), size + (600 << 20)))
        env = accumulating_job(2_000_000, 2, task_heap_memory="200 mb")
        try:
            env.execute("two gigabytes of state")
        except MemoryBudgetError as error:
            print("budget:", error)
            sys.exit(3)
    """))
    result = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 3, result.stdout + result.stderr[-3000:]
    assert "budget: operator 'Accumulate'" in result.stdout and "taskmanager.memory.task.heap.size" in result.stdout


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_replay_cache_past_its_managed_memory_spills_and_gives_the_same_output(parallelism):
    blocks, initial = kmeans.make_data(20_000, 10, 5, block=500)
    expected = kmeans.kmeans_numpy(np.concatenate(blocks), initial, 6)
    results = {}
    for managed in (None, "256 kb"):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        if managed is not None:
            env.configure(managed_memory=managed)
        out: list = []
        kmeans.build_kmeans(env, blocks, initial, 6).add_sink(out.append)
        metrics = env.execute("kmeans").get_all_accumulator_results()
        assert np.allclose(out[0], expected)
        results[managed] = {name: values for name, values in metrics.items() if "spilled_bytes" in values}
    assert all(not values["spilled_bytes"] for values in results[None].values())
    (head,) = [values for values in results["256 kb"].values() if values["spilled_bytes"]]
    consumers = parallelism + 1  # a replay cache per data head subtask, and the centroids' held feedback
    assert head["memory_bytes.managed"] <= (256 << 10) // consumers


def test_flink_memory_keys_configure_the_budgets_and_bad_sizes_name_the_key():
    env = StreamExecutionEnvironment.get_execution_environment()
    configuration = Configuration()
    configuration.set_string("taskmanager.memory.managed.size", "64 mb")
    configuration.set_string("taskmanager.memory.task.heap.size", "1g")
    configuration.set_string("taskmanager.memory.network.max", "1048576")
    env.configure(configuration)
    options = env.runtime_options
    assert (options.managed_memory, options.task_heap_memory, options.network_memory) == (64 << 20, 1 << 30, 1 << 20)
    bad = Configuration()
    bad.set_string("taskmanager.memory.managed.size", "lots")
    with pytest.raises(InvalidProgramError, match=r"taskmanager\.memory\.managed\.size.*'lots'"):
        env.configure(bad)
    with pytest.raises(InvalidProgramError, match=r"network_memory .*at least 1 byte"):
        env.configure(network_memory=0)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_feedback_channels_share_the_network_memory_and_spill_past_it(parallelism):
    starts = [(i, 2) for i in range(6)]
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(network_memory="16 kb", batch_size=64)
    got: list = []
    env.from_collection(starts).iterate(countdown).add_sink(got.append)
    feedback = run_watching(env)
    assert feedback and all(channel.memory_budget_bytes == (16 << 10) // len(feedback) for channel in feedback)
    assert sum(channel.spilled_bytes for channel in feedback) > 0
    assert Counter(got) == countdown_oracle(starts)


@pytest.mark.parametrize("kind", ["reduce", "tumbling window"])
@pytest.mark.parametrize("parallelism,seed", [(1, 0), (2, 1), (4, 2)])
def test_a_sort_buffer_past_its_managed_memory_spills_and_gives_the_same_output(kind, parallelism, seed):
    sys.path.insert(0, str(REPO / "tests" / "end_to_end"))
    from test_backlog_by_key import KINDS, Stamped, on_time_history, oracle, source

    events = on_time_history(400, seed=seed)
    spilled = {}
    for managed in (None, "8 kb"):
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
        env.configure(scheduler_seed=seed, batch_size=7, backlog_sorting="always")
        if managed is not None:
            env.configure(managed_memory=managed)
        out: list = []
        KINDS[kind](source(env, events, 0)).name("the operator").process(Stamped()).add_sink(out.append)
        metrics = env.execute().get_accumulator_result("the operator")
        assert metrics["backlog_records"] == len(events)  # it did sort
        assert Counter(map(repr, out)) == oracle(kind, events)
        spilled[managed] = metrics["spilled_bytes"]
    assert spilled[None] == 0 and spilled["8 kb"] > 0

"""State TTL in a running job: a keyed process function's TTL state expires by the job's
processing-time clock (a manual clock, moved by the records themselves so each access happens
at a known time), at every parallelism and scheduler seed, and after a failure and a restore at
another parallelism (the TTL timestamps are in the checkpoint); the oracle is plain Python."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from test_kill_recovery import committed_output

from slipstream.datastream import (
    KeyedProcessFunction,
    ListStateDescriptor,
    RestartStrategies,
    StateTtlConfig,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.iterator import CollectionSource
from slipstream.datastream.formats.base import Encoder
from slipstream.errors import UserFunctionError
from slipstream.datastream.time import Time
from slipstream.testing import ManualClock

TTL = 100
CLOCK = ManualClock()
RECORDS = [(f"k{i % 7}", i * 13 % 500) for i in range(200)]
"""``(key, processing time of the access)``; times go back and forth across keys, forward per key
only where the oracle needs it (sorted per key below)."""


def per_key_in_time_order() -> list[tuple[str, int]]:
    by_key: dict[str, list[int]] = {}
    for key, now in RECORDS:
        by_key.setdefault(key, []).append(now)
    return [(key, now) for key, times in by_key.items() for now in sorted(times)]


class CountSinceExpiry(KeyedProcessFunction):
    """Per record: how many records of its key came within TTL of the previous one (a value
    state with TTL), and the times of those still alive (a list state with TTL). Subtasks get
    copies of the function, so the job's clock is reached as a module global."""

    def open(self, runtime_context) -> None:  # noqa: ANN001
        # no full-snapshot cleanup: its time would be the clock another subtask set last
        ttl = StateTtlConfig.new_builder(Time.milliseconds(TTL)).build()
        count, times = ValueStateDescriptor("count"), ListStateDescriptor("times")
        count.enable_time_to_live(ttl)
        times.enable_time_to_live(ttl)
        self.count = runtime_context.get_state(count)
        self.times = runtime_context.get_list_state(times)

    def process_element(self, value, ctx):  # noqa: ANN001, ANN201
        key, now = value
        CLOCK.set(now)  # this task's access happens at the record's time
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        alive = list(self.times.get())
        self.times.add(now)
        yield key, now, count, alive


def oracle() -> list[tuple]:
    last_write: dict[str, int] = {}
    count: dict[str, int] = {}
    times: dict[str, list[int]] = {}
    out = []
    for key, now in per_key_in_time_order():
        if key in last_write and last_write[key] + TTL <= now:
            count[key] = 0
        count[key] = count.get(key, 0) + 1
        last_write[key] = now
        alive = [t for t in times.get(key, []) if t + TTL > now]
        times[key] = alive + [now]
        out.append((key, now, count[key], alive))
    return out


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("seed", [0, 7])
def test_ttl_state_expires_by_processing_time_in_a_job(parallelism: int, seed: int) -> None:
    CLOCK.set(0)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(clock=CLOCK, scheduler_seed=seed, batch_size=4)
    stream = env.from_collection(per_key_in_time_order()).key_by(lambda record: record[0]) \
        .process(CountSinceExpiry())
    result = sorted(stream.execute_and_collect())
    assert result == sorted(oracle())


class FailOnceAfterCheckpoints:
    """Raises once, at the ``after``-th record, if a checkpoint is complete by then (else later)."""

    def __init__(self, directory: str, after: int) -> None:
        self.directory, self.after, self.seen = directory, after, 0

    def __call__(self, value: tuple) -> tuple:
        self.seen += 1
        if self.seen >= self.after and any(
                os.path.exists(os.path.join(self.directory, name, "_manifest.json"))
                for name in os.listdir(self.directory)):
            raise RuntimeError(f"injected failure at {value}")
        return value


def restorable_job(root: str, parallelism: int, fail: FailOnceAfterCheckpoints | None = None
                   ) -> StreamExecutionEnvironment:
    """Records in per-key time order from one source subtask, so each key's accesses keep their
    order whatever the keyed operator's parallelism."""
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism).configure(clock=CLOCK, batch_size=4, backlog_sorting=False)
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval_records(40)
    config.set_checkpoint_storage_dir(os.path.join(root, "chk"))
    env.set_restart_strategy(RestartStrategies.no_restart())
    sink = FileSink.for_row_format(os.path.join(root, "out"), Encoder.simple_string_encoder()).build()
    (env.from_source(CollectionSource(per_key_in_time_order()), None, "records").uid("records").set_parallelism(1)
     .map(fail or (lambda record: record)).uid("hook").set_parallelism(1)
     .key_by(lambda record: record[0]).process(CountSinceExpiry()).uid("ttl")
     .map(str).uid("format").sink_to(sink).uid("sink"))
    return env


@pytest.mark.parametrize("old,new", [(1, 3), (3, 1), (2, 4)])
def test_ttl_timestamps_survive_a_restore_at_another_parallelism(tmp_path, old: int, new: int) -> None:
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "chk"))
    CLOCK.set(0)
    with pytest.raises(UserFunctionError, match="injected failure"):
        restorable_job(root, old, FailOnceAfterCheckpoints(os.path.join(root, "chk"), len(RECORDS) // 2)) \
            .execute("before")
    result = restorable_job(root, new).execute("restored", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None
    assert committed_output(os.path.join(root, "out")) == Counter(str(line) for line in oracle())

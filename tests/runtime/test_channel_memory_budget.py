"""BLOCKING and FEEDBACK channels honour their memory budget, in records and in bytes, even when
one batch holds far more than the budget (a multiplying ``flat_map``): what does not fit is
split and spilled, and every record still arrives exactly once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.runtime.channels import SpillingChannel
from slipstream.runtime.executor import JobRun
from slipstream.runtime.planner import plan_job

FAN_OUT = 100
BUDGET = 20


pytestmark = pytest.mark.configure(batch_size=8, channel_capacity=2, channel_memory_budget=BUDGET)


def run_watching(env: StreamExecutionEnvironment) -> list[SpillingChannel]:
    """Run the job to its end; its spilling channels (FEEDBACK edges in a loop, BLOCKING edges in
    BATCH mode), with what they held."""
    run = JobRun(spec := env._take_job("budget"), plan_job(spec))
    run.open()
    try:
        run.scheduler.run()
    finally:
        run.close()
    return [channel for channel in run.channels if isinstance(channel, SpillingChannel)]


def countdown(numbers: Any) -> tuple[Any, Any]:
    """Each (id, rounds) record becomes FAN_OUT records with one round less, until none is left."""
    children = numbers.flat_map(lambda r: [(r[0] * FAN_OUT + i, r[1] - 1) for i in range(FAN_OUT)]
                                if r[1] > 0 else [r])
    return children.filter(lambda r: r[1] > 0), children.filter(lambda r: r[1] <= 0)


def countdown_oracle(starts: list[tuple[int, int]]) -> Counter:
    out: Counter = Counter()
    for ident, rounds in starts:
        ids = [ident]
        for _ in range(rounds):
            ids = [i * FAN_OUT + child for i in ids for child in range(FAN_OUT)]
        out.update((i, 0) for i in ids)
    return out


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(0, 3)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_a_multiplying_flat_map_into_a_feedback_edge_keeps_the_budget(env: StreamExecutionEnvironment) -> None:
    starts = [(i, 2) for i in range(6)]
    got: list = []
    env.from_collection(starts).iterate(countdown).add_sink(got.append)
    feedback = run_watching(env)
    assert feedback and max(channel.peak_in_memory_records for channel in feedback) <= BUDGET
    assert sum(channel.spilled_bytes for channel in feedback) > 0  # one input batch made ~FAN_OUT batches' worth
    assert Counter(got) == countdown_oracle(starts)


@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(0, 3)
@pytest.mark.modes(RuntimeExecutionMode.BATCH)
def test_a_multiplying_flat_map_into_a_blocking_edge_keeps_the_budget(env: StreamExecutionEnvironment) -> None:
    """A keyed map reads behind a blocking edge in BATCH mode (an operator that sorts its input would
    take it as it comes, its sort buffer keeping the budget)."""
    numbers = list(range(40))
    got: list = []
    (env.from_collection(numbers)
     .flat_map(lambda x: [(x % 5, x * FAN_OUT + i) for i in range(FAN_OUT)])
     .key_by(lambda r: r[0]).map(lambda r: (r[0], r[1] + 1))
     .add_sink(got.append))
    blocking = run_watching(env)
    assert blocking and max(channel.peak_in_memory_records for channel in blocking) <= BUDGET
    assert Counter(got) == Counter((x % 5, x * FAN_OUT + i + 1) for x in numbers for i in range(FAN_OUT))


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_large_records_are_bounded_by_the_byte_budget(env: StreamExecutionEnvironment) -> None:
    record_bytes = 10_000
    env.configure(channel_memory_budget=100_000, channel_memory_budget_bytes=20 * record_bytes)
    got: list = []

    def grow(numbers: Any) -> tuple[Any, Any]:
        children = numbers.flat_map(lambda r: [(r[0] * 100 + i, r[1] - 1, "x" * record_bytes) for i in range(100)]
                                    if r[1] > 0 else [r])
        return children.filter(lambda r: r[1] > 0), children.filter(lambda r: r[1] <= 0)

    env.from_collection([(i, 2, "") for i in range(4)]).iterate(grow).add_sink(got.append)
    feedback = run_watching(env)
    assert 0 < max(channel.peak_in_memory_records for channel in feedback) <= 20
    assert sorted(r[0] for r in got) == sorted(i * 10_000 + j * 100 + k for i in range(4)
                                                for j in range(100) for k in range(100))


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_spilling_channels_spill_under_the_configured_spill_dir(
        env: StreamExecutionEnvironment, tmp_path: Any) -> None:
    env.configure(spill_dir=str(tmp_path))
    env.from_collection([(i, 2) for i in range(3)]).iterate(countdown).add_sink(lambda record: None)
    run = JobRun(spec := env._take_job("spill dir"), plan_job(spec))
    run.open()
    try:
        run.scheduler.run()
        spilled = [channel._file.path for channel in run.channels
                   if isinstance(channel, SpillingChannel) and channel.spilled_bytes]
        assert spilled and all(path.startswith(str(tmp_path)) for path in spilled)
    finally:
        run.close()
    assert not any(tmp_path.iterdir())  # closing the run deleted them


def test_records_held_as_arrow_count_as_the_python_rows_their_bytes_would_make(tmp_path: Any) -> None:
    """A record budget is the same memory whatever form the records take: 10,000 rows of three int64
    columns (240 KB) are the memory of about 940 Python rows (256 bytes each), so a budget of 1,000
    records keeps them in memory, and the same records as Python rows spill past the first 1,000."""
    import pyarrow as pa

    from slipstream.operators.elements import RecordBatch

    table = pa.table({name: list(range(10_000)) for name in ("a", "b", "c")})
    columnar, rows = (SpillingChannel(1_000, name, str(tmp_path)) for name in ("columnar", "rows"))
    for batch in table.to_batches(max_chunksize=1_000):
        columnar.push(RecordBatch(arrow=batch))
        rows.push(RecordBatch(RecordBatch(arrow=batch).values))
    assert columnar.spilled_bytes == 0 and 900 <= columnar.peak_in_memory_records <= 1_000
    assert rows.spilled_bytes > 0 and rows.peak_in_memory_records == 1_000
    for channel in (columnar, rows):
        taken = []
        while channel.queue:
            taken.extend(tuple(row) for row in channel.pop().values)
        assert taken == list(zip(*(table.column(name).to_pylist() for name in ("a", "b", "c"))))
        channel.close()

"""FLIP-176 iterations under checkpoints, failures and restarts, against plain-Python/numpy oracles.

Every job writes through a two-phase-commit ``FileSink``, so what a reader sees (the
committed part files) is what counts: a listener call repeated or lost across a restore
shows as a duplicated or missing line. Failures are injected in-process by a plain map
inside the iteration body that raises once at a value only reached after some epochs;
its failure count lives in a class attribute, since user functions are deep-copied per
subtask and their attributes are what a restore puts back.

Processing time is a ``ManualClock(tick_ms=1)`` that moves one millisecond each time it is read,
so a "short interval" checkpoint is taken every few dozen scheduler turns — while the
epochs run, after the sources ended — and a run is repeatable for a scheduler seed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slipstream.datastream import (
    CoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    OutputTag,
    ProcessFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
)
from slipstream.datastream.checkpoint_config import ExternalizedCheckpointCleanup
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.formats.base import Encoder
from slipstream.datastream.iteration import (
    DataStreamList,
    IterationBodyResult,
    IterationConfig,
    IterationListener,
    Iterations,
    OperatorLifeCycle,
    ReplayableDataStreamList,
    iterate_and_replay_bounded_streams_until_termination,
    iterate_bounded_streams_until_termination,
)
from slipstream.errors import CheckpointError, UserFunctionError
from slipstream.operators.spill_file import SpillFile
from slipstream.runtime.channels import SpillingChannel
from slipstream.runtime.checkpoint.iteration_region import REGION_KIND, IterationRegion
from slipstream.runtime.checkpoint.snapshot import loads_checkpointed
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.testing import ManualClock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))

import iteration_kmeans as kmeans
from crash_job import DONE, PARTIALS, EpochLines, EpochStep, iteration_lines

KEYS = 7
CRITERIA = OutputTag("criteria")
LINES = OutputTag("lines")


# -- the runtime around the jobs ----------------------------------------------------------------------------
class FailOnce(MapFunction):
    """An identity map that raises the first time it sees a value ``matches`` accepts — once per test:
    the counts are on the class, as the function's own attributes are deep-copied per subtask."""

    failures = 0
    seen = 0

    def __init__(self, matches: Callable[[Any], bool]) -> None:
        self.matches = matches

    def map(self, value: Any) -> Any:
        if self.matches(value):
            FailOnce.seen += 1
            if not FailOnce.failures:
                FailOnce.failures += 1
                raise RuntimeError(f"injected failure at {value!r}")
        return value


@pytest.fixture(autouse=True)
def _reset_failures() -> None:
    FailOnce.failures = FailOnce.seen = 0


def make_env(tmp_path: Path, parallelism: int, seed: int = 0, *, interval: int | None = 25,
             records: int | None = 300, restarts: int = 1, retained: int = 1000) -> StreamExecutionEnvironment:
    """An environment checkpointing every ``interval`` ticks and every ``records`` source records into
    ``tmp_path/chk``, keeping every checkpoint (so the one a restart restored from can be read)."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    env.configure(scheduler_seed=seed, batch_size=16, channel_capacity=2, quantum=2, clock=ManualClock(tick_ms=1))
    config = env.get_checkpoint_config()
    if interval is not None:
        config.set_checkpoint_interval(interval)
    if records is not None:
        config.set_checkpoint_interval_records(records)
    config.set_checkpoint_storage_dir(str(tmp_path / "chk")).set_num_retained_checkpoints(retained)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0) if restarts
                             else RestartStrategies.no_restart())
    return env


def sink(stream: Any, tmp_path: Path) -> None:
    stream.map(str).sink_to(FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build())


def committed(tmp_path: Path) -> Counter:
    """The lines of the visible (committed) part files."""
    out, lines = tmp_path / "out", Counter()
    if out.is_dir():
        for f in out.iterdir():
            if not f.name.startswith((".", "_")):
                lines.update(f.read_text().splitlines())
    return lines


def assert_same(got: Counter, expected: Counter) -> None:
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (f"{sum(missing.values())} line(s) lost (e.g. {sorted(missing)[:4]}), "
                                       f"{sum(extra.values())} duplicated or unexpected (e.g. {sorted(extra)[:4]})")


def region_state(path: str) -> dict:
    """The iteration's state in the checkpoint at ``path`` (its one IterationRegion entry)."""
    checkpoint = CheckpointStorage(os.path.dirname(path)).read_verified(path, None)
    (entry,) = [e for e in checkpoint.manifest.operators.values() if e.kind == REGION_KIND]
    return loads_checkpointed(checkpoint.files[entry.subtasks[0].operator], checkpoint.files, path)


def assert_restarted_from_mid_iteration(stats: dict) -> dict:
    """One restart, restored from a checkpoint taken while the epochs ran (not before, not after)."""
    assert FailOnce.failures == 1 and FailOnce.seen >= 2, "the failure happened, and its record came again"
    assert stats["restarts"] == 1 and stats["restored_from"] is not None, stats
    state = region_state(stats["restored_from"])
    progress = state["coordinator"][0]["progress"]
    assert progress["epoch_watermark"] >= 1 and not progress["terminated"], progress
    return state


# -- 1, 2: a sync bounded iteration whose listeners write one line per epoch ----------------------------------
def rounds(x: int) -> int:
    """How many epochs number ``x`` goes round."""
    return x % 8 + 1


def epoch_lines(n: int) -> Counter:
    """The oracle of :func:`epochs_job`."""
    return iteration_lines(n, rounds)


class ClosureEpochs(EpochLines):
    """EpochLines, plus a closure in an attribute: ``pair,e,total(e) + total(e - 1)`` per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.plus_previous = lambda total: total

    def write(self, epoch: int, due: list[tuple[int, int, int]], collector: Any) -> None:
        total = sum(p[2] for p in due)
        collector.collect(f"pair,{epoch},{self.plus_previous(total)}")
        self.plus_previous = lambda t, previous=total: t + previous
        super().write(epoch, due, collector)


def pair_lines(n: int) -> Counter:
    """The oracle of ClosureEpochs' extra lines."""
    numbers = range(1, n + 1)
    totals = [0] + [sum(x for x in numbers if rounds(x) >= e) for e in range(1, max(map(rounds, numbers)) + 1)]
    return Counter(f"pair,{e},{totals[e] + totals[e - 1]}" for e in range(1, len(totals)))


def epochs_job(env: StreamExecutionEnvironment, n: int, fail_at: Any, tmp_path: Path,
               listener: type[EpochLines] = EpochLines) -> None:
    """Numbers 1..n go round ``rounds(x)`` epochs; a FailOnce map sits in the body before the listeners,
    failing at the record ``fail_at`` (or at the first one, when ``fail_at`` is a predicate)."""
    matches = fail_at if callable(fail_at) else lambda r: r == fail_at

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        stepped = variables.get(0).map(FailOnce(matches)).key_by(lambda r: r[0] % KEYS).process(EpochStep())
        epochs = stepped.get_side_output(PARTIALS).global_().process(listener()).set_parallelism(1)
        feedback = stepped.rebalance().map(lambda r: r)  # the listener's one big batch, rebatched
        return IterationBodyResult([feedback], [stepped.get_side_output(DONE), epochs])

    numbers = env.from_collection([(x, rounds(x)) for x in range(1, n + 1)]).set_parallelism(env.get_parallelism())
    outputs = iterate_bounded_streams_until_termination(DataStreamList.of(numbers), DataStreamList.of(), body)
    sink(outputs.get(0).union(outputs.get(1)), tmp_path)


N_EPOCHS_JOB = 2400
FAIL_IN_EPOCH_6 = (1799, rounds(1799) - 5)  # 1799 goes round 8 epochs: (1799, 3) is its 6th


@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 7])
def test_sync_iteration_restarts_mid_iteration_and_writes_each_epoch_line_once(tmp_path: Path, parallelism: int,
                                                                               seed: int) -> None:
    """A failure in epoch 6 restarts the job from a checkpoint taken while the epochs ran; the
    committed output equals the oracle: each epoch's listener line exactly once."""
    env = make_env(tmp_path, parallelism, seed)
    epochs_job(env, N_EPOCHS_JOB, FAIL_IN_EPOCH_6, tmp_path)
    stats = env.execute("epochs").get_accumulator_result("checkpoints")
    assert_restarted_from_mid_iteration(stats)
    assert_same(committed(tmp_path), epoch_lines(N_EPOCHS_JOB))


def test_feedback_spilled_to_disk_is_checkpointed_and_restored_without_loss(tmp_path: Path, monkeypatch) -> None:
    """With a feedback memory budget of 4 records, feedback spills to disk. The job fails as soon as a
    checkpoint taken after the first epoch and holding feedback that was on disk completed, so it
    restores from that one; nothing is lost, and no spill file is left behind."""
    spills: list[int] = []
    with_spilled_feedback: set[int] = set()  # checkpoints that read feedback from a spill file
    completed: list[int] = []
    snapshotting: list[int] = []
    completed_at_failure: list[int] = []

    def snapshot(region: Any, checkpoint_id: int, original: Any = IterationRegion._snapshot) -> None:
        snapshotting.append(checkpoint_id)
        original(region, checkpoint_id)

    def snapshot_elements(channel: SpillingChannel, original: Any = SpillingChannel.snapshot_elements) -> list:
        if len(channel) > len(channel.queue):  # some of it is in the spill file
            with_spilled_feedback.add(snapshotting[-1])
        return original(channel)

    def spill(file: SpillFile, element: Any, original: Any = SpillFile.append) -> None:
        spills.append(1)
        original(file, element)

    def write(storage: CheckpointStorage, manifest: Any, files: dict, shared: dict | None = None,
              original: Any = CheckpointStorage.write) -> str:
        path = original(storage, manifest, files, shared)
        if region_state(path)["coordinator"][0]["progress"]["epoch_watermark"] >= 1:
            completed.append(manifest.checkpoint_id)  # mid-iteration: an epoch was decided
        return path

    monkeypatch.setattr(IterationRegion, "_snapshot", snapshot)
    monkeypatch.setattr(SpillingChannel, "snapshot_elements", snapshot_elements)
    monkeypatch.setattr(SpillFile, "append", spill)
    monkeypatch.setattr(CheckpointStorage, "write", write)
    env = make_env(tmp_path, 3, 3).configure(spill_dir=str(tmp_path / "spill"))
    env.runtime_options.channel_memory_budget = 4
    (tmp_path / "spill").mkdir()

    def spilled_checkpoint_completed(record: Any) -> bool:
        if completed and completed[-1] in with_spilled_feedback and not completed_at_failure:
            completed_at_failure.append(completed[-1])
        return bool(completed_at_failure)

    epochs_job(env, N_EPOCHS_JOB, spilled_checkpoint_completed, tmp_path)
    stats = env.execute("spilling").get_accumulator_result("checkpoints")
    assert spills and FailOnce.failures == 1
    assert not list((tmp_path / "spill").iterdir()), "spill files of the failed attempt and of the run removed"
    assert stats["restarts"] == 1 and stats["restored_from"] is not None, stats
    assert stats["restored_from"] == CheckpointStorage(str(tmp_path / "chk")).path_of(completed_at_failure[0])
    assert completed_at_failure[0] in with_spilled_feedback, (completed_at_failure, with_spilled_feedback)
    progress = region_state(stats["restored_from"])["coordinator"][0]["progress"]
    assert progress["epoch_watermark"] >= 1 and not progress["terminated"], progress
    assert_same(committed(tmp_path), epoch_lines(N_EPOCHS_JOB))


# -- 3: replayed data, ALL_ROUND and PER_ROUND ---------------------------------------------------------------
DATA = list(range(1, 401))
ROUNDS = 7
MODULUS = 1_000_003


def step_model(w: int, data: list[int]) -> int:
    """One round of the replay jobs: a new model from the old one and a pass over all the data."""
    return (w * 31 + sum((x * w + x) % 1009 for x in data)) % MODULUS


def replay_oracle(w0: int) -> tuple[Counter, list[int]]:
    """The lines ``round,e,w`` of rounds 1..ROUNDS and the model each round starts from."""
    models = [w0]
    for _ in range(ROUNDS):
        models.append(step_model(models[-1], DATA))
    return Counter(f"round,{e},{models[e]}" for e in range(1, ROUNDS + 1)), models


class RoundSum(CoProcessFunction, IterationListener):
    """The round's model (input 1, broadcast) and data (input 2, replayed): at the epoch watermark,
    this subtask's part of the round's sum. Starts afresh each round (itself, or as PER_ROUND)."""

    def __init__(self) -> None:
        self.model: tuple[int, int] | None = None
        self.data: list[int] = []

    def process_element1(self, value: tuple[int, int], ctx: Any) -> None:
        self.model = value

    def process_element2(self, value: int, ctx: Any) -> None:
        self.data.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if self.model is not None:
            epoch, w = self.model
            assert epoch == epoch_watermark, (self.model, epoch_watermark)
            collector.collect((epoch, w, sum((x * w + x) % 1009 for x in self.data), len(self.data)))
        self.model, self.data = None, []


class Merge(ProcessFunction, IterationListener):
    """At parallelism 1: the round's parts into the next model, written out and sent round while rounds remain."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, int, int, int]] = []

    def process_element(self, value: tuple[int, int, int, int], ctx: Any) -> None:
        self.parts.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if not self.parts:
            return
        (epoch, w), = {(p[0], p[1]) for p in self.parts}
        assert sum(p[3] for p in self.parts) == len(DATA), "each round sees all the replayed data once"
        new = (w * 31 + sum(p[2] for p in self.parts)) % MODULUS
        self.parts = []
        context.output(LINES, f"round,{epoch},{new}")
        if epoch < ROUNDS:
            collector.collect((epoch + 1, new))


def replay_body(fail_at: tuple[int, int]) -> Callable[[DataStreamList, DataStreamList], IterationBodyResult]:
    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        model = variables.get(0).map(FailOnce(lambda v: v == fail_at)).set_parallelism(1)
        parts = model.broadcast().connect(data.get(0)).process(RoundSum())
        merged = parts.global_().process(Merge()).set_parallelism(1)
        return IterationBodyResult([merged], [merged.get_side_output(LINES)])
    return body


@pytest.mark.parametrize("style", ["replay", "replay_from_disk", "per_round"])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_replayed_data_and_per_round_bodies_restart_to_the_oracle(tmp_path: Path, style: str,
                                                                  parallelism: int) -> None:
    """Data replayed every round (``iterate_and_replay_bounded_streams_until_termination``, ALL_ROUND,
    its cache in memory or mostly spilled to disk; and Flink ML's ``Iterations`` with
    ``OperatorLifeCycle.PER_ROUND``): a failure in round 4 and a restart from a mid-iteration
    checkpoint give every round's model exactly once, as the oracle."""
    w0 = 12_345
    expected, models = replay_oracle(w0)
    env = make_env(tmp_path, parallelism, parallelism, records=100)
    if style == "replay_from_disk":
        env.configure(sort_memory_budget=20, spill_dir=str(tmp_path / "spill"))
    initial = env.from_collection([(1, w0)]).set_parallelism(1)
    data = env.from_collection(DATA)
    body = replay_body((4, models[3]))
    if style != "per_round":
        outputs = iterate_and_replay_bounded_streams_until_termination(DataStreamList.of(initial),
                                                                       DataStreamList.of(data), body)
    else:
        config = IterationConfig.new_builder().set_operator_life_cycle(OperatorLifeCycle.PER_ROUND).build()
        outputs = Iterations.iterate_bounded_streams_until_termination(
            DataStreamList.of(initial), ReplayableDataStreamList.replay(data), config, body)
    sink(outputs.get(0), tmp_path)
    result = env.execute(f"replay-{style}")
    assert_restarted_from_mid_iteration(result.get_accumulator_result("checkpoints"))
    assert_same(committed(tmp_path), expected)
    if style == "replay_from_disk":
        assert any(values.get("spilled_bytes") for values in result.get_all_accumulator_results().values())
        assert not list((tmp_path / "spill").iterdir())


# -- 4: termination criteria --------------------------------------------------------------------------------
THRESHOLD = 20_000


def criteria_oracle(n: int) -> tuple[Counter, int]:
    """Numbers 1..n halve every epoch and leave at 0 (``r,x,e``); the iteration goes on while the
    epoch's total is above THRESHOLD: it ends at the first epoch E whose total is not."""
    values, lines, epoch = {x: x for x in range(1, n + 1)}, [], 0
    while values:
        epoch += 1
        total = sum(values.values())
        lines.append(f"epoch,{epoch},{len(values)},{total}")
        lines += [f"r,{x},{epoch}" for x, v in values.items() if v // 2 == 0]
        values = {x: v // 2 for x, v in values.items() if v // 2}
        if total <= THRESHOLD:
            break
    return Counter(lines + [f"terminated,{epoch}"]), epoch


class Halve(KeyedProcessFunction, IterationListener):
    """Sync: at the epoch watermark, halves the epoch's ``(x, v)`` (out at 0) and reports count and total."""

    def __init__(self) -> None:
        self.waiting: list[tuple[int, int]] = []

    def process_element(self, value: tuple[int, int], ctx: Any) -> None:
        self.waiting.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        if not self.waiting:
            return
        for x, v in self.waiting:
            if v // 2:
                collector.collect((x, v // 2))
            else:
                context.output(DONE, f"r,{x},{epoch_watermark}")
        context.output(PARTIALS, (epoch_watermark, len(self.waiting), sum(v for _, v in self.waiting)))
        self.waiting = []


class Criteria(ProcessFunction, IterationListener):
    """At parallelism 1: a line per epoch, a criteria record while the total is above THRESHOLD, and
    the last epoch it saw when the iteration ends."""

    def __init__(self) -> None:
        self.parts: list[tuple[int, int, int]] = []
        self.last_epoch = 0

    def process_element(self, value: tuple[int, int, int], ctx: Any) -> None:
        self.parts.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark: int, context: Any, collector: Any) -> None:
        self.last_epoch = epoch_watermark
        count, total = sum(p[1] for p in self.parts), sum(p[2] for p in self.parts)
        self.parts = []
        collector.collect(f"epoch,{epoch_watermark},{count},{total}")
        if total > THRESHOLD:
            context.output(CRITERIA, epoch_watermark)

    def on_iteration_terminated(self, context: Any, collector: Any) -> None:
        collector.collect(f"terminated,{self.last_epoch}")


def criteria_run(tmp_path: Path, n: int, parallelism: int, fail_at: Any) -> tuple[dict, int]:
    """Runs the criteria job; returns the checkpoint stats and the rounds the runtime ran."""
    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        halved = (variables.get(0).map(FailOnce(lambda r: r == fail_at)).key_by(lambda r: r[0] % KEYS)
                  .process(Halve()))
        epochs = halved.get_side_output(PARTIALS).global_().process(Criteria()).set_parallelism(1)
        return IterationBodyResult([halved], [halved.get_side_output(DONE), epochs], epochs.get_side_output(CRITERIA))

    env = make_env(tmp_path, parallelism, 1)
    numbers = env.from_collection([(x, x) for x in range(1, n + 1)]).set_parallelism(env.get_parallelism())
    outputs = iterate_bounded_streams_until_termination(DataStreamList.of(numbers), DataStreamList.of(), body)
    sink(outputs.get(0).union(outputs.get(1)), tmp_path)
    stats = env.execute("criteria").get_accumulator_result("checkpoints")
    storage = CheckpointStorage(str(tmp_path / "chk"))
    progress = region_state(storage.path_of(storage.complete_ids()[-1]))["coordinator"][0]["progress"]
    assert progress["terminated"]
    return stats, len(progress["rounds"])


@pytest.mark.parametrize("parallelism", [1, 3])
def test_termination_criteria_end_the_iteration_at_the_same_epoch_after_a_restart(tmp_path: Path,
                                                                                  parallelism: int) -> None:
    """A criteria stream ends the iteration while records still go round; a failure in epoch 5 and a
    restart end it at the same epoch as a run without failure, and as the oracle says."""
    n = 2000
    expected, last_epoch = criteria_oracle(n)
    assert 5 < last_epoch < n.bit_length(), "the criteria, not the feedback, end the iteration"
    _, epochs_without_failure = criteria_run(tmp_path / "clean", n, parallelism, None)
    assert_same(committed(tmp_path / "clean"), expected)
    FailOnce.failures = FailOnce.seen = 0
    stats, epochs_with_failure = criteria_run(tmp_path / "failed", n, parallelism, (1537, 1537 >> 4))  # epoch 5
    assert_restarted_from_mid_iteration(stats)
    assert_same(committed(tmp_path / "failed"), expected)
    assert epochs_with_failure == epochs_without_failure == last_epoch


# -- 5: restoring at another parallelism ---------------------------------------------------------------------
@pytest.mark.parametrize("new_parallelism", [1, 3])
def test_an_iteration_restores_only_at_the_parallelism_it_was_checkpointed_at(tmp_path: Path,
                                                                              new_parallelism: int) -> None:
    """A run at parallelism 2 fails mid-iteration without restarting; restoring its latest checkpoint at
    another parallelism is a CheckpointError that says why, and at parallelism 2 gives the oracle."""
    env = make_env(tmp_path, 2, 0, restarts=0)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    epochs_job(env, N_EPOCHS_JOB, FAIL_IN_EPOCH_6, tmp_path)
    with pytest.raises(UserFunctionError, match="injected failure"):
        env.execute("first")
    storage = CheckpointStorage(str(tmp_path / "chk"))
    assert region_state(storage.path_of(storage.complete_ids()[-1]))["coordinator"][0]["progress"]["epoch_watermark"] >= 1
    env = make_env(tmp_path, new_parallelism, 0)
    epochs_job(env, N_EPOCHS_JOB, None, tmp_path)
    with pytest.raises(CheckpointError, match="restored only at the parallelism it was checkpointed at"):
        env.execute("rescaled", restore_from="latest")
    env = make_env(tmp_path, 2, 0)
    epochs_job(env, N_EPOCHS_JOB, None, tmp_path)
    stats = env.execute("same parallelism", restore_from="latest").get_accumulator_result("checkpoints")
    assert stats["restored_from"] is not None
    assert_same(committed(tmp_path), epoch_lines(N_EPOCHS_JOB))


# -- 6: a listener whose state cannot be written -------------------------------------------------------------
class Locked(ProcessFunction, IterationListener):
    """A listener holding a lock in an attribute, with no ``__getstate__`` to leave it out."""

    def open(self, runtime_context: Any) -> None:
        self.lock = threading.Lock()

    def process_element(self, value: Any, ctx: Any) -> Any:
        with self.lock:
            return [value]


def test_a_listener_with_an_unpicklable_attribute_fails_the_checkpoint_naming_operator_and_class(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The checkpoint of the iteration fails with a CheckpointError that names the operator and the
    listener's class (not restartable: a restart would fail the same way)."""
    env = make_env(tmp_path, 2, 0, restarts=2)
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(0)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        stepped = variables.get(0).process(Locked()).name("locked-step").uid("locked-step")
        return IterationBodyResult([stepped.filter(lambda r: r[1] > 1).map(lambda r: (r[0], r[1] - 1))],
                                   [stepped.filter(lambda r: r[1] == 1)])

    numbers = env.from_collection([(x, rounds(x)) for x in range(1, 1001)]).set_parallelism(env.get_parallelism())
    outputs = iterate_bounded_streams_until_termination(DataStreamList.of(numbers), DataStreamList.of(), body)
    sink(outputs.get(0), tmp_path)
    with pytest.raises(CheckpointError) as caught:
        env.execute("locked")
    message = str(caught.value)
    assert "operator 'locked-step'" in message and "function Locked" in message, message
    assert "restart" not in caplog.text, "a CheckpointError is not worth a restart"
    assert not committed(tmp_path)


def test_a_listener_holding_a_closure_is_checkpointed_and_restored(tmp_path: Path) -> None:
    """Lambdas and closures among a listener's attributes are fine (cloudpickle writes them): one that
    captured the previous epoch's total is restored with it, so each epoch's pair line is the oracle's."""
    env = make_env(tmp_path, 2, 1)
    epochs_job(env, N_EPOCHS_JOB, FAIL_IN_EPOCH_6, tmp_path, listener=ClosureEpochs)
    stats = env.execute("closures").get_accumulator_result("checkpoints")
    assert_restarted_from_mid_iteration(stats)
    assert_same(committed(tmp_path), epoch_lines(N_EPOCHS_JOB) + pair_lines(N_EPOCHS_JOB))


# -- 7: the KMeans example --------------------------------------------------------------------------------
def test_kmeans_example_with_checkpoints_equals_numpy(tmp_path: Path) -> None:
    """The example's builder, unchanged, with checkpointing on (a checkpoint every two blocks read
    and every few turns, some between rounds): the final centroids equal numpy's. The builder has no
    place for a failing map; the next test puts one in front of the example's body."""
    blocks, initial = kmeans.make_data(2000, 3, 4, seed=1, block=100)
    env = make_env(tmp_path, 3, 2, records=2)
    centroids = kmeans.build_kmeans(env, blocks, initial, 6)
    centroids.map(lambda c: json.dumps(c.tolist())).sink_to(
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build())
    env.execute("kmeans")
    storage = CheckpointStorage(str(tmp_path / "chk"))
    progress = [region_state(storage.path_of(i))["coordinator"][0]["progress"] for i in storage.complete_ids()]
    assert any(p["epoch_watermark"] >= 1 and not p["terminated"] for p in progress), "checkpoints between rounds"
    (line,) = committed(tmp_path)
    np.testing.assert_allclose(np.array(json.loads(line)), kmeans.kmeans_numpy(np.concatenate(blocks), initial, 6),
                               rtol=1e-9, atol=1e-9)


def test_kmeans_example_body_restarts_from_a_mid_iteration_checkpoint(tmp_path: Path) -> None:
    """The example's body (``kmeans_body``) behind a map that fails when round 3's centroids come round:
    after a restart from a mid-iteration checkpoint the final centroids equal numpy's."""
    blocks, initial = kmeans.make_data(2000, 3, 4, seed=2, block=100)
    points = np.concatenate(blocks)
    third = kmeans.kmeans_numpy(points, initial, 2)  # the centroids round 3 starts from
    env = make_env(tmp_path, 3, 5, records=2)

    def body(variables: DataStreamList, data: DataStreamList) -> IterationBodyResult:
        failing = variables.get(0).map(FailOnce(lambda c: np.allclose(c, third, rtol=1e-12))).set_parallelism(1)
        return kmeans.kmeans_body(6)(DataStreamList.of(failing), data)

    config = IterationConfig.new_builder().set_operator_life_cycle(OperatorLifeCycle.ALL_ROUND).build()
    outputs = Iterations.iterate_bounded_streams_until_termination(
        DataStreamList.of(env.from_collection([initial]).set_parallelism(1)),
        ReplayableDataStreamList.replay(env.from_collection(blocks)), config, body)
    outputs.get(0).map(lambda c: json.dumps(c.tolist())).sink_to(
        FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder()).build())
    stats = env.execute("kmeans-restart").get_accumulator_result("checkpoints")
    assert_restarted_from_mid_iteration(stats)
    (line,) = committed(tmp_path)
    np.testing.assert_allclose(np.array(json.loads(line)), kmeans.kmeans_numpy(points, initial, 6),
                               rtol=1e-9, atol=1e-9)


# -- property: any failure point, parallelism, seed and budget ---------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(n=st.integers(20, 400), parallelism=st.integers(1, 4), seed=st.integers(0, 10_000),
       fail_x=st.integers(1, 400), fail_epoch=st.integers(1, 8), budget=st.sampled_from([2, 50, 100_000]),
       interval=st.integers(5, 60))
def test_a_restart_at_any_point_gives_the_oracle(tmp_path_factory: pytest.TempPathFactory, n: int, parallelism: int,
                                                 seed: int, fail_x: int, fail_epoch: int, budget: int,
                                                 interval: int) -> None:
    """Whatever record fails (any number, any of its epochs — or none, when it never comes), at any
    parallelism, scheduler seed, checkpoint interval and feedback budget: the committed output is the
    oracle's, each epoch's line once."""
    FailOnce.failures = FailOnce.seen = 0
    tmp_path = tmp_path_factory.mktemp("restart")
    env = make_env(tmp_path, parallelism, seed, interval=interval, records=None)
    env.runtime_options.channel_memory_budget = budget
    epochs_job(env, n, (fail_x, rounds(fail_x) - fail_epoch + 1), tmp_path)
    stats = env.execute("any point").get_accumulator_result("checkpoints")
    assert stats["restarts"] == FailOnce.failures
    assert_same(committed(tmp_path), epoch_lines(n))


# -- an iteration that had ended restores at any parallelism --------------------------------------------------
class CountPerKey(KeyedProcessFunction):
    """Counts each key's numbers in keyed state: ``c,key,count``."""

    def open(self, runtime_context: Any) -> None:
        from slipstream.datastream import ValueStateDescriptor
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value: int, ctx: Any) -> Any:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        return [f"c,{ctx.get_current_key()},{count}"]


@pytest.mark.parametrize("new_parallelism", [1, 3])
def test_an_iteration_that_had_ended_restores_at_another_parallelism(tmp_path: Path, new_parallelism: int) -> None:
    """Training on the history (a bounded iteration) ends early; the streaming part of the job runs on.
    Restored at another parallelism from a checkpoint taken after the training ended, the iteration
    ends again at once (its lines were committed before), and the rest restores rescaled."""
    n, numbers = 600, 6000
    env = make_env(tmp_path, 2, 0, interval=None, records=500, restarts=0)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)

    def job(env: StreamExecutionEnvironment) -> None:
        env.configure(backlog_sorting=False)  # the numbers stream record by record: checkpoints go on meanwhile
        epochs_job(env, n, None, tmp_path)
        counts = (env.from_collection(list(range(numbers))).map(FailOnce(lambda x: x == numbers - 100))
                  .key_by(lambda x: x % KEYS).process(CountPerKey()))
        sink(counts, tmp_path / "counts")

    job(env)
    with pytest.raises(UserFunctionError, match="injected failure"):
        env.execute("first")
    storage = CheckpointStorage(str(tmp_path / "chk"))
    latest = region_state(storage.path_of(storage.complete_ids()[-1]))
    assert all(task["finished"] for task in latest["tasks"]), "the training had ended at the latest checkpoint"
    env = make_env(tmp_path, new_parallelism, 0, interval=None, records=500)
    job(env)
    stats = env.execute("rescaled", restore_from="latest").get_accumulator_result("checkpoints")
    assert stats["restored_from"] is not None
    assert_same(committed(tmp_path), epoch_lines(n))
    per_key = Counter(x % KEYS for x in range(numbers))
    assert_same(committed(tmp_path / "counts"),
                Counter(f"c,{k},{i}" for k, count in per_key.items() for i in range(1, count + 1)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_checkpoint_right_after_restoring_an_ended_iteration_does_not_hold_its_sources_back(tmp_path: Path,
                                                                                             seed: int) -> None:
    """Restored with its training ended, the iteration's tasks never read again, while the sources
    feeding it run once more to send their end of input. A checkpoint triggered before a source's
    first turn put its barrier behind its start in a channel nobody empties: full, the source could
    never end and the job never finished (it hung, as the worker kill test did)."""
    n, numbers = 200, 3000

    def job(env: StreamExecutionEnvironment) -> None:
        env.configure(backlog_sorting=False)
        epochs_job(env, n, None, tmp_path)
        counts = (env.from_collection(list(range(numbers))).map(FailOnce(lambda x: x == numbers - 100))
                  .key_by(lambda x: x % KEYS).process(CountPerKey()))
        sink(counts, tmp_path / "counts")

    env = make_env(tmp_path, 2, seed, interval=None, records=500, restarts=0)
    job(env)
    with pytest.raises(UserFunctionError, match="injected failure"):
        env.execute("first")
    env = make_env(tmp_path, 2, seed, interval=1, records=None)
    job(env)
    stats = env.execute("restored", restore_from="latest").get_accumulator_result("checkpoints")
    assert stats["restored_from"] is not None and stats["completed"] > 0
    assert_same(committed(tmp_path), epoch_lines(n))
    per_key = Counter(x % KEYS for x in range(numbers))
    assert_same(committed(tmp_path / "counts"),
                Counter(f"c,{k},{i}" for k, count in per_key.items() for i in range(1, count + 1)))

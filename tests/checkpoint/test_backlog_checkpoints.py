"""Checkpoints while a backlog is sorted: a sorter's buffers (spilled runs as shared files, the
in-memory tail as Arrow IPC segments) are checkpointed with the sources' positions at the same
barrier, so a failure mid-backlog resumes from there — not from zero — with exactly-once output.

The jobs (``backlog_job.py``) read Parquet or CSV files; their oracles are plain Python.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any
from unittest.mock import MagicMock

import pyarrow as pa
import pytest
from backlog_job import build, oracle
from test_kill_recovery import committed_output
from test_recovery_in_process import FailOnce

from slipstream.attributes import RecordAttributes
from slipstream.datastream import RestartStrategies
from slipstream.datastream.co_group import CoGroupFunction
from slipstream.datastream.fields import FieldKey
from slipstream.datastream.functions import as_function
from slipstream.datastream.time import MAX_WATERMARK
from slipstream.datastream.transformations import CoGroupTransformation
from slipstream.datastream.window import EndOfStreamWindows
from slipstream.errors import (
    CheckpointError,
    CorruptCheckpointError,
    InvalidProgramError,
    SlipstreamError,
    UserFunctionError,
)
from slipstream.operators.base import OperatorContext
from slipstream.operators.co_group import CoGroupOperator
from slipstream.operators.columnar_buffer import SPILL_PARTITIONS, ColumnarBuffer, without_stamps
from slipstream.operators.elements import RecordBatch
from slipstream.operators.sort_buffer import BufferOrder, KeyDictionary, SortBuffer
from slipstream.operators.spill_file import read_arrow_file
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine
from slipstream.runtime.checkpoint.manifest import MANIFEST_NAME, Manifest
from slipstream.runtime.checkpoint.snapshot import decode_backlog, encode_backlog
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "backlog_job.py")


def backlog_manifests(checkpoints: str) -> list[Manifest]:
    """The complete checkpoints' manifests that hold a buffered backlog, oldest first."""
    storage = CheckpointStorage(checkpoints)
    found = []
    for checkpoint_id in storage.complete_ids():
        path = storage.path_of(checkpoint_id)
        try:
            with open(os.path.join(path, MANIFEST_NAME), "rb") as handle:
                manifest = Manifest.decode(handle.read(), path)
        except (OSError, ValueError):
            continue  # pruned meanwhile
        if any(s.backlog for entry in manifest.operators.values() for s in entry.subtasks):
            found.append(manifest)
    return found


def spilled_runs(manifest: Manifest) -> int:
    """How many shared backlog files (runs and tails) the manifest's subtasks refer to."""
    return sum(len(s.backlog_files) for entry in manifest.operators.values() for s in entry.subtasks)


def reads_of(workdir: str) -> list[int]:
    with open(os.path.join(workdir, "reads.txt")) as handle:
        return [int(line) for line in handle.read().split()]


# -- the buffers -------------------------------------------------------------------------------------------
def _restored_sort_buffer(buffer: SortBuffer, keys: KeyDictionary) -> SortBuffer:
    """A new buffer filled from ``buffer``'s snapshot, as a restore gets it (files as their bytes)."""
    state = buffer.snapshot()
    as_bytes = {**state, "runs": [(bytes(f.contents()), rows, first) for f, rows, first in state["runs"]],
                "tail": [bytes(f.contents()) for f in state["tail"]]}
    key_files = [bytes(f.contents()) for f in keys.checkpoint_files(buffer.spill_directory)]
    restored_keys = KeyDictionary()
    restored = SortBuffer(PolarsBatchEngine(), memory_budget=buffer.memory_budget, key_dictionary=restored_keys,
                          field=lambda value: value[1], order=buffer.order)
    restored_keys.restore(key_files, restored.spill_directory)
    restored.restore(as_bytes)
    return restored


@pytest.mark.parametrize("order", [BufferOrder.TIME, BufferOrder.ARRIVAL, BufferOrder.INTERVAL])
def test_a_restored_sort_buffer_goes_on_as_the_one_snapshotted(order):
    """Runs and tail come back; records added after the restore land where they would have; the
    order read back and the vectorisable field column equal the uninterrupted buffer's."""
    def fill(buffer: SortBuffer, start: int, stop: int) -> None:
        for i in range(start, stop, 7):
            chunk = range(i, min(i + 7, stop))
            buffer.add([f"k{x % 11}" for x in chunk], [(f"k{x % 11}", x) for x in chunk], [x % 50 for x in chunk],
                       interval=i // 100)

    keys = KeyDictionary()
    straight = SortBuffer(PolarsBatchEngine(), memory_budget=60, key_dictionary=keys, field=lambda v: v[1],
                          order=order)
    fill(straight, 0, 400)
    assert straight.num_runs > 0 and straight._values  # runs and a tail
    earlier = straight.snapshot()["tail"]
    straight.add(["k1"], [("k1", 10_000)], [7])  # no spill: the next checkpoint writes one record more
    later = straight.snapshot()["tail"]
    assert len(later) == 2 and later[0].digest() == earlier[0].digest()
    assert read_arrow_file(bytes(later[1].contents())).num_rows == 1
    restored = _restored_sort_buffer(straight, keys)
    fill(straight, 400, 700)
    fill(restored, 400, 700)
    assert len(restored) == len(straight) == 701
    assert list(restored.records()) == list(straight.records())
    assert restored.field_table().sort_by("seq").equals(straight.field_table().sort_by("seq"))
    straight.close()
    restored.close()


def test_a_restored_columnar_buffer_holds_the_same_partitions():
    def batch(start: int) -> pa.RecordBatch:
        return pa.record_batch({"k": [x % 13 for x in range(start, start + 50)], "v": list(range(start, start + 50))})

    straight, restored = ColumnarBuffer("k", memory_budget=2500), ColumnarBuffer("k", memory_budget=2500)
    for start in range(0, 450, 50):
        straight.add(batch(start), list(range(start, start + 50)))
    assert straight.spilled and straight._batches
    state = straight.snapshot()
    restored.restore({**state, "parts": [[bytes(f.contents()) for f in files] for files in state["parts"]],
                      "tail": [bytes(f.contents()) for f in state["tail"]]})
    for start in range(450, 800, 50):
        straight.add(batch(start), list(range(start, start + 50)))
        restored.add(batch(start), list(range(start, start + 50)))
    assert len(restored) == len(straight) == 800
    for ours, theirs in zip(restored.partition_tables(SPILL_PARTITIONS), straight.partition_tables(SPILL_PARTITIONS)):
        assert without_stamps(ours).equals(without_stamps(theirs)) and ours.equals(theirs)
    straight.close()
    restored.close()


def as_restored(operator: Any) -> Any:
    """``operator``'s buffered backlog as a restore hands it over (through the checkpoint's encoding)."""
    data, files = encode_backlog(operator.snapshot_backlog(), operator)
    return decode_backlog(data, [bytes(file.contents()) for file in files])


def co_group_on_columns() -> CoGroupOperator:
    def count(first: list, second: list) -> Any:
        yield (first or second)[0][0], len(first), len(second), sum(r[1] for r in first) + sum(r[1] for r in second)

    return CoGroupOperator(CoGroupTransformation(
        id=1, name="CoGroup", key_selectors=[FieldKey("f0"), FieldKey("f0")], assigner=EndOfStreamWindows.get(),
        trigger=EndOfStreamWindows.get().get_default_trigger(), function=as_function(count, CoGroupFunction,
                                                                                     "co_group", 2, "test")))


@pytest.mark.parametrize("budget", [1, 1_000_000], ids=["spilled", "in-memory"])
def test_a_co_group_restored_mid_backlog_goes_on_with_its_columnar_buffers(budget):
    """Both inputs buffered as Arrow (the co-group's own columnar buffers): snapshotted mid-backlog and
    restored into a new operator, the rest of the backlog gives what one uninterrupted operator gives."""
    def batch(start: int, stop: int) -> RecordBatch:
        return RecordBatch(None, None, arrow=pa.table({"f0": [f"k{x % 17}" for x in range(start, stop)],
                                                      "f1": list(range(start, stop))}))

    def run(operator: CoGroupOperator, start: int, stop: int, ends: bool) -> None:
        for at in range(start, stop, 20):
            for index in (0, 1):
                operator.process_batch(batch(at, at + 20), index)
        if ends:
            for index in (0, 1):
                operator.process_watermark(MAX_WATERMARK, index)
                operator.process_record_attributes(RecordAttributes(False), index)
                operator.end_input(index)

    def started(operator: CoGroupOperator, restored: Any = None) -> list:
        records: list = []
        output = MagicMock()
        output.collect_batch.side_effect = lambda b: records.extend(b.values)
        operator.setup(OperatorContext(name="CoGroup", uid="cg", subtask_index=0, parallelism=1,
                                       max_parallelism=128, output=output, processing_time_service=MagicMock(),
                                       keyed_backend=HeapKeyedStateBackend(128), batch_engine=PolarsBatchEngine(),
                                       sort_memory_budget=budget))
        if restored is not None:
            operator.restore_backlog(restored)
        operator.open()
        for index in (0, 1):
            operator.process_record_attributes(RecordAttributes(True), index)
        return records

    straight = co_group_on_columns()
    expected = started(straight)
    run(straight, 0, 400, ends=True)
    first = co_group_on_columns()
    started(first)
    run(first, 0, 200, ends=False)
    assert all(own is not None for own in first.snapshot_backlog()["own"])  # held as columns, not rows
    restored = as_restored(first)
    first.close()
    second = co_group_on_columns()
    got = started(second, restored)
    run(second, 200, 400, ends=True)
    assert sorted(got) == sorted(expected) and len(expected) == 17
    assert second.ctx.metrics["backlog_records"] == 800


# -- in process: a failure mid-backlog --------------------------------------------------------------------
@pytest.mark.one_process("its FailOnce fails once by an attribute of its function, which a restarted worker has afresh")
@pytest.mark.parametrize("kind", ["reduce", "process", "window"])
@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("budget", [500, 1_000_000], ids=["spilled", "in-memory"])
def test_a_failure_mid_backlog_resumes_from_the_backlog_checkpoint_exactly_once(tmp_path, kind, parallelism, budget):
    fail_mid_backlog_and_check(tmp_path, kind, parallelism, budget)


@pytest.mark.one_process("its FailOnce fails once by an attribute of its function, which a restarted worker has afresh")
@pytest.mark.parametrize("seed", [3, 17])
def test_a_failure_mid_backlog_at_parallelism_four_resumes_exactly_once_whatever_the_schedule(tmp_path, seed):
    fail_mid_backlog_and_check(tmp_path, "window", 4, 300, seed)


def fail_mid_backlog_and_check(tmp_path: Any, kind: str, parallelism: int, budget: int,
                               seed: int | None = None) -> None:
    """Fail once at 70% of the rows, restart in process from the latest (backlog) checkpoint: the run
    that finishes reads only what that checkpoint had left, and the output equals the oracle."""
    n = 12_000
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    fail = FailOnce(int(n * 0.7))
    env = build(kind, out, chk, n, parallelism, budget, fail=fail,
                restart=RestartStrategies.fixed_delay_restart(1, 0), seed=seed)
    result = env.execute("backlog failure")
    assert fail.seen == 2 and fail.left == 0
    metrics = result.get_all_accumulator_results()
    read = sum(m.get("records_out", 0) for name, m in metrics.items() if name.startswith("rows"))
    assert 0 < read <= n - 2_000, f"the restarted run read {read} of {n} rows: it did not resume mid-backlog"
    # the sorter's buffers held, at the switch, the restored records and those read since: each once
    assert sum(m.get("backlog_records", 0) for m in metrics.values()) == n
    assert committed_output(out) == oracle(kind, n)


def test_a_backlog_checkpoint_restored_without_backlog_sorting_is_refused_naming_the_operator(tmp_path):
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    with pytest.raises(UserFunctionError, match="injected failure"):
        build("reduce", out, chk, 12_000, 1, fail=FailOnce(9_000)).execute("fails mid-backlog")
    assert backlog_manifests(chk)
    env = build("reduce", out, chk, 12_000, 1)
    env.configure(backlog_sorting=False)
    with pytest.raises(SlipstreamError, match=r"'Keyed Reduce' .*checkpointed while it sorted its backlog"):
        env.execute("restored without sorting", restore_from="latest")
    assert committed_output(out) == Counter()


def test_no_checkpoint_is_taken_during_backlog_when_its_interval_is_zero(tmp_path):
    """Flink's ``execution.checkpointing.interval-during-backlog`` = 0: none while a source reports
    backlog (unset: the normal interval applies, and the backlog is checkpointed)."""
    taken = {}
    for setting in (None, 0):
        chk = str(tmp_path / f"chk{setting}")
        env = build("reduce", str(tmp_path / f"out{setting}"), chk, 8_000, 1)
        env.get_checkpoint_config().set_num_retained_checkpoints(1_000)
        if setting is not None:
            env.get_checkpoint_config().set_checkpoint_interval_during_backlog(setting)
        env.execute("interval")
        taken[setting] = len(backlog_manifests(chk))
    assert taken[None] >= 2 and taken[0] == 0


def test_an_interval_during_backlog_shorter_than_the_interval_is_refused_as_in_flink(tmp_path):
    env = build("reduce", str(tmp_path / "out"), str(tmp_path / "chk"), 100, 1)
    env.get_checkpoint_config().set_checkpoint_interval(1_000).set_checkpoint_interval_during_backlog(500)
    with pytest.raises(InvalidProgramError, match=r"interval-during-backlog \(500 ms\) must be 0"):
        env.execute("too short")


def test_checkpoints_during_backlog_store_each_spilled_run_once(tmp_path):
    """Consecutive backlog checkpoints share the runs spilled before both: a run is one shared file,
    every later checkpoint lists it under the same name, and each adds only what is new."""
    chk = str(tmp_path / "chk")
    env = build("reduce", str(tmp_path / "out"), chk, 20_000, 1, 1_000)
    env.get_checkpoint_config().set_num_retained_checkpoints(1_000)
    env.execute("shared runs")
    manifests = backlog_manifests(chk)
    assert len(manifests) >= 3

    def runs(manifest: Manifest) -> set[str]:
        """The shared names of the manifest's spilled runs (the backlog file read with names for contents)."""
        (subtask,) = manifest.operators["count"].subtasks
        path = CheckpointStorage(chk).path_of(manifest.checkpoint_id)
        with open(os.path.join(path, subtask.backlog), "rb") as handle:
            state = decode_backlog(handle.read(), list(subtask.backlog_files))
        return {name for name, _, _ in state["buffers"][0]["runs"]}

    for earlier, later in itertools.pairwise(manifests):
        assert runs(earlier) < runs(later)  # the earlier runs, under the same names, and new ones
        new = set(later.backlog_file_names()) - set(earlier.backlog_file_names())
        added = sum(later.shared[name]["size"] for name in new)
        assert added < sum(later.shared[name]["size"] for name in later.backlog_file_names())


def test_a_restore_hard_links_the_runs_unread_and_refuses_a_damaged_one(tmp_path):
    """Verified chunk by chunk, a backlog checkpoint's runs are handed to the restore as files (hard
    linked into the spill directory, never read into memory); a damaged run is refused, named."""
    chk = str(tmp_path / "chk")
    env = build("reduce", str(tmp_path / "out"), chk, 20_000, 1, 1_000)
    env.get_checkpoint_config().set_num_retained_checkpoints(1_000)
    env.execute("runs")
    manifest = backlog_manifests(chk)[-1]
    storage = CheckpointStorage(chk)
    verified = storage.read_verified(storage.path_of(manifest.checkpoint_id), None)
    runs = manifest.backlog_file_names()
    assert len(runs) > 2 and set(verified.stored) == runs and not runs & set(verified.files)
    name = sorted(runs)[0]
    target = str(tmp_path / "linked.arrow")
    assert verified.stored[name].copy_to(target) == os.path.getsize(os.path.join(chk, name))
    assert os.stat(target).st_nlink == 2
    with open(os.path.join(chk, name), "r+b") as handle:
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptCheckpointError, match="checksum") as caught:
        storage.read_verified(storage.path_of(manifest.checkpoint_id), None)
    assert name in str(caught.value)


# -- SIGKILL in a child process ----------------------------------------------------------------------------
def start(kind: str, workdir: str, n: int, parallelism: int, budget: int) -> subprocess.Popen:
    env = dict(os.environ, SLIPSTREAM_RESTORE_FROM="latest", PYTHONFAULTHANDLER="1")
    return subprocess.Popen([sys.executable, JOB, kind, os.path.join(workdir, "out"), os.path.join(workdir, "chk"),
                             str(n), str(parallelism), str(budget)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill_after_backlog_checkpoint(process: subprocess.Popen, checkpoints: str, after: int) -> Manifest:
    """SIGKILL ``process`` once a backlog checkpoint newer than id ``after`` with spilled runs is
    complete; that checkpoint's manifest."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [m for m in backlog_manifests(checkpoints) if m.checkpoint_id > after and spilled_runs(m) > 1]
        if found:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            return found[-1]
        assert process.poll() is None, f"the job ended before a backlog checkpoint: {process.stderr.read().decode()}"
        time.sleep(0.02)
    process.kill()
    raise AssertionError("no backlog checkpoint within 120 s")


@pytest.mark.parametrize("state_backend,kind,parallelism", [
    ("hashmap", "reduce", 1), ("rocksdb", "process", 2), ("hashmap", "window", 2), ("rocksdb", "builtin", 1),
    ("hashmap", "builtin", 2), ("rocksdb", "cogroup", 2)], indirect=["state_backend"])
def test_sigkill_mid_backlog_resumes_from_the_backlog_checkpoint(tmp_path, kind, parallelism):
    """Killed twice while the backlog is buffered (runs spilled, a tail in memory), each time after a
    newer backlog checkpoint: the last run reads only what that checkpoint's positions had left,
    and the committed output equals the oracle. The buffers are the subject, not the keyed state
    they become at the switch (which every other test here covers on both backends): each kind
    runs on one backend, and the kinds share them out."""
    n = 60_000
    workdir = str(tmp_path)
    checkpoints = os.path.join(workdir, "chk")
    last = 0
    for _ in range(2):
        last = kill_after_backlog_checkpoint(start(kind, workdir, n, parallelism, 2_000), checkpoints,
                                             last).checkpoint_id
    process = start(kind, workdir, n, parallelism, 2_000)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr.decode()
    (read,) = reads_of(workdir)
    total = 2 * n if kind == "cogroup" else n  # the co-group reads the files twice
    assert 0 < read < total, f"the restored run read {read} of {total} rows: it started from zero"
    got, expected = committed_output(os.path.join(workdir, "out")), oracle(kind, n)
    assert got == expected, (f"{sum((expected - got).values())} line(s) lost, "
                             f"{sum((got - expected).values())} duplicated or unexpected")


def test_a_backlog_checkpoint_restored_at_another_parallelism_is_refused_naming_the_operator(tmp_path):
    workdir = str(tmp_path)
    checkpoints = os.path.join(workdir, "chk")
    manifest = kill_after_backlog_checkpoint(start("reduce", workdir, 60_000, 2, 2_000), checkpoints, 0)
    before = CheckpointStorage(checkpoints).complete_ids()
    process = start("reduce", workdir, 60_000, 1, 2_000)
    _, stderr = process.communicate(timeout=120)
    message = stderr.decode()
    assert process.returncode != 0
    assert CheckpointError.__name__ in message and "'Keyed Reduce' (uid 'count')" in message
    assert "while it sorted its backlog, at parallelism 2" in message and "set_parallelism(2)" in message
    assert manifest.checkpoint_id in before and CheckpointStorage(checkpoints).complete_ids() == before
    assert not os.path.exists(os.path.join(workdir, "reads.txt"))
    assert Counter() == committed_output(os.path.join(workdir, "out"))


def test_explain_says_a_sorter_is_checkpointed_during_its_backlog(tmp_path):
    plan = build("reduce", str(tmp_path / "out"), str(tmp_path / "chk"), 10, 1).explain()
    assert "checkpoints during the backlog hold its buffer (spilled runs as shared files, stored once" in plan

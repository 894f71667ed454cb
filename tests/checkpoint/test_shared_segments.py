"""Iteration replay caches in checkpoints as content-addressed shared segments: a checkpoint writes
only the segments appended since the last completed one and refers to the others (from the cache,
a channel or a function's attributes alike); every checkpoint that lists a segment checks it;
restoring gives the same records back, shared between the places that held them."""

from __future__ import annotations

import io
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.errors import CorruptCheckpointError
from slipstream.operators.elements import RecordBatch
from slipstream.operators.replay_cache import SEGMENT_BYTES, ReplayCache
from slipstream.operators.segments import Segment, SegmentReader, Sharing
from slipstream.runtime.checkpoint.manifest import SHARED_DIR, Manifest
from slipstream.runtime.checkpoint.snapshot import (
    OperatorSnapshot,
    build_manifest_and_files,
    commit_keyed,
    loads_checkpointed,
)
from slipstream.runtime.checkpoint.storage import CheckpointStorage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import iteration_kmeans as kmeans


class Head:
    """What a checkpoint sees of an iteration head: the segments of its cache."""

    def __init__(self, cache: ReplayCache) -> None:
        self.cache = cache

    def shared_segments(self) -> list[Segment]:
        return self.cache.snapshot()


def checkpoint(storage: CheckpointStorage, checkpoint_id: int, cache: ReplayCache, extra: object = None
               ) -> tuple[str, int]:
    """Checkpoint ``cache`` (and ``extra``, pickled beside it) as the coordinator does; its directory
    and the bytes it wrote (own files and new shared files)."""
    sharing = Sharing.of([Head(cache)])
    assert sharing is not None
    data = sharing.dumps({"replay_cache": cache.snapshot(), "extra": extra})
    snap = OperatorSnapshot("head", "IterationHead", 0, 1, 1, None, None, data, segments=sharing.take_used())
    manifest = Manifest(checkpoint_id, "job", "fp", 0, "EXACTLY_ONCE")
    files, shared = build_manifest_and_files(manifest, [snap])
    path = storage.write(manifest, files, shared)
    commit_keyed([snap])
    storage.prune(checkpoint_id)
    return path, sum(len(d) for d in [*files.values(), *shared.values()])


def blocks(count: int, rows: int = 2_000, seed: int = 0) -> list[RecordBatch]:
    rng = np.random.default_rng(seed)
    return [RecordBatch([rng.normal(size=(rows, 10))]) for _ in range(count)]


def restored(storage: CheckpointStorage, path: str) -> dict:
    verified = storage.read_verified(path, None)
    (subtask,) = verified.manifest.operators["head"].subtasks
    return loads_checkpointed(verified.files[subtask.operator], verified.files, path)


def records(batches: list[RecordBatch]) -> list[np.ndarray]:
    return [record for batch in batches for record in batch.values]


@pytest.mark.parametrize("spilled", [False, True])
def test_the_second_checkpoint_of_an_unchanged_cache_writes_almost_nothing(tmp_path, spilled):
    storage = CheckpointStorage(str(tmp_path / "chk"), num_retained=2)
    cache = ReplayCache(1 if spilled else 10**9, "the replay cache of 'test'", str(tmp_path / "spill"))
    appended = blocks(40)
    for batch in appended:
        cache.append(batch)
    cached_bytes = sum(batch.estimated_bytes() for batch in appended)
    _, first = checkpoint(storage, 1, cache)
    path, second = checkpoint(storage, 2, cache)
    assert first > 0.9 * cached_bytes
    assert second < 0.01 * cached_bytes, f"the second checkpoint wrote {second} bytes of a {cached_bytes}-byte cache"
    state = restored(storage, path)
    got = records([batch for segment in state["replay_cache"] for batch in segment.batches])
    assert all(np.array_equal(a, b) for a, b in zip(got, records(appended), strict=True))


def test_a_checkpoint_writes_only_the_segments_appended_since_the_last_one(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), num_retained=3)
    cache = ReplayCache(10**9, "the replay cache of 'test'")
    first_half, second_half = blocks(20, seed=1), blocks(20, seed=2)
    for batch in first_half:
        cache.append(batch)
    checkpoint(storage, 1, cache)
    for batch in second_half:
        cache.append(batch)
    path, second = checkpoint(storage, 2, cache)
    added = sum(batch.estimated_bytes() for batch in second_half)
    assert 0.9 * added < second < 1.1 * added + SEGMENT_BYTES // 100
    state = restored(storage, path)
    got = records([batch for segment in state["replay_cache"] for batch in segment.batches])
    assert all(np.array_equal(a, b) for a, b in zip(got, records(first_half + second_half), strict=True))


def test_records_of_the_cache_held_elsewhere_are_written_once_and_restored_as_the_same_objects(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"))
    cache = ReplayCache(10**9, "the replay cache of 'test'")
    appended = blocks(10)
    for batch in appended:
        cache.append(batch)
    kept_by_function = records(appended)[3:7]  # as KMeans' per-round operator keeps the blocks it was sent
    path, written = checkpoint(storage, 1, cache, extra={"blocks": kept_by_function, "in_channel": appended[0]})
    assert written < 1.1 * sum(batch.estimated_bytes() for batch in appended)
    state = restored(storage, path)
    cached = records([batch for segment in state["replay_cache"] for batch in segment.batches])
    assert all(got is cached[3 + i] for i, got in enumerate(state["extra"]["blocks"]))
    assert state["extra"]["in_channel"] is state["replay_cache"][0].batches[0]


def test_large_tuples_of_the_cache_in_another_batch_are_written_once_and_restored_as_the_same_objects(tmp_path):
    """Records of a built-in type are not seen by the pickler's reducer_override one by one: the batch
    holding them (here a channel's, outside the cache) puts references in their places."""
    storage = CheckpointStorage(str(tmp_path / "chk"))
    cache = ReplayCache(10**9, "the replay cache of 'test'")
    appended = [RecordBatch([tuple(range(b * 1_000 + i, b * 1_000 + i + 300)) for i in range(20)]) for b in range(5)]
    for batch in appended:
        cache.append(batch)
    in_channel = RecordBatch([appended[1].values[4], (1, 2), appended[3].values[0]])
    path, written = checkpoint(storage, 1, cache, extra={"in_channel": in_channel})
    assert written < 1.1 * sum(batch.estimated_bytes() for batch in appended)
    state = restored(storage, path)
    cached = state["replay_cache"][0].batches
    got = state["extra"]["in_channel"].values
    assert got[0] is cached[1].values[4] and got[2] is cached[3].values[0] and got[1] == (1, 2)


def test_records_in_flight_pickle_without_a_python_call_per_record(tmp_path, monkeypatch):
    """The sharing pickler is asked about batches and objects of other than built-in types only."""
    cache = ReplayCache(10**9, "the replay cache of 'test'")
    cache.append(RecordBatch([np.arange(1_000)]))
    sharing = Sharing.of([Head(cache)])
    assert sharing is not None
    asked = []
    reduce = sharing.reduce
    monkeypatch.setattr(sharing, "reduce", lambda obj: asked.append(type(obj)) or reduce(obj))
    in_flight = [RecordBatch([(i, f"r{i}", [i, 2.5]) for i in range(j, j + 500)]) for j in range(0, 10_000, 500)]
    data = sharing.dumps({"channel": in_flight, "replay_cache": cache.snapshot()})
    assert asked.count(RecordBatch) == len(in_flight) and len(asked) < len(in_flight) + 5, asked
    used = sharing.take_used()
    back = SegmentReader(lambda digest: bytes(used[digest][1])).loads(data)
    assert back["channel"] == in_flight and back["replay_cache"][0].batches[0].values[0] is not None
    with pytest.raises(pickle.UnpicklingError, match="shared segment"):
        pickle.loads(data)


def test_a_corrupt_shared_segment_is_detected_by_every_checkpoint_that_lists_it(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), num_retained=2)
    cache = ReplayCache(10**9, "the replay cache of 'test'")
    for batch in blocks(10):
        cache.append(batch)
    first, _ = checkpoint(storage, 1, cache)
    second, _ = checkpoint(storage, 2, cache)
    (segment,) = [name for name in os.listdir(os.path.join(storage.directory, SHARED_DIR)) if name.endswith(".seg")]
    target = os.path.join(storage.directory, SHARED_DIR, segment)
    data = bytearray(Path(target).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(target).write_bytes(bytes(data))
    for path in (first, second):
        with pytest.raises(CorruptCheckpointError, match="checksum does not match") as caught:
            storage.read_verified(path, None)
        assert segment in str(caught.value)


def test_pruning_keeps_the_segments_a_retained_checkpoint_lists_and_deletes_the_rest(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), num_retained=1)
    held = ReplayCache(10**9, "the feedback held at 'test'")
    for batch in blocks(5, seed=3):
        held.append(batch)
    checkpoint(storage, 1, held)
    list(held.drain())  # the round started: what was held went in
    for batch in blocks(5, seed=4):
        held.append(batch)
    path, _ = checkpoint(storage, 2, held)
    listed = set(Manifest.decode(Path(path, "_manifest.json").read_bytes(), path).shared)
    stored = {f"{SHARED_DIR}/{name}" for name in os.listdir(os.path.join(storage.directory, SHARED_DIR))}
    assert stored == listed and len(listed) == 1


def test_kmeans_checkpoints_store_each_segment_once(tmp_path):
    """Checkpoints every few milliseconds of KMeans: the storage holds every replayed point once,
    and each checkpoint's own files are a small part of it."""
    block_list, initial = kmeans.make_data(40_000, 10, 10, block=2_000)
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    directory = tmp_path / "chk"
    env.get_checkpoint_config().set_checkpoint_interval(5).set_checkpoint_storage_dir(str(directory)) \
        .set_num_retained_checkpoints(1000)
    out: list = []
    kmeans.build_kmeans(env, block_list, initial, 8).add_sink(out.append)
    stats = env.execute("kmeans with checkpoints").get_accumulator_result("checkpoints")
    assert np.allclose(out[0], kmeans.kmeans_numpy(np.concatenate(block_list), initial, 8))
    points_bytes = sum(block.nbytes for block in block_list)
    segments = [path for path in (directory / SHARED_DIR).iterdir() if path.suffix == ".seg"]
    assert stats["completed"] >= 3
    assert points_bytes < sum(path.stat().st_size for path in segments) < 1.5 * points_bytes
    for chk in directory.glob("chk-*"):
        own = sum(path.stat().st_size for path in chk.iterdir())
        assert own < 0.05 * points_bytes, f"{chk.name} has {own} bytes of its own files"


@pytest.mark.parametrize("seed", range(6))
def test_a_cache_that_spills_between_checkpoints_keeps_its_order_in_replays_drains_and_restores(tmp_path, seed):
    """Appends, checkpoints (sealing segments) and spilling past a small budget, interleaved at random:
    every replay, every restore and the drain give the batches in the order they came."""
    import random

    rng = random.Random(seed)
    storage = CheckpointStorage(str(tmp_path / "chk"), num_retained=2)
    cache = ReplayCache(rng.choice([3, 10, 40]), "the replay cache of 'test'", str(tmp_path / "spill"))
    appended: list[list[int]] = []
    for step in range(60):
        batch = [step * 10 + i for i in range(rng.randint(1, 4))]
        cache.append(RecordBatch(batch))
        appended.append(batch)
        if rng.random() < 0.2:
            path, _ = checkpoint(storage, len(appended), cache)
            state = restored(storage, path)
            assert [b.values for segment in state["replay_cache"] for b in segment.batches] == appended
        if rng.random() < 0.1:
            assert [b.values for b in cache] == appended
    assert [b.values for b in cache] == appended
    assert [b.values for b in cache.drain()] == appended and not cache
    cache.close()


def test_a_restored_cache_refers_to_the_same_files_and_writes_them_into_another_storage(tmp_path):
    storage = CheckpointStorage(str(tmp_path / "chk"), num_retained=3)
    cache = ReplayCache(10**9, "the replay cache of 'test'")
    appended = blocks(10)
    for batch in appended:
        cache.append(batch)
    path, _ = checkpoint(storage, 1, cache)
    names = set(os.listdir(os.path.join(storage.directory, SHARED_DIR)))
    for target in (storage, CheckpointStorage(str(tmp_path / "elsewhere"))):
        again = ReplayCache(10**9, "the replay cache of 'test'")
        again.restore(restored(storage, path)["replay_cache"])
        restored_path, _ = checkpoint(target, 2, again)
        assert set(os.listdir(os.path.join(target.directory, SHARED_DIR))) == names
        got = records([b for segment in restored(target, restored_path)["replay_cache"] for b in segment.batches])
        assert all(np.array_equal(a, b) for a, b in zip(got, records(appended), strict=True))


def test_references_written_as_persistent_ids_by_earlier_versions_still_restore():
    segment = Segment([RecordBatch([(1, 2), (3, 4)])], 2)
    digest = segment.encode()

    class EarlierPickler(pickle.Pickler):
        def persistent_id(self, obj):
            if obj is segment.batches[0]:
                return digest, (0,)
            return (digest, ()) if obj is segment else None

    out = io.BytesIO()
    EarlierPickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump({"held": [segment], "in_channel": segment.batches[0]})
    back = SegmentReader(lambda wanted: bytes(segment.unwritten())).loads(out.getvalue())
    assert back["in_channel"] is back["held"][0].batches[0] and back["in_channel"].values == [(1, 2), (3, 4)]

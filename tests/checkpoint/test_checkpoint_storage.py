"""The on-disk format: every kind of corruption is caught before anything is unpickled, with a
typed error naming the file, the checkpoint and expected versus actual; crash points of the writer
leave the old or the new checkpoint, never a mix; fallback only when no sink committed past it."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from crash_job import build, oracle
from slipstream.errors import CheckpointError, CorruptCheckpointError, SlipstreamError
from slipstream.operators import segments as segments_module
from slipstream.runtime.checkpoint import state_files as state_files_module
from slipstream.runtime.checkpoint.fs import FaultInjectingFileSystem, SimulatedCrash
from slipstream.runtime.checkpoint.manifest import MANIFEST_NAME, Manifest, sha256_hex
from slipstream.runtime.checkpoint.recovery import find_restore_point
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from slipstream.runtime.driver import JobDriver
from test_kill_recovery import committed_output

pytestmark = pytest.mark.one_process("it watches and corrupts what this process reads and writes (monkeypatched file "
                                     "access)")

N = 4_000


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory):
    """A finished ``counts`` job with two retained checkpoints; tests copy it before damaging it."""
    root = tmp_path_factory.mktemp("finished")
    out, chk = str(root / "out"), str(root / "chk")
    build("counts", out, chk, N, interval_ms=None, records=500).execute("finished")
    return root


@pytest.fixture
def job(finished_job, tmp_path):
    shutil.copytree(finished_job, tmp_path / "job")
    root = tmp_path / "job"
    chk = root / "chk"
    ids = checkpoint_dirs(chk)
    assert len(ids) == 2
    return {"out": str(root / "out"), "chk": str(chk), "older": str(chk / ids[0]), "latest": str(chk / ids[1])}


@pytest.fixture
def no_unpickling(monkeypatch):
    """Fail the test if anything is unpickled or a keyed Arrow state file opened (corruption must be
    found before that)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a state file was read before the checkpoint was verified")
    monkeypatch.setattr(state_files_module.pickle, "loads", refuse)
    monkeypatch.setattr(segments_module.SegmentReader, "loads", refuse)
    monkeypatch.setattr(state_files_module.pa.ipc, "open_file", refuse)


def restore(job, restore_from):
    return build("counts", job["out"], job["chk"], N, interval_ms=None, records=500).execute(
        "restore", restore_from=restore_from)


def checkpoint_dirs(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("chk-"))


def state_files(path):
    """The files a checkpoint's manifest lists: its own, then the shared ones (``shared/...``)."""
    body = json.load(open(os.path.join(path, MANIFEST_NAME)))
    return sorted(body["files"]) + sorted(body.get("shared", {}))


def located(path, name):
    """Where file ``name`` of the checkpoint in ``path`` is: shared files lie beside the checkpoint."""
    return os.path.join(os.path.dirname(path) if name.startswith("shared/") else path, name)


def biggest_state_file(path, only_here=False):
    """The checkpoint's biggest file; ``only_here``: of those no other checkpoint beside it lists."""
    others = {name for other in checkpoint_dirs(os.path.dirname(path)) if other != os.path.basename(path)
              for name in state_files(os.path.join(os.path.dirname(path), other)) if name.startswith("shared/")}
    names = [name for name in state_files(path) if not (only_here and name in others)]
    return max(names, key=lambda name: os.path.getsize(located(path, name)))


def expect_corrupt(job, path, file, *, match=None):
    with pytest.raises(CorruptCheckpointError) as caught:
        restore(job, path)
    error = caught.value
    assert isinstance(error, SlipstreamError)
    assert error.checkpoint == path and error.file == file
    assert path in str(error) and file in str(error)
    if match:
        assert match in str(error)
    return error


def test_directories_are_private_and_the_manifest_is_json(job):
    for path in (job["chk"], job["latest"]):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    with open(os.path.join(job["latest"], MANIFEST_NAME)) as handle:
        body = json.load(handle)
    assert body["format"] == "slipstream-checkpoint" and body["version"] == 4
    assert set(body["files"]) == set(os.listdir(job["latest"])) - {MANIFEST_NAME}
    assert body["shared"] and all(os.path.exists(located(job["latest"], name)) for name in body["shared"])


def test_an_intact_checkpoint_restores(job):
    restore(job, job["latest"])
    assert committed_output(job["out"]) == oracle("counts", N)


@pytest.mark.parametrize("where", ["empty", "one byte", "half", "all but one byte"])
def test_truncated_state_file(job, no_unpickling, where):
    name = biggest_state_file(job["latest"])
    path = located(job["latest"], name)
    size = os.path.getsize(path)
    keep = {"empty": 0, "one byte": 1, "half": size // 2, "all but one byte": size - 1}[where]
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    error = expect_corrupt(job, job["latest"], name, match="wrong size")
    assert error.expected.startswith(f"{size} bytes") and error.actual.startswith(f"{keep} bytes")


def test_flipped_byte(job, no_unpickling):
    name = biggest_state_file(job["latest"])
    path = located(job["latest"], name)
    data = bytearray(open(path, "rb").read())
    expected = sha256_hex(bytes(data))
    data[len(data) // 3] ^= 0x01
    open(path, "wb").write(bytes(data))
    error = expect_corrupt(job, job["latest"], name, match="checksum")
    assert expected in error.expected and sha256_hex(bytes(data)) in error.actual


def test_zeroed_block(job, no_unpickling):
    name = biggest_state_file(job["latest"])
    path = located(job["latest"], name)
    data = bytearray(open(path, "rb").read())
    start = len(data) // 4
    data[start:start + 64] = bytes(len(data[start:start + 64]))
    open(path, "wb").write(bytes(data))
    expect_corrupt(job, job["latest"], name, match="checksum")


def test_missing_manifest(job, no_unpickling):
    os.unlink(os.path.join(job["latest"], MANIFEST_NAME))
    expect_corrupt(job, job["latest"], MANIFEST_NAME, match="no manifest")


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_damaged_manifest(job, no_unpickling, damage):
    path = os.path.join(job["latest"], MANIFEST_NAME)
    data = bytearray(open(path, "rb").read())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        index = data.index(b'"size": ') + 8
        data[index] = ord("9") if data[index] != ord("9") else ord("8")
    open(path, "wb").write(bytes(data))
    expect_corrupt(job, job["latest"], MANIFEST_NAME)


def test_missing_state_file(job, no_unpickling):
    name = state_files(job["latest"])[0]
    os.unlink(located(job["latest"], name))
    error = expect_corrupt(job, job["latest"], name, match="missing")
    assert error.actual == "no file"


def test_file_swapped_in_from_another_checkpoint(job, no_unpickling):
    different = [name for name in state_files(job["latest"])
                 if os.path.exists(os.path.join(job["older"], name))
                 and open(os.path.join(job["older"], name), "rb").read()
                 != open(os.path.join(job["latest"], name), "rb").read()]
    name = different[0]
    shutil.copy(os.path.join(job["older"], name), os.path.join(job["latest"], name))
    expect_corrupt(job, job["latest"], name)


def test_manifest_swapped_in_from_another_checkpoint(job, no_unpickling):
    shutil.copy(os.path.join(job["older"], MANIFEST_NAME), os.path.join(job["latest"], MANIFEST_NAME))
    expect_corrupt(job, job["latest"], MANIFEST_NAME, match="another checkpoint")


def test_checkpoint_of_another_job(job, tmp_path, no_unpickling):
    other_out, other_chk = str(tmp_path / "other_out"), str(tmp_path / "other_chk")
    build("windows", other_out, other_chk, 2_000, interval_ms=None, records=500).execute("other")
    other = os.path.join(other_chk, checkpoint_dirs(other_chk)[-1])
    error = expect_corrupt(job, other, MANIFEST_NAME, match="another job")
    assert "fingerprint" in error.expected and "fingerprint" in error.actual


def test_state_file_from_another_job(job, tmp_path, no_unpickling):
    other_out, other_chk = str(tmp_path / "other_out"), str(tmp_path / "other_chk")
    build("windows", other_out, other_chk, 2_000, interval_ms=None, records=500).execute("other")
    other = os.path.join(other_chk, checkpoint_dirs(other_chk)[-1])
    name = [n for n in state_files(job["latest"]) if n in state_files(other)][0]
    shutil.copy(os.path.join(other, name), os.path.join(job["latest"], name))
    expect_corrupt(job, job["latest"], name)


@pytest.mark.parametrize("leftover", ["_manifest.json.tmp", "op0-0.keyed.pkl.tmp", "stray.bin"])
def test_leftover_or_foreign_files(job, no_unpickling, leftover):
    open(os.path.join(job["latest"], leftover), "wb").write(b"x")
    expect_corrupt(job, job["latest"], leftover)


def test_unknown_format_version(job, no_unpickling):
    path = os.path.join(job["latest"], MANIFEST_NAME)
    body = json.load(open(path))
    body.pop("manifest_sha256")
    body["version"] = 99
    body["manifest_sha256"] = sha256_hex(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    open(path, "w").write(json.dumps(body))
    error = expect_corrupt(job, job["latest"], MANIFEST_NAME, match="format version")
    assert "99" in error.actual


def _damage_biggest(path):
    name = biggest_state_file(path, only_here=True)
    with open(located(path, name), "r+b") as handle:
        handle.truncate(3)


def test_latest_falls_back_when_no_sink_committed_past_the_older_checkpoint(tmp_path, caplog):
    from crash_job import Hook  # noqa: F401  (the job module is importable from the tests)
    n = 4_000
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    counter = FaultInjectingFileSystem()
    env = build("counts", str(tmp_path / "o"), str(tmp_path / "c"), n, interval_ms=None, records=500)
    JobDriver(env._take_job("count"), fs=counter).run()
    manifest_renames = [i for i, op in enumerate(counter.operations, 1) if op.endswith("-> _manifest.json")]
    # Crash right after the third checkpoint's manifest is in place, before any sink committed it.
    env = build("counts", out, chk, n, interval_ms=None, records=500)
    with pytest.raises(SimulatedCrash):
        JobDriver(env._take_job("crash"), fs=FaultInjectingFileSystem(manifest_renames[2])).run()
    ids = checkpoint_dirs(chk)
    older, latest = os.path.join(chk, ids[-2]), os.path.join(chk, ids[-1])
    _damage_biggest(latest)
    result = build("counts", out, chk, n, interval_ms=None, records=500).execute("again", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] == older
    assert "trying an older one" in caplog.text
    assert committed_output(out) == oracle("counts", n)


def test_latest_refuses_to_fall_back_past_committed_output(tmp_path):
    from test_recovery_in_process import FailOnce
    n = 4_000
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    with pytest.raises(SlipstreamError):
        build("counts", out, chk, n, interval_ms=None, records=500, fail=FailOnce(3_950)).execute("fails")
    latest = os.path.join(chk, checkpoint_dirs(chk)[-1])
    _damage_biggest(latest)
    with pytest.raises(CheckpointError, match="committed after the checkpoint"):
        build("counts", out, chk, n, interval_ms=None, records=500).execute("again", restore_from="latest")


def test_latest_with_only_damaged_checkpoints_fails_loudly(job):
    for path in (job["older"], job["latest"]):
        name = biggest_state_file(path)
        with open(located(path, name), "r+b") as handle:
            handle.truncate(1)
    with pytest.raises(CorruptCheckpointError) as caught:
        restore(job, "latest")
    assert caught.value.checkpoint == job["latest"]


def test_latest_of_an_empty_directory_starts_afresh(tmp_path):
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    build("counts", out, chk, 1_000, interval_ms=None, records=300).execute("fresh", restore_from="latest")
    assert committed_output(out) == oracle("counts", 1_000)


# -- crash points of the writer ------------------------------------------------------------------
def _write(storage, checkpoint_id, files):
    manifest = Manifest(checkpoint_id, "job", "fp", 0, "EXACTLY_ONCE")
    storage.write(manifest, dict(files))
    storage.prune(checkpoint_id)


def test_every_crash_point_leaves_the_old_or_the_new_checkpoint(tmp_path):
    old_files = {"a.pkl": b"old-a" * 100, "b.pkl": b"old-b" * 50}
    new_files = {"a.pkl": b"new-a" * 120, "b.pkl": b"new-b" * 40, "c.pkl": b"new-c"}
    counter = FaultInjectingFileSystem()
    _write(CheckpointStorage(str(tmp_path / "count"), 1), 1, old_files)
    start = len(counter.operations)
    _write(CheckpointStorage(str(tmp_path / "count"), 1, counter), 2, new_files)
    operations = counter.operations[start:]
    assert any(op.startswith("rename") for op in operations) and any("fsync" in op for op in operations)
    outcomes = set()
    for crash_after in range(1, len(operations) + 1):
        directory = str(tmp_path / f"crash{crash_after}")
        _write(CheckpointStorage(directory, 1), 1, old_files)
        with pytest.raises(SimulatedCrash):
            _write(CheckpointStorage(directory, 1, FaultInjectingFileSystem(crash_after)), 2, new_files)
        found = find_restore_point(CheckpointStorage(directory, 1), "latest", "fp")
        assert found is not None, f"no checkpoint after a crash at {operations[crash_after - 1]!r}"
        expected = old_files if found.checkpoint_id == 1 else new_files
        assert found.files == expected, f"a mix after a crash at {operations[crash_after - 1]!r}"
        outcomes.add(found.checkpoint_id)
    assert outcomes == {1, 2}


def test_crash_points_during_a_running_job_lose_and_duplicate_nothing(tmp_path):
    n = 3_000
    counter = FaultInjectingFileSystem()
    env = build("counts", str(tmp_path / "o"), str(tmp_path / "c"), n, interval_ms=None, records=1000)
    JobDriver(env._take_job("count"), fs=counter).run()
    per_checkpoint = len(counter.operations) // 4  # around four checkpoints with the final one
    for crash_after in range(1, 2 * per_checkpoint + 2):
        out, chk = str(tmp_path / f"out{crash_after}"), str(tmp_path / f"chk{crash_after}")
        env = build("counts", out, chk, n, interval_ms=None, records=1000)
        with pytest.raises(SimulatedCrash):
            JobDriver(env._take_job("crash"), fs=FaultInjectingFileSystem(crash_after)).run()
        build("counts", out, chk, n, interval_ms=None, records=1000).execute("recover", restore_from="latest")
        assert committed_output(out) == oracle("counts", n), f"crash after operation {crash_after}"

"""A refused restore changes nothing: every operator checks the state it is given before any of
them applies it, so a FileSink subtask never deletes the newer checkpoint's pending part files
for a restore that another subtask then refuses."""

from __future__ import annotations

import os
import shutil

import pytest

from crash_job import build, oracle
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.errors import CheckpointError
from slipstream.runtime.checkpoint.fs import SimulatedCrash
from slipstream.runtime.checkpoint.storage import CheckpointStorage
from test_checkpoint_storage import biggest_state_file, located
from test_kill_recovery import committed_output

pytestmark = pytest.mark.one_process("it crashes this process's commits and reads (a monkeypatched file system), "
                                       "which worker processes do not share")

N = 6_000
EVERY = 500  # records between checkpoints


def directory_contents(directory: str) -> dict[str, bytes]:
    """Every file of ``directory``, hidden in-progress parts included, with its bytes."""
    contents = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as handle:
            contents[name] = handle.read()
    return contents


def crash_between_sink_commits(monkeypatch, parallelism: int, checkpoint_id: int, committing: int) -> None:
    """When checkpoint ``checkpoint_id`` completes, only sink subtask ``committing`` commits its part
    files; the process then "dies" before the other subtasks commit theirs."""
    original = FileSink.create_writer
    asked: list[int] = []  # the subtasks told checkpoint_id completed

    def create_writer(sink):
        writer = original(sink)
        open_writer, commit = writer.open, writer.commit
        subtask = []

        def open_and_note(subtask_index: int, subtasks: int) -> None:
            subtask.append(subtask_index)
            open_writer(subtask_index, subtasks)

        def commit_or_die(completed: int) -> None:
            if completed != checkpoint_id:
                commit(completed)
                return
            if subtask == [committing]:
                commit(completed)
            asked.append(subtask[0])
            if len(asked) == parallelism:
                raise SimulatedCrash(f"killed while the sink's subtasks commit checkpoint {completed}")

        writer.open, writer.commit = open_and_note, commit_or_die
        return writer

    monkeypatch.setattr(FileSink, "create_writer", create_writer)


@pytest.mark.parametrize("route", ["explicit", "latest falls back"])
@pytest.mark.parametrize("parallelism,committing", [(2, 0), (2, 1), (4, 3), (4, 1)])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_refused_restore_deletes_nothing_and_the_newer_checkpoint_still_restores(
        tmp_path, monkeypatch, route, parallelism, committing, seed):
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def job():
        env = build("counts", out, chk, N, interval_ms=None, records=EVERY, parallelism=parallelism)
        env.configure(scheduler_seed=seed)
        return env

    crash_between_sink_commits(monkeypatch, parallelism, checkpoint_id=2, committing=committing)
    with pytest.raises(SimulatedCrash):
        job().execute("killed between commits")
    monkeypatch.undo()
    storage = CheckpointStorage(chk)
    assert storage.complete_ids() == [1, 2]
    older, newer = storage.path_of(1), storage.path_of(2)
    pending = [name for name in os.listdir(out) if name.startswith(".")]
    assert pending, "the subtasks that did not commit checkpoint 2 left its parts pending"
    before = directory_contents(out)

    if route == "explicit":
        with pytest.raises(CheckpointError, match=r"\(uid 'sink'\), subtask \d/\d: .*committed after the checkpoint"):
            job().execute("refused", restore_from=older)
    else:  # the newest checkpoint cannot be read for now: "latest" falls back to the older one
        damaged = located(newer, biggest_state_file(newer, only_here=True))
        saved = tmp_path / "saved"
        shutil.copy(damaged, saved)
        with open(damaged, "r+b") as handle:
            handle.truncate(3)
        with pytest.raises(CheckpointError, match=r"\(uid 'sink'\), subtask \d/\d: .*committed after the checkpoint"):
            job().execute("refused", restore_from="latest")
        shutil.copy(saved, damaged)
    assert directory_contents(out) == before, "the refused restore changed the sink's files"

    result = job().execute("restored", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] == newer
    assert committed_output(out) == oracle("counts", N)

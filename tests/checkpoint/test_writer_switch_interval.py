"""While a checkpoint writer thread runs, the interpreter switches threads every 0.5 ms instead of
Python's 5 ms, so the job's thread waits at most that long for the interpreter lock the writer
holds; afterwards the interval is what it was (unless someone else changed it meanwhile)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from slipstream.runtime.checkpoint.coordinator import WRITING_SWITCH_INTERVAL_S, CheckpointWriter
from slipstream.runtime.checkpoint.fs import FileSystem
from slipstream.runtime.checkpoint.manifest import Manifest
from slipstream.runtime.checkpoint.storage import CheckpointStorage


class HeldFileSystem(FileSystem):
    """Notes the switch interval at each file write and holds the write until ``go`` is set."""

    def __init__(self) -> None:
        self.intervals: list[float] = []
        self.writing = threading.Event()
        self.go = threading.Event()

    def write_file(self, path: str, data: bytes | memoryview, what: str = "checkpoint file") -> None:
        self.intervals.append(sys.getswitchinterval())
        self.writing.set()
        assert self.go.wait(30)
        super().write_file(path, data, what)


def started_writer(directory: str, checkpoint_id: int) -> tuple[CheckpointWriter, HeldFileSystem]:
    """A writer of an empty checkpoint, started and held at its first file write."""
    fs = HeldFileSystem()
    writer = CheckpointWriter(CheckpointStorage(directory, fs=fs),
                              Manifest(checkpoint_id, "job", "fingerprint", 0, "EXACTLY_ONCE"), [])
    writer.start()
    assert fs.writing.wait(30)
    return writer, fs


@pytest.fixture()
def default_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield 0.005
    sys.setswitchinterval(before)


def test_the_switch_interval_is_lowered_while_a_writer_runs_and_restored_after(tmp_path, default_interval) -> None:
    writer, fs = started_writer(str(tmp_path), 1)
    assert sys.getswitchinterval() == WRITING_SWITCH_INTERVAL_S == fs.intervals[0]
    fs.go.set()
    writer.wait()
    assert writer.error is None and writer.path is not None
    assert sys.getswitchinterval() == default_interval


def test_overlapping_writers_restore_the_interval_when_the_last_one_ends(tmp_path, default_interval) -> None:
    first, first_fs = started_writer(str(tmp_path / "a"), 1)
    second, second_fs = started_writer(str(tmp_path / "b"), 1)
    first_fs.go.set()
    first.wait()
    assert sys.getswitchinterval() == WRITING_SWITCH_INTERVAL_S  # the second still writes
    second_fs.go.set()
    second.wait()
    assert sys.getswitchinterval() == default_interval


def test_an_interval_changed_during_a_write_is_left_as_it_was_set(tmp_path, default_interval) -> None:
    writer, fs = started_writer(str(tmp_path), 1)
    sys.setswitchinterval(0.002)  # the program's own choice, made while the checkpoint was written
    fs.go.set()
    writer.wait()
    assert sys.getswitchinterval() == pytest.approx(0.002)

"""Restore at another parallelism: sources hand what their old readers had left to the new ones
(number and index ranges, Arrow row slices, file splits and positions in them, HybridSource phases),
and FileSink commits the old subtasks' pending files; the output equals the oracle at 1→3 and 3→1."""

from __future__ import annotations

import os
import time
from collections import Counter

import pyarrow as pa
import pytest
from crash_job import KEYS, Hook
from test_kill_recovery import committed_output

from slipstream.datastream import RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.base import SHARE_FINISHED
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.connectors.hybrid_source import HybridSource
from slipstream.datastream.connectors.iterator import CollectionSource
from slipstream.datastream.connectors.number_seq import (
    NumberSequenceSource,
    redistribute_slices,
)
from slipstream.datastream.formats.base import Encoder, StreamFormat
from slipstream.errors import UserFunctionError

N = 6_000


def number_files(directory: str, first: int, last: int, files: int = 5) -> str:
    """The numbers ``first..last`` as text lines spread over ``files`` files (several splits)."""
    os.makedirs(directory, exist_ok=True)
    numbers = list(range(first, last + 1))
    for f in range(files):
        with open(os.path.join(directory, f"n{f}.txt"), "w") as handle:
            handle.write("".join(f"{x}\n" for x in numbers[f::files]))
    return directory


def make_source(kind: str, root: str):
    if kind == "numbers":
        return NumberSequenceSource(1, N)
    if kind == "collection":
        return CollectionSource(list(range(1, N + 1)))
    if kind == "arrow":
        return ArrowSource(pa.table({"x": list(range(1, N + 1))}), batch_size=100)
    text = StreamFormat.text_line_format()
    if kind == "files":
        return FileSource.for_record_stream_format(text, number_files(os.path.join(root, "in"), 1, N)).build()
    if kind == "hybrid":
        history = FileSource.for_record_stream_format(
            text, number_files(os.path.join(root, "in"), 1, N // 2)).build()
        return HybridSource.builder(history).add_source(NumberSequenceSource(N // 2 + 1, N)).build()
    raise ValueError(kind)


def as_int(value) -> int:
    return int(value[0]) if not isinstance(value, (int, str)) else int(value)


def build(kind: str, root: str, parallelism: int, fail=None) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.configure(batch_size=50, backlog_sorting=False)
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval_records(400)
    config.set_checkpoint_storage_dir(os.path.join(root, "chk"))
    env.set_restart_strategy(RestartStrategies.no_restart())
    sink = FileSink.for_row_format(os.path.join(root, "out"), Encoder.simple_string_encoder()).build()
    (env.from_source(make_source(kind, root), None, "numbers").uid("numbers")
     .map(as_int).uid("int").map(Hook(fail)).uid("hook")
     .map(lambda x: (x % KEYS, 1)).uid("pairs")
     .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
     .map(lambda p: f"{p[0]},{p[1]}").uid("format").sink_to(sink).uid("sink"))
    return env


def oracle() -> Counter:
    per_key = Counter(x % KEYS for x in range(1, N + 1))
    return Counter(f"{k},{i}" for k, count in per_key.items() for i in range(1, count + 1))


def latest_checkpoint(directory: str) -> int:
    """The id of the newest checkpoint under ``directory`` whose manifest is written (0 if none);
    older ones may already be pruned, so this counts ids, not directories."""
    if not os.path.isdir(directory):
        return 0
    return max((int(name.removeprefix("chk-")) for name in os.listdir(directory)
                if name.startswith("chk-") and os.path.exists(os.path.join(directory, name, "_manifest.json"))),
               default=0)


class FailAfterCheckpoints:
    """Raises on the first record after this subtask saw ``after`` records and ``checkpoints`` checkpoints
    newer than the ones that existed when it was made completed, so the failed run always leaves a partly read
    source and a checkpoint of this run behind. Past ``after`` it paces its records while it waits,
    so a job on worker processes cannot finish before that checkpoint does."""

    def __init__(self, root: str, after: int, checkpoints: int = 1) -> None:
        self.directory = os.path.join(root, "chk")
        self.after = after
        self.awaited = latest_checkpoint(self.directory) + checkpoints
        self.seen = 0

    def __call__(self, value) -> None:
        self.seen += 1
        if self.seen < self.after:
            return
        if latest_checkpoint(self.directory) >= self.awaited:
            raise RuntimeError(f"injected failure at {value}")
        time.sleep(0.0005)


@pytest.mark.parametrize("kind", ["numbers", "collection", "arrow", "files", "hybrid"])
@pytest.mark.parametrize("old,new", [(1, 3), (3, 1)])
def test_sources_and_file_sink_restore_at_another_parallelism(tmp_path, kind, old, new):
    root = str(tmp_path)
    with pytest.raises(UserFunctionError, match="injected failure"):
        build(kind, root, old, fail=FailAfterCheckpoints(root, N // 3 // old)).execute("before")
    result = build(kind, root, new).execute("rescaled", restore_from="latest")
    stats = result.get_accumulator_result("checkpoints")
    assert stats["restored_from"] is not None
    got, expected = committed_output(os.path.join(root, "out")), oracle()
    assert not expected - got and not got - expected, (
        f"lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}")


def test_rescaled_twice_then_restored_at_the_same_parallelism(tmp_path):
    """Positions written after a rescale (ranges, partial splits, later phases) rescale again."""
    root = str(tmp_path)
    for parallelism in (2, 3, 1):
        with pytest.raises(UserFunctionError):
            build("hybrid", root, parallelism, fail=FailAfterCheckpoints(root, N // 5 // parallelism)).execute(
                "step", restore_from="latest")
    build("hybrid", root, 1).execute("last", restore_from="latest")
    assert committed_output(os.path.join(root, "out")) == oracle()


def test_redistributed_slices_cover_what_is_left_exactly_once():
    # Three old readers of 0..29: the first read 4, the second all, the third never started.
    positions = [[[4, 10]], SHARE_FINISHED, None]
    shares = redistribute_slices(positions, 30, 2)
    left = [x for share in shares for a, b in share for x in range(a, b)]
    assert left == list(range(4, 10)) + list(range(20, 30))
    assert [sum(b - a for a, b in share) for share in shares] == [8, 8]

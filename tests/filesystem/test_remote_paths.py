"""Sources, sinks and checkpoint storage on remote file systems (``memory://`` and ``s3://``):
read, written and restored through fsspec, never turned into local paths."""

from __future__ import annotations

import uuid
from collections import Counter

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from slipstream.cli.main import main as cli
from slipstream.datastream import RestartStrategies, StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.formats.base import Encoder, StreamFormat
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
from slipstream.errors import CorruptCheckpointError, InvalidProgramError, UserFunctionError
from slipstream.filesystem import resolve
from slipstream.runtime.checkpoint.manifest import Manifest
from slipstream.runtime.checkpoint.storage import CheckpointStorage


def _fs(url: str):
    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    return fs, path


def put(url: str, data: bytes) -> None:
    fs, path = _fs(url)
    fs.pipe_file(path, data)


def visible_lines(directory: str) -> Counter:
    """The lines of the files a reader of ``directory`` sees (no name part starting with ``.``/``_``)."""
    fs, root = _fs(directory)
    lines: Counter = Counter()
    for path in fs.find(root):
        if not any(part.startswith((".", "_")) for part in path[len(root):].split("/")):
            lines.update(fs.cat_file(path).decode().splitlines())
    return lines


def names_under(directory: str) -> list[str]:
    fs, root = _fs(directory)
    return sorted(path[len(root) + 1:] for path in fs.find(root))


def new_env(parallelism: int) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    return env


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_file_source_reads_every_visible_remote_line_once(store: str, parallelism: int) -> None:
    expected = Counter()
    for f in range(5):
        lines = [f"{f}-{i}" for i in range(40 + f)]
        expected.update(lines)
        put(f"{store}/in/sub{f % 2}/part-{f}.txt", ("\n".join(lines) + "\n").encode())
    put(f"{store}/in/.hidden.txt", b"never\n")
    put(f"{store}/in/_SUCCESS", b"never\n")
    put(f"{store}/in/_tmp/x.txt", b"never\n")
    out: list[str] = []
    env = new_env(parallelism)
    env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), f"{store}/in").build(),
                    None, "lines").add_sink(out.append)
    env.execute("remote-read")
    assert Counter(out) == expected



def test_worker_processes_reach_s3_with_the_settings_the_driver_gave_fsspec(s3_endpoint: str) -> None:
    """The moto endpoint and keys are set in ``fsspec.config.conf`` in this process only; a job on
    two workers reads and writes S3 with them (it failed with NoCredentialsError)."""
    store = f"s3://slipstream-tests/{uuid.uuid4().hex}"
    lines = [f"line-{i}" for i in range(300)]
    put(f"{store}/in/part-0.txt", ("\n".join(lines) + "\n").encode())
    env = new_env(2).configure(workers=2)
    env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), f"{store}/in").build(),
                    None, "lines").map(str.upper).sink_to(
        FileSink.for_row_format(f"{store}/out", Encoder.simple_string_encoder()).build())
    env.execute("remote-on-workers")
    assert visible_lines(f"{store}/out") == Counter(line.upper() for line in lines)


def test_parquet_row_groups_are_read_from_a_remote_store(store: str) -> None:
    table = pa.table({"id": list(range(1000)), "name": [f"n{i}" for i in range(1000)]})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=128)
    put(f"{store}/data.parquet", sink.getvalue().to_pybytes())
    source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(batch_size=50), f"{store}/data.parquet")
    out: list = []
    env = new_env(2)
    env.from_source(source.build(), None, "rows").map(lambda row: (row.id, row.name)).add_sink(out.append)
    env.execute("remote-parquet")
    assert sorted(out) == [(i, f"n{i}") for i in range(1000)]


class FailOnce:
    """Raises the first time it sees ``value`` (a task failure the restart strategy restarts from)."""

    def __init__(self, value: int) -> None:
        self.value, self.failed = value, False

    def __call__(self, value: int) -> int:
        if value == self.value and not self.failed:
            self.failed = True
            raise RuntimeError(f"injected failure at {value}")
        return value


def _counting_job(out: str, checkpoints: str, n: int, parallelism: int, fail: FailOnce, restarts: int):
    env = new_env(parallelism)
    config = env.enable_checkpointing(60_000).get_checkpoint_config()
    config.set_checkpoint_interval_records(300)
    config.set_checkpoint_storage_dir(checkpoints).set_num_retained_checkpoints(2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 0) if restarts
                             else RestartStrategies.no_restart())
    env.configure(batch_size=32)
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()
    (env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
     .map(fail).uid("fail").map(str).uid("format").sink_to(sink).uid("sink"))
    return env


@pytest.mark.one_process("its FailOnce fails once by an attribute of its function, which a restarted worker has anew")
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_a_file_sink_on_a_remote_store_is_exactly_once_across_a_restart(store: str, parallelism: int) -> None:
    n = 3000
    fail = FailOnce(n // 2)
    result = _counting_job(f"{store}/out", f"{store}/chk", n, parallelism, fail, restarts=1).execute("remote-sink")
    assert fail.failed and result.get_accumulator_result("checkpoints")["restarts"] == 1
    assert visible_lines(f"{store}/out") == Counter(str(i) for i in range(1, n + 1))
    assert not [name for name in names_under(f"{store}/out") if ".inprogress." in name]


@pytest.mark.one_process("its FailOnce fails once by an attribute of its function, which a restarted worker has anew")
def test_a_job_restores_latest_from_checkpoints_stored_remotely(store: str) -> None:
    n, out, chk = 3000, f"{store}/out", f"{store}/chk"
    with pytest.raises(UserFunctionError, match="injected failure"):
        _counting_job(out, chk, n, 2, FailOnce(2000), restarts=0).execute("remote-first")
    assert any(name.endswith("_manifest.json") for name in names_under(chk))
    before = visible_lines(out)
    assert 0 < sum(before.values()) < n  # what the completed checkpoints committed, nothing more
    _counting_job(out, chk, n, 2, FailOnce(-1), restarts=0).execute("remote-second", restore_from="latest")
    assert visible_lines(out) == Counter(str(i) for i in range(1, n + 1))


def test_checkpoint_storage_on_a_remote_store_verifies_what_it_reads(store: str) -> None:
    storage = CheckpointStorage(f"{store}/chk")
    assert storage.directory.startswith(store.split("://")[0] + "://") and not storage.fs.atomic_rename
    path = storage.write(Manifest(checkpoint_id=3, job_name="j", job_fingerprint="f", created_ms=0, mode="EXACTLY_ONCE"),
                         {"op0-0.state.pkl": b"state bytes"})
    assert storage.complete_ids() == [3]
    assert names_under(path) == ["_manifest.json", "op0-0.state.pkl"]  # no temporary manifest left
    assert storage.read_verified(path, "f").files == {"op0-0.state.pkl": b"state bytes"}
    put(f"{path}/op0-0.state.pkl", b"state byteZ")
    with pytest.raises(CorruptCheckpointError, match="checksum does not match"):
        storage.read_verified(path, "f")
    runner = CliRunner()
    listed = runner.invoke(cli, ["checkpoints", "verify", f"{store}/chk"])
    assert listed.exit_code == 1 and "chk-000003: DAMAGED" in listed.output


def test_a_commit_interrupted_between_copy_and_delete_is_finished_by_the_restore(store: str) -> None:
    """On an object store a part is committed by copying its in-progress object to the final name,
    then deleting it; a crash between the two is finished on restore, and the part appears once."""
    sink = FileSink.for_row_format(f"{store}/out", Encoder.simple_string_encoder()).build()
    writer = sink.create_writer()
    writer.open(0, 1)
    writer.write(["a", "b"], None)
    state = writer.prepare_commit(1)
    (in_progress, final), = writer._listed_parts([state])
    fs, _ = resolve(in_progress)
    fs._fs.copy(in_progress, final)  # the crash: copied, not yet deleted
    restored = sink.create_writer()
    restored.open(0, 1)
    restored.check_commit_state([state])
    restored.restore_commit_state([state])
    assert names_under(f"{store}/out") == ["part-0-0"]
    assert visible_lines(f"{store}/out") == Counter(["a", "b"])


def test_a_scheme_no_file_system_serves_is_refused_when_the_job_is_built() -> None:
    with pytest.raises(InvalidProgramError, match="FileSource 'nosuch://b/in': fsspec knows no file system"):
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), "nosuch://b/in").build()
    with pytest.raises(InvalidProgramError, match="FileSink 'nosuch://b/out': fsspec knows no file system"):
        FileSink.for_row_format("nosuch://b/out", Encoder.simple_string_encoder()).build()

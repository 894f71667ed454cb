"""A transactional sink is FLIP-327's ``is_output_on_checkpoint`` operator: its output becomes
visible when a checkpoint completes, never between checkpoints."""

from pathlib import Path

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.base import Sink
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.sinks import PrintSink
from slipstream.datastream.formats.base import Encoder
from slipstream.datastream.functions import MapFunction


def visible_lines(directory: Path) -> list[str]:
    return sorted(line for part in directory.glob("[!.]*") for line in part.read_text().splitlines())


SEEN: list[int] = []
"""Module-level: user functions are copied per subtask, so an instance's list would not come back."""


class Watch(MapFunction):
    """Records, for each record, how many lines the sink had made visible when it passed by."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def map(self, value: int) -> str:
        SEEN.append(len(visible_lines(self.directory)) if self.directory.exists() else 0)
        return str(value)


def test_transactional_sinks_declare_output_on_checkpoint() -> None:
    assert FileSink.for_row_format("/nonexistent", Encoder.simple_string_encoder()).build().is_transactional()
    assert not PrintSink().is_transactional() and not Sink.is_transactional(PrintSink())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).sink_to(FileSink.for_row_format("/nonexistent", Encoder.simple_string_encoder())
                                     .build()).name("files")
    env.from_collection([2]).print().name("printed")
    plan = env.explain()
    assert "files: emits when a checkpoint is taken" in plan
    assert "printed: emits" not in plan


def test_output_appears_only_when_checkpoints_complete(tmp_path: Path) -> None:
    out = tmp_path / "out"
    SEEN.clear()
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(batch_size=10, quantum=1).enable_checkpointing(1_000_000)
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage_dir(str(tmp_path / "chk"))
    config.set_checkpoint_interval_records(100)
    env.from_source(IteratorSource(range(1_000), bounded=False), None, "numbers") \
        .map(Watch(out)).sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build())
    env.execute("visible at checkpoints")
    assert visible_lines(out) == sorted(str(i) for i in range(1_000))
    # the visible output never runs ahead of the records, and it grows in a few steps (one per
    # completed checkpoint), not record by record
    assert len(SEEN) == 1_000 and SEEN == sorted(SEEN)
    assert all(visible <= index for index, visible in enumerate(SEEN))
    assert 3 <= len(set(SEEN)) <= 1_000 // 100 + 1

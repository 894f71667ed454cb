"""PyFlink's parameter names, so a call with PyFlink's keywords works as in PyFlink (the names
were compared with PyFlink 1.20's and 2.3's sources)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from slipstream.common import Types
from slipstream.datastream import (
    CountSlidingWindowAssigner,
    CountTumblingWindowAssigner,
    EventTimeSessionWindows,
    ProcessingTimeSessionWindows,
    StreamExecutionEnvironment,
)
from slipstream.datastream.checkpoint_config import CheckpointConfig, ExternalizedCheckpointCleanup
from slipstream.datastream.checkpoint_storage import FileSystemCheckpointStorage
from slipstream.datastream.connectors.file_system import FileSource
from slipstream.datastream.formats.csv import CsvSchema
from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
from slipstream.datastream.state import StateTtlConfig
from slipstream.datastream.state_backend import FsStateBackend
from slipstream.datastream.time import Duration, Time
from slipstream.datastream.typeinfo import MapTypeInfo, RowTypeInfo, TupleTypeInfo
from slipstream.datastream.window import (
    CountTrigger,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
)
from slipstream.errors import InvalidProgramError


def test_time_and_type_and_result_keywords() -> None:
    assert Time(milliseconds=5) == Time(5) == Time.milliseconds(milliseconds=5)
    assert MapTypeInfo(key_type_info=Types.STRING(), value_type_info=Types.INT()) == \
        Types.MAP(Types.STRING(), Types.INT())
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1]).add_sink(lambda _: None)
    result = env.execute()
    assert result.get_accumulator_result(accumulator_name="no such") is None
    assert result.is_job_execution_result() and result.get_job_execution_result() is result
    assert RowTypeInfo(types=[Types.INT()], field_names=["a"]) == Types.ROW_NAMED(["a"], [Types.INT()])
    assert TupleTypeInfo(types=[Types.STRING()]) == Types.TUPLE([Types.STRING()])


def test_windows_and_triggers_keywords() -> None:
    assert CountTrigger(window_size=3).count == CountTrigger.of(window_size=3).count == 3
    assert CountTumblingWindowAssigner(window_size=4).size == 4
    sliding = CountSlidingWindowAssigner(window_size=4, window_slide=2)
    assert (sliding.size, sliding.slide) == (4, 2)
    assert EventTimeSessionWindows(session_gap=Duration.of_seconds(1)).gap == 1000
    assert ProcessingTimeSessionWindows(session_gap=Time.seconds(2)).gap == 2000


@pytest.mark.parametrize("assigner", [DynamicEventTimeSessionWindows, DynamicProcessingTimeSessionWindows])
def test_a_dynamic_session_assigner_takes_its_extractor_as_pyflinks_does(assigner) -> None:
    def extract(element) -> int:
        return element * 10

    positional, keyword = assigner(extract), assigner(session_window_time_gap_extractor=extract)
    assert positional.extractor.extract(3) == keyword.extractor.extract(3) == 30
    with pytest.raises(InvalidProgramError, match="SessionWindowTimeGapExtractor or a callable"):
        assigner(5)


def test_state_and_checkpoint_keywords(tmp_path) -> None:
    ttl = (StateTtlConfig.new_builder(Duration.of_seconds(1))
           .set_state_visibility(state_visibility=StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
           .set_ttl_time_characteristic(ttl_time_characteristic=StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)
           .build())
    assert ttl.get_state_visibility() is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
    config = CheckpointConfig()
    config.enable_externalized_checkpoints(cleanup_mode=ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION)
    config.set_externalized_checkpoint_cleanup(cleanup_mode=ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    assert config.get_externalized_checkpoint_cleanup() is ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION
    backend = FsStateBackend(str(tmp_path), None, 1024, 4096)  # PyFlink's order: threshold, then buffer size
    assert (backend.get_min_file_size_threshold(), backend.get_write_buffer_size()) == (1024, 4096)
    assert backend.is_using_asynchronous_snapshots()
    storage = FileSystemCheckpointStorage(checkpoint_path=str(tmp_path))
    assert (storage.get_min_file_size_threshold(), storage.get_write_buffer_size()) == (None, -1)
    with pytest.warns(UserWarning, match="not applied"):
        FileSystemCheckpointStorage(str(tmp_path), file_state_size_threshold=100, write_buffer_size=10)


def test_format_keywords(tmp_path) -> None:
    schema = CsvSchema.builder().add_number_column("n", number_type=None) \
        .add_array_column("tags", element_type=None).build()
    assert [column.type_info for column in schema.columns] == [Types.LONG(), Types.STRING()]
    pq.write_table(pa.table({"ID": [1, 2], "name": ["a", "b"], "extra": [0.5, 1.5]}), tmp_path / "t.parquet")
    row_type = Types.ROW_NAMED(["name", "id"], [Types.STRING(), Types.LONG()])
    parquet = ParquetColumnarRowInputFormat(row_type=row_type, batch_size=10, is_case_sensitive=False)
    env = StreamExecutionEnvironment.get_execution_environment()
    source = FileSource.for_bulk_file_format(parquet, str(tmp_path)).build()
    rows = list(env.from_source(source, None, "parquet").execute_and_collect())
    assert [tuple(row) for row in rows] == [("a", 1), ("b", 2)]
    with pytest.raises(InvalidProgramError, match="hadoop_config does not apply"):
        ParquetColumnarRowInputFormat(row_type, hadoop_config=object())

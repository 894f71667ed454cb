"""A record a sink cannot write fails the job naming the sink, the record and the field — also
when the writer finds out only at a flush or a checkpoint (Parquet row groups); to_spark's case is in tests/spark."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.formats.parquet import ParquetBulkWriters
from slipstream.errors import UserFunctionError

SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64())])


def records(bad_at: int, count: int = 50) -> list[dict]:
    return [{"word": f"w{i}", "n": "many" if i == bad_at else i} for i in range(count)]


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("bad_at", [0, 37])
def test_a_parquet_sink_names_itself_the_record_and_the_field(tmp_path, checkpointing: bool, bad_at: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().configure(batch_size=8)
    if checkpointing:
        env.enable_checkpointing(10_000)
        env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "chk"))
    sink = FileSink.for_bulk_format(str(tmp_path / "out"), ParquetBulkWriters.for_schema(SCHEMA)).build()
    env.from_collection(records(bad_at)).sink_to(sink).name("parquet out")
    with pytest.raises(UserFunctionError) as raised:
        env.execute("bad parquet")
    message = str(raised.value)
    assert "operator 'parquet out'" in message
    assert f"'w{bad_at}'" in message and "field 'n'" in message and "'many'" in message
    assert raised.value.record == {"word": f"w{bad_at}", "n": "many"}


def test_a_parquet_sink_without_schema_names_a_record_that_breaks_the_inferred_one(tmp_path) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().configure(batch_size=8)
    sink = FileSink.for_bulk_format(str(tmp_path), ParquetBulkWriters.for_schema()).build()
    env.from_collection(records(20)).sink_to(sink).name("inferred")
    with pytest.raises(UserFunctionError, match=r"operator 'inferred'.*'w20'.*field 'n'"):
        env.execute()


"""Columnar records: Arrow batches travel untouched until a Python function needs rows."""

import polars as pl
import pyarrow as pa
import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.arrow import ArrowSource
from slipstream.datastream.connectors.base import Sink, SinkWriter
from slipstream.operators.elements import RecordBatch


class ColumnarCounter(Sink):
    """Counts rows; records how many arrived as Arrow batches and how many as rows."""

    def __init__(self) -> None:
        self.columnar_rows = 0
        self.row_rows = 0

    def create_writer(self) -> SinkWriter:
        counter = self

        class Writer(SinkWriter):
            def write(self, values, timestamps):
                counter.row_rows += len(values)

            def write_arrow(self, batch, timestamps):
                counter.columnar_rows += batch.num_rows

        return Writer()


@pytest.mark.one_process("it counts rows in the sink object, in the process that runs the sink")
@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_arrow_source_reaches_a_columnar_sink_without_rows(parallelism: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    sink = ColumnarCounter()
    env.from_source(ArrowSource(pa.table({"x": list(range(1000))}), batch_size=64), None, "t").sink_to(sink)
    env.execute()
    assert (sink.columnar_rows, sink.row_rows) == (1000, 0)


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_python_functions_see_named_rows(parallelism: int) -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)
    frame = pl.DataFrame({"key": [i % 3 for i in range(30)], "amount": [float(i) for i in range(30)]})
    totals = list(env.from_source(ArrowSource(frame, batch_size=4), None, "frame")
                  .key_by(lambda row: row.key)
                  .map(lambda row: (row["key"], row[1]))
                  .key_by(lambda pair: pair[0])
                  .reduce(lambda a, b: (a[0], a[1] + b[1]))
                  .execute_and_collect())
    final = {key: total for key, total in totals}
    assert final == {k: float(sum(i for i in range(30) if i % 3 == k)) for k in range(3)}


def test_record_batch_builds_rows_once_and_only_when_asked() -> None:
    batch = RecordBatch(arrow=pa.record_batch({"a": [1, 2], "b": ["x", "y"]}))
    assert batch.is_columnar and len(batch) == 2 and batch._values is None
    rows = batch.values
    assert [(r.a, r.b) for r in rows] == [(1, "x"), (2, "y")]
    assert batch.values is rows


def test_arrow_source_refuses_other_data() -> None:
    with pytest.raises(Exception, match="Arrow table or a polars DataFrame"):
        ArrowSource([1, 2, 3])

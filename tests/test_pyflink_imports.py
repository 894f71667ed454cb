"""A PyFlink job ports by changing ``pyflink`` to ``slipstream`` in its imports."""

from slipstream.common import Duration, Row, Types, WatermarkStrategy
from slipstream.common.typeinfo import Types as TypesAgain
from slipstream.common.watermark_strategy import TimestampAssigner
from slipstream.datastream import (
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
)


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class Late(ProcessFunction):
    def process_element(self, value, ctx):
        yield Row(word=value[0], at=ctx.timestamp())


def test_a_pyflink_style_job_runs_with_slipstream_imports() -> None:
    assert TypesAgain is Types
    env = StreamExecutionEnvironment.get_execution_environment()
    events = env.from_collection([("a", 1_000), ("b", 2_000), ("a", 7_000)],
                                 type_info=Types.TUPLE([Types.STRING(), Types.LONG()]))
    timed = events.assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(1)).with_timestamp_assigner(EventTime()))
    counts = timed.key_by(lambda e: e[0]).window(TumblingEventTimeWindows.of(Duration.of_seconds(5))) \
        .reduce(lambda x, y: (x[0], max(x[1], y[1])))
    rows = list(timed.process(Late()).execute_and_collect())
    assert sorted((r.word, r.at) for r in rows) == [("a", 1_000), ("a", 7_000), ("b", 2_000)]
    assert isinstance(OutputTag("late"), OutputTag) and counts is not None

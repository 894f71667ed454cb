"""A long sorted backlog the backlog-checkpoint tests run in a child process and SIGKILL mid-way.

Usage: python backlog_job.py KIND OUT_DIR CHECKPOINT_DIR N PARALLELISM [SORT_MEMORY_BUDGET]

The input is N rows ``(id, key, ts)`` in Parquet or CSV files (written once, beside OUT_DIR):
key ``id % KEYS``, event time ``ts = id`` (ascending, so no row is late). When the job finishes
it writes how many rows its source read in this run to ``OUT_DIR/../reads.txt``: a run restored
from a backlog checkpoint reads fewer than N. Checkpoints are taken every ``interval`` records during the backlog
(the record clock: ``set_checkpoint_interval_records``; ``interval-during-backlog`` unset, so it
applies during the backlog too), each subtask spilling past SORT_MEMORY_BUDGET records (default
1,000: runs and an in-memory tail).

KIND:
  reduce    Parquet -> key_by(key) -> rolling reduce with a Python function counting per key ->
            ``key,count`` for every count (1..the key's rows, whatever the order of arrival)
  process   CSV -> key_by(key) -> KeyedProcessFunction with ValueState and an event-time timer per
            key at the end of time; the timer writes ``key,count,sum``
  window    Parquet -> key_by(key) -> tumbling event-time windows of WINDOW ms with a Python window
            function writing ``key,start,count,sum``
  builtin   Arrow batches from Parquet -> key_by("key") -> window(...).sum("id") (the columnar
            buffer of a built-in aggregation) -> ``key,start,sum``
  cogroup   the Parquet files read twice, as Arrow (sources ``rows`` and ``rows-again``) -> co_group
            where/equal_to("key") over the tumbling windows (each input in a co-group's columnar
            buffer) -> ``key,count,sum,count,sum`` per key and window

The restore comes from ``SLIPSTREAM_RESTORE_FROM`` (``latest``), as for ``crash_job.py``.
"""

from __future__ import annotations

import os
import sys
from collections import Counter

KEYS = 97
WINDOW = 5_000
FILES = 4
CHECKPOINT_EVERY = 2_000
"""Source records between checkpoints (the record clock of ``set_checkpoint_interval_records``)."""


def rows(n: int) -> list[tuple[int, int, int]]:
    return [(i, i % KEYS, i) for i in range(1, n + 1)]


def write_input(directory: str, n: int, csv: bool) -> str:
    """The rows in FILES files (id ``i`` in file ``(i - 1) * FILES // n``: each file a range of time)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    per_file = -(-n // FILES)
    for f in range(FILES):
        path = os.path.join(directory, f"part{f}.{'csv' if csv else 'parquet'}")
        if os.path.exists(path):
            continue
        chunk = rows(n)[f * per_file:(f + 1) * per_file]
        table = pa.table({"id": [r[0] for r in chunk], "key": [r[1] for r in chunk], "ts": [r[2] for r in chunk]})
        if csv:
            pcsv.write_csv(table, path + ".tmp")
        else:
            pq.write_table(table, path + ".tmp", row_group_size=500)
        os.replace(path + ".tmp", path)
    return directory


def oracle(kind: str, n: int) -> Counter:
    """The job's output computed in plain Python."""
    data = rows(n)
    if kind == "reduce":
        per_key = Counter(key for _, key, _ in data)
        return Counter(f"{key},{count}" for key, total in per_key.items() for count in range(1, total + 1))
    if kind == "process":
        counts: Counter = Counter()
        sums = Counter()
        for i, key, _ in data:
            counts[key] += 1
            sums[key] += i
        return Counter(f"{key},{counts[key]},{sums[key]}" for key in counts)
    windows: dict[tuple[int, int], list[int]] = {}
    for i, key, ts in data:
        windows.setdefault((key, ts - ts % WINDOW), []).append(i)
    if kind == "window":
        return Counter(f"{key},{start},{len(ids)},{sum(ids)}" for (key, start), ids in windows.items())
    if kind == "cogroup":
        return Counter(f"{key},{len(ids)},{sum(ids)},{len(ids)},{sum(ids)}" for (key, _), ids in windows.items())
    return Counter(f"{key},{start},{sum(ids)}" for (key, start), ids in windows.items())


class Hook:
    """An identity map on every row before the sorter, through which in-process tests inject a failure."""

    def __init__(self, fail=None) -> None:
        self.fail = fail

    def __call__(self, value):
        if self.fail is not None:
            self.fail(value[0])
        return value


def build(kind: str, out: str, checkpoints: str, n: int, parallelism: int, budget: int = 1_000, *,
          fail=None, restart=None, seed: int | None = None):
    from slipstream.datastream import (
        KeyedProcessFunction,
        ProcessWindowFunction,
        StreamExecutionEnvironment,
        ValueStateDescriptor,
    )
    from slipstream.datastream.connectors.file_system import FileSink, FileSource
    from slipstream.datastream.formats.base import Encoder
    from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema
    from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
    from slipstream.datastream.time import Time
    from slipstream.datastream.typeinfo import Types
    from slipstream.datastream.watermark_strategy import TimestampAssigner, WatermarkStrategy
    from slipstream.datastream.window import TumblingEventTimeWindows

    class Stamp(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value[2]

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.configure(backlog_sorting="always", sort_memory_budget=budget, batch_size=100, scheduler_seed=seed)
    config = env.get_checkpoint_config()
    config.set_checkpoint_interval_records(CHECKPOINT_EVERY)
    config.set_checkpoint_storage_dir(checkpoints).set_num_retained_checkpoints(2)
    if restart is not None:
        env.set_restart_strategy(restart)
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()
    data = os.path.join(os.path.dirname(out), "input")
    if kind == "process":
        schema = (CsvSchema.builder().add_number_column("id", number_type=Types.LONG())
                  .add_number_column("key", number_type=Types.LONG())
                  .add_number_column("ts", number_type=Types.LONG()).set_use_header().build())
        source = FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema),
                                                     write_input(data, n, csv=True)).build()
    else:
        source = FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(),
                                                 write_input(data, n, csv=False)).build()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp())
    stream = env.from_source(source, strategy, "rows").uid("rows")
    if kind not in ("builtin", "cogroup"):
        stream = stream.map(lambda row: (row[0], row[1], row[2])).uid("tuples").map(Hook(fail)).uid("hook")
    if kind == "reduce":
        lines = (stream.map(lambda r: (r[1], 1)).uid("pairs").key_by(lambda p: p[0])
                 .reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count").map(lambda p: f"{p[0]},{p[1]}").uid("format"))
    elif kind == "process":
        class CountAndSum(KeyedProcessFunction):
            def open(self, runtime_context):
                self.state = runtime_context.get_state(ValueStateDescriptor("count-sum"))

            def process_element(self, value, ctx):
                count, total = self.state.value() or (0, 0)
                self.state.update((count + 1, total + value[0]))
                ctx.timer_service().register_event_time_timer(2 ** 62)

            def on_timer(self, timestamp, ctx):
                count, total = self.state.value()
                yield f"{ctx.get_current_key()},{count},{total}"

        lines = stream.key_by(lambda r: r[1]).process(CountAndSum()).uid("count")
    elif kind == "window":
        class Summary(ProcessWindowFunction):
            def process(self, key, context, elements):
                ids = [e[0] for e in elements]
                yield f"{key},{context.window().start},{len(ids)},{sum(ids)}"

        lines = (stream.key_by(lambda r: r[1]).window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW)))
                 .process(Summary()).uid("windows"))
    elif kind == "cogroup":
        again = env.from_source(source, strategy, "rows-again").uid("rows-again")

        def both(first, second):
            ids, again_ids = [row[0] for row in first], [row[0] for row in second]
            yield f"{(first or second)[0][1]},{len(ids)},{sum(ids)},{len(again_ids)},{sum(again_ids)}"

        lines = (stream.co_group(again).where("key").equal_to("key")
                 .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))).apply(both).uid("both"))
    else:
        lines = (stream.key_by("key").window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW)))
                 .sum("id").uid("windows").map(lambda row: f"{row[1]},{row[2] - row[2] % WINDOW},{row[0]}")
                 .uid("format"))
    lines.sink_to(sink).uid("sink")
    return env


def main() -> None:
    kind, out, checkpoints, n, parallelism = sys.argv[1:6]
    budget = int(sys.argv[6]) if len(sys.argv) > 6 else 1_000
    result = build(kind, out, checkpoints, int(n), int(parallelism), budget).execute(f"backlog-{kind}")
    read = sum(metrics.get("records_out", 0) for name, metrics in result.get_all_accumulator_results().items()
               if name.startswith("rows"))
    with open(os.path.join(os.path.dirname(out), "reads.txt"), "a") as handle:
        handle.write(f"{read}\n")


if __name__ == "__main__":
    main()

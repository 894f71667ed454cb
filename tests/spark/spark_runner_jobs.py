"""The jobs the Spark runner's tests run on both runners, their input, and oracles in plain Python.

A module of its own: Spark's Python workers import the functions from here by name, and the
kill test's driver process (``spark_runner_driver.py``) builds the same jobs.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slipstream.datastream import (
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from slipstream.datastream.bootstrap import KeyedStateBootstrapFunction
from slipstream.datastream.connectors.file_system import FileSink, FileSource
from slipstream.datastream.formats.base import Encoder, StreamFormat
from slipstream.datastream.functions import AggregateFunction
from slipstream.datastream.time import Duration, Time
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.datastream.window import (
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)

KEYS = ["a", "b", "c", "d", "e"]
BOUND_MS = 5
TIMER_DELAY_MS = 10
BIG = OutputTag("big")


def event_lines(file_index: int, per_file: int = 40) -> list[str]:
    """``key,ts,amount`` lines: timestamps rise across files, at most BOUND_MS out of order."""
    lines = []
    for i in range(per_file):
        n = file_index * per_file + i
        ts = n * 3 + (n * 7) % BOUND_MS  # never more than BOUND_MS behind the newest
        lines.append(f"{KEYS[(n * 7) % len(KEYS)]},{ts},{(n * 13) % 50}")
    return lines


def write_input(directory: Path, files: range, per_file: int = 40) -> None:
    """Input files ``part-NNN.txt``, each written under a hidden name and moved in whole, aged in
    index order (Spark's file stream source takes files by age, the embedded reader by path)."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in files:
        hidden = directory / f".part-{index:03d}.txt.tmp"
        hidden.write_text("\n".join(event_lines(index, per_file)) + "\n")
        aged = time.time() - 3600 + index
        os.utime(hidden, (aged, aged))
        os.replace(hidden, directory / f"part-{index:03d}.txt")


def parse(line: str) -> tuple[str, int, int]:
    key, ts, amount = line.split(",")
    return key, int(ts), int(amount)


def event_time(event: tuple[str, int, int], record_timestamp: int) -> int:
    return event[1]


def key_of(event: tuple[str, int, int]) -> str:
    return event[0]


def shown(value: Any) -> str:
    return repr(value)


class Tracker(KeyedProcessFunction):
    """Per key: a running count (value state), the last three amounts (list state), counts per
    amount bucket (map state); an event-time timer TIMER_DELAY_MS after each record."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.recent = runtime_context.get_list_state(ListStateDescriptor("recent"))
        self.buckets = runtime_context.get_map_state(MapStateDescriptor("buckets"))

    def process_element(self, event: tuple[str, int, int], ctx: Any) -> Iterator[Any]:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        recent = [*self.recent.get(), event[2]][-3:]
        self.recent.update(recent)
        bucket = event[2] // 10
        self.buckets.put(bucket, (self.buckets.get(bucket) or 0) + 1)
        ctx.timer_service().register_event_time_timer(event[1] + TIMER_DELAY_MS)
        yield ("in", ctx.get_current_key(), ctx.timestamp(), count, tuple(recent),
               tuple(sorted(self.buckets.items())))

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[Any]:
        yield ("timer", ctx.get_current_key(), timestamp)


class SplitBig(ProcessFunction):
    """Amounts of 40 and more to the side output ``big``; the rest on."""

    def process_element(self, event: tuple[str, int, int], ctx: Any) -> Iterator[Any]:
        if event[2] >= 40:
            ctx.output(BIG, event)
        else:
            yield event


class KeyedSplitBig(KeyedProcessFunction):
    """Per key, after event time: amounts of 40 and more to the side output ``big`` (with the key's
    count so far), the rest on."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, event: tuple[str, int, int], ctx: Any) -> Iterator[Any]:
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        if event[2] >= 40:
            ctx.output(BIG, (*event, count))
        else:
            yield event


TUMBLE_MS, SLIDE_SIZE_MS, SLIDE_MS = 30, 60, 20


class WindowFigures(ProcessWindowFunction):
    """Each window's key, bounds, element count and amount total."""

    def process(self, key: str, context: Any, elements: Any) -> Iterator[Any]:
        window = context.window()
        elements = list(elements)
        yield key, window.start, window.end, len(elements), sum(e[2] for e in elements)


class MeanAmount(AggregateFunction):
    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add(self, value: tuple[str, int, int], accumulator: tuple[int, int]) -> tuple[int, int]:
        return accumulator[0] + value[2], accumulator[1] + 1

    def get_result(self, accumulator: tuple[int, int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return a[0] + b[0], a[1] + b[1]


class MeanPerWindow(ProcessWindowFunction):
    """The aggregate's result with the key and the window's end."""

    def process(self, key: str, context: Any, elements: Any) -> Iterator[Any]:
        for mean in elements:
            yield key, context.window().end, round(mean, 6)


def windowed(events: Any) -> Any:
    """The events with event time and watermarks (at most BOUND_MS out of order, so none is late), by key."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)) \
        .with_timestamp_assigner(event_time)
    return events.assign_timestamps_and_watermarks(strategy).key_by(key_of)


def add_amounts(a: tuple[str, int, int], b: tuple[str, int, int]) -> tuple[str, int, int]:
    return a[0], max(a[1], b[1]), a[2] + b[2]


def as_dict(event: tuple[str, int, int]) -> dict[str, Any]:
    return {"key": event[0], "ts": event[1], "amount": event[2]}


def file_source(directory: Path, watched: bool = False) -> FileSource:
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(directory))
    if watched:
        builder = builder.monitor_continuously(Duration.of_millis(100))
    return builder.build()


def source(env: StreamExecutionEnvironment, directory: Path, watched: bool = False,
           history: Path | None = None) -> Any:
    """The events of ``directory``; with ``history``, a HybridSource of that directory's files first."""
    from slipstream.datastream.connectors.hybrid_source import HybridSource
    live = file_source(directory, watched)
    return env.from_source(live if history is None else HybridSource.builder(file_source(history)).add_source(live)
                           .build(), None, "events")


def text_sink(directory: Path) -> FileSink:
    return FileSink.for_row_format(str(directory), Encoder.simple_string_encoder()).build()


def build(env: StreamExecutionEnvironment, kind: str, input_dir: Path, output: Any, watched: bool = False,
          history: Path | None = None) -> None:
    """One job of ``kind`` from ``input_dir`` (after ``history``'s files, when given) to ``output``
    (a directory for a FileSink, or a callable)."""
    events = source(env, input_dir, watched, history).map(parse).name("parse")
    if kind == "stateless":
        stream = events.filter(lambda e: e[2] % 3 != 0).flat_map(lambda e: [e, (e[0].upper(), e[1], -e[2])]) \
            .map(shown).name("show")
    elif kind in ("keyed", "keyed_to_sink"):  # the second's sink right after the keyed operator
        strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)) \
            .with_timestamp_assigner(event_time)
        stream = events.assign_timestamps_and_watermarks(strategy).key_by(key_of) \
            .process(Tracker()).name("tracker").uid("tracker")
        if kind == "keyed":
            stream = stream.map(shown)
    elif kind == "reduce":
        stream = events.key_by(key_of).reduce(add_amounts).name("totals").map(shown)
    elif kind == "sum":  # a built-in rolling aggregation
        stream = events.key_by(key_of).sum(2).name("sums").map(shown)
    elif kind == "tumbling_reduce":
        stream = windowed(events).window(TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE_MS))) \
            .reduce(add_amounts).name("window totals").map(shown)
    elif kind == "sliding_process":
        stream = windowed(events).window(SlidingEventTimeWindows.of(Time.milliseconds(SLIDE_SIZE_MS),
                                                                    Time.milliseconds(SLIDE_MS))) \
            .process(WindowFigures()).name("window figures").map(shown)
    elif kind == "tumbling_aggregate":
        stream = windowed(events).window(TumblingEventTimeWindows.of(Time.milliseconds(TUMBLE_MS))) \
            .aggregate(MeanAmount(), MeanPerWindow()).name("window means").map(shown)
    elif kind == "side_output":
        stream = events.process(SplitBig()).name("split").get_side_output(BIG).map(shown)
    elif kind == "watermarked_split":  # one watermark reaching both inputs of a union (a diamond)
        split = windowed(events).process(KeyedSplitBig()).name("keyed split")
        stream = split.union(split.get_side_output(BIG)).map(shown)
    elif kind == "parquet":  # events as dicts into a Parquet FileSink
        events.filter(lambda e: e[2] % 3 != 0).map(as_dict).name("as dict") \
            .sink_to(parquet_sink(output)).name("parquet")
        return
    else:
        raise ValueError(kind)
    if callable(output):
        stream.add_sink(output).name("collect")
    else:
        stream.sink_to(text_sink(output)).name("files")


def oracle(kind: str, files: range, per_file: int = 40) -> list[str]:
    """What ``kind`` writes for ``files``, computed in plain Python (sorted lines)."""
    events = [parse(line) for index in files for line in event_lines(index, per_file)]
    if kind == "stateless":
        out = [repr(x) for e in events if e[2] % 3 != 0 for x in (e, (e[0].upper(), e[1], -e[2]))]
    elif kind in ("keyed", "keyed_to_sink"):  # str() of a tuple of str and int is its repr()
        out = []
        counts: dict[str, int] = defaultdict(int)
        recent: dict[str, list[int]] = defaultdict(list)
        buckets: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        timers = set()
        for key, ts, amount in events:
            counts[key] += 1
            recent[key] = (recent[key] + [amount])[-3:]
            buckets[key][amount // 10] += 1
            timers.add((key, ts + TIMER_DELAY_MS))
            out.append(repr(("in", key, ts, counts[key], tuple(recent[key]), tuple(sorted(buckets[key].items())))))
        out += [repr(("timer", key, ts)) for key, ts in timers]
    elif kind == "reduce":
        out, totals = [], {}
        for e in events:
            totals[e[0]] = e if e[0] not in totals else add_amounts(totals[e[0]], e)
            out.append(repr(totals[e[0]]))
    elif kind == "sum":  # the running sum of the amounts, the other fields the key's first record's
        out, firsts, sums = [], {}, defaultdict(int)
        for e in events:
            firsts.setdefault(e[0], e)
            sums[e[0]] += e[2]
            out.append(repr((e[0], firsts[e[0]][1], sums[e[0]])))
    elif kind == "tumbling_reduce":
        windows: dict[tuple[str, int], tuple[str, int, int]] = {}
        for e in events:
            slot = (e[0], e[1] - e[1] % TUMBLE_MS)
            windows[slot] = e if slot not in windows else add_amounts(windows[slot], e)
        out = [repr(total) for total in windows.values()]
    elif kind == "sliding_process":
        members: dict[tuple[str, int], list[int]] = defaultdict(list)
        for key, ts, amount in events:
            for start in range(ts - ts % SLIDE_MS, ts - SLIDE_SIZE_MS, -SLIDE_MS):
                members[(key, start)].append(amount)
        out = [repr((key, start, start + SLIDE_SIZE_MS, len(amounts), sum(amounts)))
               for (key, start), amounts in members.items()]
    elif kind == "tumbling_aggregate":
        amounts: dict[tuple[str, int], list[int]] = defaultdict(list)
        for key, ts, amount in events:
            amounts[(key, ts - ts % TUMBLE_MS + TUMBLE_MS)].append(amount)
        out = [repr((key, end, round(sum(values) / len(values), 6))) for (key, end), values in amounts.items()]
    elif kind == "watermarked_split":
        out, seen = [], defaultdict(int)
        for e in events:
            seen[e[0]] += 1
            out.append(repr((*e, seen[e[0]]) if e[2] >= 40 else e))
    else:
        out = [repr(e) for e in events if e[2] >= 40]
    return sorted(out)


def committed_lines(directory: Path) -> list[str]:
    """The lines of the visible part files under ``directory`` (sorted), as a reader sees them:
    names starting with ``.`` or ``_`` (in-progress parts, Spark's sink log) are not output."""
    lines: list[str] = []
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not any(part.startswith((".", "_")) for part in path.relative_to(directory).parts):
            lines.extend(line for line in path.read_text().splitlines() if line)
    return sorted(lines)


def spark_committed_files(directory: Path) -> list[Path]:
    """The files Spark's file sink committed under ``directory``: the ones its log
    (``_spark_metadata``) lists; a micro-batch cut short by a kill leaves files it never lists."""
    import json
    from urllib.parse import unquote, urlparse
    committed: set[str] = set()
    for log in sorted((directory / "_spark_metadata").iterdir()):
        if log.name.startswith(".") or log.suffix == ".tmp":
            continue
        for line in log.read_text().splitlines()[1:]:  # the first line is the log's version
            entry = json.loads(line)
            path = unquote(urlparse(entry["path"]).path)
            if entry["action"] == "add":
                committed.add(path)
            else:
                committed.discard(path)
    return [Path(path) for path in sorted(committed)]


def spark_committed_lines(directory: Path) -> list[str]:
    """The lines of the files Spark's file sink committed under ``directory`` (sorted)."""
    return sorted(line for path in spark_committed_files(directory) for line in path.read_text().splitlines() if line)


PARQUET_SCHEMA_FIELDS = [("key", "string"), ("ts", "int64"), ("amount", "int64")]


def parquet_sink(directory: Path) -> FileSink:
    import pyarrow as pa

    from slipstream.datastream.formats.parquet import ParquetBulkWriters
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in PARQUET_SCHEMA_FIELDS])
    return FileSink.for_bulk_format(str(directory), ParquetBulkWriters.for_schema(schema)).build()


def parquet_rows(paths: list[Path]) -> list[tuple[Any, ...]]:
    """The rows of Parquet files as tuples in the schema's order (sorted)."""
    import pyarrow.parquet as pq
    names = [name for name, _ in PARQUET_SCHEMA_FIELDS]
    return sorted(tuple(row[name] for name in names) for path in paths for row in pq.read_table(path).to_pylist())


def visible_files(directory: Path) -> list[Path]:
    """The committed part files of an embedded FileSink (hidden in-progress ones left out)."""
    return [path for path in sorted(directory.rglob("*")) if path.is_file()
            and not any(part.startswith((".", "_")) for part in path.relative_to(directory).parts)]


# -- a bootstrap then a stream: a co_group backlog as a keyed co-process's initial state ------------
USERS = 50


def history_table() -> Any:
    import pyarrow as pa
    rows = range(600)
    return pa.table({"user_id": [(n * 7) % (USERS - 5) for n in rows], "amount": [float(n % 37) for n in rows]})


def users_table() -> Any:
    import pyarrow as pa
    return pa.table({"user_id": list(range(USERS)), "limit": [100.0 + 10 * u for u in range(USERS)]})


def profiles(first: Any, second: Any) -> Any:
    import polars as pl
    stats = first.group_by("user_id").agg(pl.len().alias("txns"), pl.col("amount").mean().alias("average"))
    return second.join(stats, on="user_id", how="left").with_columns(pl.col("txns").fill_null(0),
                                                                     pl.col("average").fill_null(0.0))


def live(count: int = 300) -> Iterator[dict[str, Any]]:
    for n in range(count):
        yield {"txn": n, "user_id": (n * 11) % USERS, "amount": float((n * 17) % 90)}


def live_source() -> Iterator[dict[str, Any]]:
    return live()


class Score(KeyedCoProcessFunction):
    """Live transactions (input 1) scored against their user's profile (input 2, the backlog)."""

    def open(self, runtime_context: Any) -> None:
        self.profile = runtime_context.get_state(ValueStateDescriptor("profile"))
        self.waiting = runtime_context.get_list_state(ListStateDescriptor("waiting"))

    def process_element1(self, txn: dict[str, Any], ctx: Any) -> Iterator[Any]:
        profile = self.profile.value()
        if profile is None:
            self.waiting.add(txn)
        else:
            yield self.score(txn, profile)

    def process_element2(self, profile: Any, ctx: Any) -> Iterator[Any]:
        self.profile.update(profile)
        for txn in self.waiting.get():
            yield self.score(txn, profile)
        self.waiting.clear()

    @staticmethod
    def score(txn: dict[str, Any], profile: Any) -> str:
        return repr((txn["txn"], txn["user_id"], profile.txns, round(profile.average, 6),
                     txn["amount"] > profile.limit / 4))


def bootstrap_job(env: StreamExecutionEnvironment, directory: Path, output: Any) -> None:
    import pyarrow.parquet as pq

    from slipstream.datastream.connectors.arrow import ArrowSource
    from slipstream.datastream.connectors.iterator import IteratorSource
    from slipstream.datastream.formats.parquet import ParquetColumnarRowInputFormat
    from slipstream.datastream.window import EndOfStreamWindows
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(history_table(), directory / "history.parquet")
    history = env.from_source(FileSource.for_bulk_file_format(ParquetColumnarRowInputFormat(),
                                                              str(directory / "history.parquet")).build(),
                              None, "history")
    users = env.from_source(ArrowSource(users_table()), None, "users")
    user_profiles = history.co_group(users).where("user_id").equal_to("user_id") \
        .window(EndOfStreamWindows.get()).apply(profiles, vectorized=True).name("profiles")
    transactions = env.from_source(IteratorSource(live_source, bounded=False), None, "live")
    transactions.connect(user_profiles).key_by(lambda t: t["user_id"], lambda p: p.user_id) \
        .process(Score()).name("score").uid("score").add_sink(output)


def bootstrap_oracle() -> list[str]:
    history = history_table().to_pylist()
    out = []
    for txn in live():
        mine = [h["amount"] for h in history if h["user_id"] == txn["user_id"]]
        average = sum(mine) / len(mine) if mine else 0.0
        out.append(repr((txn["txn"], txn["user_id"], len(mine), round(average, 6),
                         txn["amount"] > (100.0 + 10 * txn["user_id"]) / 4)))
    return sorted(out)


# -- a KeyedStateBootstrapFunction: its backlog as Spark batch, each key's state Spark's initial state --
class Totals(KeyedProcessFunction, KeyedStateBootstrapFunction):
    """Per key a count and a total of the amounts: from the backlog in one polars query, then
    record by record, each live record emitting ``key,count,total``."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_backlog(self, frame: Any) -> Any:
        import polars as pl
        return frame.group_by("f0").agg(pl.len().alias("count"), pl.col("f2").sum().alias("total"))

    def process_element(self, event: tuple[str, int, int], ctx: Any) -> Iterator[str]:
        count, total = (self.count.value() or 0) + 1, (self.total.value() or 0) + event[2]
        self.count.update(count)
        self.total.update(total)
        yield f"{event[0]},{count},{total}"


def totals_job(env: StreamExecutionEnvironment, source: Any, output: Any) -> None:
    """``source``'s lines (history, then live) into :class:`Totals`, keyed by the key's field."""
    stream = env.from_source(source, None, "events").map(parse).name("parse").key_by(0) \
        .process(Totals()).name("totals").uid("totals")
    if callable(output):
        stream.add_sink(output).name("collect")
    else:
        stream.sink_to(text_sink(output)).name("files")


def totals_oracle(backlog_files: range, live_files: range) -> list[str]:
    """What :func:`totals_job` emits: nothing for the backlog, a line per live record (sorted)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for index in backlog_files:
        for key, _, amount in map(parse, event_lines(index)):
            counts[key][0] += 1
            counts[key][1] += amount
    out = []
    for index in live_files:
        for key, _, amount in map(parse, event_lines(index)):
            counts[key][0] += 1
            counts[key][1] += amount
            out.append(f"{key},{counts[key][0]},{counts[key][1]}")
    return sorted(out)


class KeylessTotals(Totals):
    """A bootstrap function whose ``process_backlog`` forgets the key column."""

    def process_backlog(self, frame: Any) -> Any:
        return super().process_backlog(frame).drop("f0")


# -- a KeyedStateBootstrapFunction over Parquet history: columns into process_backlog ---------------
class LastAmounts(KeyedProcessFunction, KeyedStateBootstrapFunction):
    """Per user the count and the last amount (which shows the backlog's arrival order), then per
    live transaction ``user,count,last,amount``."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.last = runtime_context.get_state(ValueStateDescriptor("last"))

    def process_backlog(self, frame: Any) -> Any:
        import polars as pl
        return frame.group_by("user").agg(pl.len().alias("count"), pl.col("amount").last().alias("last"))

    def process_element(self, txn: Any, ctx: Any) -> Iterator[str]:
        count, last = (self.count.value() or 0) + 1, self.last.value()
        self.count.update(count)
        self.last.update(txn["amount"])
        yield f"{txn['user']},{count},{last},{txn['amount']}"


def parquet_history(directory: Path) -> list[dict[str, Any]]:
    """Two Parquet files of several row groups each (users u0-u6); the rows in arrival order."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"user": f"u{(n * 5) % 7}", "amount": (n * 31) % 101} for n in range(400)]
    for index, part in enumerate((rows[:250], rows[250:])):
        pq.write_table(pa.Table.from_pylist(part), directory / f"part-{index}.parquet", row_group_size=64)
    return rows


def live_transactions() -> Iterator[dict[str, Any]]:
    return iter([{"user": f"u{(n * 3) % 9}", "amount": n} for n in range(60)])


def last_amounts_oracle(history: list[dict[str, Any]]) -> list[str]:
    count: dict[str, int] = defaultdict(int)
    last: dict[str, Any] = {}
    for row in history:
        count[row["user"]] += 1
        last[row["user"]] = row["amount"]
    out = []
    for txn in live_transactions():
        count[txn["user"]] += 1
        out.append(f"{txn['user']},{count[txn['user']]},{last.get(txn['user'])},{txn['amount']}")
        last[txn["user"]] = txn["amount"]
    return sorted(out)

"""A job the fault-injection tests run in a child process and SIGKILL at random moments.

Usage: python crash_job.py KIND OUT_DIR CHECKPOINT_DIR N

It restores from the latest checkpoint through the command-line route: the tests set
``SLIPSTREAM_RESTORE_FROM=latest`` in its environment. Every job's committed output
(the visible part files in OUT_DIR) has an oracle computed by ``oracle(KIND, N)``
that does not depend on scheduling, so "nothing lost, nothing duplicated" is an
equality of multisets.

KIND:
  counts   numbers 1..N (2 source subtasks) -> key_by(x % 13) -> running count per key
  wide     as counts, keyed by ``wide_key``: the first 20,000 numbers make 20,000 keys, the rest go to 500
           hot ones, so a checkpoint changes a small share of the keys however many records it covers
           (incremental checkpoints add layers of changes)
  union    two sources (numbers, and the lines of a text file) -> union -> key_by -> a
           KeyedProcessFunction with value state -> count per key (a task with several inputs: alignment)
  windows  numbers as event time -> tumbling event-time windows of 100 per key (timers in state)
  bad      CSV files with bad lines -> good rows counted per key; bad rows routed by the source
           (with_bad_record_output) to a side output and written by a second FileSink
  hybrid   HybridSource: text files of 1..N/2, then numbers N/2+1..N -> count per key, as counts
  loop     numbers 1..N -> a loop (FLIP-15) each number goes round ``rounds(x)`` times, decremented
           by a keyed function inside the loop that counts per key the numbers that leave it
           (``loop_lines``): many records are in the feedback channel at every barrier
  nested   as loop, but every round of the outer loop runs an inner loop ``inner_rounds(x, r)`` times
  iteration numbers 1..N -> a bounded, sync FLIP-176 iteration: each number goes round ``rounds(x)``
           epochs; a keyed listener (key ``x % KEYS``) keeps each epoch's numbers in an attribute and, at
           its epoch watermark, sends them round and their count and sum on; a listener at parallelism 1
           writes one line per epoch and one when the iteration terminates (``iteration_lines``)
  iteration_loop  as iteration, but in every epoch each number first goes round a FLIP-15 loop inside
           the body ``inner_rounds(x, left)`` times (same oracle: an epoch passes the loop whole)
  watched  a watched directory (``monitor_continuously``) ``watched/`` beside OUT_DIR -> a word count
           (keyed reduce, backlog sorted): unbounded, so the tests stop it with SIGKILL; N is unused
  broadcast numbers 1..N (2 source subtasks) -> key_by(x % KEYS), connected with the rules 1..N/5
           broadcast (2 source subtasks) -> a KeyedBroadcastProcessFunction: the rules build a sum per
           residue in broadcast state (read first: they are backlog), each number counts its key in
           keyed state and is written with the count and its key's sum (``broadcast_lines``); the hook is
           on the numbers read and on the lines written (before and after the rules ended)
  online   examples/iteration_online_logistic_regression.py's offline-then-online job: a bounded
           iteration trains on ``HISTORY`` samples, then an unbounded one on N live samples from an
           unbounded source; each model version is written as ``version;w1,w2,w3``. Its oracle is
           numpy's (``online_models``), equal within floating-point error, so tests compare it
           themselves (summation order may differ in the last bits)

Usage for the last three: python crash_job.py KIND OUT_DIR CHECKPOINT_DIR N [PARALLELISM]

With ``CRASH_JOB_WORKERS=N`` in its environment the job's subtasks run on N worker processes
(``configure(workers=N)``); a SIGKILL of the job's process is then one of the driver, whose workers
end as their control sockets close. With ``CRASH_JOB_ASYNC_WRITES=1`` every checkpoint is written by the
background writer (``set_async_write_threshold(0)``), however small its state. With
``CRASH_JOB_HOLD_WRITE=MARKER`` too, the background writer stops inside the first fsync it makes
once a checkpoint is complete, after creating the file MARKER (unless it exists already): the
test kills the job there, in the middle of writing a checkpoint (:class:`HoldingWrite`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter

from slipstream.datastream import (
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    ValueStateDescriptor,
)
from slipstream.datastream.iteration import IterationListener
from slipstream.filesystem import FileSystem
from slipstream.runtime.checkpoint.storage import CheckpointStorage

KEYS = 13
WIDE_KEYS = 20_000
"""Keys of the ``wide`` job: one per number up to here."""
HOT_KEYS = 500
"""Keys of the ``wide`` job's numbers after the first ``WIDE_KEYS``."""
RULE_SUMS = MapStateDescriptor("rule sums")
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def wide_key(x: int) -> int:
    """The ``wide`` job's key of number ``x``: every number its own key at first, then a few hot keys."""
    return x % WIDE_KEYS if x <= WIDE_KEYS else x % HOT_KEYS


def counted_key(x: int) -> int:
    """The ``counts`` and ``hybrid`` jobs' key of number ``x``."""
    return x % KEYS


def is_bad(i: int) -> int:
    """0 for a good CSV line, else which kind of bad line id ``i`` is written as."""
    return 1 if i % 17 == 0 else 2 if i % 29 == 0 else 0


CSV_FILES = 4


def csv_input(directory: str, n: int) -> str:
    """Ids 1..n over CSV_FILES files with a header (id ``i`` in file ``i % CSV_FILES``), some lines bad."""
    os.makedirs(directory, exist_ok=True)
    for f in range(CSV_FILES):
        path = os.path.join(directory, f"in{f}.csv")
        if os.path.exists(path):
            continue
        lines = ["id,name"]
        for i in range(1, n + 1):
            if i % CSV_FILES == f:
                lines.append((f"{i},n{i}", f"{i},n{i},extra", f"x{i},n{i}")[is_bad(i)])
        with open(path + ".tmp", "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(path + ".tmp", path)
    return directory


def text_numbers(directory: str, first: int, last: int, files: int = 3) -> str:
    """The numbers first..last as lines of ``files`` text files."""
    os.makedirs(directory, exist_ok=True)
    numbers = list(range(first, last + 1))
    for f in range(files):
        path = os.path.join(directory, f"n{f}.txt")
        if not os.path.exists(path):
            with open(path + ".tmp", "w") as handle:
                handle.write("".join(f"{x}\n" for x in numbers[f::files]))
            os.replace(path + ".tmp", path)
    return directory


def rounds(x: int) -> int:
    """How many times number ``x`` goes round the (outer) loop of the loop jobs."""
    return x % 11 + 1


def inner_rounds(x: int, remaining: int) -> int:
    """How many times ``x`` goes round the inner loop of the nested job when ``remaining`` outer rounds are left."""
    return (x + remaining) % 3 + 1


def loop_lines(n: int, nested: bool = False) -> Counter:
    """The loop jobs' oracle: ``r,x,steps`` once per number (steps = rounds it went, inner ones
    included) and ``c,key,count`` for count 1..(numbers of that key): the running count the loop's
    keyed state holds as each number leaves."""
    def steps(x: int) -> int:
        return rounds(x) + (sum(inner_rounds(x, r) for r in range(1, rounds(x) + 1)) if nested else 0)

    per_key = Counter(x % KEYS for x in range(1, n + 1))
    return Counter([f"r,{x},{steps(x)}" for x in range(1, n + 1)]
                   + [f"c,{k},{i}" for k, count in per_key.items() for i in range(1, count + 1)])


def iteration_lines(n: int, rounds_of=rounds) -> Counter:
    """The iteration job's oracle (numbers 1..n going round ``rounds_of(x)`` epochs): ``r,x`` as each
    number leaves; per epoch e, the count, sum and running sum of the numbers that go round in it;
    ``final,visits,running sum`` at the end."""
    lines = [f"r,{x}" for x in range(1, n + 1)]
    cumulative = visits = 0
    for epoch in range(1, max(rounds_of(x) for x in range(1, n + 1)) + 1):
        numbers = [x for x in range(1, n + 1) if rounds_of(x) >= epoch]
        cumulative += sum(numbers)
        visits += len(numbers)
        lines.append(f"epoch,{epoch},{len(numbers)},{sum(numbers)},{cumulative}")
    return Counter(lines + [f"final,{visits},{cumulative}"])


HISTORY = 1000
"""Samples the online job trains on offline, before its N live ones."""


def online_samples(n: int):
    sys.path.insert(0, EXAMPLES)
    import iteration_online_logistic_regression as online

    return online, online.make_samples(HISTORY + n, 3, seed=7)


def online_models(n: int) -> list:
    """The online job's oracle: the model versions 1, 2, ... numpy's mini-batch SGD gives."""
    import numpy as np

    online, (X, y) = online_samples(n)
    start = online.offline_numpy(X[:HISTORY], y[:HISTORY], np.zeros(3), 0.5, 12)
    return online.online_numpy(X[HISTORY:], y[HISTORY:], start, 0.5, 40)


def rule_sums(n: int) -> Counter:
    """The broadcast job's broadcast state when its rules have ended: the rules 1..n/5 summed by residue."""
    sums: Counter = Counter()
    for rule in range(1, n // 5 + 1):
        sums[rule % KEYS] += rule
    return sums


def broadcast_lines(n: int) -> Counter:
    sums = rule_sums(n)
    per_key = Counter(x % KEYS for x in range(1, n + 1))
    return Counter(f"{k},{i},{sums[k]}" for k, count in per_key.items() for i in range(1, count + 1))


class SumRulesCountNumbers(KeyedBroadcastProcessFunction):
    """The broadcast job's function: rules summed by residue in broadcast state, numbers counted per key."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_broadcast_element(self, value, ctx):
        sums = ctx.get_broadcast_state(RULE_SUMS)
        sums.put(value % KEYS, (sums.get(value % KEYS) or 0) + value)
        return ()

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield f"{ctx.get_current_key()},{count},{ctx.get_broadcast_state(RULE_SUMS).get(ctx.get_current_key())}"


def newest_complete_id(checkpoints: str) -> int:
    """The id of the newest complete checkpoint in the directory ``checkpoints`` (0: none yet)."""
    ids = CheckpointStorage(checkpoints).complete_ids() if os.path.isdir(checkpoints) else []
    return ids[-1] if ids else 0


def oracle(kind: str, n: int) -> Counter:
    if kind == "broadcast":
        return broadcast_lines(n)
    if kind in ("iteration", "iteration_loop"):
        return iteration_lines(n)
    if kind in ("loop", "nested"):
        return loop_lines(n, kind == "nested")
    if kind in ("counts", "hybrid", "wide"):
        key = wide_key if kind == "wide" else counted_key
        per_key = Counter(key(x) for x in range(1, n + 1))
        return Counter(f"{k},{i}" for k, count in per_key.items() for i in range(1, count + 1))
    if kind == "union":
        values = list(range(1, n + 1)) + list(range(1, n // 2 + 1))
        per_key = Counter(v % KEYS for v in values)
        return Counter(f"{k},{i}" for k, count in per_key.items() for i in range(1, count + 1))
    if kind == "bad":
        per_key = Counter(i % KEYS for i in range(1, n + 1) if not is_bad(i))
        result = Counter(f"{k},{i}" for k, count in per_key.items() for i in range(1, count + 1))
        for f in range(CSV_FILES):
            ids = [i for i in range(1, n + 1) if i % CSV_FILES == f]
            result.update(f"bad,in{f}.csv,{line}" for line, i in enumerate(ids, start=2) if is_bad(i))
        return result
    if kind == "windows":
        sums = Counter()
        for x in range(1, n + 1):
            sums[(x % KEYS, x // 100 * 100)] += x
        return Counter(f"{k},{start},{total}" for (k, start), total in sums.items())
    raise ValueError(kind)


FILE_INPUTS = {"union": "lines.txt", "bad": "csv", "hybrid": "history", "watched": "watched"}


def file_input(kind: str, out: str) -> str:
    """The path the FileSource of job ``kind`` reads (a file or a directory), beside OUT_DIR."""
    return os.path.join(os.path.dirname(out), FILE_INPUTS[kind])


def text_input(path: str, n: int) -> str:
    """The numbers 1..n/2 as the lines of the text file ``path``."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as handle:
            handle.write("".join(f"{i}\n" for i in range(1, n // 2 + 1)))
        os.replace(path + ".tmp", path)
    return path


class Hook:
    """An identity map in every job (so the job graph is the same), through which in-process
    tests inject failures: ``fail(value)`` may raise."""

    def __init__(self, fail=None) -> None:
        self.fail = fail

    def __call__(self, value):
        if self.fail is not None:
            self.fail(value)
        return value


def build(kind: str, out: str, checkpoints: str, n: int, *, interval_ms: int | None = 40,
          records: int | None = 3000, parallelism: int = 2, mode=None, restart=None, fail=None,
          retained: int = 2, async_writes: bool = False):
    from slipstream.datastream import (CheckpointingMode, KeyedProcessFunction, RestartStrategies,
                                       StreamExecutionEnvironment, ValueStateDescriptor)
    from slipstream.datastream.connectors.file_system import FileSink, FileSource
    from slipstream.datastream.connectors.number_seq import NumberSequenceSource
    from slipstream.datastream.formats.base import Encoder, StreamFormat

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.configure(batch_size=64, backlog_sorting=False)
    config = env.get_checkpoint_config()
    config.set_checkpointing_mode(mode or CheckpointingMode.EXACTLY_ONCE)
    if interval_ms is not None:
        config.set_checkpoint_interval(interval_ms)
    if records is not None:
        config.set_checkpoint_interval_records(records)
    config.set_checkpoint_storage_dir(checkpoints).set_num_retained_checkpoints(retained)
    if async_writes:
        config.set_async_write_threshold(0)
    env.set_restart_strategy(restart or RestartStrategies.no_restart())
    hook = Hook(fail)
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()

    if kind in ("counts", "wide"):
        key = wide_key if kind == "wide" else counted_key
        numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers").set_parallelism(2)
        (numbers.map(hook).uid("hook").map(lambda x: (key(x), 1)).uid("pairs")
         .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
         .map(lambda p: f"{p[0]},{p[1]}").uid("format").sink_to(sink).uid("sink"))
    elif kind == "union":
        class Count(KeyedProcessFunction):
            def open(self, runtime_context):
                self.count = runtime_context.get_state(ValueStateDescriptor("count"))

            def process_element(self, value, ctx):
                count = (self.count.value() or 0) + 1
                self.count.update(count)
                yield f"{ctx.get_current_key()},{count}"

        numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers").set_parallelism(2)
        lines = env.from_source(FileSource.for_record_stream_format(
            StreamFormat.text_line_format(), text_input(file_input(kind, out), n)).build(), None, "lines").uid("lines").set_parallelism(2)
        (numbers.union(lines.map(int).uid("parse")).map(hook).uid("hook").key_by(lambda v: v % KEYS)
         .process(Count()).uid("count").sink_to(sink).uid("sink"))
    elif kind == "broadcast":
        numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers").set_parallelism(2)
        rules = env.from_source(NumberSequenceSource(1, n // 5), None, "rules").uid("rules").set_parallelism(2)
        (numbers.map(hook).uid("hook").key_by(lambda x: x % KEYS).connect(rules.broadcast(RULE_SUMS))
         .process(SumRulesCountNumbers()).uid("count").map(hook).uid("hook-out").sink_to(sink).uid("sink"))
    elif kind == "bad":
        from slipstream.datastream.connectors.file_system import OutputFileConfig
        from slipstream.datastream.formats.csv import CsvReaderFormat, CsvSchema
        from slipstream.datastream.output_tag import OutputTag
        from slipstream.datastream.typeinfo import Types

        schema = (CsvSchema.builder().add_number_column("id", number_type=Types.INT()).add_string_column("name")
                  .set_use_header().build())
        bad = OutputTag("bad-records")
        source = (FileSource.for_record_stream_format(CsvReaderFormat.for_schema(schema),
                                                      csv_input(file_input(kind, out), n))
                  .with_bad_record_output(bad).build())
        rows = env.from_source(source, None, "rows").uid("rows").set_parallelism(2)
        (rows.map(lambda row: row.id).uid("ids").map(hook).uid("hook").map(lambda x: (x % KEYS, 1)).uid("pairs")
         .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
         .map(lambda p: f"{p[0]},{p[1]}").uid("format").sink_to(sink).uid("sink"))
        bad_sink = (FileSink.for_row_format(out, Encoder.simple_string_encoder())
                    .with_output_file_config(OutputFileConfig("bad")).build())
        (rows.get_side_output(bad).map(lambda r: f"bad,{os.path.basename(r.path)},{r.line}").uid("bad-format")
         .sink_to(bad_sink).uid("bad-sink"))
    elif kind == "hybrid":
        from slipstream.datastream.connectors.hybrid_source import HybridSource

        history = FileSource.for_record_stream_format(
            StreamFormat.text_line_format(), text_numbers(file_input(kind, out), 1, n // 2)
        ).build()
        source = HybridSource.builder(history).add_source(NumberSequenceSource(n // 2 + 1, n)).build()
        numbers = env.from_source(source, None, "numbers").uid("numbers").set_parallelism(2)
        (numbers.map(int).uid("int").map(hook).uid("hook").map(lambda x: (x % KEYS, 1)).uid("pairs")
         .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
         .map(lambda p: f"{p[0]},{p[1]}").uid("format").sink_to(sink).uid("sink"))
    elif kind == "watched":
        from slipstream.datastream.time import Duration

        env.configure(backlog_sorting="always")  # the reduce sorts the files present at start, emits at their end
        source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(),
                                                      file_input(kind, out))
                  .monitor_continuously(Duration.of_millis(20)).build())
        words = env.from_source(source, None, "words").uid("words")
        (words.map(hook).uid("hook").map(lambda w: (w, 1)).uid("pairs")
         .key_by(lambda p: p[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("count")
         .map(lambda p: f"{p[0]},{p[1]}").uid("format").sink_to(sink).uid("sink"))
    elif kind == "windows":
        from slipstream.datastream.time import Time
        from slipstream.datastream.watermark_strategy import TimestampAssigner, WatermarkStrategy
        from slipstream.datastream.window import TumblingEventTimeWindows

        class Stamp(TimestampAssigner):
            def extract_timestamp(self, value, record_timestamp):
                return value

        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp())
        numbers = env.from_source(NumberSequenceSource(1, n), strategy, "numbers").uid("numbers").set_parallelism(2)
        (numbers.map(hook).uid("hook").key_by(lambda x: x % KEYS).window(TumblingEventTimeWindows.of(Time.milliseconds(100)))
         .process(_window_sum()).uid("windows").sink_to(sink).uid("sink"))
    elif kind in ("loop", "nested"):
        numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
        (numbers.key_by(lambda x: x % KEYS).process(_counted("from-the-source")).uid("source-count")
         .map(lambda x: (x, rounds(x), 0)).uid("rounds").iterate(_loop_body(kind == "nested", hook))
         .flat_map(lambda r: [f"r,{r[0]},{r[2]}", f"c,{r[3]},{r[4]}"]).uid("format").sink_to(sink).uid("sink"))
    elif kind in ("iteration", "iteration_loop"):
        from slipstream.datastream.iteration import DataStreamList, iterate_bounded_streams_until_termination

        numbers = env.from_source(NumberSequenceSource(1, n), None, "numbers").uid("numbers")
        variables = numbers.map(lambda x: (x, rounds(x))).uid("rounds")
        outputs = iterate_bounded_streams_until_termination(DataStreamList.of(variables), DataStreamList.of(),
                                                            _iteration_body(hook, kind == "iteration_loop"))
        outputs.get(0).union(outputs.get(1)).sink_to(sink).uid("sink")
    elif kind == "online":
        import numpy as np

        online, (X, y) = online_samples(n)
        history, live = (X[:HISTORY], y[:HISTORY]), (X[HISTORY:], y[HISTORY:])
        models = online.build_offline_then_online(env, history, live, np.zeros(3), 0.5, 12, 40, block=100)
        (models.map(lambda m: f"{m[0]};{','.join(repr(float(w)) for w in m[1])}").uid("format")
         .sink_to(sink).uid("sink"))
    else:
        raise ValueError(kind)
    return env


def _counted(name: str):
    """A keyed function that counts the records of each key in its state ``name`` and passes them on."""
    from slipstream.datastream import KeyedProcessFunction, ValueStateDescriptor

    class Counted(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor(name))

        def process_element(self, value, ctx):
            self.count.update((self.count.value() or 0) + 1)
            yield value

    return Counted()


def _loop_body(nested: bool, hook):
    """The loop of the loop jobs over records ``(x, rounds left, steps so far)``: a keyed function
    (key ``x % KEYS``) decrements the rounds left; at zero it counts the number in its state and the
    record leaves as ``(x, -, steps, key, count)``. With ``nested``, each round first goes round an
    inner loop ``inner_rounds`` times."""
    from slipstream.datastream import KeyedProcessFunction, ValueStateDescriptor

    class Round(KeyedProcessFunction):
        def open(self, runtime_context):
            self.count = runtime_context.get_state(ValueStateDescriptor("left-the-loop"))

        def process_element(self, value, ctx):
            x, left, steps = value[:3]
            if left > 1:
                yield (x, left - 1, steps + 1)
            else:
                count = (self.count.value() or 0) + 1
                self.count.update(count)
                yield (x, 0, steps + 1, ctx.get_current_key(), count)

    def inner(records):
        stepped = records.map(lambda r: (r[0], r[1], r[2] + 1, r[3] - 1)).uid("inner-step")
        return (stepped.filter(lambda r: r[3] > 0).uid("inner-again").rebalance(),
                stepped.filter(lambda r: r[3] <= 0).uid("inner-done"))

    def body(records):
        if nested:
            records = (records.map(lambda r: (r[0], r[1], r[2], inner_rounds(r[0], r[1]))).uid("inner-rounds")
                       .iterate(inner).map(lambda r: r[:3]).uid("inner-out"))
        stepped = records.map(hook).uid("hook").key_by(lambda r: r[0] % KEYS).process(Round()).uid("loop-count")
        return (stepped.filter(lambda r: len(r) == 3).uid("again").rebalance(),
                stepped.filter(lambda r: len(r) == 5).uid("done"))

    return body


DONE, PARTIALS = OutputTag("done"), OutputTag("partials")


class EpochStep(KeyedProcessFunction, IterationListener):
    """Sync, over ``(x, rounds left)``: keeps the epoch's records in an attribute; at its epoch
    watermark sends them round (or out as ``r,x`` on DONE, at their last round) and their count and
    sum on PARTIALS. Counts each key's records in keyed state ``visits``."""

    def __init__(self):
        self.waiting = []

    def open(self, runtime_context):
        self.visits = runtime_context.get_state(ValueStateDescriptor("visits"))  # a handle among the attributes

    def process_element(self, value, ctx):
        self.visits.update((self.visits.value() or 0) + 1)
        self.waiting.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark, context, collector):
        if not self.waiting:
            return
        for x, left in self.waiting:
            if left > 1:
                collector.collect((x, left - 1))
            else:
                context.output(DONE, f"r,{x}")
        context.output(PARTIALS, (epoch_watermark, len(self.waiting), sum(x for x, _ in self.waiting)))
        self.waiting = []


class EpochLines(ProcessFunction, IterationListener):
    """At parallelism 1: one line per epoch from EpochStep's partials, one when the iteration ends."""

    def __init__(self):
        self.parts, self.visits, self.cumulative = [], 0, 0

    def process_element(self, value, ctx):
        self.parts.append(value)

    def on_epoch_watermark_incremented(self, epoch_watermark, context, collector):
        # Off the feedback path, the next epoch's partials may be here already (the rounds do
        # not wait for this branch); an earlier epoch's would mean the watermark came too soon.
        due = [p for p in self.parts if p[0] <= epoch_watermark]
        if not due:
            return
        if any(epoch < epoch_watermark for epoch, _, _ in due):
            raise AssertionError(f"partials {due} at epoch watermark {epoch_watermark}")
        self.parts = [p for p in self.parts if p[0] > epoch_watermark]
        self.write(epoch_watermark, due, collector)

    def write(self, epoch, due, collector):
        count, total = sum(p[1] for p in due), sum(p[2] for p in due)
        self.visits += count
        self.cumulative += total
        collector.collect(f"epoch,{epoch},{count},{total},{self.cumulative}")

    def on_iteration_terminated(self, context, collector):
        collector.collect(f"final,{self.visits},{self.cumulative}")


def _iteration_body(hook, inner_loop: bool):
    """The iteration job's body over variables ``(x, rounds left)`` (see the module docstring)."""
    from slipstream.datastream.iteration import IterationBodyResult

    def lap(records):
        stepped = records.map(lambda r: (r[0], r[1], r[2] - 1)).uid("lap")
        return stepped.filter(lambda r: r[2] > 0).uid("lap-again").rebalance(), \
            stepped.filter(lambda r: r[2] == 0).uid("lap-done")

    def body(variables, data):
        entering = variables.get(0).map(hook).uid("hook")
        if inner_loop:
            entering = (entering.map(lambda r: (r[0], r[1], inner_rounds(r[0], r[1]))).uid("laps")
                        .iterate(lap).map(lambda r: r[:2]).uid("laps-done"))
        stepped = entering.key_by(lambda r: r[0] % KEYS).process(EpochStep()).uid("step")
        epochs = stepped.get_side_output(PARTIALS).global_().process(EpochLines()).uid("epochs").set_parallelism(1)
        return IterationBodyResult([stepped], [stepped.get_side_output(DONE), epochs])

    return body


def _window_sum():
    from slipstream.datastream.window import ProcessWindowFunction

    class WindowSum(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield f"{key},{context.window().start},{sum(elements)}"

    return WindowSum()


class HoldingWrite(FileSystem):
    """A file system whose first fsync on the background checkpoint writer's thread once a
    checkpoint is complete creates ``marker`` and sleeps until the process is killed (no hold when
    ``marker`` exists: the restarted job runs freely)."""

    def __init__(self, checkpoints: str, marker: str) -> None:
        self.checkpoints, self.marker = checkpoints, marker

    def _fsync(self, fd: int) -> None:
        super()._fsync(fd)
        if threading.current_thread() is threading.main_thread() or os.path.exists(self.marker):
            return
        complete = CheckpointStorage(self.checkpoints).complete_ids()
        if complete:
            with open(self.marker + ".tmp", "w") as file:
                file.write(" ".join(map(str, complete)))
            os.replace(self.marker + ".tmp", self.marker)  # the complete checkpoints when the writer stopped
            time.sleep(600)


def main() -> None:
    kind, out, checkpoints, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if len(sys.argv) > 5:  # the loop jobs: a checkpoint every 400 numbers read, many per run; the
        # iteration's epochs start once every number was read: a checkpoint every 40 ms, most during them
        env = build(kind, out, checkpoints, n, parallelism=int(sys.argv[5]),
                    records=None if kind == "iteration" else 400)
    else:
        env = build(kind, out, checkpoints, n, async_writes=os.environ.get("CRASH_JOB_ASYNC_WRITES") == "1")
    if os.environ.get("CRASH_JOB_WORKERS"):
        env.configure(workers=int(os.environ["CRASH_JOB_WORKERS"]))
    marker = os.environ.get("CRASH_JOB_HOLD_WRITE")
    if marker:
        from slipstream.runtime.driver import JobDriver
        JobDriver(env._take_job(f"crash-{kind}"), os.environ.get("SLIPSTREAM_RESTORE_FROM"),
                  fs=HoldingWrite(checkpoints, marker)).run()
        return
    env.execute(f"crash-{kind}")  # restore_from comes from SLIPSTREAM_RESTORE_FROM


if __name__ == "__main__":
    main()

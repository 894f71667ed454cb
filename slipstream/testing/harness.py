"""Operator test harnesses: one operator subtask driven by the test, as Flink's
``OneInputStreamOperatorTestHarness``, ``KeyedOneInputStreamOperatorTestHarness`` and
``KeyedTwoInputStreamOperatorTestHarness`` drive theirs.

The test pushes records with timestamps, watermarks, backlog on/off (``RecordAttributes``) and
end of input into any input, moves processing time, and reads what the operator emitted (records,
side outputs, watermarks, in order) and which timers it holds; :meth:`OperatorHarness.snapshot`
takes the subtask's state as a checkpoint would, and a new harness restores it (also at another
parallelism). The operator runs as in a task: same context, keyed backend, timer service and
order of calls, without channels or a scheduler in between.

>>> from slipstream.testing import OperatorHarness
>>> harness = OperatorHarness.of(lambda env: env.from_collection([]).key_by(lambda r: r[0]).sum(1))
>>> _ = harness.process_element(("a", 1), 10).process_element(("b", 2), 11).process_element(("a", 3), 12)
>>> harness.extract_output_values()
[('a', 1), ('b', 2), ('a', 4)]
>>> harness.extract_output_records()[-1]
Record(value=('a', 4), timestamp=12)
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from slipstream.attributes import RecordAttributes
from slipstream.datastream.environment import StreamExecutionEnvironment
from slipstream.datastream.output_tag import OutputTag
from slipstream.datastream.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Watermark
from slipstream.datastream.transformations import Transformation
from slipstream.operators.base import OperatorContext, Output, StreamOperator
from slipstream.operators.elements import RecordBatch, WatermarkStatus
from slipstream.runtime.checkpoint.snapshot import close_files, decode_backlog, encode_backlog
from slipstream.runtime.key_groups import assign_to_key_group, key_group_range
from slipstream.runtime.state.heap_backend import HeapKeyedStateBackend
from slipstream.runtime.task import TaskProcessingTimeService
from slipstream.testing.clock import ManualClock


class Record(NamedTuple):
    """A record the operator emitted, with its event timestamp (None when it has none)."""

    value: Any
    timestamp: int | None


class SideRecord(NamedTuple):
    """A record the operator emitted to the side output ``tag_id``."""

    tag_id: str
    value: Any
    timestamp: int | None


class HarnessOutput(Output):
    """Everything the operator emits, in order: :class:`Record`, :class:`SideRecord`,
    ``Watermark``, ``RecordAttributes`` and ``WatermarkStatus`` elements in :attr:`events`."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def collect_batch(self, batch: RecordBatch) -> None:
        stamps = batch.timestamps or itertools.repeat(None)
        self.events.extend(Record(value, ts) for value, ts in zip(batch.values, stamps))

    def collect_side(self, tag: OutputTag, batch: RecordBatch) -> None:
        stamps = batch.timestamps or itertools.repeat(None)
        self.events.extend(SideRecord(tag.tag_id, value, ts) for value, ts in zip(batch.values, stamps))

    def emit_watermark(self, watermark: Watermark) -> None:
        self.events.append(watermark)

    def emit_record_attributes(self, attributes: RecordAttributes) -> None:
        self.events.append(attributes)

    def emit_watermark_status(self, status: WatermarkStatus) -> None:
        self.events.append(status)

    @property
    def records(self) -> list[Record]:
        """The main output's records, in order."""
        return [event for event in self.events if type(event) is Record]

    @property
    def values(self) -> list[Any]:
        """The main output's values, in order."""
        return [event.value for event in self.events if type(event) is Record]

    @property
    def watermarks(self) -> list[int]:
        """The timestamps of the emitted watermarks, in order."""
        return [event.timestamp for event in self.events if isinstance(event, Watermark)]

    def side_output(self, tag: OutputTag | str) -> list[Record]:
        """The records of side output ``tag`` (an ``OutputTag`` or its id), in order."""
        tag_id = tag.tag_id if isinstance(tag, OutputTag) else tag
        return [Record(e.value, e.timestamp) for e in self.events if type(e) is SideRecord and e.tag_id == tag_id]

    def clear(self) -> None:
        self.events.clear()


@dataclass(frozen=True)
class HarnessSnapshot:
    """One operator subtask's state as a checkpoint holds it: keyed state by key group, the
    operator's own state, and the backlog it was buffering with the contents of its spilled runs,
    all serialised (what cannot be pickled fails here, as in a checkpoint)."""

    subtask_index: int
    parallelism: int
    max_parallelism: int
    keyed: bytes | None
    operator: bytes | None
    backlog: tuple[bytes, list[bytes]] | None = None


class OperatorHarness:
    """One operator subtask, driven by the test (see the module docstring).

    Give it a transformation (``OperatorHarness.of`` builds one with the DataStream API) or an
    operator; it sets the operator up with a :class:`HarnessOutput`, a keyed state backend when
    the operator is keyed, and a timer service on its own :class:`ManualClock`, restores
    ``restore`` (snapshots of one or all subtasks of an earlier run) and opens it.
    ``batch_engine`` enables the FLIP-327 sorted backlog path, ``batch_mode`` runs as in BATCH
    mode; the other keywords are :class:`OperatorContext` fields.
    """

    def __init__(self, operator: StreamOperator | Transformation, *, subtask_index: int = 0,
                 parallelism: int = 1, max_parallelism: int = 128, start_time_ms: int = 0,
                 restore: HarnessSnapshot | list[HarnessSnapshot] | None = None, **context: Any) -> None:
        if isinstance(operator, Transformation):
            operator = StreamOperator.for_transformation(operator)
        self.operator = operator
        self.output = HarnessOutput()
        self.clock = ManualClock(start_time_ms)
        self._timers = TaskProcessingTimeService(self.clock)
        keyed = operator.transformation.is_keyed
        self._backend = HeapKeyedStateBackend(max_parallelism, self.clock.now_ms) if keyed else None
        name = operator.transformation.name
        self.ctx = OperatorContext(name=name, uid=operator.transformation.uid or name, subtask_index=subtask_index,
                                   parallelism=parallelism, max_parallelism=max_parallelism, output=self.output,
                                   processing_time_service=self._timers, keyed_backend=self._backend, **context)
        self._watermarks = [MIN_TIMESTAMP] * max(operator.num_inputs, 1)
        self._backlog = [False] * len(self._watermarks)
        self._ended = [False] * len(self._watermarks)
        operator.setup(self.ctx)
        if restore is not None:
            self._restore([restore] if isinstance(restore, HarnessSnapshot) else restore)
            operator.check_restore()
        operator.open()

    @classmethod
    def of(cls, build: Callable[[StreamExecutionEnvironment], Any], **options: Any) -> OperatorHarness:
        """A harness of the operator of the stream ``build(env)`` returns (built with the DataStream
        API on a fresh environment: ``lambda env: env.from_collection([]).key_by(k).process(f)``)."""
        stream = build(StreamExecutionEnvironment.get_execution_environment())
        return cls(stream.get_transformation(), **options)

    def __repr__(self) -> str:
        return f"OperatorHarness({self.ctx.name!r}, subtask {self.ctx.subtask_index + 1}/{self.ctx.parallelism})"

    # -- input ----------------------------------------------------------------------------------
    def process_element(self, value: Any, timestamp: int | None = None, input_index: int = 0) -> OperatorHarness:
        """One record, with its event timestamp (None: no timestamp)."""
        return self.process_batch(RecordBatch([value], None if timestamp is None else [timestamp]), input_index)

    def process_elements(self, records: Iterable[tuple[Any, int | None]], input_index: int = 0,
                         batch_size: int | None = None) -> OperatorHarness:
        """``(value, timestamp)`` pairs, in batches of ``batch_size`` (all in one by default)."""
        records = list(records)
        size = batch_size or max(len(records), 1)
        for start in range(0, len(records), size):
            chunk = records[start:start + size]
            stamps = [ts for _, ts in chunk]
            self.process_batch(RecordBatch([value for value, _ in chunk],
                                           None if all(ts is None for ts in stamps) else stamps), input_index)
        return self

    def process_values(self, values: Iterable[Any], input_index: int = 0) -> OperatorHarness:
        """Records without timestamps, in one batch."""
        return self.process_batch(RecordBatch(list(values)), input_index)

    def process_batch(self, batch: RecordBatch, input_index: int = 0) -> OperatorHarness:
        self._check_open(input_index)
        self.operator.process_batch(batch, input_index)
        return self

    def process_watermark(self, timestamp: int, input_index: int = 0) -> OperatorHarness:
        """Event time of input ``input_index`` reached ``timestamp`` (a task forwards rising ones only)."""
        self._check_open(input_index)
        if timestamp > self._watermarks[input_index]:
            self._watermarks[input_index] = timestamp
            self.operator.process_watermark(Watermark(timestamp), input_index)
        return self

    def process_watermark_status(self, idle: bool, input_index: int = 0) -> OperatorHarness:
        self._check_open(input_index)
        self.operator.process_watermark_status(idle, input_index)
        return self

    def set_backlog(self, is_backlog: bool, input_index: int = 0) -> OperatorHarness:
        """Input ``input_index`` starts or stops being backlog (FLIP-327's ``RecordAttributes``)."""
        self._check_open(input_index)
        if is_backlog != self._backlog[input_index]:
            self._backlog[input_index] = is_backlog
            self.operator.process_record_attributes(RecordAttributes(is_backlog), input_index)
        return self

    def end_input(self, input_index: int | None = None) -> OperatorHarness:
        """Input ``input_index`` (every input when None) ends as a task ends it: the final
        watermark, backlog over, ``end_input``; when the last input ends, ``finish``."""
        for index in range(len(self._ended)) if input_index is None else [input_index]:
            self.process_watermark(MAX_TIMESTAMP, index)
            self.set_backlog(False, index)
            self._ended[index] = True
            self.operator.end_input(index)
        if all(self._ended):
            self.operator.finish()
        return self

    def close(self) -> None:
        """Close the operator (after :meth:`end_input`, or to abandon it)."""
        self.operator.close()

    def _check_open(self, input_index: int) -> None:
        if not 0 <= input_index < len(self._ended):
            raise ValueError(f"{self.ctx.name} has {len(self._ended)} input(s), not an input {input_index}")
        if self._ended[input_index]:
            raise ValueError(f"{self.ctx.name}: input {input_index} has ended")

    # -- processing time ------------------------------------------------------------------------
    def set_processing_time(self, now_ms: int) -> OperatorHarness:
        """Move processing time to ``now_ms`` and fire the timers due by then, in time order."""
        self.clock.set(now_ms)
        self._timers.fire_due(now_ms)
        return self

    def advance_processing_time(self, millis: int) -> OperatorHarness:
        return self.set_processing_time(self.clock.now_ms() + millis)

    def get_processing_time(self) -> int:
        return self.clock.now_ms()

    # -- what came out ----------------------------------------------------------------------------
    def extract_output_values(self) -> list[Any]:
        """The main output's values so far, in order (Flink's ``extractOutputValues``)."""
        return self.output.values

    def extract_output_records(self) -> list[Record]:
        """The main output's records so far, with their timestamps."""
        return self.output.records

    def get_side_output(self, tag: OutputTag | str) -> list[Record]:
        return self.output.side_output(tag)

    def get_output(self) -> list[Any]:
        """Every element emitted so far, in order (records, side records, watermarks, attributes)."""
        return self.output.events

    @property
    def metrics(self) -> dict[str, Any]:
        """The operator's metrics (late records dropped, records sorted, ...)."""
        return self.ctx.metrics

    def timers(self) -> dict[str, list[tuple[int, Any, Any]]]:
        """The registered timers, ``{"event": [...], "processing": [...]}`` of ``(timestamp, key,
        namespace)`` in firing order; empty for an operator without timers."""
        service = getattr(self.operator, "timers", None)
        return service.snapshot() if service is not None else {"event": [], "processing": []}

    def num_event_time_timers(self) -> int:
        return len(self.timers()["event"])

    def num_processing_time_timers(self) -> int:
        return len(self.timers()["processing"])

    # -- state ----------------------------------------------------------------------------------
    def snapshot(self) -> HarnessSnapshot:
        """The subtask's state now, as a checkpoint takes it."""
        backend, operator_state = self._backend, self.operator.snapshot_state()
        return HarnessSnapshot(self.ctx.subtask_index, self.ctx.parallelism, self.ctx.max_parallelism,
                               None if backend is None else _dumps(backend.snapshot()),
                               None if operator_state is None else _dumps(operator_state), self._backlog_snapshot())

    def _backlog_snapshot(self) -> tuple[bytes, list[bytes]] | None:
        """The backlog the operator buffers, encoded as a checkpoint writes it, with its files' bytes."""
        backlog = self.operator.snapshot_backlog()
        if backlog is None:
            return None
        data, files = encode_backlog(backlog, self.operator)
        try:
            return data, [bytes(file.contents()) for file in files]
        finally:
            close_files(files)

    def _restore(self, snapshots: list[HarnessSnapshot]) -> None:
        """Restore as a job does: the own subtask's state at the same parallelism, otherwise the
        key groups this subtask owns and the operator's own rescaling."""
        ctx, backend = self.ctx, self._backend
        groups = key_group_range(ctx.max_parallelism, ctx.parallelism, ctx.subtask_index)
        same = [s for s in snapshots if s.parallelism == ctx.parallelism and s.subtask_index == ctx.subtask_index]
        for snapshot in same or snapshots:
            if snapshot.max_parallelism != ctx.max_parallelism:
                raise ValueError(f"{ctx.name}: a snapshot of max parallelism {snapshot.max_parallelism} "
                                 f"cannot be restored at {ctx.max_parallelism}")
            if backend is not None and snapshot.keyed is not None:
                backend.restore(pickle.loads(snapshot.keyed), key_groups=None if same else groups)
        states = [None if s.operator is None else pickle.loads(s.operator) for s in same or snapshots]
        if same:
            if states[0] is not None:
                self.operator.initialize_state(states[0])
            if same[0].backlog is not None:
                data, contents = same[0].backlog
                self.operator.restore_backlog(decode_backlog(data, list(contents)))
            return
        if any(s.backlog is not None for s in snapshots):
            raise ValueError(f"{ctx.name}: a snapshot taken while the operator buffered backlog cannot be "
                             f"restored at another parallelism (its buffers hold records by key, not key group)")

        def owns_key(key: Any) -> bool:
            return assign_to_key_group(key, ctx.max_parallelism) in groups

        self.operator.initialize_rescaled_state(states, owns_key)


def _dumps(state: Any) -> bytes:
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


OneInputStreamOperatorTestHarness = OperatorHarness
"""Flink's name; one class serves one and two inputs, keyed or not."""
KeyedOneInputStreamOperatorTestHarness = OperatorHarness
KeyedTwoInputStreamOperatorTestHarness = OperatorHarness
TwoInputStreamOperatorTestHarness = OperatorHarness

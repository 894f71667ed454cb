"""A collecting sink for tests: what a job wrote, in memory, with timestamps and subtasks.

Use it with ``sink_to`` (or ``add_sink``) at any parallelism. It is ``execute_and_collect``'s
sink: with checkpoints on, a record is collected when the checkpoint after it completes, and a
restart from a checkpoint collects only what that checkpoint had not, so it holds every record
exactly once; without checkpoints a record is collected when written, and a restart runs the
job again from its start (the records before the failure come twice).

>>> from slipstream.datastream import StreamExecutionEnvironment
>>> from slipstream.testing import CollectingSink
>>> env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
>>> sink = CollectingSink()
>>> _ = env.from_collection(range(6)).map(lambda x: x * 10).sink_to(sink)
>>> _ = env.execute()
>>> sorted(sink.values)
[0, 10, 20, 30, 40, 50]
>>> sorted(sink.by_subtask())
[0, 1]
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any, NamedTuple

from slipstream.datastream.connectors.sinks import CollectSink


class CollectedRecord(NamedTuple):
    """A record a sink subtask wrote, with its event timestamp (None when it has none)."""

    value: Any
    timestamp: int | None
    subtask: int


class CollectingSink(CollectSink):
    """Keeps what the job writes (see the module docstring); one instance per sink in the job."""

    def default_name(self) -> str:
        return "CollectingSink"

    def entries(self, values: list[Any], timestamps: list[Any] | None, subtask: int) -> list[Any]:
        stamps = timestamps or itertools.repeat(None)
        return [CollectedRecord(value, ts, subtask) for value, ts in zip(values, stamps)]

    @property
    def records(self) -> list[CollectedRecord]:
        """Every record collected, in the order the subtasks wrote (or committed) them."""
        return list(self.buffer)

    @property
    def values(self) -> list[Any]:
        return [record.value for record in self.buffer]

    def timestamped(self) -> list[tuple[Any, int | None]]:
        """``(value, timestamp)`` of every record collected."""
        return [(record.value, record.timestamp) for record in self.buffer]

    def by_subtask(self) -> dict[int, list[Any]]:
        """The values each sink subtask wrote, in its order."""
        result: dict[int, list[Any]] = defaultdict(list)
        for record in self.buffer:
            result[record.subtask].append(record.value)
        return dict(result)

"""The test kit: what slipstream's own tests use to test operators and jobs, shipped for yours.

- :class:`OperatorHarness` drives one operator subtask directly (Flink's operator test
  harnesses): records with timestamps, watermarks, backlog on/off and end of input into any
  input; processing time moved by hand; emitted records, side outputs and timers read back;
  state snapshotted and restored (at another parallelism too).
- :class:`TestStream` is a source with in-band markers (Beam's ``TestStream``, bytewax's
  ``TestingSource``): watermarks, processing-time advances, end of backlog and a failure that
  makes the job restart once.
- :class:`CollectingSink` keeps what a job writes, across parallelism and restarts (exactly
  once with checkpoints).
- :class:`ManualClock` is processing time that moves only when told.

A typical job test is list in, operators, collecting sink, run, assert:

>>> from slipstream.datastream import StreamExecutionEnvironment
>>> from slipstream.testing import CollectingSink
>>> env = StreamExecutionEnvironment.get_execution_environment()
>>> sink = CollectingSink()
>>> _ = env.from_collection(["a b", "b"]).flat_map(str.split).key_by(lambda w: w) \\
...     .map(lambda w: (w, 1)).key_by(lambda p: p[0]).sum(1).sink_to(sink)
>>> _ = env.execute()
>>> sorted(sink.values)
[('a', 1), ('b', 1), ('b', 2)]
"""

from slipstream.testing.clock import ManualClock
from slipstream.testing.harness import (
    HarnessOutput,
    HarnessSnapshot,
    KeyedOneInputStreamOperatorTestHarness,
    KeyedTwoInputStreamOperatorTestHarness,
    OneInputStreamOperatorTestHarness,
    OperatorHarness,
    Record,
    SideRecord,
    TwoInputStreamOperatorTestHarness,
)
from slipstream.testing.sinks import CollectedRecord, CollectingSink
from slipstream.testing.sources import (
    AdvanceProcessingTime,
    AdvanceWatermark,
    EndOfBacklog,
    FailHere,
    TestingSource,
    TestStream,
    TestStreamFailure,
    TimestampedValue,
)

__all__ = [
    "AdvanceProcessingTime",
    "AdvanceWatermark",
    "CollectedRecord",
    "CollectingSink",
    "EndOfBacklog",
    "FailHere",
    "HarnessOutput",
    "HarnessSnapshot",
    "KeyedOneInputStreamOperatorTestHarness",
    "KeyedTwoInputStreamOperatorTestHarness",
    "ManualClock",
    "OneInputStreamOperatorTestHarness",
    "OperatorHarness",
    "Record",
    "SideRecord",
    "TestStream",
    "TestStreamFailure",
    "TestingSource",
    "TimestampedValue",
    "TwoInputStreamOperatorTestHarness",
]

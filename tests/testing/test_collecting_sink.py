"""The test kit's collecting sink: every record once with its timestamp and subtask, at every
parallelism and mode, and only committed records while checkpoints are on."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.testing import CollectedRecord, CollectingSink


def test_every_record_is_collected_once_with_its_timestamp_and_subtask(env: StreamExecutionEnvironment) -> None:
    numbers = list(range(500))
    sink = CollectingSink()
    (env.from_collection(numbers)
     .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps()
                                       .with_timestamp_assigner(lambda n, _: n * 2))
     .key_by(lambda n: n % 7).map(lambda n: n + 1).add_sink(sink))
    env.execute()
    assert sorted(sink.timestamped()) == [(n + 1, n * 2) for n in numbers]
    by_subtask = sink.by_subtask()
    assert set(by_subtask) <= set(range(env.get_parallelism()))
    assert Counter(v for values in by_subtask.values() for v in values) == Counter(n + 1 for n in numbers)
    assert all(isinstance(record, CollectedRecord) for record in sink.records)


@pytest.mark.parametrize("workers", [1, 2])
def test_with_checkpoints_records_are_collected_when_their_checkpoint_completes(tmp_path: Any, workers: int) -> None:
    """Each record joins at a commit, and a subclass sees the commits in the driver's process also
    when the sink's subtasks run on worker processes."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.configure(batch_size=8, workers=workers)
    env.get_checkpoint_config().set_checkpoint_interval_records(40).set_checkpoint_storage_dir(str(tmp_path))
    seen_at_commit: list[int] = []

    class Watching(CollectingSink):
        def commit(self, subtask: int, checkpoint_id: int, records: list) -> None:
            seen_at_commit.append(len(records))
            super().commit(subtask, checkpoint_id, records)

    def negate_slowly(n: int) -> int:  # so checkpoints complete while records flow, on workers too
        time.sleep(0.0005)
        return -n

    sink = Watching()
    env.from_collection(list(range(400))).map(negate_slowly).sink_to(sink)
    env.execute()
    assert sorted(sink.values) == sorted(-n for n in range(400))
    assert len(seen_at_commit) > 2 and sum(seen_at_commit) == 400  # every record joined at a commit

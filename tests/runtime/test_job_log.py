"""When standard error is not a terminal, a job's moments go to the ``slipstream.job`` logger:
started, switched (with the backlog's figures), each checkpoint completed, finished or failed."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.datastream.watermark_strategy import WatermarkStrategy
from slipstream.errors import UserFunctionError


def slow(x: int) -> int:
    if x % 500 == 0:
        threading.Event().wait(0.01)
    return x


def messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "slipstream.job"]


def test_a_finished_job_logs_its_start_its_checkpoints_and_its_end(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="slipstream.job")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(progress_interval=0.02, batch_size=50)
    env.enable_checkpointing(20)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path))
    strategy = WatermarkStrategy.no_watermarks()
    env.from_source(NumberSequenceSource(1, 5000), strategy, "numbers").map(slow).add_sink(lambda x: None)
    env.execute("logged")
    lines = messages(caplog)
    assert lines[0].startswith("job 'logged' started")
    assert any("checkpoint" in line and "completed in" in line for line in lines)
    assert lines[-1].startswith("job 'logged' finished after") and "5,000 records read" in lines[-1]


def test_a_failed_job_logs_the_error(caplog) -> None:
    caplog.set_level(logging.INFO, logger="slipstream.job")
    env = StreamExecutionEnvironment.get_execution_environment()

    def fail(x: int) -> int:
        raise ValueError(f"bad {x}")

    env.from_collection([1, 2, 3]).map(fail).add_sink(lambda x: None)
    with pytest.raises(UserFunctionError):
        env.execute("failing")
    errors = [r for r in caplog.records if r.name == "slipstream.job" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and "job 'failing' failed" in errors[0].getMessage()
    assert "bad 1" in errors[0].getMessage()


def test_the_switch_is_logged_with_the_backlog_read(caplog) -> None:
    caplog.set_level(logging.INFO, logger="slipstream.job")
    backlog_read = threading.Event()

    def live():
        backlog_read.wait(60)
        threading.Event().wait(0.2)  # a few samples after the switch
        yield from range(5)

    def history(x: int) -> int:
        if x == 1999:
            backlog_read.set()
        return slow(x)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(progress_interval=0.02, batch_size=50)
    backlog = env.from_collection(list(range(2000))).map(history)
    env.from_source(IteratorSource(live, bounded=False), None, "live").union(backlog).add_sink(lambda x: None)
    env.execute("switching")
    switched = [line for line in messages(caplog) if "switched to streaming" in line]
    assert len(switched) == 1
    read = int(re.search(r"([\d,]+) records read", switched[0]).group(1).replace(",", ""))
    assert 2000 <= read <= 2005  # the backlog, and the live records when a sample came late

"""``configure`` accepts every runtime setting the README documents, and the README documents
every one it accepts; bad values are refused with the setting's name."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.environment import RuntimeOptions
from slipstream.errors import InvalidProgramError
from slipstream.testing import ManualClock

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SET_ELSEWHERE = {"batch_engine", "engine_options",  # set_batch_engine(...) sets these
                 "progress_listeners",  # add_progress_listener(...) adds to these
                 "runner",  # set_runner(...) or execute(runner=...) sets this
                 "latency_interval_ms"}  # get_config().set_latency_tracking_interval(...), as in PyFlink


def configure_parameters() -> set[str]:
    """The runtime settings: ``configure``'s keyword-only parameters (its positional one is a
    PyFlink ``Configuration``, see tests/pyflink_compat/test_configuration.py)."""
    parameters = inspect.signature(StreamExecutionEnvironment.configure).parameters.values()
    return {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


def documented_settings() -> set[str]:
    """The runtime settings the README names: in the ``configure(...)`` row of its API table, in
    ``configure(name=...)`` calls, and as a backticked runtime option anywhere."""
    row = next(line for line in README.splitlines() if "`configure(...)`" in line)
    in_row = set(re.findall(r"`(\w+)`", row.split("`configure(...)`", 1)[1]))
    in_calls = set(re.findall(r"configure\((\w+)=", README))
    options = {f.name for f in dataclasses.fields(RuntimeOptions)}
    named = set(re.findall(r"`(\w+)`", README)) & options
    return in_row | in_calls | named


def a_new_value(name: str, current: Any) -> Any:
    """A valid value for setting ``name`` that differs from ``current``."""
    if name == "clock":
        return ManualClock()
    if name == "spill_dir":
        return "/spill/here"
    if isinstance(current, bool):
        return not current
    if current is None and name.endswith("_port"):
        return 0
    if current is None and name.endswith("_memory"):
        return 64 << 20
    if current is None and name == "workers":  # None: the default count (SLIPSTREAM_WORKERS, else the cores)
        return 3
    return current + 1


def test_the_readme_names_the_settings_it_documents() -> None:
    assert {"channel_memory_budget", "channel_memory_budget_bytes", "sort_memory_budget",
            "backlog_sorting"} <= documented_settings()


@pytest.mark.parametrize("name", sorted(documented_settings()))
def test_every_documented_setting_is_accepted_by_configure(name: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    value = a_new_value(name, getattr(env.runtime_options, name))
    assert env.configure(**{name: value}) is env
    assert getattr(env.runtime_options, name) == value


def test_configure_covers_every_runtime_option_and_the_readme_documents_each() -> None:
    options = {f.name for f in dataclasses.fields(RuntimeOptions)} - SET_ELSEWHERE
    assert configure_parameters() == options
    assert configure_parameters() <= documented_settings()


@pytest.mark.parametrize("name", ["channel_memory_budget", "channel_memory_budget_bytes", "batch_size"])
@pytest.mark.parametrize("value", [0, -3, 2.5, True, "10"])
def test_a_budget_must_be_a_positive_integer(name: str, value: Any) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidProgramError, match=f"{name} must be a positive integer"):
        env.configure(**{name: value})

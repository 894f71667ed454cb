"""The co-group's batch work runs against the narrow ``CoGroupHost`` interface, not the operator.

A plain host written here (no operator, no runtime) drives the row paths; the oracle groups the
same records in plain Python. The batch modules read nothing private of their host.
"""

from __future__ import annotations

import ast
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import slipstream.operators
from slipstream.datastream.window import GlobalWindow, Window
from slipstream.errors import UserFunctionError
from slipstream.operators.co_group_batch import CoGroupHost, RowsPerKey, RowsVectorised
from slipstream.operators.co_group_frames import records_to_frame
from slipstream.operators.sort_buffer import BufferOrder, KeyDictionary, SortBuffer
from slipstream.runtime.batch.polars_engine import PolarsBatchEngine

WINDOW = GlobalWindow.get()


class Sides:
    """A per-key co-group function: (key, records of the first input, records of the second)."""

    def co_group(self, first: list, second: list) -> Any:
        key = (first or second)[0][0]
        yield key, len(first), len(second)


class Counts:
    """Its vectorised twin: one row per key over both DataFrames."""

    def co_group(self, first: pl.DataFrame, second: pl.DataFrame) -> pl.DataFrame:
        a = first.group_by("f0").len("a")
        b = second.group_by("f0").len("b")
        return a.join(b, on="f0", how="full", coalesce=True).fill_null(0).sort("f0")


class Host(CoGroupHost):
    """Everything the batch work may use, and nothing else."""

    def __init__(self, function: Any, vectorized: bool = False) -> None:
        self.function = function
        self.vectorized = vectorized
        self.current_key: Any = None
        self.sent: list[Any] = []
        self._values: list = []
        self._timestamps: list = []
        self._side: dict = {}

    def user_error(self, record: object, cause: BaseException, what: str = "record") -> UserFunctionError:
        return UserFunctionError("co_group", 0, 1, record, cause, what=what)

    def set_current_key(self, key: Any) -> None:
        self.current_key = key

    def collect(self, window: Window, first: list, second: list) -> None:
        for out in self.function.co_group(first, second):
            self._values.append(out)
            self._timestamps.append(window.max_timestamp())

    def call_vectorized(self, window: Window, keys: list, first: list, second: list) -> None:
        result = self.function.co_group(self.frame(first, 0), self.frame(second, 1))
        self._values.extend(result.rows())
        self._timestamps.extend([window.max_timestamp()] * result.height)

    def frame(self, records: list, input_index: int) -> Any:
        return records_to_frame(records, None, None)

    def outputs(self) -> tuple[list, list, dict]:
        return self._values, self._timestamps, self._side

    def flush(self) -> None:
        self.sent.extend(self._values)
        self._values, self._timestamps = [], []


def buffers(records: list[list[tuple[int, int]]]) -> list[SortBuffer]:
    engine = PolarsBatchEngine()
    keys = KeyDictionary()
    sides = [SortBuffer(engine, key_dictionary=keys, order=BufferOrder.ARRIVAL) for _ in records]
    for arrival, (buffer, side) in enumerate(zip(sides, records)):
        buffer.add([key for key, _ in side], side, arrival=arrival)
    return sides


def history(seed: int) -> list[list[tuple[int, int]]]:
    rng = random.Random(seed)
    return [[(rng.randrange(20), i) for i in range(rng.randrange(1, 200))] for _ in range(2)]


def oracle(records: list[list[tuple[int, int]]]) -> list[tuple[int, int, int]]:
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for side, values in enumerate(records):
        for key, _ in values:
            counts[key][side] += 1
    first_seen = list(dict.fromkeys(key for key, _ in records[0] + records[1]))
    return [(key, *counts[key]) for key in first_seen]


@pytest.mark.parametrize("seed", range(5))
def test_the_per_key_path_runs_on_a_host_that_is_no_operator(seed: int) -> None:
    records = history(seed)
    host = Host(Sides())
    count = RowsPerKey(buffers(records)).run(host, WINDOW)
    assert host.sent == oracle(records)
    assert count == len(host.sent)


@pytest.mark.parametrize("seed", range(5))
def test_the_vectorised_path_runs_on_a_host_that_is_no_operator(seed: int) -> None:
    records = history(seed)
    host = Host(Counts(), vectorized=True)
    count = RowsVectorised(buffers(records)).run(host, WINDOW)
    assert sorted(host.sent) == sorted(oracle(records))
    assert count == len(oracle(records))


def test_a_failing_function_names_its_key_and_window_and_what_it_must_return() -> None:
    class NotIterable:
        def co_group(self, first: list, second: list) -> Any:
            return 42

    with pytest.raises(UserFunctionError, match=r"failed on key 3, window .*must yield its outputs") as info:
        RowsPerKey(buffers([[(3, 0)], [(3, 1)]])).run(Host(NotIterable()), WINDOW)
    assert isinstance(info.value.__cause__, TypeError)


@pytest.mark.parametrize("module", ["co_group_batch", "co_group_columns", "co_group_engine"])
def test_the_batch_work_reads_nothing_private_of_its_host(module: str) -> None:
    path = Path(slipstream.operators.__file__).parent / f"{module}.py"
    private = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id in ("host", "operator") and node.attr.startswith("_")]
    assert not private

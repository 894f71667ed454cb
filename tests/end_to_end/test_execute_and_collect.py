"""Running jobs: ``execute_and_collect`` (iterator, context manager, ``limit``, unbounded
sources), ``execute`` results and their per-operator counters, and ``print`` output."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from slipstream.datastream import CloseableIterator, MapFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from slipstream.datastream.connectors.iterator import IteratorSource
from slipstream.testing import CollectingSink

pytestmark = [pytest.mark.modes(RuntimeExecutionMode.STREAMING),
              pytest.mark.configure(batch_size=4, channel_capacity=2)]


def unbounded(env: StreamExecutionEnvironment) -> Any:
    return env.from_source(IteratorSource(itertools.count(), bounded=False), None, "counter")


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "IteratorSource reader" and t.is_alive()]


def wait_for_no_reader_threads(before: int) -> None:
    deadline = time.monotonic() + 3
    while len(reader_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(reader_threads()) <= before


CLOSED: list[int] = []


class TracksClose(MapFunction):
    def open(self, runtime_context: Any) -> None:
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value: Any) -> Any:
        return value

    def close(self) -> None:
        CLOSED.append(self.index)


# -- the iterator ---------------------------------------------------------------------------------
@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(0, 8)
@pytest.mark.workers(1, 2)
def test_iterator_protocol(env: StreamExecutionEnvironment) -> None:
    it = env.from_collection(list(range(50))).map(lambda x: x * x).execute_and_collect()
    assert isinstance(it, CloseableIterator)
    assert iter(it) is it
    first = next(it)
    rest = list(it)
    assert sorted([first] + rest) == [x * x for x in range(50)]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(3)
def test_order_is_kept_at_parallelism_one(env: StreamExecutionEnvironment) -> None:
    assert list(env.from_collection(list(range(100))).map(lambda x: -x).execute_and_collect()) == \
        [-x for x in range(100)]


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_an_empty_source_yields_nothing(env: StreamExecutionEnvironment) -> None:
    assert list(env.from_collection([]).map(lambda x: x).execute_and_collect()) == []


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_context_manager_closes_and_cancels_the_job(env: StreamExecutionEnvironment) -> None:
    CLOSED.clear()
    before = len(reader_threads())
    taken = []
    with unbounded(env).map(TracksClose()).execute_and_collect() as it:
        for value in it:
            taken.append(value)
            if len(taken) == 25:
                break
    assert len(set(taken)) == 25
    assert sorted(CLOSED) == [0, 1]  # every subtask's function was closed
    with pytest.raises(StopIteration):
        next(it)
    wait_for_no_reader_threads(before)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_close_is_idempotent_and_stops_a_bounded_job_early(env: StreamExecutionEnvironment) -> None:
    CLOSED.clear()
    it = env.from_collection(list(range(1000))).map(TracksClose()).execute_and_collect()
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()
    it.close()
    assert CLOSED == [0]
    assert list(it) == []


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_an_exhausted_iterator_has_closed_the_job(env: StreamExecutionEnvironment) -> None:
    CLOSED.clear()
    assert sorted(env.from_collection(list(range(10))).map(TracksClose()).execute_and_collect()) == \
        list(range(10))
    assert sorted(CLOSED) == [0, 1]


@pytest.mark.parallelisms(1, 2)
@pytest.mark.seeds(0)
def test_limit_returns_a_list(env: StreamExecutionEnvironment) -> None:
    got = env.from_collection(list(range(30))).execute_and_collect(limit=7)
    assert isinstance(got, list) and len(got) == 7 and set(got) <= set(range(30))
    assert sorted(env.from_collection(list(range(5))).execute_and_collect(limit=10)) == list(range(5))
    assert env.from_collection(list(range(5))).execute_and_collect(limit=0) == []


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_limit_on_an_unbounded_source_returns_and_stops_the_job(env: StreamExecutionEnvironment) -> None:
    CLOSED.clear()
    before = len(reader_threads())
    assert unbounded(env).map(TracksClose()).execute_and_collect(limit=10) == list(range(10))
    assert CLOSED == [0]
    wait_for_no_reader_threads(before)


@pytest.mark.parallelisms(1, 3)
@pytest.mark.seeds(0)
def test_breaking_out_of_an_unbounded_job(env: StreamExecutionEnvironment) -> None:
    before = len(reader_threads())
    parallelism = env.get_parallelism()
    seen = []
    with unbounded(env).filter(lambda x: x % 7 == 0).map(lambda x: x // 7).execute_and_collect() as it:
        for value in it:
            seen.append(value)
            if len(seen) == 40:
                break
    assert len(set(seen)) == 40
    if parallelism == 1:
        assert seen == list(range(40))
    wait_for_no_reader_threads(before)


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_a_failure_while_collecting_closes_the_job(env: StreamExecutionEnvironment) -> None:
    CLOSED.clear()

    def fail(x: int) -> int:
        if x == 20:
            raise RuntimeError("twenty")
        return x

    it = env.from_collection(list(range(100))).map(TracksClose()).map(fail).execute_and_collect()
    with pytest.raises(Exception, match="twenty"):
        list(it)
    assert CLOSED == [0]


# -- execute() and its result ------------------------------------------------------------------------
@pytest.mark.parallelisms(1, 2, 4)
@pytest.mark.seeds(0, 2)
@pytest.mark.workers(1, 2)
def test_execute_result_counts_records_per_operator(env: StreamExecutionEnvironment) -> None:
    sunk = CollectingSink()
    data = list(range(60))
    (env.from_collection(data).name("numbers")
     .map(lambda x: x + 1).name("plus one")
     .filter(lambda x: x % 3 == 0).name("thirds")
     .flat_map(lambda x: [x, x]).name("twice")
     .key_by(lambda x: x % 5).reduce(lambda a, b: a + b).name("sum")
     .sink_to(sunk).name("sink"))
    result = env.execute("counting job")
    assert isinstance(result.get_net_runtime(), int) and result.get_net_runtime() >= 0
    assert result.get_job_id()
    metrics = result.get_all_accumulator_results()
    thirds = [x + 1 for x in data if (x + 1) % 3 == 0]
    expected = {
        "numbers": (0, 60),
        "plus one": (60, 60),
        "thirds": (60, len(thirds)),
        "twice": (len(thirds), 2 * len(thirds)),
        "sum": (2 * len(thirds), 2 * len(thirds)),
        "sink": (2 * len(thirds), 0),
    }
    for name, (records_in, records_out) in expected.items():
        assert metrics[name]["records_in"] == records_in, name
        assert metrics[name]["records_out"] == records_out, name
    assert len(sunk.values) == 2 * len(thirds)
    # the result is a copy: changing it changes nothing
    metrics["sum"]["records_in"] = -1
    assert result.get_all_accumulator_results()["sum"]["records_in"] == 2 * len(thirds)


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_execute_counts_side_outputs_and_several_sinks(env: StreamExecutionEnvironment) -> None:
    a: list = []
    b: list = []
    stream = env.from_collection(list(range(20))).map(lambda x: x).name("m")
    stream.filter(lambda x: x < 5).name("small").add_sink(a.append).name("sink a")
    stream.add_sink(b.append).name("sink b")
    metrics = env.execute().get_all_accumulator_results()
    assert metrics["m"]["records_out"] == 20
    assert metrics["small"]["records_in"] == 20 and metrics["small"]["records_out"] == 5
    assert metrics["sink a"]["records_in"] == 5 and metrics["sink b"]["records_in"] == 20
    assert sorted(a) == list(range(5)) and sorted(b) == list(range(20))


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_the_environment_can_run_a_second_job(env: StreamExecutionEnvironment) -> None:
    assert sorted(env.from_collection([1, 2]).execute_and_collect()) == [1, 2]
    assert sorted(env.from_collection([3, 4]).execute_and_collect()) == [3, 4]


# -- print() ---------------------------------------------------------------------------------------
def printed(capsys: Any) -> list[str]:
    return capsys.readouterr().out.splitlines()


@pytest.mark.parallelisms(1)
@pytest.mark.seeds(0)
def test_print_at_parallelism_one_has_no_prefix(env: StreamExecutionEnvironment, capsys: Any) -> None:
    env.from_collection([1, "two", (3, 4)]).print()
    env.execute()
    assert printed(capsys) == ["1", "two", "(3, 4)"]


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_print_at_parallelism_two_prefixes_the_subtask(env: StreamExecutionEnvironment, capsys: Any) -> None:
    env.from_collection(list(range(10))).set_parallelism(2).print()
    env.execute()
    lines = printed(capsys)
    # a parallel collection source gives subtask 1 the first half and subtask 2 the second
    assert sorted(lines) == sorted([f"1> {i}" for i in range(5)] + [f"2> {i}" for i in range(5, 10)])


@pytest.mark.parallelisms(2)
@pytest.mark.seeds(0)
def test_print_with_an_identifier(env: StreamExecutionEnvironment, capsys: Any) -> None:
    env.from_collection(list(range(4))).set_parallelism(2).print("id")
    env.execute()
    assert sorted(printed(capsys)) == ["id:1> 0", "id:1> 1", "id:2> 2", "id:2> 3"]
    env.set_parallelism(1)
    env.from_collection(["x"]).print("id")
    env.execute()
    assert printed(capsys) == ["id> x"]

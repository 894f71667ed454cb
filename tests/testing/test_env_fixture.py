"""The ``env`` fixture of tests/conftest.py: one run per mode × parallelism × seed, narrowed by markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from slipstream.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

SEEN: set[tuple[RuntimeExecutionMode, int, int]] = set()


def test_each_run_gets_a_fresh_environment_in_its_mode_and_parallelism(env: StreamExecutionEnvironment) -> None:
    assert env.get_runtime_mode() in (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH)
    assert env.get_parallelism() in (1, 2, 4)
    assert env.runtime_options.scheduler_seed == 0
    assert sorted(env.from_collection(range(10)).map(lambda n: n * n).execute_and_collect()) == \
        [n * n for n in range(10)]
    key = (env.get_runtime_mode(), env.get_parallelism(), env.runtime_options.scheduler_seed)
    assert key not in SEEN
    SEEN.add(key)


@pytest.mark.modes(RuntimeExecutionMode.BATCH)
@pytest.mark.parallelisms(2)
@pytest.mark.seeds(3, 4)
def test_markers_narrow_the_axes(env: StreamExecutionEnvironment, request: pytest.FixtureRequest) -> None:
    assert env.get_runtime_mode() is RuntimeExecutionMode.BATCH and env.get_parallelism() == 2
    assert request.node.callspec.id in ("batch-p2-s3", "batch-p2-s4")
    assert env.runtime_options.scheduler_seed == int(request.node.callspec.id[-1])


@pytest.mark.configure(batch_size=5, channel_capacity=3)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
@pytest.mark.parallelisms(1)
def test_the_configure_marker_applies_its_options_to_every_run(env: StreamExecutionEnvironment) -> None:
    options = env.runtime_options
    assert (options.batch_size, options.channel_capacity, options.scheduler_seed) == (5, 3, 0)


KEYED = [{"key": k, "n": n} for n, k in enumerate("abcabcaab" * 4)]


@pytest.mark.engines("polars", "record-by-record")
@pytest.mark.parallelisms(2)
def test_the_engines_marker_runs_the_backlog_on_each_engine(env: StreamExecutionEnvironment,
                                                            request: pytest.FixtureRequest) -> None:
    engine = request.node.callspec.id.split("-", 3)[-1]
    assert engine in ("polars", "record-by-record")
    assert env.runtime_options.backlog_sorting is (engine == "polars") and env.get_batch_engine() == "polars"
    updates = list(env.from_collection(KEYED).key_by("key").sum("n").execute_and_collect())
    finals = {update["key"]: update["n"] for update in updates}
    assert finals == {k: sum(r["n"] for r in KEYED if r["key"] == k) for k in "abc"}


def test_a_test_asking_for_an_engine_its_job_cannot_use_fails_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(Path(__file__).parent.parent.joinpath("conftest.py").read_text())
    pytester.makepyfile(test_unsorted="""
        import pytest
        from slipstream.datastream import RuntimeExecutionMode

        @pytest.mark.engines("polars")
        @pytest.mark.modes(RuntimeExecutionMode.STREAMING)
        @pytest.mark.parallelisms(1)
        def test_a_map_has_no_backlog_to_sort(env):
            assert list(env.from_collection([1, 2]).map(lambda n: n).execute_and_collect()) == [1, 2]
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_a_map_has_no_backlog_to_sort*asked for the polars engine, but none of its "
                                 "jobs sorted a backlog on it*"])


WORKER_RUNS: list[str] = []


@pytest.mark.workers(1, 2)
@pytest.mark.modes(RuntimeExecutionMode.STREAMING)
def test_the_workers_marker_adds_a_run_on_worker_processes_at_the_largest_parallelism(
        env: StreamExecutionEnvironment, request: pytest.FixtureRequest) -> None:
    WORKER_RUNS.append(request.node.callspec.id)
    assert env.runtime_options.workers == int(request.node.callspec.id[-1])
    updates = list(env.from_collection(KEYED).key_by("key").sum("n").execute_and_collect())
    assert {update["key"]: update["n"] for update in updates} == \
        {k: sum(r["n"] for r in KEYED if r["key"] == k) for k in "abc"}
    if len(WORKER_RUNS) == 4:
        assert WORKER_RUNS == ["streaming-p1-s0-w1", "streaming-p2-s0-w1", "streaming-p4-s0-w1", "streaming-p4-s0-w2"]


def test_a_test_asking_for_workers_its_jobs_do_not_use_fails_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(Path(__file__).parent.parent.joinpath("conftest.py").read_text())
    pytester.makepyfile(test_one_process="""
        import pytest
        from slipstream.datastream import RuntimeExecutionMode

        @pytest.mark.workers(2)
        @pytest.mark.modes(RuntimeExecutionMode.STREAMING)
        @pytest.mark.parallelisms(2)
        def test_a_job_of_parallelism_one(env):
            env.set_parallelism(1)
            assert list(env.from_collection([1, 2]).map(lambda n: n).execute_and_collect()) == [1, 2]
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_a_job_of_parallelism_one*asked for 2 worker processes, but none of its "
                                 "jobs ran on them*"])


def test_a_workers_marker_on_a_test_of_parallelism_one_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(Path(__file__).parent.parent.joinpath("conftest.py").read_text())
    pytester.makepyfile(test_one_process="""
        import pytest

        @pytest.mark.workers(1, 2)
        @pytest.mark.parallelisms(1)
        def test_only_at_parallelism_one(env):
            pass
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_only_at_parallelism_one: its workers marker asks for worker processes, "
                                 "but it runs only at parallelism 1*"])
    assert result.ret != 0


def test_the_one_process_marker_keeps_a_test_s_jobs_here_under_slipstream_workers(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """``SLIPSTREAM_WORKERS=2`` puts a job of parallelism 2 on two workers, except in a test marked
    ``one_process(reason)``; the marker without its reason fails the test."""
    monkeypatch.setenv("SLIPSTREAM_WORKERS", "2")
    pytester.makeconftest(Path(__file__).parent.parent.joinpath("conftest.py").read_text())
    pytester.makepyfile(test_pinned="""
        import pytest
        from slipstream.datastream import StreamExecutionEnvironment

        def last_line():
            env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
            env.from_collection([1, 2]).key_by(lambda n: n).map(lambda n: n).print()
            return env.explain().splitlines()[-1]

        def test_unmarked():
            assert last_line().startswith("Runs on 2 worker processes")

        @pytest.mark.one_process("counts in this process")
        def test_marked():
            assert last_line().startswith("Runs in this process: one worker")

        @pytest.mark.one_process
        def test_marked_without_a_reason():
            pass
    """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_marked_without_a_reason: one_process needs its reason*"])

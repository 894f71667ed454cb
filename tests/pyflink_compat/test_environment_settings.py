"""The environment methods PyFlink jobs call: what applies does, what cannot apply says so in a warning."""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from pathlib import Path

import pytest

from slipstream.common import Duration, ExecutionConfig, RestartStrategies
from slipstream.datastream import (
    CheckpointConfig,
    CheckpointingMode,
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
    RocksDBStateBackend,
    StreamExecutionEnvironment,
    TimeCharacteristic,
)
from slipstream.datastream.connectors.sinks import CollectSink
from slipstream.errors import InvalidProgramError
from slipstream.runtime.planner import plan_job


def new_env(parallelism: int = 2) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)


@pytest.fixture(autouse=True)
def warnings_are_errors_unless_expected():  # noqa: ANN201
    """A warning no test expects fails it: every warning here is a claim the test checks."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# -- settings read back ------------------------------------------------------------------------------
def test_stream_time_characteristic_defaults_to_event_time_and_warns_for_the_others() -> None:
    env = new_env()
    assert env.get_stream_time_characteristic() is TimeCharacteristic.EventTime
    env.set_stream_time_characteristic(TimeCharacteristic.EventTime)
    with pytest.warns(UserWarning, match="set_stream_time_characteristic\\(ProcessingTime\\) is not applied"):
        env.set_stream_time_characteristic(TimeCharacteristic.ProcessingTime)
    assert env.get_stream_time_characteristic() is TimeCharacteristic.ProcessingTime


def test_buffer_timeout_reads_back_and_warns() -> None:
    env = new_env()
    assert env.get_buffer_timeout() == 100
    with pytest.warns(UserWarning, match="flushes its output after every scheduler turn"):
        env.set_buffer_timeout(12000)
    assert env.get_buffer_timeout() == 12000
    with pytest.raises(InvalidProgramError):
        env.set_buffer_timeout(-2)


def test_execution_config_shares_the_environments_settings_and_compares_by_value() -> None:
    env, other = new_env(), new_env()
    config = env.get_config()
    assert isinstance(config, ExecutionConfig) and config == other.get_config()
    assert hash(config) == hash(other.get_config())
    config.set_parallelism(12)
    assert env.get_parallelism() == 12 and config != other.get_config()
    other.set_parallelism(12)
    assert config == other.get_config()
    config.set_restart_strategy(RestartStrategies.fixed_delay_restart(4, 10000))
    assert env.get_restart_strategy() == RestartStrategies.fixed_delay_restart(4, timedelta(seconds=10))
    assert (ExecutionConfig.PARALLELISM_DEFAULT, ExecutionConfig.PARALLELISM_UNKNOWN) == (-1, -2)
    assert config.get_latency_tracking_interval() == 500  # latency markers are on by default
    config.set_latency_tracking_interval(1000)
    assert config.get_latency_tracking_interval() == env.runtime_options.latency_interval_ms == 1000
    config.set_latency_tracking_interval(-1)
    assert config.get_latency_tracking_interval() == 0  # off


def test_restart_strategies_are_equal_by_value() -> None:
    assert RestartStrategies.no_restart() == RestartStrategies.no_restart()
    assert RestartStrategies.fixed_delay_restart(3, 100) == RestartStrategies.fixed_delay_restart(3, 100)
    assert RestartStrategies.fixed_delay_restart(3, 100) != RestartStrategies.fixed_delay_restart(3, 101)
    assert RestartStrategies.fall_back_restart() != RestartStrategies.no_restart()
    strategies = {RestartStrategies.no_restart(), RestartStrategies.no_restart(),
                  RestartStrategies.fixed_delay_restart(1, Duration.of_seconds(1))}
    assert len(strategies) == 2
    fixed = RestartStrategies.fixed_delay_restart(1, timedelta(milliseconds=1500))
    assert fixed.get_delay_between_attempts_interval() == timedelta(milliseconds=1500)
    env = new_env()
    env.set_restart_strategy(RestartStrategies.no_restart())
    assert env.get_restart_strategy() == RestartStrategies.no_restart()


# -- checkpoint config ---------------------------------------------------------------------------------
def test_checkpoint_config_constants_and_defaults_follow_flink() -> None:
    config = new_env().get_checkpoint_config()
    assert (CheckpointConfig.DEFAULT_MAX_CONCURRENT_CHECKPOINTS, CheckpointConfig.DEFAULT_MIN_PAUSE_BETWEEN_CHECKPOINTS,
            CheckpointConfig.DEFAULT_TIMEOUT, CheckpointConfig.DEFAULT_MODE) == \
        (1, 0, 600_000, CheckpointingMode.EXACTLY_ONCE)
    assert not config.is_checkpointing_enabled() and config.get_checkpoint_interval() == -1
    assert config.is_fail_on_checkpointing_errors() is True
    config.set_fail_on_checkpointing_errors(False)
    assert config.get_tolerable_checkpoint_failure_number() == 2**31 - 1
    config.set_tolerable_checkpoint_failure_number(3)
    assert config.get_tolerable_checkpoint_failure_number() == 3 and not config.is_fail_on_checkpointing_errors()


def test_unaligned_checkpoints_read_back_and_warn_that_checkpoints_stay_aligned() -> None:
    env = new_env()
    config = env.get_checkpoint_config()
    assert not config.is_unaligned_checkpoints_enabled() and not config.is_force_unaligned_checkpoints()
    assert config.get_alignment_timeout() == Duration.of_millis(0)
    with pytest.warns(UserWarning, match="always aligned"):
        config.enable_unaligned_checkpoints()
    assert config.is_unaligned_checkpoints_enabled() and env.is_unaligned_checkpoints_enabled()
    config.disable_unaligned_checkpoints()
    assert not config.is_unaligned_checkpoints_enabled()
    with pytest.warns(UserWarning, match="always aligned"):
        config.set_force_unaligned_checkpoints(True)
    assert config.is_force_unaligned_checkpoints() and env.is_force_unaligned_checkpoints()
    with pytest.warns(UserWarning, match="always aligned"):
        config.set_alignment_timeout(Duration.of_minutes(1))
    assert config.get_aligned_checkpoint_timeout() == Duration.of_minutes(1)


def test_checkpoints_are_always_preferred_for_recovery() -> None:
    config = new_env().get_checkpoint_config()
    assert config.is_prefer_checkpoint_for_recovery() is True
    config.set_prefer_checkpoint_for_recovery(True)
    with pytest.warns(UserWarning, match="a savepoint is a checkpoint here"):
        config.set_prefer_checkpoint_for_recovery(False)


# -- state backends ------------------------------------------------------------------------------------
def test_no_state_backend_is_set_until_one_is() -> None:
    env = new_env()
    assert env.get_state_backend() is None
    env.set_state_backend(HashMapStateBackend())
    assert env.get_state_backend() == HashMapStateBackend()


def test_a_backend_naming_a_directory_sends_checkpoints_there(tmp_path: Path) -> None:
    env = new_env()
    env.set_state_backend(FsStateBackend(f"file://{tmp_path}"))
    assert env.get_checkpoint_config().get_checkpoint_storage_dir() == str(tmp_path)
    env.set_state_backend(MemoryStateBackend(str(tmp_path / "memory")))
    assert env.get_checkpoint_config().get_checkpoint_storage_dir() == str(tmp_path / "memory")
    with pytest.warns(UserWarning, match=r"MemoryStateBackend\(max_state_size\) is not applied"):
        env.set_state_backend(MemoryStateBackend(max_state_size=10))
    with pytest.raises(InvalidProgramError, match="fsspec knows no file system 'nosuch://'"):
        FsStateBackend("nosuch://namenode/checkpoints")


def test_a_job_with_a_filesystem_backend_checkpoints_into_its_directory(tmp_path: Path) -> None:
    env = new_env(1).enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_interval_records(2)
    env.set_state_backend(FsStateBackend(str(tmp_path)))
    out: list[int] = []
    env.from_collection(list(range(10))).key_by(lambda x: x % 2).reduce(lambda a, b: a + b).add_sink(out.append)
    env.execute("checkpointed")
    assert sorted(out)[-2:] == [20, 25]
    assert any(path.name.startswith("chk-") for path in tmp_path.iterdir())


@pytest.mark.parametrize("backend", [EmbeddedRocksDBStateBackend(), RocksDBStateBackend("file:///tmp/rocks", True)],
                         ids=["embedded", "legacy"])
def test_rocksdb_backends_are_taken_and_keep_state_in_their_local_directory(
        backend: EmbeddedRocksDBStateBackend, tmp_path: Path) -> None:
    env = new_env(2).enable_checkpointing(60_000)
    env.get_checkpoint_config().set_checkpoint_interval_records(3)
    backend.set_db_storage_paths(str(tmp_path / "local"))
    env.set_state_backend(backend)
    env.get_checkpoint_config().set_checkpoint_storage_dir(str(tmp_path / "checkpoints"))
    assert env.get_state_backend() is backend and backend.is_incremental_checkpoints_enabled()
    out: list[int] = []
    env.from_collection(list(range(10))).key_by(lambda x: x % 2).reduce(lambda a, b: a + b).add_sink(out.append)
    env.execute("on rocksdb")
    assert sorted(out)[-2:] == [20, 25]
    assert (tmp_path / "local").is_dir() and not list((tmp_path / "local").iterdir())  # each database went
    assert any(path.suffix == ".sst" for path in (tmp_path / "checkpoints" / "shared").iterdir())


# -- chaining -------------------------------------------------------------------------------------------
def test_disabling_operator_chaining_plans_every_operator_as_its_own_task() -> None:
    def build(env: StreamExecutionEnvironment) -> list[list[str]]:
        env.from_collection([1, 2, 3]).set_parallelism(2).map(lambda x: x + 1).filter(bool) \
            .sink_to(CollectSink())
        return [[node.name for node in vertex.nodes] for vertex in plan_job(env._job_spec(list(env._transformations))).vertices]

    chained = new_env()
    assert chained.is_chaining_enabled() and len(build(chained)) == 1
    unchained = new_env().disable_operator_chaining()
    assert not unchained.is_chaining_enabled() and len(build(unchained)) == 4


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_an_unchained_job_gives_the_same_records(parallelism: int) -> None:
    env = new_env(parallelism).disable_operator_chaining()
    out = list(env.from_collection(list(range(100))).map(lambda x: (x % 3, x * 2)).key_by(lambda r: r[0])
               .reduce(lambda a, b: (a[0], a[1] + b[1])).execute_and_collect())
    totals = {key: sum(x * 2 for x in range(100) if x % 3 == key) for key in range(3)}
    assert len(out) == 100  # a rolling reduce: one update per record
    assert {key: max(total for k, total in out if k == key) for key in range(3)} == totals


# -- dependencies ----------------------------------------------------------------------------------------
def test_an_added_python_file_is_importable_by_the_jobs_functions(tmp_path: Path) -> None:
    module = tmp_path / "dep_add_two.py"
    module.write_text("def add_two(a):\n    return a + 2\n")

    def plus_two(value: int) -> int:
        from dep_add_two import add_two  # type: ignore[import-not-found]
        return add_two(value)

    env = new_env()
    env.add_python_file(str(module))
    try:
        assert sorted(env.from_collection([1, 2, 3, 4, 5]).map(plus_two).execute_and_collect()) == [3, 4, 5, 6, 7]
        assert env.get_configuration().get_string("python.files", None) == str(module)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("dep_add_two", None)


def test_an_added_package_directory_is_importable_by_its_name(tmp_path: Path) -> None:
    package = tmp_path / "dep_package"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 42\n")
    env = new_env()
    env.add_python_file(str(package))
    try:
        import dep_package  # type: ignore[import-not-found]
        assert dep_package.VALUE == 42
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("dep_package", None)


def test_a_missing_python_file_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(InvalidProgramError, match="no such file or directory"):
        new_env().add_python_file(str(tmp_path / "absent.py"))


def test_requirements_are_checked_against_this_interpreter(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("pyarrow>=1\n# a comment\npolars\n")
    env = new_env()
    env.set_python_requirements(str(requirements))  # installed: nothing to say
    requirements.write_text("pyarrow\nno-such-distribution-here==0.0.0\n")
    with pytest.warns(UserWarning, match="installs nothing; not installed here: no-such-distribution-here"):
        env.set_python_requirements(str(requirements), str(tmp_path))
    assert env.get_configuration().get_string("python.requirements", None) == f"{requirements}#{tmp_path}"


def test_the_python_executable_applies_only_when_it_is_this_interpreter() -> None:
    env = new_env()
    env.set_python_executable(sys.executable)
    with pytest.warns(UserWarning, match="is not applied: slipstream runs functions in the interpreter"):
        env.set_python_executable("py_env.zip/py_env/bin/python")


def test_archives_jars_and_classpaths_are_recorded_and_warned_about() -> None:
    env = new_env()
    with pytest.warns(UserWarning, match="archives are not extracted"):
        env.add_python_archive("py_env.zip", "myenv")
    with pytest.warns(UserWarning, match="no JVM"):
        env.add_jars("file:///a.jar", "file:///b.jar")
    with pytest.warns(UserWarning, match="no JVM"):
        env.add_classpaths("file:///c.jar")
    kept = env.get_configuration()
    assert kept.get_string("python.archives", None) == "py_env.zip#myenv"
    assert kept.get_string("pipeline.jars", None) == "file:///a.jar;file:///b.jar"
    assert kept.get_string("pipeline.classpaths", None) == "file:///c.jar"


# -- sources ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_read_text_file_gives_every_line(tmp_path: Path, parallelism: int) -> None:
    texts = ["Mike", "Marry", "Ted", "Jack", "Bob", "Henry"]
    path = tmp_path / "text_file"
    path.write_text("".join(f"{text}\n" for text in texts))
    lines = list(new_env(parallelism).read_text_file(f"file://{path}").execute_and_collect())
    assert sorted(lines) == sorted(texts)

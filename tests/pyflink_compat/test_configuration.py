"""``Configuration`` behaves as PyFlink's, and ``env.configure(configuration)`` applies Flink's keys.

The expected values of the ``Configuration`` tests are those of Flink's own PyFlink tests
(``pyflink/common/tests/test_configuration.py``); the tests are written anew.
"""

from __future__ import annotations

import copy
import warnings

import pytest

from slipstream.common import Configuration, RestartStrategies
from slipstream.datastream import (
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    EmbeddedRocksDBStateBackend,
    FsStateBackend,
    HashMapStateBackend,
    MemoryStateBackend,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    TimeCharacteristic,
)
from slipstream.errors import InvalidProgramError


def config(**entries: str) -> Configuration:
    """A configuration of string entries; keys use ``__`` for ``.`` and ``_`` for ``-``."""
    made = Configuration()
    for key, value in entries.items():
        made.set_string(key.replace("__", ".").replace("_", "-"), value)
    return made


# -- Configuration ----------------------------------------------------------------------------------
def test_a_copy_starts_with_the_entries_of_the_original() -> None:
    original = Configuration()
    assert original.to_dict() == {}
    original.set_string("k1", "v1")
    assert Configuration(original).to_dict() == {"k1": "v1"}


def test_each_type_reads_back_what_was_set() -> None:
    conf = Configuration().set_string("str", "v1").set_integer("int", 2).set_boolean("bool", True) \
        .set_float("float", 0.5).set_bytearray("bytearray", bytearray([1, 2, 3]))
    assert conf.get_string("str", "") == "v1"
    assert conf.get_integer("int", 0) == 2
    assert conf.get_boolean("bool", False) is True
    assert conf.get_float("float", 0) == 0.5
    assert conf.get_bytearray("bytearray", bytearray()) == bytearray([1, 2, 3])
    assert conf.get_string("missing", "default") == "default" and conf.get_integer("missing", 7) == 7


def test_values_convert_between_types_as_flink_does() -> None:
    conf = Configuration().set_string("n", " 3 ").set_string("flag", "TRUE").set_integer("i", 4)
    assert conf.get_integer("n", 0) == 3 and conf.get_boolean("flag", False) is True
    assert conf.get_float("i", 0) == 4.0 and conf.get_string("i", "") == "4"
    with pytest.raises(ValueError, match="'flag' holds 'TRUE', which is not an integer"):
        conf.get_integer("flag", 0)


def test_key_set_contains_key_and_remove_config() -> None:
    conf = Configuration().set_string("k1", "v1").set_string("k2", "v2").set_integer("k3", 1)
    assert conf.key_set() == {"k1", "k2", "k3"}
    assert conf.contains_key("k1") and not conf.contains_key("k4")
    assert conf.remove_config("k1") is True and conf.remove_config("k1") is False
    assert not conf.contains_key("k1")


def test_to_dict_prints_values_and_add_all_to_dict_keeps_their_types() -> None:
    conf = Configuration().set_string("k1", "v1").set_integer("k2", 1).set_float("k3", 1.2) \
        .set_boolean("k4", True)
    assert conf.to_dict() == {"k1": "v1", "k2": "1", "k3": "1.2", "k4": "true"}
    conf.set_bytearray("k5", bytearray([1, 2, 3]))
    target: dict = {}
    conf.add_all_to_dict(target)
    assert target == {"k1": "v1", "k2": 1, "k3": 1.2, "k4": True, "k5": bytearray([1, 2, 3])}


def test_add_all_copies_entries_with_an_optional_prefix() -> None:
    source = Configuration().set_string("k1", "v1")
    target = Configuration().add_all(source)
    assert target.get_string("k1", "") == "v1"
    target.add_all(source, "conf_")
    assert target.get_string("conf_k1", "") == "v1"


def test_a_deep_copy_is_equal_and_independent() -> None:
    conf = Configuration().set_string("k1", "v1")
    copied = copy.deepcopy(conf)
    assert copied == conf
    copied.set_string("k1", "v2")
    assert copied != conf and conf.get_string("k1", "") == "v1"


def test_equality_hash_and_str() -> None:
    one = Configuration().set_string("k1", "v1").set_integer("k2", 1)
    other = Configuration().set_string("k1", "v1")
    assert one != other and hash(one) != hash(other)
    other.set_integer("k2", 1)
    assert one == other and hash(one) == hash(other)
    assert str(one) == "{k1=v1, k2=1}"


# -- env.configure(configuration) -------------------------------------------------------------------
def test_known_keys_set_the_environment_and_its_checkpoint_config() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(config(parallelism__default="3", pipeline__max_parallelism="64",
                         execution__runtime_mode="batch", execution__checkpointing__interval="10 s",
                         execution__checkpointing__mode="AT_LEAST_ONCE",
                         execution__checkpointing__timeout="12000", execution__checkpointing__min_pause="1 min",
                         execution__checkpointing__tolerable_failed_checkpoints="2",
                         execution__checkpointing__externalized_checkpoint_retention="DELETE_ON_CANCELLATION",
                         state__checkpoints__num_retained="4"))
    checkpoints = env.get_checkpoint_config()
    assert (env.get_parallelism(), env.get_max_parallelism(), env.get_runtime_mode()) == \
        (3, 64, RuntimeExecutionMode.BATCH)
    assert (checkpoints.get_checkpoint_interval(), checkpoints.get_checkpointing_mode(),
            checkpoints.get_checkpoint_timeout(), checkpoints.get_min_pause_between_checkpoints(),
            checkpoints.get_tolerable_checkpoint_failure_number(), checkpoints.get_num_retained_checkpoints(),
            checkpoints.get_externalized_checkpoint_cleanup()) == \
        (10_000, CheckpointingMode.AT_LEAST_ONCE, 12_000, 60_000, 2, 4,
         ExternalizedCheckpointCleanup.DELETE_ON_CANCELLATION)


def test_pyflinks_configure_example_applies_with_a_warning_for_what_cannot(tmp_path) -> None:  # noqa: ANN001
    """The keys of Flink's ``test_configure`` (the state backend 'jobmanager' is a heap backend)."""
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.warns(UserWarning) as warned:
        env.configure(config(pipeline__operator_chaining="false", pipeline__time_characteristic="IngestionTime",
                             execution__buffer_timeout="1 min", execution__checkpointing__timeout="12000",
                             state__backend="jobmanager"))
    assert env.is_chaining_enabled() is False
    assert env.get_stream_time_characteristic() is TimeCharacteristic.IngestionTime
    assert env.get_buffer_timeout() == 60_000
    assert env.get_checkpoint_config().get_checkpoint_timeout() == 12_000
    assert isinstance(env.get_state_backend(), MemoryStateBackend)
    messages = " ".join(str(w.message) for w in warned)
    assert "IngestionTime" in messages and "set_buffer_timeout(60000)" in messages


def test_get_execution_environment_takes_a_configuration() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(config(parallelism__default="2"))
    assert env.get_parallelism() == 2


def test_keyword_options_still_configure_the_runtime_alongside_a_configuration() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(config(parallelism__default="2"), scheduler_seed=5, batch_size=16)
    assert (env.get_parallelism(), env.runtime_options.scheduler_seed, env.runtime_options.batch_size) == (2, 5, 16)


def test_unknown_keys_are_kept_readable_and_named_in_a_warning() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.warns(UserWarning, match="does not apply: python.fn-execution.bundle.size, taskmanager.numberOfTaskSlots"):
        env.configure(Configuration().set_integer("python.fn-execution.bundle.size", 1)
                      .set_string("taskmanager.numberOfTaskSlots", "10").set_string("parallelism.default", "2"))
    kept = env.get_configuration()
    assert kept.get_integer("python.fn-execution.bundle.size", 0) == 1
    assert kept.get_string("taskmanager.numberOfTaskSlots", None) == "10"
    assert kept.get_string("parallelism.default", None) == "2" and env.get_parallelism() == 2


@pytest.mark.parametrize("key,value,message", [
    ("parallelism.default", "two", "'parallelism.default': 'two' is not an integer"),
    ("execution.runtime-mode", "fast", "'fast' is not one of STREAMING, BATCH, AUTOMATIC"),
    ("execution.checkpointing.interval", "soon", "'soon' is not a duration"),
    ("pipeline.operator-chaining", "maybe", "'maybe' is not true or false"),
    ("state.backend", "leveldb", "'leveldb' is not one of hashmap, jobmanager, filesystem, rocksdb"),
    ("restart-strategy", "exponential-delay", "restart strategy 'exponential-delay' is not supported"),
])
def test_a_value_that_does_not_parse_or_cannot_apply_is_refused_naming_the_key(key: str, value: str,
                                                                               message: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidProgramError, match=message):
        env.configure(Configuration().set_string(key, value))


def test_state_backend_and_restart_strategy_keys(tmp_path) -> None:  # noqa: ANN001
    env = StreamExecutionEnvironment.get_execution_environment()
    env.configure(config(state__backend="filesystem", state__checkpoints__dir=f"file://{tmp_path}",
                         restart_strategy="fixed-delay", restart_strategy__fixed_delay__attempts="3",
                         restart_strategy__fixed_delay__delay="2 s"))
    assert env.get_state_backend() == FsStateBackend(str(tmp_path))
    assert env.get_checkpoint_config().get_checkpoint_storage_dir() == str(tmp_path)
    assert env.get_restart_strategy() == RestartStrategies.fixed_delay_restart(3, 2000)
    env.configure(config(state__backend="hashmap", restart_strategy="none"))
    assert env.get_state_backend() == HashMapStateBackend()
    assert env.get_restart_strategy() == RestartStrategies.no_restart()
    env.configure(config(state__backend="rocksdb", state__backend__rocksdb__localdir=str(tmp_path / "db")))
    expected = EmbeddedRocksDBStateBackend()
    expected.set_db_storage_paths(str(tmp_path / "db"))
    assert env.get_state_backend() == expected


@pytest.mark.parametrize("key", ["state.backend.type", "state.backend"])
@pytest.mark.parametrize("backend,table_files", [("rocksdb", True), ("hashmap", False)])
def test_the_state_backend_key_chooses_where_a_jobs_keyed_state_lives(tmp_path, key: str, backend: str,
                                                                      table_files: bool) -> None:
    """Flink's ``state.backend.type`` (and its older name): RocksDB checkpoints its state as table
    files (SST), the heap as Arrow or pickle files; the job's result is the same."""
    configuration = Configuration().set_string(key, backend).set_string("parallelism.default", "2") \
        .set_string("state.checkpoints.dir", str(tmp_path / "chk"))
    env = StreamExecutionEnvironment.get_execution_environment(configuration)
    env.enable_checkpointing(60_000).get_checkpoint_config().set_checkpoint_interval_records(50)
    out: list = []
    env.from_collection([(x % 7, x) for x in range(600)]).key_by(lambda p: p[0]) \
        .reduce(lambda a, b: (a[0], a[1] + b[1])).add_sink(out.append)
    env.execute(f"{key}: {backend}")
    final: dict[int, int] = {}
    for residue, total in out:
        final[residue] = max(final.get(residue, 0), total)
    assert final == {residue: sum(range(residue, 600, 7)) for residue in range(7)}
    shared = [path.suffix for path in (tmp_path / "chk" / "shared").iterdir()]
    assert shared and (".sst" in shared) is table_files and all(suffix == ".sst" for suffix in shared) is table_files


def test_a_configured_job_runs_with_what_the_configuration_says() -> None:
    env = StreamExecutionEnvironment.get_execution_environment(config(parallelism__default="3"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # parallelism applies: nothing to warn about
        env.configure(config(pipeline__global_job_parameters="greeting:hi,who:all"))
    assert env.get_config().get_global_job_parameters() == {"greeting": "hi", "who": "all"}

    from slipstream.datastream import MapFunction, RuntimeContext

    class Greet(MapFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.subtasks = runtime_context.get_number_of_parallel_subtasks()
            self.greeting = runtime_context.get_job_parameter("greeting")

        def map(self, value: int) -> tuple:
            return self.greeting, self.subtasks, value

    out = env.from_collection([1, 2]).map(Greet()).execute_and_collect()
    assert sorted(out) == [("hi", 3, 1), ("hi", 3, 2)]


def test_the_failure_rate_restart_strategy_from_flinks_keys() -> None:
    configuration = Configuration()
    configuration.set_string("restart-strategy.type", "failure-rate")
    configuration.set_string("restart-strategy.failure-rate.max-failures-per-interval", "3")
    configuration.set_string("restart-strategy.failure-rate.failure-rate-interval", "5 min")
    configuration.set_string("restart-strategy.failure-rate.delay", "10 s")
    env = StreamExecutionEnvironment.get_execution_environment(configuration)
    assert env.get_restart_strategy() == RestartStrategies.failure_rate_restart(3, 300_000, 10_000)
    assert env.get_restart_strategy().get_failure_interval().total_seconds() == 300

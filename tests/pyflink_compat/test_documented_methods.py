"""The methods PyFlink documents for ``StreamExecutionEnvironment``, ``DataStream`` and
``DataStreamSink`` that had no slipstream counterpart: each does what PyFlink's does here, or is
kept and warned about (a JVM-only setting), or is refused saying what to use instead."""

from __future__ import annotations

import json

import pytest

from slipstream.common import Types
from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.configuration import Configuration
from slipstream.errors import InvalidProgramError
from slipstream.runtime.checkpoint.storage import CheckpointStorage

HASH = "0123456789abcdef0123456789ABCDEF"
TRIPLES = Types.TUPLE([Types.INT(), Types.STRING(), Types.DOUBLE()])


def fresh() -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment()


# -- DataStream.project -----------------------------------------------------------------------------
def test_project_picks_fields_in_the_order_given_with_their_types() -> None:
    env = fresh()
    stream = env.from_collection([(1, "a", 2.5), (2, "b", 3.5)], type_info=TRIPLES).project(2, 0, 2)
    assert stream.get_type() == Types.TUPLE([Types.DOUBLE(), Types.INT(), Types.DOUBLE()])
    assert stream.get_name() == "Projection"
    assert list(stream.execute_and_collect()) == [(2.5, 1, 2.5), (3.5, 2, 3.5)]


def test_project_refuses_a_stream_not_of_tuples_and_indexes_outside_the_tuple() -> None:
    env = fresh()
    with pytest.raises(InvalidProgramError, match="only a stream of Types.TUPLE records can be projected"):
        env.from_collection([(1, 2)]).project(0)
    triples = env.from_collection([(1, "a", 2.5)], type_info=TRIPLES)
    with pytest.raises(InvalidProgramError, match="field index 3 is not one of the 3 fields"):
        triples.project(0, 3)
    with pytest.raises(InvalidProgramError, match="at least one field index"):
        triples.project()


# -- descriptions, uid hashes, sinks' settings ------------------------------------------------------
def test_descriptions_show_in_explain_and_in_the_json_plan() -> None:
    env = fresh()
    stream = env.from_collection([1, 2]).map(lambda x: x + 1).set_description("adds one")
    stream.print().set_description("to the terminal")
    assert "Map: adds one" in env.explain()
    nodes = {node["type"]: node for node in json.loads(env.get_execution_plan())["nodes"]}
    assert nodes["Map"]["description"] == "adds one"
    assert nodes["Sink: Print to Std. Out"]["description"] == "to the terminal"
    assert "description" not in nodes["Source: Collection Source"]


def test_a_sink_is_named_identified_and_grouped_like_an_operator() -> None:
    env = fresh()
    sink = env.from_collection([1]).print()
    with pytest.warns(UserWarning, match="slot sharing group 'g'"):
        sink.name("out").uid("printer").set_uid_hash(HASH).slot_sharing_group("g")
    with pytest.raises(InvalidProgramError, match="non-empty string"):
        sink.name("")
    nodes = json.loads(env.get_execution_plan())["nodes"]
    assert nodes[-1]["type"] == "out" and nodes[-1]["slot_sharing_group"] == "g"


def test_a_uid_hash_must_be_32_hex_digits_and_unique_and_a_keyed_stream_has_none() -> None:
    env = fresh()
    stream = env.from_collection([1])
    for bad in ("abc", HASH + "0", "g" * 32, 7):
        with pytest.raises(InvalidProgramError, match="32 hexadecimal digits"):
            stream.map(lambda x: x).set_uid_hash(bad)  # type: ignore[arg-type]
    stream.map(lambda x: x).set_uid_hash(HASH)
    with pytest.raises(InvalidProgramError, match="already used"):
        stream.map(lambda x: x).set_uid_hash(HASH)
    keyed = stream.key_by(lambda x: x)
    for call in (lambda: keyed.set_uid_hash(HASH.lower()), lambda: keyed.set_description("keys")):
        with pytest.raises(InvalidProgramError, match="is not supported"):
            call()


def test_an_operator_without_uid_keeps_its_state_under_its_uid_hash(tmp_path) -> None:
    """The hash names the operator's state in the checkpoint, and a job with it restores from there."""
    def job() -> StreamExecutionEnvironment:
        env = fresh().set_parallelism(2)
        env.enable_checkpointing(60_000)
        config = env.get_checkpoint_config()
        config.set_checkpoint_interval_records(100)
        config.set_checkpoint_storage_dir(str(tmp_path))
        (env.from_collection(list(range(600))).map(lambda x: (x % 3, 1)).key_by(lambda p: p[0])
         .reduce(lambda a, b: (a[0], a[1] + b[1])).set_uid_hash(HASH).add_sink(lambda _: None))
        return env

    job().execute("first")
    storage = CheckpointStorage(str(tmp_path))
    newest = storage.read_verified(storage.path_of(storage.complete_ids()[-1]), None)
    assert HASH in newest.manifest.operators
    result = job().execute("again", restore_from="latest")
    assert result.get_accumulator_result("checkpoints")["restored_from"] is not None


# -- the environment --------------------------------------------------------------------------------
def test_the_default_local_parallelism_is_what_new_environments_start_with() -> None:
    env = fresh()
    assert env.get_default_local_parallelism() == 1 and env.get_parallelism() == 1
    try:
        env.set_default_local_parallelism(3)
        assert fresh().get_parallelism() == 3 and env.get_parallelism() == 1
        with pytest.raises(InvalidProgramError, match="positive integer"):
            env.set_default_local_parallelism(0)
    finally:
        env.set_default_local_parallelism(1)


def test_the_default_savepoint_directory_is_set_by_method_or_by_flinks_keys(tmp_path) -> None:
    env = fresh()
    assert env.get_default_savepoint_directory() is None
    env.set_default_savepoint_directory(str(tmp_path))
    assert env.get_default_savepoint_directory() == str(tmp_path)
    for key in ("state.savepoints.dir", "execution.checkpointing.savepoint-dir"):
        configured = fresh()
        configured.configure(Configuration().set_string(key, "/savepoints"))
        assert configured.get_default_savepoint_directory() == "/savepoints"


def test_the_changelog_switch_is_kept_unset_by_default_and_warned_about_when_on() -> None:
    env = fresh()
    assert env.is_changelog_state_backend_enabled() is None
    env.enable_changelog_state_backend(False)
    assert env.is_changelog_state_backend_enabled() is False
    with pytest.warns(UserWarning, match="always incremental"):
        env.enable_changelog_state_backend(True)
    assert env.is_changelog_state_backend_enabled() is True
    configured = fresh()
    with pytest.warns(UserWarning, match="always incremental"):
        configured.configure(Configuration().set_string("state.backend.changelog.enabled", "true"))
    assert configured.is_changelog_state_backend_enabled() is True


def test_java_serializer_settings_and_cached_files_are_kept_and_warned_about(tmp_path) -> None:
    env = fresh()
    for call in (lambda: env.register_type("com.example.Pojo"),
                 lambda: env.add_default_kryo_serializer("com.example.Pojo", "com.example.Ser"),
                 lambda: env.register_type_with_kryo_serializer("com.example.Pojo", "com.example.Ser")):
        with pytest.warns(UserWarning, match="no Java serializers"):
            call()
    config = env.get_config()
    assert config.get_registered_pojo_types() == ["com.example.Pojo"]
    assert config.get_default_kryo_serializer_classes() == {"com.example.Pojo": "com.example.Ser"}
    assert config.get_registered_types_with_kryo_serializer_classes() == {"com.example.Pojo": "com.example.Ser"}
    path = str(tmp_path / "lookup.csv")
    with pytest.warns(UserWarning, match="read the file at its own path"):
        env.register_cached_file(path, "lookup")
    assert env.get_configuration().get_string("pipeline.cached-files", "") == \
        f"name:lookup,path:{path},executable:false"


def test_add_source_and_create_input_say_what_to_use_instead() -> None:
    env = fresh()
    with pytest.raises(InvalidProgramError, match=r"wraps a Java source: use from_source\(\.\.\.\)"):
        env.add_source(object())
    with pytest.raises(InvalidProgramError, match="Java InputFormat"):
        env.create_input(object())


def test_close_drops_the_graph_built_since_the_last_run_and_ends_spare_workers() -> None:
    from slipstream.runtime.workers import spares
    env = fresh()
    env.from_collection([1]).print()
    env.close()
    assert spares.spare_pids() == []
    with pytest.raises(InvalidProgramError, match="no sink"):
        env.execute()
    assert list(env.from_collection([2]).execute_and_collect()) == [2]  # the environment builds new jobs


# -- ExecutionConfig's switches, Row, descriptors, type infos ----------------------------------------
def test_execution_config_switches_read_back_and_disabled_auto_uids_require_every_uid() -> None:
    env = fresh()
    config = env.get_config()
    assert not config.is_object_reuse_enabled() and config.is_closure_cleaner_enabled()
    assert not config.has_generic_types_disabled() and config.has_auto_generated_uids_enabled()
    config.enable_object_reuse()
    with pytest.warns(UserWarning, match="no Kryo"):
        config.enable_force_kryo()
    assert config.is_object_reuse_enabled() and config.is_force_kryo_enabled()
    assert env.get_configuration().get_string("pipeline.object-reuse", "") == "true"
    config.disable_auto_generated_uids()
    env.from_collection([1]).uid("numbers").map(lambda x: x).print().uid("out")
    with pytest.raises(InvalidProgramError, match="operator 'Map' has no uid or uid hash"):
        env.execute()
    configured = fresh()
    configured.configure(Configuration().set_string("pipeline.auto-generate-uids", "false"))
    assert not configured.get_config().has_auto_generated_uids_enabled()


def test_rows_descriptors_type_infos_and_iterators_as_pyflinks() -> None:
    from slipstream.common import Row
    from slipstream.datastream.state import AggregatingStateDescriptor, ReducingStateDescriptor
    from slipstream.datastream.typeinfo import BasicTypeInfo, RowKind
    from slipstream.datastream.functions import AggregateFunction

    row = Row.of_kind(RowKind.UPDATE_AFTER, name="a", age=3)
    assert row.get_row_kind() is RowKind.UPDATE_AFTER and row.get_fields_by_names(["name", "age"]) == ["a", 3]
    with pytest.raises(KeyError, match="no field"):
        row.get_fields_by_names(["size"])

    def add(a: int, b: int) -> int:
        return a + b

    assert ReducingStateDescriptor("sum", add).get_reduce_function().reduce(1, 2) == 3

    class Count(AggregateFunction):
        def create_accumulator(self): return 0
        def add(self, value, accumulator): return accumulator + 1
        def get_result(self, accumulator): return accumulator
        def merge(self, a, b): return a + b

    count = Count()
    assert AggregatingStateDescriptor("count", count).get_agg_function() is count
    assert BasicTypeInfo.STRING_TYPE_INFO() == Types.STRING() and BasicTypeInfo.BIG_DEC_TYPE_INFO() == Types.BIG_DEC()
    env = fresh()
    assert env.get_checkpointing_consistency_mode() == env.get_checkpointing_mode()
    stream = env.from_collection([1, 2])
    assert stream.get_execution_config() is env.get_config()
    with stream.execute_and_collect() as records:
        assert records.next() == 1 and next(records) == 2


def test_watermark_alignment_is_kept_and_warned_about() -> None:
    from slipstream.common import Duration, WatermarkStrategy
    with pytest.warns(UserWarning, match="watermark alignment of group 'readers'"):
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_watermark_alignment(
            "readers", Duration.of_seconds(20), Duration.of_seconds(2))
    assert strategy.get_alignment() == ("readers", 20_000, 2_000)
    env = fresh()
    stream = env.from_collection([3, 1, 2]).assign_timestamps_and_watermarks(
        strategy.with_timestamp_assigner(lambda value, _: value))
    assert sorted(stream.execute_and_collect()) == [1, 2, 3]


def test_state_backends_getters_and_kept_tuning(tmp_path) -> None:
    from slipstream.datastream.state_backend import (
        EmbeddedRocksDBStateBackend,
        FsStateBackend,
        MemoryStateBackend,
        RocksDBStateBackend,
    )
    assert MemoryStateBackend.DEFAULT_MAX_STATE_SIZE == 5 * 1024 * 1024
    assert MemoryStateBackend().is_using_asynchronous_snapshots()
    rocks = EmbeddedRocksDBStateBackend()
    assert rocks.get_number_of_transfer_threads() == 4 and rocks.get_options() is None and rocks.unapplied() == []
    rocks.set_number_of_transfer_threads(8)
    rocks.set_options("com.example.MyOptionsFactory")
    assert rocks.get_number_of_transfer_threads() == 8 and rocks.get_options() == "com.example.MyOptionsFactory"
    assert len(rocks.unapplied()) == 2
    with pytest.raises(InvalidProgramError, match="transfer threads"):
        rocks.set_number_of_transfer_threads(0)
    assert RocksDBStateBackend(str(tmp_path)).get_checkpoint_backend() == FsStateBackend(str(tmp_path))
    assert RocksDBStateBackend().get_checkpoint_backend() == MemoryStateBackend()
    env = fresh()
    rocks_env = RocksDBStateBackend(str(tmp_path))
    rocks_env.set_number_of_transfering_threads(2)
    with pytest.warns(UserWarning, match="number_of_transfer_threads"):
        env.set_state_backend(rocks_env)


def test_execution_configs_java_settings_are_kept_and_read_back() -> None:
    config = fresh().get_config()
    assert config.get_registered_kryo_types() == [] and config.get_registered_pojo_types() == []
    with pytest.warns(UserWarning, match="no Java serializers"):
        config.register_kryo_type("com.example.A").register_kryo_type("com.example.B")
    with pytest.warns(UserWarning, match="no Java serializers"):
        config.register_kryo_type("com.example.A")  # once only, as Flink's set
    assert config.get_registered_kryo_types() == ["com.example.A", "com.example.B"]
    assert (config.get_task_cancellation_interval(), config.get_task_cancellation_timeout()) == (30_000, 180_000)
    config.set_task_cancellation_interval(1_000).set_task_cancellation_timeout(0)
    assert (config.get_task_cancellation_interval(), config.get_task_cancellation_timeout()) == (1_000, 0)
    with pytest.raises(InvalidProgramError, match="integer milliseconds"):
        config.set_task_cancellation_timeout(-1)
    assert not config.is_auto_type_registration_disabled()
    assert config.disable_auto_type_registration().is_auto_type_registration_disabled()
    assert not config.is_use_snapshot_compression()
    with pytest.warns(UserWarning, match="uncompressed"):
        config.set_use_snapshot_compression(True)
    assert config.is_use_snapshot_compression()

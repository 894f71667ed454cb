"""``ExecutionConfig``: job-wide settings, as ``pyflink.common.ExecutionConfig`` (the part that applies).

``env.get_config()`` returns the environment's config. Parallelism, maximum
parallelism and the restart strategy are the environment's own settings, read and
written through either object, as in Flink. The switches of Java's serialisation and closures
(object reuse, closure cleaner, generic types, forced Kryo or Avro) are kept under Flink's keys and
change nothing (turning one where it would matter is warned about); disabling auto-generated uids
makes every operator need a uid, as in Flink. Kryo and POJO registrations, task cancellation's
interval and timeout and snapshot compression are kept the same way, readable through their getters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slipstream.datastream.python_dependencies import warn_not_applied
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.environment import StreamExecutionEnvironment
    from slipstream.datastream.restart_strategy import RestartStrategyConfiguration

__all__ = ["AUTO_UIDS", "ExecutionConfig"]

OBJECT_REUSE = "pipeline.object-reuse"
CLOSURE_CLEANER = "pipeline.closure-cleaner-enabled"
GENERIC_TYPES = "pipeline.generic-types"
AUTO_UIDS = "pipeline.auto-generate-uids"
"""False: every operator must have a uid (or a uid hash); the planner refuses a job otherwise."""
FORCE_KRYO = "pipeline.force-kryo"
FORCE_AVRO = "pipeline.force-avro"
AUTO_TYPE_REGISTRATION = "pipeline.auto-type-registration"
DEFAULT_KRYO_SERIALIZERS = "pipeline.default-kryo-serializers"
KRYO_TYPE_SERIALIZERS = "pipeline.kryo-type-serializers"  # registerTypeWithKryoSerializer's (no key in Flink's options)
KRYO_TYPES = "pipeline.registered-kryo-types"
POJO_TYPES = "pipeline.registered-pojo-types"
CANCELLATION_INTERVAL = "task.cancellation.interval"
CANCELLATION_TIMEOUT = "task.cancellation.timeout"
SNAPSHOT_COMPRESSION = "execution.checkpointing.snapshot-compression"
_NO_JAVA_SERIALIZERS = "records are Python objects, pickled where they cross processes; there are no Java serializers"


class ExecutionConfig:
    """Job-wide settings of one environment.

    ``auto_watermark_interval`` is kept for reading back: slipstream asks watermark
    generators for their periodic watermark after every input batch (see
    :mod:`slipstream.operators.timestamps`), never later than Flink's interval would.
    """

    PARALLELISM_DEFAULT = -1
    """The flag value meaning "the environment's default parallelism"."""

    PARALLELISM_UNKNOWN = -2
    """The flag value meaning "not set"; never a valid parallelism."""

    def __init__(self, environment: StreamExecutionEnvironment) -> None:
        self._env = environment
        self.auto_watermark_interval = 200
        self.global_job_parameters: dict[str, str] = {}

    # -- settings of the environment ---------------------------------------------------------------
    def get_parallelism(self) -> int:
        return self._env.get_parallelism()

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        self._env.set_parallelism(parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._env.get_max_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        self._env.set_max_parallelism(max_parallelism)
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration | None:
        return self._env.get_restart_strategy()

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration) -> ExecutionConfig:
        self._env.set_restart_strategy(restart_strategy_configuration)
        return self

    # -- the config's own settings ----------------------------------------------------------------
    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        self.auto_watermark_interval = _milliseconds(interval, "the auto watermark interval")
        return self

    def get_auto_watermark_interval(self) -> int:
        return self.auto_watermark_interval

    def set_latency_tracking_interval(self, interval: int) -> ExecutionConfig:
        """How often (ms) streaming sources send latency markers, from which every operator keeps a
        source-to-operator latency histogram (Flink's ``metrics.latency.interval``; 500 by default;
        0 or less disables them). See :mod:`slipstream.runtime.latency`."""
        milliseconds = _milliseconds(interval, "the latency tracking interval", allow_negative=True)
        self._env.runtime_options.latency_interval_ms = max(0, milliseconds)
        return self

    def get_latency_tracking_interval(self) -> int:
        return self._env.runtime_options.latency_interval_ms

    def set_global_job_parameters(self, global_job_parameters_dict: dict[str, str]) -> ExecutionConfig:
        """Parameters every function reads with ``runtime_context.get_job_parameter(key)``."""
        if not isinstance(global_job_parameters_dict, dict):
            raise InvalidProgramError(f"global job parameters must be a dict, got {global_job_parameters_dict!r}")
        self.global_job_parameters = dict(global_job_parameters_dict)
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return dict(self.global_job_parameters)

    # -- Java-side switches, kept under Flink's keys (env.get_configuration() shows them) -----------
    def _flag(self, key: str, default: bool) -> bool:
        value = self._env._pipeline.configuration.get_string(key, None)
        return default if value is None else value == "true"

    def _set_flag(self, key: str, value: bool, why: str | None = None) -> ExecutionConfig:
        if why is not None:
            warn_not_applied(f"{key} = {str(value).lower()}", why)
        self._env._pipeline.configuration.set_string(key, str(value).lower())
        return self

    def enable_object_reuse(self) -> ExecutionConfig:
        """Kept: records pass between operators without copies either way (Flink's object reuse)."""
        return self._set_flag(OBJECT_REUSE, True)

    def disable_object_reuse(self) -> ExecutionConfig:
        return self._set_flag(OBJECT_REUSE, False, "records pass between chained operators without copies")

    def is_object_reuse_enabled(self) -> bool:
        return self._flag(OBJECT_REUSE, False)

    def enable_closure_cleaner(self) -> ExecutionConfig:
        return self._set_flag(CLOSURE_CLEANER, True)

    def disable_closure_cleaner(self) -> ExecutionConfig:
        return self._set_flag(CLOSURE_CLEANER, False, "there are no Java closures to clean")

    def is_closure_cleaner_enabled(self) -> bool:
        return self._flag(CLOSURE_CLEANER, True)

    def enable_generic_types(self) -> ExecutionConfig:
        return self._set_flag(GENERIC_TYPES, True)

    def disable_generic_types(self) -> ExecutionConfig:
        return self._set_flag(GENERIC_TYPES, False, "records without a type are pickled, never Kryo's generic type")

    def has_generic_types_disabled(self) -> bool:
        return not self._flag(GENERIC_TYPES, True)

    def enable_auto_generated_uids(self) -> ExecutionConfig:
        return self._set_flag(AUTO_UIDS, True)

    def disable_auto_generated_uids(self) -> ExecutionConfig:
        """As Flink's: a job whose operators do not all have a ``uid`` (or ``set_uid_hash``) is refused."""
        return self._set_flag(AUTO_UIDS, False)

    def has_auto_generated_uids_enabled(self) -> bool:
        return self._flag(AUTO_UIDS, True)

    def enable_force_kryo(self) -> ExecutionConfig:
        return self._set_flag(FORCE_KRYO, True, "records are Python objects, pickled; there is no Kryo")

    def disable_force_kryo(self) -> ExecutionConfig:
        return self._set_flag(FORCE_KRYO, False)

    def is_force_kryo_enabled(self) -> bool:
        return self._flag(FORCE_KRYO, False)

    def enable_force_avro(self) -> ExecutionConfig:
        return self._set_flag(FORCE_AVRO, True, "records are Python objects, pickled; there is no Avro serializer")

    def disable_force_avro(self) -> ExecutionConfig:
        return self._set_flag(FORCE_AVRO, False)

    def is_force_avro_enabled(self) -> bool:
        return self._flag(FORCE_AVRO, False)

    def disable_auto_type_registration(self) -> ExecutionConfig:
        """Kept: no type is registered with a serializer here, automatically or not."""
        return self._set_flag(AUTO_TYPE_REGISTRATION, False)

    def is_auto_type_registration_disabled(self) -> bool:
        return not self._flag(AUTO_TYPE_REGISTRATION, True)

    # -- Java serializers' registrations: kept under Flink's keys, read back, warned about ----------
    def _names(self, key: str) -> list[str]:
        value = self._env._pipeline.configuration.get_string(key, "")
        return [name for name in value.split(";") if name]

    def _add_name(self, key: str, name: str, call: str) -> ExecutionConfig:
        warn_not_applied(call, _NO_JAVA_SERIALIZERS)
        names = self._names(key)
        if name not in names:
            self._env._pipeline.configuration.set_string(key, ";".join([*names, name]))
        return self

    def _serializers(self, key: str) -> dict[str, str]:
        pairs = (entry.split(",serializer:") for entry in self._names(key))
        return {type_name.removeprefix("class:"): serializer for type_name, serializer in pairs}

    def _add_serializer(self, key: str, type_class_name: str, serializer_class_name: str, call: str) -> ExecutionConfig:
        warn_not_applied(call, _NO_JAVA_SERIALIZERS)
        serializers = {**self._serializers(key), type_class_name: serializer_class_name}
        self._env._pipeline.configuration.set_string(
            key, ";".join(f"class:{name},serializer:{serializer}" for name, serializer in serializers.items()))
        return self

    def add_default_kryo_serializer(self, type_class_name: str, serializer_class_name: str) -> ExecutionConfig:
        return self._add_serializer(DEFAULT_KRYO_SERIALIZERS, type_class_name, serializer_class_name,
                                    f"add_default_kryo_serializer({type_class_name!r}, {serializer_class_name!r})")

    def register_type_with_kryo_serializer(self, type_class_name: str, serializer_class_name: str) -> ExecutionConfig:
        call = f"register_type_with_kryo_serializer({type_class_name!r}, {serializer_class_name!r})"
        return self._add_serializer(KRYO_TYPE_SERIALIZERS, type_class_name, serializer_class_name, call)

    def register_pojo_type(self, type_class_name: str) -> ExecutionConfig:
        return self._add_name(POJO_TYPES, type_class_name, f"register_pojo_type({type_class_name!r})")

    def register_kryo_type(self, type_class_name: str) -> ExecutionConfig:
        return self._add_name(KRYO_TYPES, type_class_name, f"register_kryo_type({type_class_name!r})")

    def get_default_kryo_serializer_classes(self) -> dict[str, str]:
        """Type class name -> serializer class name, as registered."""
        return self._serializers(DEFAULT_KRYO_SERIALIZERS)

    def get_registered_types_with_kryo_serializer_classes(self) -> dict[str, str]:
        return self._serializers(KRYO_TYPE_SERIALIZERS)

    def get_registered_pojo_types(self) -> list[str]:
        return self._names(POJO_TYPES)

    def get_registered_kryo_types(self) -> list[str]:
        return self._names(KRYO_TYPES)

    # -- task cancellation and snapshot compression: kept, read back -------------------------------
    def _millis_setting(self, key: str, default: int) -> int:
        value = self._env._pipeline.configuration.get_string(key, None)
        return default if value is None else int(value)

    def set_task_cancellation_interval(self, interval: int) -> ExecutionConfig:
        """Kept: a cancel stops the job between two turns, so there is nothing to repeat it at."""
        self._env._pipeline.configuration.set_string(CANCELLATION_INTERVAL, str(_milliseconds(interval, "interval")))
        return self

    def get_task_cancellation_interval(self) -> int:
        """Milliseconds (30,000 unless set, as Flink's)."""
        return self._millis_setting(CANCELLATION_INTERVAL, 30_000)

    def set_task_cancellation_timeout(self, timeout: int) -> ExecutionConfig:
        """Kept: a cancel stops the job between two turns; 0 disables the timeout, as in Flink."""
        self._env._pipeline.configuration.set_string(CANCELLATION_TIMEOUT, str(_milliseconds(timeout, "timeout")))
        return self

    def get_task_cancellation_timeout(self) -> int:
        """Milliseconds (180,000 unless set, as Flink's)."""
        return self._millis_setting(CANCELLATION_TIMEOUT, 180_000)

    def set_use_snapshot_compression(self, use_snapshot_compression: bool) -> ExecutionConfig:
        return self._set_flag(SNAPSHOT_COMPRESSION, use_snapshot_compression,
                              "checkpoint files are written uncompressed" if use_snapshot_compression else None)

    def is_use_snapshot_compression(self) -> bool:
        return self._flag(SNAPSHOT_COMPRESSION, False)

    def _key(self) -> tuple[Any, ...]:
        return (self.get_parallelism(), self.get_max_parallelism(), self.get_restart_strategy(),
                self.auto_watermark_interval, self.get_latency_tracking_interval(),
                tuple(sorted(self.global_job_parameters.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionConfig) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _milliseconds(value: Any, what: str, allow_negative: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (value < 0 and not allow_negative):
        raise InvalidProgramError(f"{what} must be integer milliseconds, got {value!r}")
    return value

"""Flink's configuration keys that slipstream applies, for ``env.configure(Configuration)``.

Each known key is applied through the environment method that does the same thing,
so it is checked and warned about exactly as that call would be:

* ``parallelism.default``, ``pipeline.max-parallelism``, ``execution.runtime-mode``,
  ``execution.buffer-timeout``, ``pipeline.operator-chaining`` (``.enabled``),
  ``pipeline.time-characteristic``: the environment's setters;
* ``pipeline.auto-watermark-interval``, ``pipeline.global-job-parameters``, ``metrics.latency.interval``:
  ``get_config()``'s;
* ``execution.checkpointing.interval`` / ``.mode`` / ``.timeout`` / ``.min-pause`` /
  ``.max-concurrent-checkpoints`` / ``.tolerable-failed-checkpoints`` / ``.unaligned`` (``.enabled``) /
  ``.interval-during-backlog`` / ``.externalized-checkpoint-retention``, ``state.checkpoints.dir``
  (``execution.checkpointing.dir``), ``state.checkpoints.num-retained``
  (``execution.checkpointing.num-retained``): ``get_checkpoint_config()``'s;
* ``state.savepoints.dir`` (``execution.checkpointing.savepoint-dir``): ``set_default_savepoint_directory``;
  ``state.backend.changelog.enabled`` (``state.changelog.enabled``): ``enable_changelog_state_backend``;
* ``state.backend`` (``state.backend.type``): ``set_state_backend`` with ``hashmap``,
  ``jobmanager``, ``filesystem`` or ``rocksdb`` (its databases under ``state.backend.rocksdb.localdir``);
* ``restart-strategy`` (``.type``): ``none``, ``fixed-delay`` with ``restart-strategy.fixed-delay.attempts``
  and ``.delay``, or ``failure-rate`` with ``restart-strategy.failure-rate.max-failures-per-interval``,
  ``.failure-rate-interval`` and ``.delay`` (other strategies are refused);
* ``python.files``, ``python.archives``, ``python.requirements``, ``python.executable``,
  ``pipeline.jars``, ``pipeline.classpaths``: the dependency methods
  (see :mod:`slipstream.datastream.python_dependencies`);
* ``taskmanager.memory.managed.size``, ``taskmanager.memory.task.heap.size``,
  ``taskmanager.memory.network.max``: the job's memory budgets (``configure``'s
  ``managed_memory``, ``task_heap_memory``, ``network_memory``; see :mod:`slipstream.operators.memory`);
* ``local.number-taskmanager``: how many worker processes run the job (``configure(workers=...)``;
  see :mod:`slipstream.runtime.workers`), ``heartbeat.interval`` and ``heartbeat.timeout``: how often a
  worker reports, and how long a silent one is waited for before the job fails over.

Durations read as Flink writes them (``500``, ``500 ms``, ``10 s``, ``1 min``).
A value that does not parse raises ``InvalidProgramError`` naming the key. Every other
key is kept (``env.get_configuration()``) and named in one warning: it is never applied
wrongly, and never silently taken for applied.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from slipstream.datastream.configuration import Configuration
from slipstream.datastream.time_characteristic import TimeCharacteristic
from slipstream.errors import InvalidProgramError

if TYPE_CHECKING:
    from slipstream.datastream.environment import StreamExecutionEnvironment
    from slipstream.datastream.slot_sharing_group import SlotSharingGroup
    from slipstream.datastream.state_backend import StateBackend

__all__ = ["MANAGED", "NETWORK", "TASK_HEAP", "PipelineSettings", "apply_configuration", "parse_duration_ms",
           "parse_memory_size"]

SAVEPOINT_DIRECTORY = "execution.checkpointing.savepoint-dir"
"""The default savepoint directory (``set_default_savepoint_directory``; ``state.savepoints.dir`` before Flink 1.20)."""
CHANGELOG = "state.changelog.enabled"
"""The changelog state backend switch (``enable_changelog_state_backend``; ``state.backend.changelog.enabled`` too)."""
MANAGED = "taskmanager.memory.managed.size"
TASK_HEAP = "taskmanager.memory.task.heap.size"
NETWORK = "taskmanager.memory.network.max"
"""Flink's names of the memory pools slipstream budgets (see :mod:`slipstream.operators.memory`)."""
_UNITS = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kibibytes": 1 << 10,
          "m": 1 << 20, "mb": 1 << 20, "mebibytes": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
          "gibibytes": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tebibytes": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def parse_memory_size(value: int | str, option: str) -> int:
    """Bytes of a memory size given as an int or as Flink writes one (``64 mb``); raises naming ``option``."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (match := _SIZE.match(value.lower())) and match.group(2) in _UNITS:
        size = int(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise InvalidProgramError(f"{option} must be a memory size (bytes, or a number with a unit: "
                                  f"'512 kb', '64 mb', '1 gb'), got {value!r}")
    if size < 1:
        raise InvalidProgramError(f"{option} must be at least 1 byte, got {value!r}")
    return size


@dataclass
class PipelineSettings:
    """What an environment keeps of PyFlink's settings beyond its own runtime options."""

    configuration: Configuration = field(default_factory=Configuration)
    buffer_timeout: int = 100
    chaining_enabled: bool = True
    time_characteristic: TimeCharacteristic = TimeCharacteristic.EventTime
    state_backend: StateBackend | None = None
    slot_sharing_groups: dict[str, SlotSharingGroup] = field(default_factory=dict)

    def append_to(self, key: str, value: str, separator: str) -> None:
        """Add ``value`` to the list-valued ``key`` of the configuration, as PyFlink records dependencies."""
        old = self.configuration.get_string(key, None)
        self.configuration.set_string(key, value if not old else separator.join([old, value]))


_DURATION = re.compile(r"^\s*(\d+)\s*([a-zµ]*)\s*$")
_UNIT_MS = {**dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 1),
            **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1000),
            **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
            **dict.fromkeys(("h", "hour", "hours"), 3_600_000),
            **dict.fromkeys(("d", "day", "days"), 86_400_000)}


def parse_duration_ms(text: str, key: str) -> int:
    """Milliseconds of a Flink duration: ``500``, ``500 ms``, ``10 s``, ``1 min``, ``2 h``, ``1 d``."""
    match = _DURATION.match(text.lower())
    if match is None or match.group(2) not in _UNIT_MS:
        raise InvalidProgramError(f"configuration key {key!r}: {text!r} is not a duration "
                                  "(a number with an optional unit: ms, s, min, h, d)")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _integer(text: str, key: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidProgramError(f"configuration key {key!r}: {text!r} is not an integer") from None


def _boolean(text: str, key: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidProgramError(f"configuration key {key!r}: {text!r} is not true or false")
    return value == "true"


def _enum_member(enum: Any, text: str, key: str) -> Any:
    """The member of ``enum`` named ``text`` (any case, ``-`` for ``_``)."""
    wanted = text.strip().upper().replace("-", "_")
    for member in enum:
        if member.name.upper() == wanted:
            return member
    names = ", ".join(member.name for member in enum)
    raise InvalidProgramError(f"configuration key {key!r}: {text!r} is not one of {names}")


def _job_parameters(text: str, key: str) -> dict[str, str]:
    """Flink's map syntax: ``k1:v1,k2:v2``."""
    parameters = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = entry.partition(":")
        if not sep:
            raise InvalidProgramError(f"configuration key {key!r}: {entry!r} is not key:value")
        parameters[name.strip()] = value.strip()
    return parameters


def _each(text: str, separator: str) -> list[str]:
    return [part.strip() for part in text.split(separator) if part.strip()]


# -- how each key applies ------------------------------------------------------------------------

Apply = Callable[["StreamExecutionEnvironment", str, str, Configuration], None]


def _runtime_mode(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
    from slipstream.datastream.job_spec import RuntimeExecutionMode
    env.set_runtime_mode(_enum_member(RuntimeExecutionMode, text, key))


def _chaining(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
    env._pipeline.chaining_enabled = _boolean(text, key)


def _checkpoint_config(method: str, parse: Callable[[str, str], Any]) -> Apply:
    def apply(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
        getattr(env.get_checkpoint_config(), method)(parse(text, key))
    return apply


def _checkpointing_mode(text: str, key: str) -> Any:
    from slipstream.datastream.checkpoint_config import CheckpointingMode
    return _enum_member(CheckpointingMode, text, key)


def _retention(text: str, key: str) -> Any:
    from slipstream.datastream.checkpoint_config import ExternalizedCheckpointCleanup
    return _enum_member(ExternalizedCheckpointCleanup, text, key)


def _state_backend(env: StreamExecutionEnvironment, text: str, key: str, configuration: Configuration) -> None:
    from slipstream.datastream.state_backend import (
        EmbeddedRocksDBStateBackend,
        FsStateBackend,
        HashMapStateBackend,
        MemoryStateBackend,
    )
    name = text.strip().lower()
    directory = configuration.get_string("state.checkpoints.dir", None) or \
        configuration.get_string("execution.checkpointing.dir", None)
    if name == "hashmap":
        backend: Any = HashMapStateBackend()
    elif name == "jobmanager":
        backend = MemoryStateBackend(directory)
    elif name == "filesystem":
        if directory is None:
            raise InvalidProgramError(f"configuration key {key!r} = 'filesystem' needs 'state.checkpoints.dir'")
        backend = FsStateBackend(directory)
    elif name == "rocksdb":
        backend = EmbeddedRocksDBStateBackend()
        local = configuration.get_string("state.backend.rocksdb.localdir", None)
        if local:
            backend.set_db_storage_paths(*local.split(","))
    else:
        raise InvalidProgramError(f"configuration key {key!r}: {text!r} is not one of hashmap, jobmanager, "
                                  "filesystem, rocksdb")
    env.set_state_backend(backend)


def _restart_strategy(env: StreamExecutionEnvironment, text: str, key: str, configuration: Configuration) -> None:
    from slipstream.datastream.restart_strategy import RestartStrategies
    name = text.strip().lower()
    if name in ("none", "off", "disable"):
        env.set_restart_strategy(RestartStrategies.no_restart())
    elif name in ("fixed-delay", "fixeddelay"):
        attempts_key, delay_key = "restart-strategy.fixed-delay.attempts", "restart-strategy.fixed-delay.delay"
        attempts = _integer(configuration.get_string(attempts_key, "1"), attempts_key)
        delay = parse_duration_ms(configuration.get_string(delay_key, "1 s"), delay_key)
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(attempts, delay))
    elif name in ("failure-rate", "failurerate"):
        rate_key, interval_key, delay_key = ("restart-strategy.failure-rate.max-failures-per-interval",
                                             "restart-strategy.failure-rate.failure-rate-interval",
                                             "restart-strategy.failure-rate.delay")
        rate = _integer(configuration.get_string(rate_key, "1"), rate_key)
        interval = parse_duration_ms(configuration.get_string(interval_key, "1 min"), interval_key)
        delay = parse_duration_ms(configuration.get_string(delay_key, "1 s"), delay_key)
        env.set_restart_strategy(RestartStrategies.failure_rate_restart(rate, interval, delay))
    else:
        raise InvalidProgramError(f"configuration key {key!r}: restart strategy {text!r} is not supported "
                                  "(none, fixed-delay or failure-rate)")


def _each_with(method: str, separator: str) -> Apply:
    def apply(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
        for part in _each(text, separator):
            getattr(env, method)(part)
    return apply


def _requirements(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
    env.set_python_requirements(*text.split("#", 1))


def _archives(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
    for archive in _each(text, ","):
        env.add_python_archive(*archive.split("#", 1))


def _env_call(method: str, parse: Callable[[str, str], Any]) -> Apply:
    def apply(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
        getattr(env, method)(parse(text, key))
    return apply


def _config_call(method: str, parse: Callable[[str, str], Any]) -> Apply:
    def apply(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
        getattr(env.get_config(), method)(parse(text, key))
    return apply


def _memory(option: str) -> Apply:
    """Set the runtime option ``option`` (a memory budget) to the size as written, naming the key
    when it does not parse."""
    def apply(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
        setattr(env.runtime_options, option, parse_memory_size(text.strip(), key))
    return apply


def _runtime_option(option: str, parse: Callable[[str, str], int]) -> Apply:
    """Set the runtime option ``option`` to the value as parsed (at least 1), naming the key when it is not."""
    def apply(env: StreamExecutionEnvironment, text: str, key: str, _: Configuration) -> None:
        value = parse(text, key)
        if value < 1:
            raise InvalidProgramError(f"{key} must be at least 1, got {text!r}")
        setattr(env.runtime_options, option, value)
    return apply


def _text(text: str, key: str) -> str:
    return text.strip()


def _time_characteristic(text: str, key: str) -> TimeCharacteristic:
    return cast("TimeCharacteristic", _enum_member(TimeCharacteristic, text, key))


_OPTIONS: list[tuple[tuple[str, ...], Apply]] = [
    (("parallelism.default",), _env_call("set_parallelism", _integer)),
    (("pipeline.max-parallelism",), _env_call("set_max_parallelism", _integer)),
    (("execution.runtime-mode",), _runtime_mode),
    (("execution.buffer-timeout",), _env_call("set_buffer_timeout", parse_duration_ms)),
    (("pipeline.operator-chaining", "pipeline.operator-chaining.enabled"), _chaining),
    (("pipeline.time-characteristic",), _env_call("set_stream_time_characteristic", _time_characteristic)),
    (("pipeline.auto-watermark-interval",), _config_call("set_auto_watermark_interval", parse_duration_ms)),
    (("pipeline.global-job-parameters",), _config_call("set_global_job_parameters", _job_parameters)),
    (("metrics.latency.interval",), _config_call("set_latency_tracking_interval", parse_duration_ms)),
    (("execution.checkpointing.interval",), _checkpoint_config("set_checkpoint_interval", parse_duration_ms)),
    (("execution.checkpointing.mode",), _checkpoint_config("set_checkpointing_mode", _checkpointing_mode)),
    (("execution.checkpointing.timeout",), _checkpoint_config("set_checkpoint_timeout", parse_duration_ms)),
    (("execution.checkpointing.min-pause",),
     _checkpoint_config("set_min_pause_between_checkpoints", parse_duration_ms)),
    (("execution.checkpointing.max-concurrent-checkpoints",),
     _checkpoint_config("set_max_concurrent_checkpoints", _integer)),
    (("execution.checkpointing.tolerable-failed-checkpoints",),
     _checkpoint_config("set_tolerable_checkpoint_failure_number", _integer)),
    (("execution.checkpointing.unaligned", "execution.checkpointing.unaligned.enabled"),
     _checkpoint_config("enable_unaligned_checkpoints", _boolean)),
    (("execution.checkpointing.interval-during-backlog",),
     _checkpoint_config("set_checkpoint_interval_during_backlog", parse_duration_ms)),
    (("execution.checkpointing.externalized-checkpoint-retention",),
     _checkpoint_config("set_externalized_checkpoint_cleanup", _retention)),
    (("state.checkpoints.dir", "execution.checkpointing.dir"),
     _checkpoint_config("set_checkpoint_storage_dir", _text)),
    (("state.checkpoints.num-retained", "execution.checkpointing.num-retained"),
     _checkpoint_config("set_num_retained_checkpoints", _integer)),
    (("state.savepoints.dir", SAVEPOINT_DIRECTORY), _env_call("set_default_savepoint_directory", _text)),
    (("state.backend.changelog.enabled", CHANGELOG), _env_call("enable_changelog_state_backend", _boolean)),
    (("state.backend", "state.backend.type"), _state_backend),
    (("restart-strategy", "restart-strategy.type"), _restart_strategy),
    (("python.files",), _each_with("add_python_file", ",")),
    (("python.archives",), _archives),
    (("python.requirements",), _requirements),
    (("python.executable",), _env_call("set_python_executable", _text)),
    (("pipeline.jars",), _each_with("add_jars", ";")),
    ((MANAGED,), _memory("managed_memory")),
    ((TASK_HEAP,), _memory("task_heap_memory")),
    ((NETWORK,), _memory("network_memory")),
    (("pipeline.classpaths",), _each_with("add_classpaths", ";")),
    (("local.number-taskmanager",), _runtime_option("workers", _integer)),
    (("heartbeat.interval",), _runtime_option("heartbeat_interval_ms", parse_duration_ms)),
    (("heartbeat.timeout",), _runtime_option("heartbeat_timeout_ms", parse_duration_ms)),
]

_READ_BY_OTHERS = ("restart-strategy.fixed-delay.attempts", "restart-strategy.fixed-delay.delay",
                   "restart-strategy.failure-rate.max-failures-per-interval",
                   "restart-strategy.failure-rate.failure-rate-interval", "restart-strategy.failure-rate.delay",
                   "state.backend.rocksdb.localdir")
"""Keys read while another key is applied (the restart strategy's parameters, RocksDB's directories)."""


_READ_WHERE_USED = ("pipeline.auto-generate-uids", "pipeline.object-reuse", "pipeline.closure-cleaner-enabled",
                    "pipeline.generic-types", "pipeline.force-kryo", "pipeline.force-avro")
"""Keys the ``ExecutionConfig`` reads from the configuration itself (see its switches)."""


_RECORDED_BY_METHODS = ("python.files", "python.archives", "python.requirements", "python.executable",
                        "pipeline.jars", "pipeline.classpaths")


def apply_configuration(env: StreamExecutionEnvironment, configuration: Configuration) -> list[str]:
    """Apply the keys of ``configuration`` that slipstream knows to ``env`` (in the order of the table
    above); keep every key in the environment's configuration; return (and warn about) the others."""
    if not isinstance(configuration, Configuration):
        raise InvalidProgramError(f"configure expects a Configuration, got {configuration!r}")
    known: set[str] = {*_READ_BY_OTHERS, *_READ_WHERE_USED}
    for keys, apply in _OPTIONS:
        known.update(keys)
        for key in keys:
            if configuration.contains_key(key):
                apply(env, configuration.get_string(key, ""), key, configuration)
    kept = Configuration(configuration)
    for key in _RECORDED_BY_METHODS:  # the dependency methods record these themselves, appending
        kept.remove_config(key)
    env._pipeline.configuration.add_all(kept)
    unknown = sorted(configuration.key_set() - known)
    if unknown:
        warnings.warn(f"configuration key(s) slipstream does not apply: {', '.join(unknown)} "
                      "(kept: env.get_configuration())", stacklevel=3)
    return unknown

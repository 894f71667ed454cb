"""``MemorySize`` and ``SlotSharingGroup``, as ``pyflink.datastream.slot_sharing_group``.

A slot sharing group names the operators Flink may deploy into one task-manager
slot, with the resources that slot needs. slipstream places subtasks by their index
(subtask i of every operator on the same worker process; :mod:`slipstream.runtime.workers.placement`),
so a group places nothing: ``slot_sharing_group(...)`` on a stream or a sink and
``env.register_slot_sharing_group`` keep the group (it shows in ``get_execution_plan``) and
warn with :data:`NOT_APPLIED`. The builder checks what
Flink's checks: CPU cores and task heap memory are given together and positive.

Examples:
    >>> group = SlotSharingGroup.builder("heavy").set_cpu_cores(1.0).set_task_heap_memory_mb(100).build()
    >>> group.get_name(), group.get_cpu_cores(), str(group.get_task_heap_memory())
    ('heavy', 1.0, '100 mb')
"""

from __future__ import annotations

from functools import total_ordering
from typing import Any

from slipstream.errors import InvalidProgramError

__all__ = ["NOT_APPLIED", "MemorySize", "SlotSharingGroup"]

_UNITS = [(1 << 40, "tb"), (1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")]


NOT_APPLIED = "subtasks are placed on workers by their index, whatever their group"
"""Why a slot sharing group is kept but changes nothing (the warning says it)."""


@total_ordering
class MemorySize:
    """A number of bytes, viewable in binary units (a kibibyte is 1024 bytes)."""

    def __init__(self, bytes_size: int = 0) -> None:
        if not isinstance(bytes_size, int) or isinstance(bytes_size, bool) or bytes_size < 0:
            raise InvalidProgramError(f"a memory size is a number of bytes >= 0, got {bytes_size!r}")
        self._bytes = bytes_size

    @staticmethod
    def of_mebi_bytes(mebi_bytes: int) -> MemorySize:
        return MemorySize(mebi_bytes << 20)

    def get_bytes(self) -> int:
        return self._bytes

    def get_kibi_bytes(self) -> int:
        return self._bytes >> 10

    def get_mebi_bytes(self) -> int:
        return self._bytes >> 20

    def get_gibi_bytes(self) -> int:
        return self._bytes >> 30

    def get_tebi_bytes(self) -> int:
        return self._bytes >> 40

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemorySize) and self._bytes == other._bytes

    def __lt__(self, other: MemorySize) -> bool:
        if not isinstance(other, MemorySize):
            return NotImplemented
        return self._bytes < other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __str__(self) -> str:
        """The largest unit that divides the size exactly, as Flink prints it: ``100 mb`` (and
        ``0 tb`` for zero)."""
        for multiplier, unit in _UNITS:
            if self._bytes % multiplier == 0:
                return f"{self._bytes // multiplier} {unit}"
        return f"{self._bytes} bytes"

    def __repr__(self) -> str:
        return f"MemorySize({self})"


class SlotSharingGroup:
    """A named group of operators and the resources of the slot they would share."""

    def __init__(self, name: str, cpu_cores: float | None = None, task_heap_memory: MemorySize | None = None,
                 task_off_heap_memory: MemorySize | None = None, managed_memory: MemorySize | None = None,
                 external_resources: dict[str, float] | None = None) -> None:
        self._name = name
        self._cpu_cores = cpu_cores
        self._task_heap_memory = task_heap_memory
        self._task_off_heap_memory = task_off_heap_memory
        self._managed_memory = managed_memory
        self._external_resources = dict(external_resources or {})

    def get_name(self) -> str:
        return self._name

    def get_cpu_cores(self) -> float | None:
        return self._cpu_cores

    def get_task_heap_memory(self) -> MemorySize | None:
        return self._task_heap_memory

    def get_task_off_heap_memory(self) -> MemorySize | None:
        return self._task_off_heap_memory

    def get_managed_memory(self) -> MemorySize | None:
        return self._managed_memory

    def get_external_resources(self) -> dict[str, float]:
        return dict(self._external_resources)

    @staticmethod
    def builder(name: str) -> SlotSharingGroup.Builder:
        return SlotSharingGroup.Builder(name)

    def _key(self) -> tuple[Any, ...]:
        return (self._name, self._cpu_cores, self._task_heap_memory, self._task_off_heap_memory,
                self._managed_memory, tuple(sorted(self._external_resources.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotSharingGroup) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"SlotSharingGroup({self._name!r})"

    class Builder:
        """Collects a group's resources; ``build`` checks them as Flink does."""

        def __init__(self, name: str) -> None:
            if not isinstance(name, str) or not name:
                raise InvalidProgramError(f"a slot sharing group needs a non-empty name, got {name!r}")
            self._name = name
            self._cpu_cores: float | None = None
            self._memory: dict[str, MemorySize] = {}
            self._external: dict[str, float] = {}

        def set_cpu_cores(self, cpu_cores: float) -> SlotSharingGroup.Builder:
            self._cpu_cores = _positive(cpu_cores, "the CPU cores")
            return self

        def _set_memory(self, kind: str, size: MemorySize) -> SlotSharingGroup.Builder:
            if not isinstance(size, MemorySize):
                raise InvalidProgramError(f"the {kind} must be a MemorySize, got {size!r}")
            if kind == "task heap memory" and size.get_bytes() <= 0:
                raise InvalidProgramError(f"the task heap memory should be positive, got {size}")
            self._memory[kind] = size
            return self

        def set_task_heap_memory(self, task_heap_memory: MemorySize) -> SlotSharingGroup.Builder:
            return self._set_memory("task heap memory", task_heap_memory)

        def set_task_heap_memory_mb(self, task_heap_memory_mb: int) -> SlotSharingGroup.Builder:
            return self.set_task_heap_memory(MemorySize.of_mebi_bytes(task_heap_memory_mb))

        def set_task_off_heap_memory(self, task_off_heap_memory: MemorySize) -> SlotSharingGroup.Builder:
            return self._set_memory("task off-heap memory", task_off_heap_memory)

        def set_task_off_heap_memory_mb(self, task_off_heap_memory_mb: int) -> SlotSharingGroup.Builder:
            return self.set_task_off_heap_memory(MemorySize.of_mebi_bytes(task_off_heap_memory_mb))

        def set_managed_memory(self, managed_memory: MemorySize) -> SlotSharingGroup.Builder:
            return self._set_memory("managed memory", managed_memory)

        def set_managed_memory_mb(self, managed_memory_mb: int) -> SlotSharingGroup.Builder:
            return self.set_managed_memory(MemorySize.of_mebi_bytes(managed_memory_mb))

        def set_external_resource(self, name: str, value: float) -> SlotSharingGroup.Builder:
            self._external[name] = _positive(value, f"the external resource {name!r}")
            return self

        def build(self) -> SlotSharingGroup:
            """The group; CPU cores and task heap memory are required as soon as any resource is given."""
            specified = self._cpu_cores is not None or self._memory or self._external
            if not specified:
                return SlotSharingGroup(self._name)
            if self._cpu_cores is None or "task heap memory" not in self._memory:
                raise InvalidProgramError(
                    f"slot sharing group {self._name!r}: the CPU cores and the task heap memory are required "
                    "when specifying its resources; set both with positive values")
            zero = MemorySize(0)
            return SlotSharingGroup(self._name, self._cpu_cores, self._memory["task heap memory"],
                                    self._memory.get("task off-heap memory", zero),
                                    self._memory.get("managed memory", zero), self._external)


def _positive(value: Any, what: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise InvalidProgramError(f"{what} must be a positive number, got {value!r}")
    return float(value)

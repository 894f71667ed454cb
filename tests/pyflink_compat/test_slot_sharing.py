"""``SlotSharingGroup`` and ``MemorySize`` build and check as PyFlink's; using one warns (it places nothing).

Inputs and expected values are those of Flink's ``test_slot_sharing_group.py``; the tests are written anew.
"""

from __future__ import annotations

import json

import pytest

from slipstream.datastream import MemorySize, SlotSharingGroup, StreamExecutionEnvironment
from slipstream.errors import InvalidProgramError


def test_a_group_with_every_resource_reads_them_back() -> None:
    heap, off_heap, managed = (MemorySize.of_mebi_bytes(n) for n in (100, 200, 300))
    group = SlotSharingGroup.builder("slot_sharing_group").set_cpu_cores(1.0).set_task_heap_memory(heap) \
        .set_task_off_heap_memory(off_heap).set_managed_memory(managed).set_external_resource("gpu", 1.0).build()
    assert group.get_name() == "slot_sharing_group"
    assert (group.get_cpu_cores(), group.get_task_heap_memory(), group.get_task_off_heap_memory(),
            group.get_managed_memory(), group.get_external_resources()) == (1.0, heap, off_heap, managed, {"gpu": 1.0})


def test_a_group_without_resources_has_none() -> None:
    group = SlotSharingGroup.builder("slot_sharing_group").build()
    assert (group.get_cpu_cores(), group.get_task_heap_memory(), group.get_task_off_heap_memory(),
            group.get_managed_memory(), group.get_external_resources()) == (None, None, None, None, {})


def test_unset_memory_of_a_specified_group_is_zero() -> None:
    group = SlotSharingGroup.builder("g").set_cpu_cores(2.0).set_task_heap_memory_mb(200).build()
    assert group.get_task_off_heap_memory() == MemorySize(bytes_size=0) == group.get_managed_memory()
    assert group == SlotSharingGroup.builder("g").set_cpu_cores(2.0).set_task_heap_memory_mb(200).build()


def test_zero_heap_memory_is_refused() -> None:
    with pytest.raises(InvalidProgramError, match="task heap memory should be positive"):
        SlotSharingGroup.builder("slot_sharing_group").set_cpu_cores(1.0) \
            .set_task_heap_memory(MemorySize(bytes_size=0)).set_task_off_heap_memory_mb(10).build()


def test_cpu_cores_and_heap_memory_are_required_together() -> None:
    with pytest.raises(InvalidProgramError, match="CPU cores and the task heap memory are required"):
        SlotSharingGroup.builder("slot_sharing_group").set_cpu_cores(1.0).set_task_off_heap_memory_mb(10).build()


def test_memory_sizes_compare_convert_and_print() -> None:
    small, same, big = MemorySize.of_mebi_bytes(100), MemorySize.of_mebi_bytes(100), MemorySize.of_mebi_bytes(200)
    assert small == same and small <= same and same <= small
    assert small <= big and not big <= small and small < big
    assert (big.get_bytes(), big.get_kibi_bytes(), big.get_mebi_bytes()) == (200 << 20, 200 << 10, 200)
    assert MemorySize.of_mebi_bytes(2048).get_gibi_bytes() == 2
    assert (str(small), str(MemorySize(3072)), str(MemorySize(1536)), str(MemorySize(0))) == \
        ("100 mb", "3 kb", "1536 bytes", "0 tb")  # the largest exact unit, as Flink prints it


def test_a_streams_group_is_kept_in_the_plan_and_warned_about() -> None:
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    group = SlotSharingGroup.builder("slot_sharing_group_1").build()
    with pytest.warns(UserWarning, match="placed on workers by their index"):
        env.register_slot_sharing_group(group)
    with pytest.warns(UserWarning, match="placed on workers by their index"):
        source = env.from_collection([1, 2, 3]).name("collection source").slot_sharing_group(group)
    with pytest.warns(UserWarning, match="placed on workers by their index"):
        source.map(lambda x: x + 1).set_parallelism(3).name("map_operator").slot_sharing_group("slot_sharing_group_2") \
            .print()
    groups = {node["contents"]: node.get("slot_sharing_group") for node in json.loads(env.get_execution_plan())["nodes"]}
    assert groups["Source: collection source"] == "slot_sharing_group_1"
    assert groups["map_operator"] == "slot_sharing_group_2"

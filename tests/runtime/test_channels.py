"""Channels: bounded ones report full; spilling ones keep order across memory and disk."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.datastream.time import Watermark
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.channels import Channel, SpillingChannel


def test_bounded_channel_is_full_at_capacity() -> None:
    channel = Channel(capacity=2)
    channel.push(RecordBatch([1]))
    assert not channel.is_full()
    channel.push(RecordBatch([2]))
    assert channel.is_full()
    assert channel.pop().values == [1]
    assert not channel.is_full()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(min_value=0, max_value=9), max_size=40),
       pops=st.lists(st.booleans(), max_size=40), budget=st.integers(min_value=1, max_value=12))
def test_spilling_channel_keeps_fifo_order(sizes: list[int], pops: list[bool], budget: int) -> None:
    channel = SpillingChannel(memory_budget=budget)
    pushed, popped, counter = [], [], 0
    for index, size in enumerate(sizes):
        element = RecordBatch(list(range(counter, counter + size))) if index % 5 else Watermark(index)
        counter += size
        channel.push(element)
        pushed.append(element)
        if index < len(pops) and pops[index] and channel.queue:
            popped.append(channel.pop())
    while channel.queue:
        popped.append(channel.pop())
    assert flattened(popped) == flattened(pushed)  # batches past the budget come in pieces
    assert channel.peak_in_memory_records <= budget
    assert len(channel) == 0
    channel.close()


def flattened(elements: list) -> list:
    """Records one by one, events as they are: what a channel must keep in order."""
    return [item for element in elements
            for item in (element.values if isinstance(element, RecordBatch) else [element])]


def test_spilling_channel_spills_past_budget_to_a_private_file() -> None:
    channel = SpillingChannel(memory_budget=10)
    for start in range(0, 100, 5):
        channel.push(RecordBatch(list(range(start, start + 5))))
    assert channel.spilled_bytes > 0
    spill_dir = os.path.dirname(channel._file.path)
    assert os.stat(spill_dir).st_mode & 0o777 == 0o700
    assert not channel.is_full()
    values = []
    while channel.queue:
        values.extend(channel.pop().values)
    assert values == list(range(100))
    channel.close()
    assert not os.path.exists(spill_dir)

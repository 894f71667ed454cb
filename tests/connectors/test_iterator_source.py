import queue
import random
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import END_OF_INPUT, NOTHING_AVAILABLE, SourceReaderContext
from slipstream.datastream.connectors.errors import SourceRestoreError
from slipstream.datastream.connectors.iterator import CollectionSource, IteratorSource
from slipstream.errors import InvalidProgramError, JobExecutionError

from connector_harness import drain, read_subtasks


def test_bounded_generator_is_read_inline():
    source = IteratorSource(lambda: (i * i for i in range(20)))
    assert source.max_parallelism() == 1
    assert source.get_boundedness() is Boundedness.BOUNDED
    assert read_subtasks(source, 1, max_records=3) == [[i * i for i in range(20)]]


def test_parallelism_above_one_is_refused():
    with pytest.raises(InvalidProgramError, match="parallelism 1"):
        IteratorSource([1, 2]).create_reader(0, 2)


def test_bounded_restore_skips_what_was_emitted():
    source = IteratorSource(lambda: iter(range(10)))
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    first = reader.poll(4).values
    position = reader.snapshot_position()
    restored = source.create_reader(0, 1)
    restored.restore_position(position)
    restored.open(SourceReaderContext(0, 1))
    assert first + drain(restored) == list(range(10))


def test_one_shot_iterator_cannot_resume_midway():
    source = IteratorSource(iter(range(10)))
    reader = source.create_reader(0, 1)
    reader.restore_position(3)
    with pytest.raises(SourceRestoreError, match="one-shot"):
        reader.open(SourceReaderContext(0, 1))


def _poll_until_end(reader, wake: threading.Event, timeout: float = 5.0) -> list:
    values = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = reader.poll(8)
        if batch is END_OF_INPUT:
            return values
        if batch is NOTHING_AVAILABLE:
            wake.wait(0.05)
            wake.clear()
            continue
        values.extend(batch.values)
    raise AssertionError("the reader did not end")


def test_unbounded_reader_never_blocks_and_notifies():
    feed: queue.Queue = queue.Queue()

    def blocking_iterator():
        while (item := feed.get()) is not None:
            yield item

    source = IteratorSource(blocking_iterator, bounded=False)
    assert source.get_boundedness() is Boundedness.CONTINUOUS_UNBOUNDED
    wake = threading.Event()
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1, notify_available=wake.set))
    started = time.monotonic()
    assert reader.poll(8) is NOTHING_AVAILABLE  # the iterator is blocked in feed.get()
    assert time.monotonic() - started < 0.5
    for i in range(20):
        feed.put(i)
    assert wake.wait(2.0), "the reader thread notifies when records arrive"
    feed.put(None)  # the iterator ends: so does the unbounded source
    assert _poll_until_end(reader, wake) == list(range(20))
    reader.close()


def test_a_record_handed_over_by_the_reader_thread_is_never_left_waiting_unannounced():
    """The thread wakes the task only when it made the queue non-empty: a task that polled nothing
    and sleeps until woken must always be woken while records wait (here it would sleep 10 s)."""
    rng = random.Random(3)
    pauses = [rng.choice([0, 0, 0, 0.0001, 0.001]) for _ in range(3000)]

    def paced():
        for i, pause in enumerate(pauses):
            if pause:
                time.sleep(pause)
            yield i

    wake = threading.Event()
    notifications = []
    reader = IteratorSource(paced, bounded=False).create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1, notify_available=lambda: (notifications.append(1), wake.set())))
    values: list = []
    while True:
        wake.clear()  # as the task: cleared before it polls, so no notification is lost
        batch = reader.poll(64)
        if batch is END_OF_INPUT:
            break
        if batch is NOTHING_AVAILABLE:
            assert wake.wait(10.0), f"asleep with records waiting after {len(values)} records"
            continue
        values.extend(batch.values)
    reader.close()
    assert values == list(range(len(pauses)))
    assert len(notifications) < len(pauses)  # not once per record


def test_unbounded_reader_waits_while_its_queue_is_full_and_goes_on_when_polled(monkeypatch):
    from slipstream.datastream.connectors import iterator

    monkeypatch.setattr(iterator, "_QUEUE_CAPACITY", 10)
    wake = threading.Event()
    reader = IteratorSource(lambda: iter(range(100)), bounded=False).create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1, notify_available=wake.set))
    time.sleep(0.2)
    first = reader.poll(1000)
    assert first.values == list(range(10))  # the thread read no further ahead than the capacity
    assert _poll_until_end(reader, wake) == list(range(10, 100))
    reader.close()


def test_unbounded_iterator_failure_surfaces_in_poll():
    def failing():
        yield 1
        raise RuntimeError("sensor unplugged")

    wake = threading.Event()
    reader = IteratorSource(failing, bounded=False).create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1, notify_available=wake.set))
    with pytest.raises(JobExecutionError, match="sensor unplugged"):
        _poll_until_end(reader, wake)
    reader.close()


def test_unbounded_restore_resumes_after_emitted_records():
    source = IteratorSource(lambda: iter(range(30)), bounded=False)
    wake = threading.Event()
    reader = source.create_reader(0, 1)
    reader.restore_position(12)
    reader.open(SourceReaderContext(0, 1, notify_available=wake.set))
    assert _poll_until_end(reader, wake) == list(range(12, 30))
    reader.close()


@settings(max_examples=60, deadline=None)
@given(elements=st.lists(st.integers(), max_size=60), parallelism=st.integers(1, 6), max_records=st.integers(1, 9))
def test_collection_split_covers_every_element_once_keeping_order(elements, parallelism, max_records):
    parts = read_subtasks(CollectionSource(elements), parallelism, max_records)
    assert [e for part in parts for e in part] == elements
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1


def test_collection_restore_and_copy():
    data = ["a", "b", "c", "d", "e"]
    source = CollectionSource(data)
    data.append("late")  # the source copied the elements when it was built
    reader = source.create_reader(0, 1)
    reader.open(SourceReaderContext(0, 1))
    first = reader.poll(2).values
    restored = source.create_reader(0, 1)
    restored.restore_position(reader.snapshot_position())
    restored.open(SourceReaderContext(0, 1))
    assert first + drain(restored) == ["a", "b", "c", "d", "e"]
    with pytest.raises(SourceRestoreError):
        source.create_reader(0, 1).restore_position(99)

"""Channels between worker processes: elements keep their form on the wire, and a producer waits for
its consumer's credits (backpressure) — two workers' links over one socketpair, in one process."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque

import pyarrow as pa

from slipstream.datastream import StreamExecutionEnvironment
from slipstream.datastream.time import Watermark
from slipstream.datastream.transformations import Partitioning
from slipstream.operators.elements import EndOfInput, RecordAttributes, RecordBatch
from slipstream.runtime.channels import Channel
from slipstream.runtime.checkpoint.barriers import CheckpointBarrier
from slipstream.runtime.planner import plan_job
from slipstream.runtime.workers.links import PeerSocket, WorkerLinks
from slipstream.runtime.workers.placement import Placement
from slipstream.runtime.workers.wire import decode_element, encode_element


def test_columnar_batches_go_as_arrow_and_rows_and_events_as_pickle():
    class Local:  # defined in a function: pickle cannot name it, cloudpickle takes it by value
        def __init__(self, value):
            self.value = value

    arrow = pa.record_batch({"k": [1, 2, 3], "v": ["a", "b", "c"]})
    channel, batch = decode_element(encode_element(7, RecordBatch(arrow=arrow, timestamps=[5, 6, 7])))
    assert channel == 7 and batch.arrow.equals(arrow) and batch.timestamps == [5, 6, 7]
    assert encode_element(7, RecordBatch(arrow=arrow))[:1] == b"A"
    _, rows = decode_element(encode_element(1 << 40, RecordBatch([(1, "x"), Local(3)], None)))
    assert rows.values[0] == (1, "x") and rows.values[1].value == 3
    for event in (Watermark(42), RecordAttributes(True), CheckpointBarrier(3, 99), EndOfInput()):
        assert type(decode_element(encode_element(0, event))[1]) is type(event)


def two_workers(capacity: int):
    """The links of workers 0 and 1 for a job whose key_by edge crosses between them."""
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    env.from_collection([1, 2]).key_by(lambda x: x).map(lambda x: x).print()
    graph = plan_job(env._job_spec(list(env._transformations)))
    edge = next(edge for vertex in graph.vertices for edge in vertex.in_edges
                if edge.partitioning is Partitioning.HASH)
    left, right = socket.socketpair()
    placement = Placement(workers=2, slots=2)
    producer = WorkerLinks(graph, placement, 0, {1: left})
    consumer = WorkerLinks(graph, placement, 1, {0: right})
    inbound = consumer.connect(edge, 0, 1, Channel(capacity, "in"))
    outbound = producer.connect(edge, 0, 1, Channel(capacity, "out"))
    return producer, consumer, outbound, inbound


def settle(links: WorkerLinks, until) -> None:
    deadline = time.monotonic() + 5
    while not until() and time.monotonic() < deadline:
        time.sleep(0.005)
        links.drain()


def test_a_producer_is_full_until_its_consumer_takes_elements_and_credits_come_back():
    producer, consumer, outbound, inbound = two_workers(capacity=4)
    for i in range(4):
        outbound.push(RecordBatch([i], None))
    assert outbound.is_full()
    settle(consumer, lambda: len(inbound) == 4)
    assert [inbound.pop().values for _ in range(1)] == [[0]]
    consumer.send_credits()  # one of four taken: less than half the capacity, the queue not empty
    time.sleep(0.05)
    producer.drain()
    assert outbound.is_full()
    inbound.pop()
    consumer.send_credits()  # half the capacity taken: the credits go back
    settle(producer, lambda: not outbound.is_full())
    assert outbound.unacknowledged == 2
    outbound.push(EndOfInput())
    settle(consumer, lambda: inbound.producer_finished)
    assert [type(inbound.pop()) for _ in range(3)] == [RecordBatch, RecordBatch, EndOfInput]


def test_a_slow_stream_gives_credits_back_in_halves_and_a_full_producer_is_never_held_back():
    """One element at a time, each taken at once (a live stream at a low rate): credits go back for
    every half capacity taken, not in a message per element; and a producer that filled its channel
    gets room as soon as its idle consumer took half of what it sent."""
    producer, consumer, outbound, inbound = two_workers(capacity=4)
    unacknowledged = []
    for i in range(6):
        outbound.push(RecordBatch([i], None))
        settle(consumer, lambda: len(inbound) == 1)
        assert inbound.pop().values == [i]  # the consumer's queue is empty again: it is idle
        consumer.send_credits()
        time.sleep(0.02)  # what was sent back has arrived
        producer.drain()
        unacknowledged.append(outbound.unacknowledged)
    assert unacknowledged == [1, 0, 1, 0, 1, 0]
    for i in range(4):
        outbound.push(RecordBatch([i], None))
    assert outbound.is_full()
    settle(consumer, lambda: len(inbound) == 4)
    inbound.pop()
    inbound.pop()
    consumer.send_credits()
    settle(producer, lambda: not outbound.is_full())
    assert outbound.unacknowledged == 2


def test_a_barrier_waits_in_the_inbox_until_its_checkpoint_was_triggered_on_the_worker():
    _producer, consumer, outbound, inbound = two_workers(capacity=8)
    outbound.push(CheckpointBarrier(1, 0))
    outbound.push(RecordBatch([1], None))
    time.sleep(0.1)
    consumer.drain()
    assert len(inbound) == 0 and not consumer.pending()
    consumer.triggered = 1
    consumer.drain()
    assert [type(inbound.pop()) for _ in range(2)] == [CheckpointBarrier, RecordBatch]



def test_a_send_the_socket_cannot_take_waits_in_its_queue_and_goes_as_the_peer_reads():
    """Two workers each sending the other far more than a socket holds, before either reads: with
    blocking sends both would wait on each other forever."""
    left, right = (PeerSocket(end) for end in socket.socketpair())
    messages = [bytes([n]) * (3 << 20) for n in range(3)]
    for message in messages:
        left.send(message)
        right.send(message)
    assert left.queued and right.queued
    to_left: deque[bytes] = deque()
    to_right: deque[bytes] = deque()
    deadline = time.monotonic() + 10
    while (len(to_left) < 3 or len(to_right) < 3) and time.monotonic() < deadline:
        left.receive(to_left)
        right.receive(to_right)
        left.flush()
        right.flush()
    assert list(to_left) == messages and list(to_right) == messages
    assert not left.queued and not right.queued


def test_a_message_from_another_worker_ends_the_scheduler_s_wait_and_so_does_a_wake_up():
    _producer, consumer, outbound, inbound = two_workers(capacity=4)
    assert not consumer.wait(0.05)  # nothing came
    outbound.push(RecordBatch([1], None))
    assert consumer.wait(10)  # the batch woke it, well before the timeout
    consumer.clear()
    consumer.drain()
    assert inbound.pop().values == [1]
    threading.Timer(0.05, consumer.set).start()  # as a source's reader thread wakes it
    assert consumer.wait(10)
    consumer.clear()
    assert not consumer.wait(0)

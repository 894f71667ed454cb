"""Channels between worker processes: a worker's end of every channel whose other end is elsewhere.

Each pair of workers shares one local socket (a socketpair the driver made), carrying the
elements of every channel between them and the credits coming back. A producer's end
(:class:`OutboundChannel`) sends each element as it is pushed and counts it; it is full — its
task is not scheduled, as with a full in-memory channel — while ``capacity`` elements are not yet
taken by the consumer. The consumer's end is the ordinary :class:`Channel` its task reads; as the
task takes elements, their credits go back (:meth:`WorkerLinks.send_credits`). BLOCKING channels
are never full (their consumer spills), as in one process.

A thread per peer only receives: it appends each message to one inbox and wakes the scheduler, so
a send never waits on a peer that is itself sending, and every channel is touched by the
worker's task thread alone (:meth:`WorkerLinks.drain`).

A checkpoint's trigger reaches the workers on their control sockets, its barriers on these: a
barrier from a worker that was triggered first may arrive before this worker's own trigger. Its
tasks would not know the checkpoint yet and pass the barrier by, so the inbox holds from such a
barrier on until the trigger came (:attr:`WorkerLinks.triggered`); every worker gets every trigger.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from slipstream.operators.elements import EndOfInput
from slipstream.runtime.channels import Channel
from slipstream.runtime.checkpoint.barriers import CheckpointBarrier
from slipstream.runtime.job_graph import EdgeKind, JobGraph, JobVertex, StreamEdge
from slipstream.runtime.workers.placement import Placement
from slipstream.runtime.workers.wire import CREDIT, decode_credits, decode_element, encode_credits, encode_element

RECEIVING_SWITCH_INTERVAL_S = 0.0005
"""The worker's interpreter switch interval (Python's default: 5 ms). A receiving thread holds a
message until it gets the interpreter, which the task thread, busy, yields only when the interval
is up: so every batch and every credit between workers waited up to 5 ms, and producers ran out of
credits while the consumer's next input sat in a socket. The keyed job of ``benchmarks/scaling.py``
on two workers ran at 1.58 M rec/s with 5 ms, 2.18 M with 0.5 ms (0.27 M with 50 ms)."""


class OutboundChannel(Channel):
    """The producer's end of a channel whose consumer runs on another worker."""

    __slots__ = ("_bounded", "_channel_id", "_peer", "unacknowledged")

    def __init__(self, peer: Connection, channel_id: int, capacity: int, name: str, bounded: bool) -> None:
        super().__init__(capacity, name)
        self._peer = peer
        self._channel_id = channel_id
        self._bounded = bounded
        self.unacknowledged = 0  # elements sent and not yet taken by the consumer

    def is_full(self) -> bool:
        return self._bounded and self.unacknowledged >= self.capacity

    def push(self, element: Any) -> None:
        self._peer.send_bytes(encode_element(self._channel_id, element))
        self.unacknowledged += 1

    def __len__(self) -> int:
        return self.unacknowledged


class _Inbound:
    """A consumer's end: the channel its task reads, and what it was given and gave back."""

    __slots__ = ("bounded", "channel", "delivered", "peer", "returned")

    def __init__(self, channel: Channel, peer: int, bounded: bool) -> None:
        self.channel = channel
        self.peer = peer
        self.bounded = bounded
        self.delivered = 0
        self.returned = 0


class WorkerLinks:
    """This worker's subtasks (``is_local``) and its ends of the channels to the others."""

    def __init__(self, graph: JobGraph, placement: Placement, worker: int, peers: dict[int, Connection],
                 wake: Callable[[], None]) -> None:
        self.placement = placement
        self.worker = worker
        self.peers = peers
        self._edge_ids = {id(edge): n for n, edge in enumerate(edge for vertex in graph.vertices
                                                              for edge in vertex.in_edges)}
        self._vertex_of = graph.vertex_of
        self._inbound: dict[int, _Inbound] = {}
        self._outbound: dict[int, OutboundChannel] = {}
        self._inbox: deque[bytes] = deque()
        self._wake = wake
        self._holding = False  # the inbox starts with a barrier of a checkpoint not triggered here yet
        self.triggered = 0  # the latest checkpoint triggered on this worker

    def start(self) -> None:
        """Start receiving from every peer (and let the receiving threads in quickly, see
        :data:`RECEIVING_SWITCH_INTERVAL_S`)."""
        sys.setswitchinterval(RECEIVING_SWITCH_INTERVAL_S)
        for peer, connection in self.peers.items():
            threading.Thread(target=self._receive, args=(peer, connection), name=f"from worker {peer}",
                             daemon=True).start()

    def is_local(self, vertex: JobVertex, subtask: int) -> bool:
        return self.placement.worker_of(vertex.id, subtask) == self.worker

    def connect(self, edge: StreamEdge, producer: int, consumer: int, channel: Channel) -> Channel:
        channel_id = (self._edge_ids[id(edge)] << 32) | (producer << 16) | consumer
        bounded = edge.kind is EdgeKind.PIPELINED
        source, target = self._vertex_of[edge.source], self._vertex_of[edge.target]
        if self.is_local(target, consumer):
            self._inbound[channel_id] = _Inbound(channel, self.placement.worker_of(source.id, producer), bounded)
            return channel
        outbound = OutboundChannel(self.peers[self.placement.worker_of(target.id, consumer)], channel_id,
                                   channel.capacity, channel.name, bounded)
        self._outbound[channel_id] = outbound
        return outbound

    def _receive(self, peer: int, connection: Connection) -> None:
        """Take in what ``peer`` sends until its socket closes (then it died or its run ended: the
        driver, which watches every worker, fails the run over or has ended it)."""
        try:
            while True:
                self._inbox.append(connection.recv_bytes())
                self._wake()
        except (EOFError, OSError):
            return

    def pending(self) -> bool:
        """Whether messages wait to be taken in (:meth:`drain`) that can be now."""
        return bool(self._inbox) and not self._holding

    def drain(self) -> None:
        """Put the elements received into their channels; take the credits received (up to a barrier
        of a checkpoint not triggered here yet)."""
        inbox = self._inbox
        self._holding = False
        while inbox:
            message = inbox.popleft()
            if message[:1] == CREDIT:
                for channel_id, count in decode_credits(message).items():
                    self._outbound[channel_id].unacknowledged -= count
                continue
            channel_id, element = decode_element(message)
            if type(element) is CheckpointBarrier and element.checkpoint_id > self.triggered:
                inbox.appendleft(message)
                self._holding = True
                return
            inbound = self._inbound[channel_id]
            inbound.channel.push(element)
            inbound.delivered += 1
            if type(element) is EndOfInput:
                inbound.channel.producer_finished = True

    def send_credits(self) -> None:
        """Give back the credits of the elements tasks took: at half a channel's capacity, or all of
        them once its queue is empty (so an idle consumer never holds a producer back)."""
        by_peer: dict[int, dict[int, int]] = {}
        for channel_id, inbound in self._inbound.items():
            if not inbound.bounded:
                continue
            channel = inbound.channel
            taken = inbound.delivered - len(channel) - inbound.returned
            if taken > 0 and (taken * 2 >= channel.capacity or not channel.queue):
                by_peer.setdefault(inbound.peer, {})[channel_id] = taken
                inbound.returned += taken
        for peer, credits in by_peer.items():
            self.peers[peer].send_bytes(encode_credits(credits))


__all__ = ["OutboundChannel", "WorkerLinks"]

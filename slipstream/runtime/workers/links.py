"""Channels between worker processes: a worker's end of every channel whose other end is elsewhere.

Each pair of workers shares one local socket (a socketpair the driver made), carrying the
elements of every channel between them and the credits coming back, each message framed by its
length. A producer's end (:class:`OutboundChannel`) sends each element as it is pushed and counts
it; it is full — its task is not scheduled, as with a full in-memory channel — while ``capacity``
elements are not yet taken by the consumer. The consumer's end is the ordinary :class:`Channel`
its task reads; as the task takes elements, their credits go back
(:meth:`WorkerLinks.send_credits`). BLOCKING channels are never full (their consumer spills), as
in one process.

Only the worker's task thread touches these sockets, and it never blocks on one: what a socket
cannot take at once waits in its :class:`PeerSocket`'s queue and goes as the peer reads (so a send
never waits on a peer that is itself sending). When no task can run, the scheduler waits on the
sockets themselves (:class:`WorkerLinks` is its :class:`~slipstream.runtime.scheduler.Wakeup`),
and on a pipe that other threads — the control socket's reader, a source's reader — write to wake
it: a message from another worker wakes the thread that runs its consumer directly. (A thread per
peer used to receive and then wake the task thread: two thread wake-ups on every hop, and receiving
threads taking the interpreter from the task thread.)

A checkpoint's trigger reaches the workers on their control sockets, its barriers on these: a
barrier from a worker that was triggered first may arrive before this worker's own trigger. Its
tasks would not know the checkpoint yet and pass the barrier by, so the inbox holds from such a
barrier on until the trigger came (:attr:`WorkerLinks.triggered`); every worker gets every trigger.
"""

from __future__ import annotations

import os
import selectors
import socket
import struct
import time
from collections import deque
from itertools import islice
from typing import Any

from slipstream.operators.elements import EndOfInput
from slipstream.runtime.channels import Channel
from slipstream.runtime.checkpoint.barriers import CheckpointBarrier
from slipstream.runtime.job_graph import EdgeKind, JobGraph, JobVertex, StreamEdge
from slipstream.runtime.workers.placement import Placement
from slipstream.runtime.workers.wire import CREDIT, decode_credits, decode_element, encode_credits, encode_element

_LENGTH = struct.Struct("<Q")
RECEIVE_CHUNK = 1 << 18
"""Bytes read from a socket per call (a larger message arrives over several)."""
SEND_PIECES = 64
"""Buffers handed to one ``sendmsg`` at most (well under the system's IOV_MAX)."""
POLL_INTERVAL_S = 0.0002
"""While tasks run, the sockets are looked at between turns once this long passed since they were
last: a look costs a system call and 3-5 microseconds of the task thread (a record's hop costs about 8)."""


class PeerSocket:
    """The non-blocking socket to another worker: length-framed messages out, queued while the
    socket is full, and in, taken as whole messages."""

    __slots__ = ("_chunk", "_in", "_out", "closed", "socket", "writing")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.socket = sock
        self._out: deque[memoryview] = deque()
        self._in = bytearray()
        self._chunk = memoryview(bytearray(RECEIVE_CHUNK))
        self.closed = False  # the peer's end closed: its run ended or it died
        self.writing = False  # registered for the socket's room to write (messages queued)

    @property
    def queued(self) -> bool:
        """Whether messages wait for room in the socket."""
        return bool(self._out)

    def send(self, message: bytes) -> None:
        """Send ``message`` (its length first), queueing what the socket cannot take now; a peer
        that is gone raises (the run fails over)."""
        self._out.append(memoryview(_LENGTH.pack(len(message))))
        self._out.append(memoryview(message))
        self.flush()

    def flush(self) -> None:
        """Send what is queued, as much as the socket takes now."""
        out = self._out
        while out:
            try:
                sent = self.socket.sendmsg(list(islice(out, SEND_PIECES)))
            except BlockingIOError:
                return
            while sent:
                head = out[0]
                if sent < len(head):
                    out[0] = head[sent:]
                    break
                sent -= len(head)
                out.popleft()

    def receive(self, inbox: deque[bytes]) -> None:
        """Read what the socket holds; each whole message goes to ``inbox``."""
        buffer, chunk = self._in, self._chunk
        while True:
            try:
                size = self.socket.recv_into(chunk)
            except BlockingIOError:
                break
            except OSError:  # reset: the peer died (the driver, watching every worker, fails the run)
                size = 0
            if not size:
                self.closed = True
                break
            buffer += chunk[:size]
            if size < RECEIVE_CHUNK:  # what the socket held (the selector says when more comes): one
                break  # call, not a second that finds nothing and raises
        start, end = 0, len(buffer)
        with memoryview(buffer) as view:  # each message copied once, out of the buffer
            while end - start >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(view, start)
                if end - start - _LENGTH.size < length:
                    break
                start += _LENGTH.size
                inbox.append(view[start:start + length].tobytes())
                start += length
        if start:
            del buffer[:start]


class OutboundChannel(Channel):
    """The producer's end of a channel whose consumer runs on another worker."""

    __slots__ = ("_bounded", "_channel_id", "_peer", "unacknowledged")

    def __init__(self, peer: PeerSocket, channel_id: int, capacity: int, name: str, bounded: bool) -> None:
        super().__init__(capacity, name)
        self._peer = peer
        self._channel_id = channel_id
        self._bounded = bounded
        self.unacknowledged = 0  # elements sent and not yet taken by the consumer

    def is_full(self) -> bool:
        return self._bounded and self.unacknowledged >= self.capacity

    def push(self, element: Any) -> None:
        self._peer.send(encode_element(self._channel_id, element))
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
    """This worker's subtasks (``is_local``), its ends of the channels to the others, and the wait
    of its scheduler (a :class:`~slipstream.runtime.scheduler.Wakeup`: :meth:`set`, :meth:`wait`,
    :meth:`clear`)."""

    def __init__(self, graph: JobGraph, placement: Placement, worker: int, peers: dict[int, socket.socket]) -> None:
        self.placement = placement
        self.worker = worker
        self.peers = {index: PeerSocket(sock) for index, sock in peers.items()}
        self._edge_ids = {id(edge): n for n, edge in enumerate(edge for vertex in graph.vertices
                                                              for edge in vertex.in_edges)}
        self._vertex_of = graph.vertex_of
        self._inbound: dict[int, _Inbound] = {}
        self._outbound: dict[int, OutboundChannel] = {}
        self._inbox: deque[bytes] = deque()
        self._holding = False  # the inbox starts with a barrier of a checkpoint not triggered here yet
        self.triggered = 0  # the latest checkpoint triggered on this worker
        self._selector = selectors.DefaultSelector()
        self._woken_read, self._woken_write = os.pipe()
        os.set_blocking(self._woken_read, False)
        os.set_blocking(self._woken_write, False)
        self._woken = False
        self._polled_at = 0.0  # time.perf_counter() of the last look at the sockets
        self._selector.register(self._woken_read, selectors.EVENT_READ, None)
        for peer in self.peers.values():
            self._selector.register(peer.socket, selectors.EVENT_READ, peer)

    # -- the scheduler's wait ---------------------------------------------------------------------
    def set(self) -> None:
        """End the task thread's wait (from any thread: something outside the tasks changed)."""
        if not self._woken:
            self._woken = True
            try:
                os.write(self._woken_write, b"w")
            except BlockingIOError:  # the pipe is full of wake-ups already
                pass

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up or a message from another worker (taken in);
        whether either came."""
        if self._woken:
            return True
        received = len(self._inbox)
        self._poll(timeout)
        return self._woken or len(self._inbox) > received

    def clear(self) -> None:
        self._woken = False

    def _poll(self, timeout: float | None) -> None:
        """Take in what the sockets hold and send what waits for them, waiting up to ``timeout``."""
        for peer in self.peers.values():
            if peer.queued is not peer.writing and not peer.closed:
                peer.writing = peer.queued
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if peer.writing else 0)
                self._selector.modify(peer.socket, events, peer)
        for key, events in self._selector.select(timeout):
            peer = key.data
            if peer is None:
                self._woken = True
                try:
                    os.read(self._woken_read, 4096)
                except BlockingIOError:
                    pass
                continue
            if events & selectors.EVENT_WRITE:
                peer.flush()
            if events & selectors.EVENT_READ:
                peer.receive(self._inbox)
                if peer.closed:  # its run ended or it died: the driver, watching every worker, knows
                    self._selector.unregister(peer.socket)
        # When the look ended, not began: after a wait for input, the next drain has just been done.
        self._polled_at = time.perf_counter()

    @property
    def wakeup(self) -> WorkerLinks:
        return self

    # -- channels ---------------------------------------------------------------------------------
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

    def pending(self) -> bool:
        """Whether messages wait to be taken in (:meth:`drain`) that can be now."""
        return bool(self._inbox) and not self._holding

    def drain(self) -> None:
        """Take in what the sockets hold (unless they were looked at within ``POLL_INTERVAL_S``), send
        what waits for them; put the elements received into their channels and take the credits
        received (up to a barrier of a checkpoint not triggered here yet)."""
        if time.perf_counter() - self._polled_at >= POLL_INTERVAL_S:
            self._poll(0)
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
        """Give back the credits of the elements tasks took, once they are half a channel's capacity.

        Never sooner: a producer is full only with ``capacity`` elements unacknowledged, and once those
        arrive a consumer that takes them has half of them to give back, so waiting holds no producer
        back. Giving them back whenever a queue ran empty, as this did before, sent a message (a system
        call in each process, and a wake-up of the producer's) for every element of a slow stream."""
        by_peer: dict[int, dict[int, int]] = {}
        for channel_id, inbound in self._inbound.items():
            if not inbound.bounded:
                continue
            channel = inbound.channel
            taken = inbound.delivered - len(channel) - inbound.returned
            if taken > 0 and taken * 2 >= channel.capacity:
                by_peer.setdefault(inbound.peer, {})[channel_id] = taken
                inbound.returned += taken
        for peer, credits in by_peer.items():
            self.peers[peer].send(encode_credits(credits))


__all__ = ["OutboundChannel", "WorkerLinks"]

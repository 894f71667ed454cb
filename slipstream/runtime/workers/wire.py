"""What travels between processes: stream elements on channels, credits, and control messages.

A channel element keeps its form: a columnar batch goes as Arrow IPC (its columns are written
as they are, no rows are built), a batch of rows and every event (watermark, record
attributes, barrier, termination baton, end of input) as pickle. pickle is tried first (in C,
fast); what it cannot write by reference — a class or function defined in the driver's
``__main__``, rebuilt in a worker by cloudpickle — goes by value through cloudpickle.
"""

from __future__ import annotations

import copyreg
import enum
import io
import pickle
import struct
from typing import Any

import cloudpickle
import pyarrow as pa

from slipstream.operators.elements import RecordBatch


class ToWorker(enum.Enum):
    """What the driver tells a worker on its control socket (the message's first item)."""

    START = "start"  # every worker restored: run
    SHUTDOWN = "shutdown"  # stop now (the run ended, failed or is interrupted)
    TRIGGER = "trigger"  # (checkpoint id, time): snapshot your subtasks when their barriers come
    COMPLETE = "complete"  # (checkpoint id): durable everywhere, commit
    ABORT = "abort"  # (checkpoint id): given up


class FromWorker(enum.Enum):
    """What a worker tells the driver on its control socket (the message's first item)."""

    READY = "ready"  # restored, waiting for START
    STATUS = "status"  # (figures): the heartbeat
    ACK = "ack"  # (task, checkpoint id, snapshots): a subtask's snapshot
    DECLINE = "decline"  # (checkpoint id, reason): a checkpoint this worker cannot take
    COLLECTED = "collected"  # (sink, records, committed): what a driver sink's copy here took
    BYE = "bye"  # (metrics): every subtask here finished
    FAILED = "failed"  # (pickled exception or None, its type, its text): the worker is going
    LOG = "log"  # (a log record's fields): for the driver's logging


ELEMENT = b"E"
ARROW = b"A"
CREDIT = b"C"
_HEAD = struct.Struct("<QI")


def _reduce_memoryview(view: memoryview) -> tuple[type[memoryview], tuple[bytes]]:
    return memoryview, (view.tobytes(),)


class _Pickler(pickle.Pickler):
    """pickle, which also writes memoryviews (as the bytes they show: snapshots hold some)."""

    dispatch_table = {**copyreg.dispatch_table, memoryview: _reduce_memoryview}  # noqa: RUF012 - pickle's own attribute


def dumps(value: Any) -> bytes:
    """``value`` pickled: by reference where pickle can, by value (cloudpickle) where it cannot."""
    out = io.BytesIO()
    try:
        _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
        return out.getvalue()
    except (pickle.PicklingError, AttributeError, TypeError):
        data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return data


def encode_element(channel: int, element: Any) -> bytes:
    """One element of channel ``channel`` as a message."""
    if type(element) is RecordBatch and element.arrow is not None:
        sink = pa.BufferOutputStream()
        arrow = element.arrow
        with pa.ipc.new_stream(sink, arrow.schema) as writer:
            writer.write(arrow)
        stamps = b"" if element.timestamps is None else dumps(element.timestamps)
        ipc: bytes = sink.getvalue().to_pybytes()
        return ARROW + _HEAD.pack(channel, len(stamps)) + stamps + ipc
    return ELEMENT + _HEAD.pack(channel, 0) + dumps(element)


def encode_credits(credits: dict[int, int]) -> bytes:
    """Elements each channel's consumer took since it last said: its producer may send as many more."""
    return CREDIT + pickle.dumps(credits, protocol=pickle.HIGHEST_PROTOCOL)


def decode_element(message: bytes) -> tuple[int, Any]:
    """The channel and element of a message of :func:`encode_element`."""
    channel, stamps_size = _HEAD.unpack_from(message, 1)
    body = memoryview(message)[1 + _HEAD.size:]
    if message[:1] == ELEMENT:
        return channel, pickle.loads(body)
    timestamps = pickle.loads(body[:stamps_size]) if stamps_size else None
    batches = list(pa.ipc.open_stream(pa.py_buffer(body[stamps_size:])))
    arrow: pa.RecordBatch | pa.Table = batches[0] if len(batches) == 1 else pa.Table.from_batches(batches)
    return channel, RecordBatch(arrow=arrow, timestamps=timestamps)


def decode_credits(message: bytes) -> dict[int, int]:
    credits: dict[int, int] = pickle.loads(memoryview(message)[1:])
    return credits


__all__ = ["ARROW", "CREDIT", "ELEMENT", "FromWorker", "ToWorker", "decode_credits", "decode_element", "dumps",
           "encode_credits", "encode_element"]

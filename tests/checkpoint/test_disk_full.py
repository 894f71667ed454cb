"""A full disk while writing a sink part file or a spill file: a typed error naming the path."""

from __future__ import annotations

import errno

import pytest

from slipstream.datastream.connectors.file_system import FileSink
from slipstream.datastream.formats.base import Encoder
from slipstream.errors import DiskFullError
from slipstream.operators.elements import RecordBatch
from slipstream.runtime.channels import SpillingChannel


class FullStream:
    """A file object whose disk is full."""

    def __init__(self, real) -> None:
        self.real = real
        self.name = real.name

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_sink_part_file_on_a_full_disk(tmp_path):
    writer = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build().create_writer()
    writer.open(0, 1)
    writer.write(["first"], None)
    writer._stream = FullStream(writer._stream)
    with pytest.raises(DiskFullError) as caught:
        writer.write(["second"], None)
    assert caught.value.path == writer._in_progress_path and "sink part file" in str(caught.value)
    assert caught.value.errno == errno.ENOSPC


def test_spill_file_on_a_full_disk(tmp_path):
    channel = SpillingChannel(memory_budget=1, name="loop", spill_dir=str(tmp_path))
    channel.push(RecordBatch([1]))
    channel.push(RecordBatch([2]))  # spills: opens the file
    spill_file = channel._file
    spill_file._writer = FullStream(spill_file._writer)
    with pytest.raises(DiskFullError, match="spill file of channel loop") as caught:
        channel.push(RecordBatch([3]))
    assert caught.value.path.startswith(str(tmp_path))
    spill_file._writer = spill_file._writer.real
    channel.close()

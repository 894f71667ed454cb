from hypothesis import given, settings, strategies as st

import pytest

from slipstream.attributes import Boundedness
from slipstream.datastream.connectors.base import END_OF_INPUT, SourceReaderContext
from slipstream.datastream.connectors.number_seq import NumberSequenceSource
from slipstream.errors import InvalidProgramError

from connector_harness import drain, read_subtasks


def test_both_ends_included():
    source = NumberSequenceSource(3, 9)
    assert source.get_boundedness() is Boundedness.BOUNDED
    assert read_subtasks(source, 1) == [list(range(3, 10))]


@settings(max_examples=60, deadline=None)
@given(start=st.integers(-50, 50), length=st.integers(1, 80), parallelism=st.integers(1, 5),
       max_records=st.integers(1, 9))
def test_subtasks_cover_every_number_once_in_order(start, length, parallelism, max_records):
    end = start + length - 1
    parts = read_subtasks(NumberSequenceSource(start, end), parallelism, max_records)
    assert [n for part in parts for n in part] == list(range(start, end + 1))


def test_end_before_start_is_refused():
    with pytest.raises(InvalidProgramError, match="start <= end"):
        NumberSequenceSource(5, 4)


def test_restore_resumes_without_loss_or_duplicates():
    source = NumberSequenceSource(0, 99)
    reader = source.create_reader(1, 2)
    reader.open(SourceReaderContext(1, 2))
    first = reader.poll(10).values
    position = reader.snapshot_position()
    reader.poll(10)  # read past the snapshot, then "fail"
    restored = source.create_reader(1, 2)
    restored.restore_position(position)
    restored.open(SourceReaderContext(1, 2))
    assert first + drain(restored) == list(range(50, 100))
    assert restored.poll(5) is END_OF_INPUT

"""Helpers for driving source readers directly through the ``SourceReader`` interface.

A plain module, not a conftest, so that its name stays unique across test directories.
"""

from __future__ import annotations

from slipstream.datastream.connectors.base import END_OF_INPUT, NOTHING_AVAILABLE, Source, SourceReaderContext


def drain(reader, max_records: int = 7, switches: bool = False) -> list:
    """Poll an opened bounded reader until END_OF_INPUT; every batch must be non-empty and within
    the limit (but for the empty one a HybridSource returns when it switches sources, if ``switches``)."""
    values = []
    while True:
        batch = reader.poll(max_records)
        if batch is END_OF_INPUT:
            return values
        assert batch is not NOTHING_AVAILABLE, "a bounded reader never waits"
        assert (switches or batch.values) and len(batch.values) <= max_records
        values.extend(batch.values)


def read_subtasks(source: Source, parallelism: int, max_records: int = 7) -> list[list]:
    """What each subtask of ``source`` reads, subtask by subtask."""
    results = []
    for index in range(parallelism):
        reader = source.create_reader(index, parallelism)
        reader.open(SourceReaderContext(index, parallelism))
        results.append(drain(reader, max_records))
        reader.close()
    return results


"""``ArrowSourceBatch``: a source batch that also carries its records as one Arrow record batch.

Columnar sources (Parquet) return it so a vectorised path can keep working on
the columns; everything else reads ``values`` as from any ``SourceBatch``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from slipstream.datastream.columnar import rows_from_arrow
from slipstream.datastream.connectors.base import SourceBatch


class ArrowSourceBatch(SourceBatch):
    """A ``SourceBatch`` holding one Arrow record batch; ``values`` (its rows) are built on first use."""

    __slots__ = ("_rows", "record_batch")

    def __init__(self, record_batch: pa.RecordBatch, timestamps: list[Any] | None = None) -> None:
        self.record_batch = record_batch
        self.timestamps = timestamps
        self._rows: list[Any] | None = None

    @property
    def values(self) -> list[Any]:  # type: ignore[override]
        if self._rows is None:
            self._rows = rows_from_arrow(self.record_batch)
        return self._rows

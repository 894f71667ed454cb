"""``ArrowSourceBatch``: a source batch that also carries its records as one Arrow record batch.

Columnar sources (Parquet) return it so a vectorised path can keep working on
the columns; everything else reads ``values`` as from any ``SourceBatch``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from slipstream.datastream.connectors.base import SourceBatch


@dataclass(slots=True)
class ArrowSourceBatch(SourceBatch):
    """A ``SourceBatch`` whose ``values`` are the rows of ``record_batch``, in order."""

    record_batch: pa.RecordBatch | None = None

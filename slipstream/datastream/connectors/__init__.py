"""Sources and sinks (``pyflink.datastream.connectors``).

As PyFlink's package, this one names the connectors of its modules too (``from
slipstream.datastream.connectors import FileSource``), and slipstream's own sources beside them.
They are imported when first asked for, so that importing one module (a source's base classes)
does not import them all, and Spark's only when a Spark name is.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    "Sink": "base", "Source": "base",
    "NumberSequenceSource": "number_seq",
    "BucketAssigner": "file_system", "FileSink": "file_system", "FileSource": "file_system",
    "FileSourceBuilder": "file_system", "StreamingFileSink": "file_system",
    "OutputFileConfig": "file_system", "RollingPolicy": "file_system", "StreamFormat": "file_system",
    "HybridSource": "hybrid_source", "IteratorSource": "iterator", "ArrowSource": "arrow",
    "SparkSource": "spark",
}
"""Each name this package offers, and the module of this package it is defined in."""

__all__ = ["ArrowSource", "BucketAssigner", "FileSink", "FileSource", "FileSourceBuilder", "HybridSource",
           "IteratorSource", "NumberSequenceSource", "OutputFileConfig", "RollingPolicy", "Sink", "Source",
           "SparkSource", "StreamFormat", "StreamingFileSink"]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])

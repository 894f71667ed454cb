"""``pyflink.common.types``: ``Row`` and ``RowKind`` (see :mod:`slipstream.datastream.typeinfo`)."""

from slipstream.datastream.typeinfo import Row, RowKind

__all__ = ["Row", "RowKind"]

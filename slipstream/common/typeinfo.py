"""``pyflink.common.typeinfo``: ``Types``, ``Row`` and the type classes (see :mod:`slipstream.datastream.typeinfo`)."""

from slipstream.datastream.typeinfo import *  # noqa: F403
from slipstream.datastream.typeinfo import Row, RowKind, TypeInformation, Types  # noqa: F401

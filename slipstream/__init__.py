"""slipstream: a Flink-style DataStream API for Python.

Jobs process their backlog as sorted batch work and then stream record by
record. The user API lives in :mod:`slipstream.datastream`.
"""

__version__ = "0.1.0"

"""File formats for ``FileSource`` and ``FileSink``, one module per format as in ``pyflink.datastream.formats``."""

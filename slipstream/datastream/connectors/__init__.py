"""Sources and sinks (``pyflink.datastream.connectors``)."""

"""``pyflink.datastream.checkpointing_mode``: ``CheckpointingMode``
(see :mod:`slipstream.datastream.checkpoint_config`)."""

from slipstream.datastream.checkpoint_config import CheckpointingMode

__all__ = ["CheckpointingMode"]

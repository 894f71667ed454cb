"""``pyflink.datastream.checkpoint_storage``: where checkpoints go (see :mod:`slipstream.datastream.checkpoint_config`).

Only ``FileSystemCheckpointStorage`` exists: checkpoints are files in a local directory.
"""

from slipstream.datastream.checkpoint_config import CheckpointStorage, FileSystemCheckpointStorage

__all__ = ["CheckpointStorage", "FileSystemCheckpointStorage"]

"""Whether a source ends by itself."""

from enum import Enum


class Boundedness(Enum):
    """As Flink's ``Boundedness``: a bounded source ends; an unbounded one runs until stopped."""

    BOUNDED = "BOUNDED"
    CONTINUOUS_UNBOUNDED = "CONTINUOUS_UNBOUNDED"

"""The typed elements that travel through channels and operator chains."""

from __future__ import annotations

from dataclasses import dataclass

from slipstream.attributes import RecordAttributes
from slipstream.datastream.time import MAX_WATERMARK, Watermark

__all__ = ["RecordBatch", "Watermark", "MAX_WATERMARK", "WatermarkStatus", "RecordAttributes",
           "EndOfInput", "END_OF_INPUT", "StreamElement"]


@dataclass(slots=True)
class RecordBatch:
    """Records in arrival order; ``timestamps`` is parallel to ``values``, or None when none has one.

    Batching is what makes Python operators fast: an operator runs its user
    function over a whole batch in one loop rather than one call chain per record.
    """

    values: list
    timestamps: list | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """An input became idle (excluded from the watermark minimum) or active again."""

    idle: bool


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """The channel that carried this will carry nothing more."""


END_OF_INPUT = EndOfInput()

StreamElement = RecordBatch | Watermark | WatermarkStatus | RecordAttributes | EndOfInput

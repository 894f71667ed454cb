"""Attributes of the records that follow in a channel, sent in-band (FLIP-327)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordAttributes:
    """Says whether the records that follow are backlog (history, processed for throughput)."""

    backlog: bool = False

    def is_backlog(self) -> bool:
        return self.backlog


class RecordAttributesBuilder:
    """Combines the attributes of several inputs: the output is backlog while any input is."""

    def __init__(self, last_attributes: list[RecordAttributes] | None = None) -> None:
        self._backlog: bool | None = None
        self._inputs = list(last_attributes or [])

    def set_backlog(self, value: bool) -> RecordAttributesBuilder:
        self._backlog = bool(value)
        return self

    def build(self) -> RecordAttributes:
        if self._backlog is not None:
            return RecordAttributes(self._backlog)
        return RecordAttributes(any(a.is_backlog() for a in self._inputs))

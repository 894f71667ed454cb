"""Attributes of the records that follow in a channel, sent in-band (FLIP-327)."""

from __future__ import annotations


class RecordAttributes:
    """Says whether the records that follow are backlog (history, processed for throughput).

    Examples:
        >>> RecordAttributes(is_backlog=True).is_backlog()
        True
        >>> RecordAttributes() == RecordAttributes(False)
        True
    """

    __slots__ = ("_backlog",)

    def __init__(self, is_backlog: bool = False) -> None:
        self._backlog = bool(is_backlog)

    def is_backlog(self) -> bool:
        return self._backlog

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordAttributes) and other._backlog == self._backlog

    def __hash__(self) -> int:
        return hash(("RecordAttributes", self._backlog))

    def __repr__(self) -> str:
        return f"RecordAttributes(is_backlog={self._backlog})"

    def __reduce__(self) -> tuple[type[RecordAttributes], tuple[bool]]:
        return RecordAttributes, (self._backlog,)


class RecordAttributesBuilder:
    """Combines the attributes of several inputs: the output is backlog while any input is.

    As Flink's ``RecordAttributesBuilder(last_record_attributes_of_inputs)``; ``set_backlog``
    overrides the combination.
    """

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

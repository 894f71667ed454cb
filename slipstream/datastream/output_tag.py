"""``OutputTag``: names a side output of a process function."""

from __future__ import annotations

from typing import Any


class OutputTag:
    """Names a side output, as PyFlink's ``OutputTag(tag_id, type_info=None)``.

    A process function emits to it with ``yield tag, value`` (PyFlink's way) or
    ``ctx.output(tag, value)``; ``stream.get_side_output(tag)`` reads it.
    """

    __slots__ = ("tag_id", "type_info")

    def __init__(self, tag_id: str, type_info: Any = None) -> None:
        if not isinstance(tag_id, str) or not tag_id:
            raise ValueError(f"OutputTag needs a non-empty string id, got {tag_id!r}")
        self.tag_id = tag_id
        self.type_info = type_info

    def get_id(self) -> str:
        return self.tag_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"

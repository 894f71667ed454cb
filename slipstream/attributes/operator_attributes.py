"""What an operator declares about itself, so the planner can choose edges and modes (FLIP-327)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OperatorAttributes:
    """Declared facts about an operator; all false by default.

    ``is_output_on_eof``: emits only once its input has ended, so its output edges block.
    ``is_output_on_checkpoint``: emits only when a checkpoint is taken.
    ``has_internal_sorter``: can buffer and sort its backlog input itself.
    """

    output_on_eof: bool = False
    output_on_checkpoint: bool = False
    internal_sorter: bool = False

    def is_output_on_eof(self) -> bool:
        return self.output_on_eof

    def is_output_on_checkpoint(self) -> bool:
        return self.output_on_checkpoint

    def has_internal_sorter(self) -> bool:
        return self.internal_sorter

    # Flink's shipped names for the same facts.
    is_output_only_after_end_of_stream = is_output_on_eof
    is_internal_sorter_supported = has_internal_sorter


class OperatorAttributesBuilder:
    """Builds :class:`OperatorAttributes`, as Flink's ``OperatorAttributesBuilder``."""

    def __init__(self) -> None:
        self._output_on_eof = False
        self._output_on_checkpoint = False
        self._internal_sorter = False

    def set_is_output_on_eof(self, value: bool) -> OperatorAttributesBuilder:
        self._output_on_eof = bool(value)
        return self

    def set_is_output_on_checkpoint(self, value: bool) -> OperatorAttributesBuilder:
        self._output_on_checkpoint = bool(value)
        return self

    def set_has_internal_sorter(self, value: bool) -> OperatorAttributesBuilder:
        self._internal_sorter = bool(value)
        return self

    set_output_only_after_end_of_stream = set_is_output_on_eof
    set_internal_sorter_supported = set_has_internal_sorter

    def build(self) -> OperatorAttributes:
        return OperatorAttributes(self._output_on_eof, self._output_on_checkpoint, self._internal_sorter)

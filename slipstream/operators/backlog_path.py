"""What each operator kind does with its backlog: declared by the kind, read by the planner.

Every operator kind declares, for a transformation it implements, the path its backlog takes
(:meth:`~slipstream.operators.base.StreamOperator.backlog_path`), as Flink pairs each kind's
``translateForBatch`` with its ``translateForStreaming``:

* ``SORTED``: buffered, sorted by key, and run at the switch as batch work whose Python calls
  are amortised per key or per window (:mod:`slipstream.operators.backlog`);
* ``VECTORISED``: buffered and run as dataframe queries on the batch engine where the records
  allow it (and sorted, as above, where they do not);
* ``STREAMED``: processed record by record as it arrives, with the reason.

A kind that can sort its backlog but streams it faster says so with ``streams_faster``: in
STREAMING mode the planner then streams it (``backlog_sorting="always"`` and BATCH mode sort
it anyway). The planning pass ``choose_backlog_paths`` turns the declaration into the node's
:class:`BacklogChoice` knowing no operator kind; ``explain()`` prints it; a test walks every kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class BacklogPath(Enum):
    """The three ways an operator can process its backlog."""

    SORTED = "sorted"
    VECTORISED = "vectorised"
    STREAMED = "streamed"


@dataclass(frozen=True)
class BacklogChoice:
    """The path the planner chose for one operator, and (exactly when it streams) why."""

    path: BacklogPath
    reason: str | None = None


@dataclass(frozen=True)
class BacklogDeclaration:
    """An operator kind's backlog path for one transformation (see the module docstring).

    ``reason`` says why a ``STREAMED`` kind never sorts its backlog; ``streams_faster`` why a
    sorting kind streams it in STREAMING mode unless told to sort every kind.
    """

    path: BacklogPath
    reason: str | None = None
    streams_faster: str | None = None

    def __post_init__(self) -> None:
        if (self.path is BacklogPath.STREAMED) != (self.reason is not None):
            raise ValueError(f"a backlog path {self.path.name} gives a reason exactly when it is STREAMED")
        if self.streams_faster is not None and self.path is BacklogPath.STREAMED:
            raise ValueError("streams_faster is for a kind that can sort its backlog")

    @property
    def sorts(self) -> bool:
        """Whether the kind can buffer and sort its backlog (it has FLIP-327's internal sorter)."""
        return self.path is not BacklogPath.STREAMED

    def choose(self, backlog_sorting: bool | str, batch_mode: bool) -> BacklogChoice:
        """The path taken under ``configure(backlog_sorting=...)``: False streams every backlog;
        in STREAMING mode with True a kind that streams faster streams; otherwise the declared path."""
        if not backlog_sorting and self.sorts:
            return BacklogChoice(BacklogPath.STREAMED, "backlog_sorting=False")
        if self.streams_faster is not None and backlog_sorting is True and not batch_mode:
            return BacklogChoice(BacklogPath.STREAMED, self.streams_faster)
        return BacklogChoice(self.path, self.reason)


SORTED = BacklogDeclaration(BacklogPath.SORTED)
VECTORISED = BacklogDeclaration(BacklogPath.VECTORISED)


def streamed(reason: str) -> BacklogDeclaration:
    """The declaration of a kind that processes its backlog record by record, because ``reason``."""
    return BacklogDeclaration(BacklogPath.STREAMED, reason)


def sorted_unless_streaming(reason: str) -> BacklogDeclaration:
    """A sorting kind that streams its backlog in STREAMING mode, because ``reason``."""
    return BacklogDeclaration(BacklogPath.SORTED, streams_faster=reason)


__all__ = ["SORTED", "VECTORISED", "BacklogChoice", "BacklogDeclaration", "BacklogPath", "sorted_unless_streaming",
           "streamed"]

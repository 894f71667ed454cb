"""``StreamScope``: which loop (if any) a transformation belongs to.

Every transformation outside loops shares the root scope; loops nest scopes.
The core keeps the scope on each transformation so that planning never chains
across a scope boundary; the loop APIs build on it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

_context_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class StreamScope:
    """A path of loop contexts from the outermost scope inwards; the root scope is empty."""

    contexts: tuple[int, ...] = ()

    def nest(self) -> StreamScope:
        """A new scope directly inside this one, with a context no other scope has."""
        return StreamScope((*self.contexts, next(_context_ids)))

    def unnest(self) -> StreamScope:
        if not self.contexts:
            raise ValueError("the root scope has no outer scope")
        return StreamScope(self.contexts[:-1])

    def get_level(self) -> int:
        return len(self.contexts)

    def is_inner_of(self, other: StreamScope) -> bool:
        return len(self.contexts) > len(other.contexts) and \
            self.contexts[:len(other.contexts)] == other.contexts

    def is_outer_of(self, other: StreamScope) -> bool:
        return other.is_inner_of(self)

    def get_context_for_level(self, level: int) -> StreamScope:
        if not 0 <= level <= len(self.contexts):
            raise ValueError(f"scope {self} has no level {level}")
        return StreamScope(self.contexts[:level])

    def __str__(self) -> str:
        return "root" if not self.contexts else "root/" + "/".join(map(str, self.contexts))


ROOT_SCOPE = StreamScope()

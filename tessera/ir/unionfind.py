"""Union-find over hashable keys (IR values, ``(value, axis)`` pairs): the equivalence
classes the schedule's iteration spaces, the lowering's layouts and the exact
accumulator chains are built from."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class UnionFind(Generic[K]):
    """Disjoint classes of keys, each named by its root; a key never seen is its own
    class. Paths are halved on every ``find``, so long chains of joins stay cheap."""

    def __init__(self) -> None:
        self.parent: dict[K, K] = {}

    def find(self, key: K) -> K:
        """The root of ``key``'s class."""
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def join(self, a: K, b: K) -> None:
        """Merge the classes of ``a`` and ``b``; ``b``'s root stays the root."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


__all__ = ["UnionFind"]

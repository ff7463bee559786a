"""Flattening nested Python containers of arrays (tuples, lists, dicts) and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeDef:
    """The structure of a nested container: a hashable description without the leaves."""

    kind: str  # "leaf", "tuple", "list", "dict", "none"
    children: tuple[TreeDef, ...] = ()
    keys: tuple[Any, ...] = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """Leaves in a fixed order (dicts by sorted key) and the structure."""
    leaves: list[Any] = []

    def go(node: Any) -> TreeDef:
        if isinstance(node, (tuple, list)):
            return TreeDef(type(node).__name__, tuple(go(c) for c in node))
        if isinstance(node, dict):
            keys = tuple(sorted(node, key=repr))
            return TreeDef("dict", tuple(go(node[k]) for k in keys), keys)
        if node is None:
            return TreeDef("none")
        leaves.append(node)
        return TreeDef("leaf")

    treedef = go(tree)
    return leaves, treedef


def unflatten(treedef: TreeDef, leaves: list[Any]) -> Any:
    """Rebuild a container of ``treedef``'s structure from ``leaves``."""
    it = iter(leaves)

    def go(td: TreeDef) -> Any:
        if td.kind == "leaf":
            return next(it)
        if td.kind == "none":
            return None
        children = [go(c) for c in td.children]
        if td.kind == "dict":
            return dict(zip(td.keys, children))
        return tuple(children) if td.kind == "tuple" else children

    return go(treedef)

"""What a kernel body can name: specialisation data, free names and ``ts.tile.context()``.

Names resolve in this order: local variables, parameters, dimension symbols bound from
the arguments' annotations (``n``, ``N``, ``S``...), tile names, the function's globals
and closure (modules, constants, functions to inline), builtins. Tile names:

* ``tile_m``, ``tile_n``, ``tile_k`` (and ``block_m``, ``block_n``) — the current tile's
  origin: the group's grid coordinate along axis 0, 1, 2 times ``BM``, ``BN``, ``BK``;
* ``BM``, ``BN``, ``BK`` — the tile shape (``tile_shape=`` at launch, else the autotune
  config's ``BLOCK_M``/``BLOCK_N``/``BLOCK_K``, else ``(64, 64, 32)``).

Anything else is an :class:`~tessera.frontend.kernel.errors.UndefinedNameError`
naming the name and its line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from tessera.ir.dialects.tile import MemRefType
from tessera.ir.types import Element, TensorType

#: tile-origin names -> grid axis
ORIGINS = {"tile_m": 0, "tile_n": 1, "tile_k": 2, "block_m": 0, "block_n": 1}
#: tile-extent names -> index into the tile shape
EXTENTS = {"BM": 0, "BN": 1, "BK": 2, "BLOCK_M": 0, "BLOCK_N": 1, "BLOCK_K": 2}
DEFAULT_TILE = (64, 64, 32)


@dataclass(frozen=True)
class Param:
    """A kernel parameter in one specialisation: a memory, a runtime scalar or a
    compile-time constant."""

    name: str
    kind: str  # "tensor", "scalar" or "const"
    type: MemRefType | TensorType | None = None
    value: Any = None


@dataclass(frozen=True)
class ResultSpec:
    """Where a returned tile goes: a fresh tensor of this shape (batch dim included)."""

    shape: tuple[int, ...]
    element: Element
    batched: bool


@dataclass(frozen=True)
class Spec:
    """Everything a kernel's Tile IR depends on besides its source."""

    name: str
    params: tuple[Param, ...]
    dims: tuple[tuple[str, int], ...]
    tile: tuple[int, int, int]
    config: tuple[tuple[str, Any], ...]
    grid: tuple[int, ...]
    group_size: int
    batch: int
    result: ResultSpec | None = None
    result_scalar: Element | None = None
    lanes: int = 32

    @property
    def dim_env(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def config_env(self) -> dict[str, Any]:
        return dict(self.config)


class TileContext:
    """The compile-time object ``ts.tile.context()`` returns; attributes are resolved by
    the compiler (config values, tile shape, dims, tile origins)."""

    def __repr__(self) -> str:
        return "<ts.tile.context()>"


@dataclass(frozen=True)
class Undefined:
    """A name that may be unbound here (assigned in only one branch or inside a loop)."""

    name: str
    why: str


def names_used(tree: ast.AST) -> set[str]:
    """Every bare name and attribute name in a function's AST."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names (re)bound by statements, nested blocks included, in first-seen order."""
    seen: dict[str, None] = {}

    def target(t: ast.AST) -> None:
        if isinstance(t, ast.Name):
            seen.setdefault(t.id, None)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                target(e)
        elif isinstance(t, ast.Starred):
            target(t.value)

    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    target(t)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                target(node.target)
            elif isinstance(node, ast.For):
                target(node.target)
            elif isinstance(node, ast.NamedExpr):
                target(node.target)
    return list(seen)


__all__ = ["DEFAULT_TILE", "EXTENTS", "ORIGINS", "Param", "ResultSpec", "Spec", "TileContext",
           "Undefined", "assigned_names", "names_used"]

"""A block's tile flattened into the terms of an exact sum, without moving elements.

The blocked generators (:mod:`tessera.ir.transforms.to_tile.blocked`) flatten each
block's tile to one row of terms (``tile.reshape`` to ``(n,)``) before the carried
reduce, and a mean squared error flattens its operands' tiles before computing their
terms. The blocked layout (:class:`~tessera.lower.layout.Blocked`) deals row-major
elements to threads ``vec`` at a time, so a tile and its flattening hold every element
in the same thread and register exactly when both have the same vector width: the
terms take the tile's width where theirs is wider (a 3-D block with rows of 5 elements
has width 1, its 100 terms 4), and the reshape reads a block that is still a view of
memory (a load of rows of a wider tensor, not contiguous) straight into that layout.
"""

from __future__ import annotations

from math import gcd

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.core import RULES, Lowerer
from tessera.lower.layout import Blocked
from tessera.lower.values import Dist, Lowered, Mem


def flattening(v: Value) -> Instr | None:
    """The ``tile.reshape`` that makes ``v`` by flattening a tile to one axis, or None."""
    owner = v.owner
    t = v.type
    if isinstance(owner, Instr) and isinstance(owner.op, tile_compute.Reshape) and \
            isinstance(t, TensorType) and t.rank == 1:
        return owner
    return None


def source_width(low: Lowerer, reshapes: list[Instr]) -> int:
    """The vector width every one of ``reshapes`` leaves its elements in place with:
    the gcd of their sources' (0 when no source is blocked)."""
    vec = 0
    for r in reshapes:
        source = low.layouts.get(r.operands[0])
        if isinstance(source, Blocked):
            vec = gcd(vec, source.vec)
    return vec


def narrow(low: Lowerer, values: set[Value], reshapes: list[Instr], vec: int) -> None:
    """Hold the 1-D ``values`` (the flattened tiles and what is computed from them at
    their shape) in the blocked layout of width ``vec`` where theirs is wider, and
    lower ``reshapes`` with :func:`_flatten_rule`."""
    if not vec:
        return
    for v in values:
        layout = low.layouts.get(v)
        if isinstance(layout, Blocked) and len(layout.shape) == 1 and layout.vec > vec:
            low.layouts[v] = Blocked(layout.shape, vec)
    for r in reshapes:
        low.overrides.setdefault(id(r), _flatten_rule)


def _flatten_rule(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """A flattening whose result has the source's width: a memory view is read into
    the source's shape at the result's width (the same threads and registers as the
    result), a register tile at that width is relabelled; anything else takes the
    general rule."""
    (x,) = args
    out = low.layouts.get(instr.results[0])
    src = instr.operands[0].type
    if isinstance(out, Blocked) and isinstance(src, TensorType):
        if isinstance(x, Mem) and src.shape[-1] % out.vec == 0:
            from tessera.lower.rules.tensor import materialize

            x = materialize(low, x, Blocked(tuple(src.shape), out.vec))
        if isinstance(x, Dist) and isinstance(x.layout, Blocked) and x.layout.vec == out.vec:
            return [Dist(out, x.regs, x.type)]
    return list(RULES[tile_compute.Reshape](low, instr, args))


__all__ = ["flattening", "narrow", "source_width"]

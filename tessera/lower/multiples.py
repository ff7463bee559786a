"""What a Tile IR integer scalar is known to be a multiple of, from how it is computed.

``cp.async`` copies 4-, 8- or 16-byte chunks, and each chunk's global address must be
a multiple of its size (PTX ISA sec. 9.7.9.25). A view's start is a run-time sum of
``start * stride`` terms, so the lowering asks which number every start is sure to be
a multiple of and picks the widest chunk that divides the view's byte offset, its row
length and its row stride (:func:`tessera.lower.sm80.copy.copy_chunk`).

The rules are the gcd facts of integer arithmetic, taken over the defining ops:
a constant ``c`` is a multiple of ``|c|``; ``a * b`` of ``m(a) * m(b)``; ``a + b`` and
``a - b`` of ``gcd(m(a), m(b))``; the index of ``tile.for(lo, hi, step)`` of
``gcd(m(lo), m(step))``. Anything else (a program id, a kernel argument, a loop's
carried value) is only known to be a multiple of 1. ``0`` means "known to be 0"
(``gcd(0, x) == x``), so ``tile_m = grid_coord * BM`` is a multiple of ``BM`` and the
index of ``ts.tile.range(0, K, BK)`` one of ``BK``.
"""

from __future__ import annotations

from math import gcd

import numpy as np

from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute


class Multiples:
    """Known multiples of the integer scalars of one Tile IR function (memoised)."""

    def __init__(self, fn: Function) -> None:
        # a for's index is argument 0 of its region's block, which does not know its op
        self._loop_of: dict[Block, Instr] = {
            region.block: instr for instr in walk(fn.body) if isinstance(instr.op, tile_ir.For)
            for region in instr.regions}
        self._memo: dict[Value, int] = {}

    def of(self, v: Value) -> int:
        """A number ``v`` is sure to be a multiple of (0: ``v`` is 0)."""
        if v not in self._memo:
            self._memo[v] = self._compute(v)
        return self._memo[v]

    def _compute(self, v: Value) -> int:
        owner = v.owner
        if isinstance(owner, Block):
            loop = self._loop_of.get(owner)
            if loop is None or v is not owner.args[0]:
                return 1
            lo, _, step = loop.operands[:3]
            return gcd(self.of(lo), self.of(step))
        if not isinstance(owner, Instr):
            return 1
        op, args = owner.op, owner.operands
        if isinstance(op, tile_ir.Constant):
            value = op.value
            integral = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            return abs(int(value)) if integral else 1
        if isinstance(op, tile_compute.Mul):
            return self.of(args[0]) * self.of(args[1])
        if isinstance(op, (tile_compute.Add, tile_compute.Sub)):
            return gcd(self.of(args[0]), self.of(args[1]))
        return 1


__all__ = ["Multiples"]

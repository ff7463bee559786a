"""Exact ``mma`` chains that one f64 per element holds exactly (fp8_e4m3 products).

A product of two e4m3 values is a multiple of the quantum ``2**-18`` (the product of
the two smallest subnormals) below ``448**2``, about ``2**35.6`` quanta; a sum of ``K``
of them is a whole number of quanta below ``K * 448**2 / 2**-18``, which f64 holds
exactly while that is at most ``2**53``: ``K <= 171,196``
(:func:`tessera.ir.transforms.to_tile.matmul.exact_contraction`, the bound under which
the tile level sums such products in float64). Every partial sum is then exact in
f64, in any order, so ``fma.rn.f64`` of the exactly widened operands gives the exact
sum and rounding it once to the accumulator format gives the long accumulator's bits
(NaN operands propagate as NaN; e4m3 has no infinities, and finite products cannot
overflow).

:func:`f64_chains` picks the exact chains (:mod:`tessera.lower.exact.mma`) whose every
``mma`` has such operands and whose products per output element — each ``mma``'s K
times the trips of the loops around it, whose bounds must be constants — stay within
the bound. Their accumulator is one f64 (the first word of the element's accumulator
block): one ``ld.shared.f64``, ``fma.rn.f64`` and ``st.shared.f64`` per product
instead of a deposit into 21 words, and one ``cvt`` to round instead of the words'
normalisation.
"""

from __future__ import annotations

import math

from tessera.ir.core import Block, Function, Instr, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.numerics import storage_of


def _trips(loop: Instr) -> float:
    """The trip count of a ``tile.for`` with constant bounds (``inf`` otherwise)."""
    trips = tile_ir.constant_trips(loop)
    return math.inf if trips is None else trips


def _mmas(block: Block, trips: float, out: list[tuple[Instr, float]]) -> None:
    """Every exact ``mma`` under ``block`` with the trips of the loops around it."""
    for instr in block.instrs:
        if isinstance(instr.op, tile_compute.Mma) and instr.op.exact:
            out.append((instr, trips))
        inner = trips * _trips(instr) if isinstance(instr.op, (tile_ir.For, tile_ir.While)) \
            else trips
        for region in instr.regions:
            _mmas(region.block, inner, out)


def _limit(instr: Instr) -> int:
    """How many products of this ``mma``'s operand formats f64 sums exactly."""
    from tessera.ir.transforms.to_tile.matmul import exact_contraction

    a, b = (v.type for v in instr.operands[:2])
    assert isinstance(a, TensorType) and isinstance(b, TensorType)
    return exact_contraction(storage_of(a.element), storage_of(b.element))


def f64_chains(fn: Function, members: dict[Value, Value]) -> set[Value]:
    """The roots of the exact chains of ``fn`` (``members``: value -> root) whose
    products one f64 per element sums exactly."""
    found: list[tuple[Instr, float]] = []
    _mmas(fn.body, 1, found)
    products: dict[Value, float] = {}
    limit: dict[Value, float] = {}
    for instr, trips in found:
        root = members[instr.results[0]]
        k = instr.operands[0].type.shape[1]  # type: ignore[attr-defined]
        products[root] = products.get(root, 0) + k * trips
        limit[root] = min(limit.get(root, math.inf), _limit(instr))
    return {root for root, n in products.items() if n <= limit[root]}


__all__ = ["f64_chains"]

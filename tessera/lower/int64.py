"""Which int64 tiles of a kernel fit the 32-bit registers int64 values live in.

Integer ``+ - *`` saturate in Graph IR and wrap at the tile level, so the generated
kernels widen narrow integers to int64, compute there (no int64 overflow for 32-bit
operands) and cast back, saturating as the graph does (docs/schedule.md). The PTX
lowering holds int64 values in ``s32`` registers (:data:`tessera.lower.values.REG_OF`),
which computes the same bits exactly when no int64 value of the computation leaves the
``s32`` range: then the wrapping ``s32`` arithmetic never wraps, and the saturating
cast back sees the int64 value itself.

:func:`int64_bounds` proves that by interval arithmetic on magnitudes, forward through
the kernel: a cast of an ``n``-bit integer to int64 is below ``2**(n-1)`` in magnitude
(``2**n`` unsigned), a sum or difference below the sum of its operands' bounds, a
product below their product, a selection, ``neg``, ``abs``, ``maximum`` and ``minimum``
below the larger bound, a constant its own magnitude, and data movement keeps the
bound. Anything else (a cast from a float, a division, a value carried through a loop
or a branch) is unbounded. The int8 MLP's epilogue — the saturated int32 product cast
to int8, widened with the int8 bias, added, saturated back to int8 — stays below 2^8.
"""

from __future__ import annotations

import math

from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: the magnitudes an int64 value held in an ``s32`` register may reach (-2^31 included)
S32_BOUND = 2**31

_KEEP = (tile_compute.Broadcast, tile_compute.Reshape, tile_compute.Transpose,
         tile_compute.Neg, tile_compute.Abs, tile_compute.Maximum, tile_compute.Minimum)


def _int64(v: Value) -> bool:
    t = v.type
    return isinstance(t, TensorType) and storage_of(t.element).np_dtype.name == "int64"


def _cast_bound(src: Value) -> float:
    """The magnitude bound of ``src`` (an integer or bool tile) widened to int64."""
    t = src.type
    assert isinstance(t, TensorType)
    fmt = storage_of(t.element)
    if fmt.kind == "bool":
        return 1
    if fmt.kind != "int" or fmt.bits >= 64:
        return math.inf
    return 2**fmt.bits - 1 if fmt.np_dtype.kind == "u" else 2**(fmt.bits - 1)


def _constant(v: Value) -> float | None:
    """The magnitude of a constant operand, or None for a value computed otherwise."""
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, (tile_compute.Full,
                                                          tile_ir.Constant)):
        return abs(float(owner.op.value))
    return None


def int64_bounds(fn: Function) -> dict[Value, float]:
    """A magnitude bound for every int64 tile of ``fn`` computed from a widened integer
    (``math.inf`` where none is proved); int64 index values (grid coordinates, loop
    indices, aranges) are 32-bit by construction and are not listed."""
    bounds: dict[Value, float] = {}

    def of(v: Value) -> float:
        if v in bounds:
            return bounds[v]
        c = _constant(v)
        return math.inf if c is None else c

    for instr in walk(fn.body):
        op = instr.op
        derived = [v for v in instr.operands if v in bounds]
        if isinstance(op, tile_compute.Cast) and instr.results and _int64(instr.results[0]):
            src = instr.operands[0]
            bounds[instr.results[0]] = of(src) if _int64(src) else _cast_bound(src)
            continue
        if not derived:
            continue
        results = [v for v in instr.results if _int64(v)]
        if isinstance(op, (tile_compute.Add, tile_compute.Sub)):
            bound = of(instr.operands[0]) + of(instr.operands[1])
        elif isinstance(op, tile_compute.Mul):
            bound = of(instr.operands[0]) * of(instr.operands[1])
        elif isinstance(op, tile_compute.Where):
            bound = max(of(instr.operands[1]), of(instr.operands[2]))
        elif isinstance(op, _KEEP):
            bound = max(of(v) for v in instr.operands)
        else:  # loops, branches, yields, divisions: nothing is proved
            bound = math.inf
            results = [*results, *(a for region in instr.regions
                                   for a in region.block.args if _int64(a))]
            if op.terminator:  # a yielded value flows into a loop's or branch's slots
                bounds.update(dict.fromkeys(derived, math.inf))
        for v in results:
            bounds[v] = bound
    return bounds


def int64_fits_s32(fn: Function) -> Value | None:
    """None when every widened int64 tile of ``fn`` provably stays in the ``s32``
    range, else the first value not proved to."""
    for v, bound in int64_bounds(fn).items():
        if bound >= S32_BOUND:
            return v
    return None


__all__ = ["S32_BOUND", "int64_bounds", "int64_fits_s32"]

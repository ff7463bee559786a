"""A kernel's matmul at the tile level: a K loop of ``tile.mma`` over operand tiles
staged through shared memory (as ``examples/kernels/gemm.py`` writes it), then the
graph's roundings of the product, so its elementwise epilogue sees the graph's values.

The checked ``tile.mma`` widens its inputs exactly to float64 (int64 for integers) and
sums the K products there; the graph's matmul rounds the *exact* sum once to the
accumulator (then to the result element when that differs). The two agree exactly
when every float64 partial sum is exact, whatever order BLAS adds in. That holds by the
formats alone when the products are multiples of one quantum (the product of the
smallest subnormals) of magnitude below ``max_a * max_b``: every partial sum of ``K``
products is then an integer number of quanta below ``K * max_a * max_b / quantum``,
exact in float64 while that is at most 2^53 (:func:`exact_contraction`). For
fp8_e4m3 it allows contractions up to 2^17.4, for fp6 and fp4 far longer. int8
products (at most 2^14) sum exactly in int64 and never saturate the int32 accumulator
for K below 2^17, as the graph's exact sum would not; their tiles and B's shared
buffer are the integer tensor cores' (:mod:`.int_tiles`: B copied K-major).

For f32, tf32, bf16, f16 and fp8_e5m2 no length qualifies (2^-149 and 2^127 are 276
binades apart), nor for longer contractions of the others: those matmuls use the exact
``tile.mma`` (``exact = true``), whose accumulator holds the exact sum across the K
loop's trips and is rounded once by the cast to the accumulator format: the graph's
``matmul_rounded``, by definition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tessera.ir.core import Block, Builder, Instr, IRRegion, Value
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.dialects.tile import memory as tm
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.transforms.to_tile.edges import stage
from tessera.ir.transforms.to_tile.int_tiles import (
    byte_integer_matmul,
    k_major_b,
    ragged,
    transpose_copy,
    transpose_copy_loop,
)
from tessera.ir.types import TensorType
from tessera.numerics import DType, storage_of
from tessera.numerics.policy.modifiers import product_accum

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

#: float64 holds every integer below 2^53
_F64_INTEGERS = 2**53
#: int8 products are at most 2^14; an int32 accumulator holds sums below 2^31
_INT8_K = 2**31 // 2**14 - 1


def exact_contraction(a: DType, b: DType) -> int:
    """The longest contraction of ``a`` by ``b`` whose tile-level sums are exact (0:
    none, beyond one product)."""
    if a.kind == b.kind == "int":
        return _INT8_K if a.bits <= 8 and b.bits <= 8 else 0
    if a.kind != "float" or b.kind != "float":
        return 0
    fa, fb = (_finfo(x) for x in (a, b))
    quantum = float(fa.smallest_subnormal) * float(fb.smallest_subnormal)
    quanta = float(fa.max) * float(fb.max) / quantum
    return int(_F64_INTEGERS // quanta) if quanta < _F64_INTEGERS else 0


def _finfo(x: DType) -> np.finfo:
    import ml_dtypes

    return ml_dtypes.finfo(x.np_dtype)


def check_matmul(em: Emitter, instr: Instr) -> tuple[Value, Value, bool]:
    """The matmul's operands and whether it needs the exact ``mma``; refuses what the
    tile level cannot generate with the graph's bits."""
    a, b = instr.operands
    ta, tb = a.type, b.type
    assert isinstance(ta, TensorType) and isinstance(tb, TensorType)
    if ta.rank < 2 or ta.rank != tb.rank or ta.shape[:-2] != tb.shape[:-2]:
        raise rules.refuse(instr, "only matmuls of operands of one rank (at least 2) and "
                           "one batch shape are generated so far")
    if any(d != 1 for d in em.tile_type(instr.results[0]).shape[:-2]):
        raise rules.refuse(instr, "a tile of several batch elements of a batched matmul")
    if a is b:  # its rows and its contraction would be one loop
        raise rules.refuse(instr, "one tensor as both operands is not generated so far")
    rules.check_element(instr)
    fa, fb = storage_of(ta.element), storage_of(tb.element)
    k = int(ta.shape[1])
    limit = exact_contraction(fa, fb)
    if k <= max(limit, 1):
        return a, b, False
    if all(f.kind == "float" and f.bits <= 32 for f in (fa, fb)):
        return a, b, True  # the exact accumulator
    raise rules.refuse(
        instr, f"the tile level sums the {k} products of {fa} and {fb} exactly only for "
        f"K <= {limit} (int64) or for float formats of at most 32 bits (the exact mma)")


def emit_matmul(em: Emitter, instr: Instr, streamed: set[Value], mems: dict[Value, Value],
                env: dict[Value, Value], k_slice: tuple[Value, int] | None = None) -> Value:
    """The matmul ``instr``: this program's tile of the product, rounded as the graph
    rounds it. Operands in ``streamed`` are read from their memories (``mems``) one K
    tile at a time through shared memory; the others are tiles the kernel computed
    (``env``), whole along K. With ``k_slice = (start, length)`` the K loop runs over
    those columns only and the raw ``(m, n)`` accumulator is returned (a slice of
    split-K, :mod:`.splitk`)."""
    a, b, exact = check_matmul(em, instr)
    out = instr.results[0]
    out_t = em.tile_type(out)
    rank, lead = out_t.rank, tuple(out_t.shape[:-2])  # batch axes: tiles of 1
    (m, n), k_extent = out_t.shape[-2:], a.type.shape[-1]  # type: ignore[attr-defined]
    k_loop = em.loop_of.get((a, rank - 1))
    bk = em.tiles[k_loop] if k_loop is not None else 1
    accum = product_accum(*(v.type.element for v in (a, b)))  # type: ignore[attr-defined]
    ea, eb = (storage_of(v.type.element) for v in (a, b))  # type: ignore[attr-defined]
    shapes = {a: (m, bk), b: (bk, n)}
    k_major = not lead and byte_integer_matmul(instr) and k_major_b(a, b, streamed, m, n, bk)
    buffers = {a: shapes[a], b: (n, bk) if k_major else shapes[b]}
    smem = {v: em.create(tm.AllocShared((*lead, *buffers[v]), e), [], instr)[0]
            for v, e in ((a, ea), (b, eb)) if v in streamed}
    # a K-major B is copied transposed from its memory, or, along a ragged loop, staged
    # as it lies (K x N: masked, zeros past the edge) and then copied transposed
    staged = dict(smem)
    ragged_b = k_major and ragged(em, b)
    if k_major:
        del staged[b]
        if ragged_b:
            staged[b] = em.create(tm.AllocShared(shapes[b], eb), [], instr)[0]
    acc_t = TensorType((m, n), accum)
    zero = em.full(acc_t, 0)
    batch = [_start(em, out, axis) for axis in range(rank - 2)]
    rows = _start(em, out, rank - 2)
    cols = _start(em, out, rank - 1)

    def matrix(v: Value, tile: Value) -> Value:
        # mma multiplies matrices: a batched operand's tile drops its batch axes of 1
        return em.create(tc.Reshape(shapes[v]), [tile], instr)[0] if lead else tile

    def step(k: Value, acc: Value) -> Value:
        starts = {a: [*batch, rows, k], b: [*batch, k, cols]}
        for v, buf in staged.items():  # masked along a loop the tile does not divide
            loops = [em.loop_of.get((v, axis)) for axis in range(rank)]
            stage(em, buf, mems[v], v, starts[v], (*lead, *shapes[v]), loops, instr)
        if k_major and not ragged_b:
            transpose_copy(em, mems[b], starts[b], smem[b], instr)
        if smem:
            em.create(tm.Barrier(), [], instr)
        if ragged_b:
            transpose_copy_loop(em, staged[b], smem[b], instr)
            em.create(tm.Barrier(), [], instr)
        tiles = [matrix(v, em.create(tm.Load(), [smem[v]], instr)[0] if v in smem else env[v])
                 for v in (a, b)]
        if k_major:
            tiles[1] = em.create(tc.Transpose(), [tiles[1]], instr)[0]
        (acc,) = em.create(tc.Mma(accum, exact), [*tiles, acc], instr)
        if smem:
            em.create(tm.Barrier(), [], instr)  # the next copies overwrite what mma read
        return acc

    start, length = k_slice if k_slice is not None else (None, k_extent)
    if k_loop is None or bk >= length:  # (a tile rounded up past K: one step)
        acc = step(start if start is not None else em.index(0), zero)
    else:
        body = Block()
        index = body.add_arg(tile_ops.SCALAR_INDEX, "k")
        carried = body.add_arg(acc_t, "acc")
        outer = em.builder
        em.builder = Builder(body)
        if start is not None:  # (a constant trip count; the slice's offset added inside)
            (index,) = em.create(tc.Add(), [index, start], instr)
        em.create(tile_ops.Yield(), [step(index, carried)], instr)
        em.builder = outer
        bounds = [em.index(0), em.index(length), em.index(bk)]
        (acc,) = em.builder.create(tile_ops.For(), [*bounds, zero], loc=instr.loc,
                                   regions=[IRRegion([body])], result_types=[acc_t])
    if k_slice is not None:
        return acc
    return round_product(em, instr, acc, accum, tuple(out_t.shape) if lead else None)


def round_product(em: Emitter, instr: Instr, acc: Value, accum: DType,
                  shape: tuple[int, ...] | None, wide: bool = True) -> Value:
    """The matmul ``instr``'s accumulator ``acc`` rounded as the graph rounds the exact
    product: to the accumulator (where it may be held ``wide``), then to the result
    element; reshaped to ``shape`` (batched operands); NaNs settled."""
    if wide and accum.kind == "float":  # a float mma result is held wide until a cast
        (acc,) = em.create(tc.Cast(accum), [acc], instr)
    result = instr.results[0].type.element  # type: ignore[attr-defined]
    if storage_of(result) != accum:
        (acc,) = em.create(tc.Cast(result), [acc], instr)
    if shape is not None:
        (acc,) = em.create(tc.Reshape(shape), [acc], instr)
    return rules.settle(em, instr, acc)


def _start(em: Emitter, v: Value, axis: int) -> Value:
    loop = em.loop_of.get((v, axis))
    return em.starts[loop] if loop is not None else em.index(0)


__all__ = ["check_matmul", "emit_matmul", "exact_contraction", "round_product"]

"""Generated int8 matmuls in the shapes and layouts of the integer tensor cores.

The tile level defines an int8 ``tile.mma`` as the exact sum saturated once to int32;
``mma.sync`` m16n8k32 ``.s32.s8.s8.s32`` and ``wgmma`` ``.s32.s8.s8`` give the same
bits wherever no partial sum can leave s32, which :mod:`tessera.lower.sm80.intmma`
proves for a whole kernel (every generated contraction qualifies: K stays below 2^17,
so ``K * 128 * 128 < 2^31``). It also wants the tensor cores' tiles and operand
layouts, which the generator makes here:

* **tiles** (:func:`tensor_core_tiles`): a loop that is one whole tile of a shape the
  tensor cores do not take (M = 100) is rounded up to the next shape they take (M a
  multiple of 64, N of 8, or of 16 beyond 32 for ``wgmma``, K a power of two from 32);
  the rows, columns and products past the loop's end are masked (:mod:`.edges`):
  zeros that add nothing to the sums, never stored. K tiles are at most
  :data:`DEPTH_CAP`.
* **B K-major** (:func:`k_major_b`): 8-bit fragments are K-major and neither
  ``ldmatrix.trans`` nor ``wgmma`` transposes bytes (PTX ISA sec. 9.7.14.5.10 and
  9.7.15.5.1), so B's shared buffer is ``N x K``, filled by a transposing copy
  (:func:`transpose_copy`), and the ``mma`` reads its transpose.

Kernels the lowering does not take to tensor cores read the same buffers per thread
(:mod:`tessera.lower.exact.intmma`), with the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tessera.ir.core import Block, Builder, Instr, IRRegion, Value
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.dialects.tile import memory as tm
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

#: the multiples an integer tensor-core tile takes along M, N (up to 32 columns, and
#: beyond: ``wgmma`` n of 16) and K (32 bytes: one m16n8k32 step)
TC_ROWS, TC_COLS, TC_WIDE_COLS, TC_DEPTH = 64, 8, 16, 32
#: the longest K tile: with 128, a 128 x 128 tile's accumulators, fragments and the
#: transposing copy's addresses outgrow the 255 registers of a thread (ptxas spills)
DEPTH_CAP = 64
#: the elements of B a thread moves per trip of a transposing copy out of shared memory
COPY_ELEMENTS = 8
#: threads of a generated kernel's CTA
_THREADS = 128


def byte_integer_matmul(instr: Instr) -> bool:
    """Whether the graph matmul ``instr`` multiplies two matrices of byte integers."""
    types = [v.type for v in instr.operands]
    return all(isinstance(t, TensorType) and t.rank == 2 and storage_of(t.element).kind
               == "int" and storage_of(t.element).bits <= 8 for t in types)


def _rounded(tile: int, quantum: int) -> int:
    """``tile`` rounded up to the tensor cores' multiple ``quantum`` (K: a power of two,
    so that a buffer's rows fill one ``wgmma`` swizzle panel, which element stores
    address)."""
    if quantum == TC_DEPTH:
        return max(TC_DEPTH, 1 << (tile - 1).bit_length())
    up = -(-tile // quantum) * quantum
    if quantum == TC_COLS and up > 32:
        up = -(-tile // TC_WIDE_COLS) * TC_WIDE_COLS
    return up


def tensor_core_tiles(matmuls: list[Instr], streamed: set[Value], loop_of: dict[Any, int],
                      extents: Sequence[int], schedule: Sequence[int], tiles: list[int]) -> None:
    """Fit, in place, the ``tiles`` of a kernel whose matmuls all multiply byte integers
    read from memory to the integer tensor cores (module docstring): K tiles of at most
    :data:`DEPTH_CAP`; a loop that is one whole tile is rounded up to the tensor cores'
    multiple, up to the ``schedule``'s tile or that multiple."""
    if not matmuls or not all(byte_integer_matmul(i) and set(i.operands) <= streamed
                              for i in matmuls):
        return
    for mm in matmuls:
        a, b = mm.operands
        k_loop = loop_of.get((a, 1))
        if k_loop is not None and tiles[k_loop] > DEPTH_CAP:
            tiles[k_loop] = DEPTH_CAP
        for v, axis, quantum in ((a, 0, TC_ROWS), (b, 1, TC_COLS), (a, 1, TC_DEPTH)):
            loop = loop_of.get((v, axis))
            if loop is None or tiles[loop] != extents[loop]:
                continue
            up = _rounded(tiles[loop], quantum)
            if up <= max(schedule[loop], quantum):
                tiles[loop] = up


def k_major_b(a: Value, b: Value, streamed: set[Value], m: int, n: int, bk: int) -> bool:
    """Whether the ``mma`` of byte integers ``a @ b`` (tiles ``m x bk`` and ``bk x n``)
    reads B K-major: both are streamed through shared memory in tensor-core tiles."""
    wide = n <= 32 or n % TC_WIDE_COLS == 0
    return {a, b} <= streamed and not m % TC_ROWS and not n % TC_COLS and wide \
        and bk in (TC_DEPTH, 2 * TC_DEPTH, 4 * TC_DEPTH)


def ragged(em: Emitter, v: Value) -> bool:
    """Whether a loop of ``v``'s axes has an edge tile (its accesses are masked)."""
    t = v.type
    assert isinstance(t, TensorType)
    loops = [em.loop_of.get((v, axis)) for axis in range(t.rank)]
    return any(loop is not None and (em.extents[loop] % em.tiles[loop] or loop in em.overrun)
               for loop in loops)


def transpose_copy(em: Emitter, src: Value, at: Sequence[Value], dst: Value,
                   instr: Instr) -> None:
    """Copy the ``K x N`` window of the global ``src`` at ``at`` transposed into the
    ``N x K`` shared buffer ``dst``: a load, a transpose and a store (the lowering:
    each thread's byte loads and stores, whose addresses move with the K step)."""
    n, k = dst.type.shape  # type: ignore[attr-defined]
    (window,) = em.create(tm.View((k, n)), [src, *at], instr)
    (by_rows,) = em.create(tm.Load(), [window], instr)
    (by_cols,) = em.create(tc.Transpose(), [by_rows], instr)
    em.create(tm.Store(), [dst, by_cols], instr)


def transpose_copy_loop(em: Emitter, src: Value, dst: Value, instr: Instr) -> None:
    """Copy the ``K x N`` shared buffer ``src`` transposed into the ``N x K`` shared
    buffer ``dst``: a loop over a few rows of ``dst`` at a time (:data:`COPY_ELEMENTS`
    a thread), each a load, a transpose and a store. A loop, not one copy: its
    addresses would be the same on every K step, and ptxas would keep them all in
    registers across it, beside the accumulators."""
    n, k = dst.type.shape  # type: ignore[attr-defined]
    rows = max(d for d in range(1, n + 1) if n % d == 0 and d * k <= _THREADS * COPY_ELEMENTS)
    body = Block()
    r0 = body.add_arg(tile_ops.SCALAR_INDEX, "r")
    outer = em.builder
    em.builder = Builder(body)
    zero = em.index(0)
    (part,) = em.create(tm.View((k, rows)), [src, zero, r0], instr)
    (into,) = em.create(tm.View((rows, k)), [dst, r0, zero], instr)
    (by_rows,) = em.create(tm.Load(), [part], instr)
    (by_cols,) = em.create(tc.Transpose(), [by_rows], instr)
    em.create(tm.Store(), [into, by_cols], instr)
    em.create(tile_ops.Yield(), [], instr)
    em.builder = outer
    bounds = [em.index(0), em.index(n), em.index(rows)]
    em.builder.create(tile_ops.For(), bounds, loc=instr.loc, regions=[IRRegion([body])],
                      result_types=[])


__all__ = ["COPY_ELEMENTS", "DEPTH_CAP", "TC_COLS", "TC_DEPTH", "TC_ROWS", "TC_WIDE_COLS",
           "byte_integer_matmul", "k_major_b", "ragged", "tensor_core_tiles",
           "transpose_copy", "transpose_copy_loop"]

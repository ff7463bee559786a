"""Split-K: a contraction cut into slices that run in parallel, combined in slice
order (the schedule's ``split_k``, chosen only where the result cannot change: integer
matmuls, whose partial sums are exact, and fast mode).

A ``split_k`` kernel becomes two launches:

1. **slices**: the grid of the kernel's tiles times ``split``; the program of slice
   ``s`` runs the K loop over its ``K / split`` columns (the schedule picks a ``split``
   that divides the K tiles, so every slice has the same constant trip count; with a
   ragged K the last slice's tiles past K are masked, zeros) and
   stores its raw accumulator into a global buffer of partial sums, the slices'
   products stacked (rows ``s M ..`` of a ``split M x N`` buffer; batched products
   along a leading axis), in the accumulator's format;
2. **combine**: the kernel itself, whose matmul is the sum of the ``split`` partials,
   added in slice order (``s = 0, 1, ...``), then rounded as the graph rounds the
   product; the epilogue follows as in any kernel.

For an integer matmul the partial sums are exact (no slice of fewer than ``2^17``
int8 products leaves int32) and so is their sum: the graph's bits. In fast mode the
float32 partials are added in a fixed order, so the bits do not depend on the schedule
either, and the result stays within the bound fast mode derives for any summation
order of ``K`` products.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tessera.ir.core import Block, Function, Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.schedule.tile import pow2
from tessera.ir.transforms.to_tile import edges
from tessera.ir.transforms.to_tile.int_tiles import tensor_core_tiles
from tessera.ir.transforms.to_tile.matmul import check_matmul, emit_matmul, round_product
from tessera.ir.types import TensorType
from tessera.numerics.policy.modifiers import product_accum

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

#: elements of one program's tile of the combine, 4 per thread of 128 (the product's
#: 128 x 128 tile spills kilobytes; 8 per thread spill 16 bytes on sm_90a)
COMBINE_TILE = 512


def _matmul(instr: Instr) -> Instr:
    region = instr.regions[0].block
    (mm,) = [i for i in region.instrs if isinstance(i.op, graph_ops.MatMul)]
    return mm


def partials_type(instr: Instr) -> TensorType:
    """The global buffer of the partial sums of a ``split_k`` kernel: one accumulator
    tile of the whole product per slice."""
    mm = _matmul(instr)
    out = mm.results[0].type
    assert isinstance(out, TensorType)
    accum = product_accum(*(v.type.element for v in mm.operands))  # type: ignore[attr-defined]
    split = instr.op.split  # type: ignore[attr-defined]
    if out.rank == 2:  # the slices' matrices stacked: a 2-D tile is stored as it is held
        return TensorType((split * out.shape[0], out.shape[1]), accum)
    return TensorType((split, *out.shape), accum)


def _partial_window(em: Emitter, out: Value, s: Value
                    ) -> tuple[list[Value], tuple[int, ...], Value | None]:
    """Starts, shape and mask of this program's tile of slice ``s`` of the partials."""
    starts, shape, loops = edges.window(em, out)
    mask = edges.window_mask(em, out, starts, shape, loops)
    t = out.type
    assert isinstance(t, TensorType)
    if t.rank == 2:  # rows of slice s start at s * M
        (first,) = em.create(tc.Mul(), [s, em.index(t.shape[0])])
        (row,) = em.create(tc.Add(), [first, starts[0]])
        return [row, starts[1]], shape, mask
    if mask is not None:
        (mask,) = em.create(tc.Reshape((1, *shape)), [mask])
    return [s, *starts], (1, *shape), mask


def combine_tiles(space: schedule_ops.IterationSpace, tiles: list[int]) -> None:
    """Retile, in place, the grid loops of a combine kernel as an elementwise kernel's:
    at most :data:`COMBINE_TILE` elements, innermost loop first, powers of two."""
    budget = COMBINE_TILE
    for k in reversed(range(len(tiles))):
        if space.kinds[k] == "grid":
            tiles[k] = min(pow2(space.extents[k]), budget)
            budget = max(budget // tiles[k], 1)


def build_slices(instr: Instr, name: str, params: Sequence[str], partials: str
                 ) -> tuple[Function, tuple[int, ...]]:
    """The slices kernel of the ``split_k`` kernel ``instr`` and its grid."""
    from tessera.ir.transforms.to_tile import kernel as kernels

    op = instr.op
    assert isinstance(op, schedule_ops.ScheduledKernel)
    region = instr.regions[0].block
    space = schedule_ops.space_of(instr)
    mm = _matmul(instr)
    schedule = [edges.edge_tile(e, t) for e, t in zip(space.extents, op.tile or space.extents)]
    tiles = list(schedule)
    tensor_core_tiles([mm], set(mm.operands), space.loop_of, space.extents, schedule, tiles)
    grid_loops = [k for k, kind in enumerate(space.kinds) if kind == "grid"]
    counts = [edges.tile_count(space.extents[k], tiles[k]) for k in grid_loops] + [op.split]
    body = Block()
    em = kernels.Emitter(body, space.loop_of, tiles, mm.loc)
    em.extents = tuple(space.extents)
    mems = {a: body.add_arg(kernels.gmem(a.type), p) for a, p in zip(region.args, params)}
    held = partials_type(instr)
    mem_p = body.add_arg(tile_ops.MemRefType("global", tuple(held.shape), held.element),
                         partials)
    coords = kernels.place(em, counts, grid_loops)
    (k_loop,) = space.contracted
    # (the schedule's K tiles, which split divides; the tensor cores may step in halves)
    length = math.ceil(space.extents[k_loop] / schedule[k_loop]) // op.split * schedule[k_loop]
    if op.split * length > space.extents[k_loop]:  # a ragged K: the last slice's last
        em.overrun.add(k_loop)  # tiles reach past it, whatever tile the K loop steps by
    (base,) = em.create(tc.Mul(), [coords[-1], em.index(length)], mm)
    check_matmul(em, mm)
    acc = emit_matmul(em, mm, set(mm.operands), mems, {}, k_slice=(base, length))
    starts, shape, mask = _partial_window(em, mm.results[0], coords[-1])
    if len(shape) != 2:
        (acc,) = em.create(tc.Reshape(shape), [acc], mm)
    edges.store_window(em, mem_p, starts, shape, acc, mask, mm)
    em.create(tile_ops.Return(), [])
    grid = kernels.grid_of(counts)
    fn = Function(name, body, [], kind=tile_ops.KERNEL, loc=instr.loc,
                  attrs={"grid": list(grid), "group_size": 1, "tiles": list(tiles)})
    return fn, grid


def combine(em: Emitter, mm: Instr, mem_p: Value, split: int) -> Value:
    """The matmul ``mm`` of the combine kernel: this program's tiles of the ``split``
    partial sums added in slice order, rounded as the graph rounds the product. The
    adds are unrolled: a loop of a few trips carrying the tile made ptxas (sm_90a)
    spill a register for no gain."""
    accum = mem_p.type.element  # type: ignore[attr-defined]
    out = mm.results[0]
    acc: Value | None = None
    for s in range(split):
        starts, shape, mask = _partial_window(em, out, em.index(s))
        part = edges.load_window(em, mem_p, starts, shape, mask, mm)
        acc = part if acc is None else em.create(tc.Add(), [acc, part], mm)[0]
    assert acc is not None
    if len(shape) != 2:
        (acc,) = em.create(tc.Reshape(shape[1:]), [acc], mm)
    return round_product(em, mm, acc, accum, None)


__all__ = ["COMBINE_TILE", "build_slices", "combine", "combine_tiles", "partials_type"]

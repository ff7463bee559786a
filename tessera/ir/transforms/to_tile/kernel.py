"""One ``schedule.kernel`` as a ``tile.kernel`` function: the Tile IR a hand-written
``@ts.kernel`` compiles to.

The kernel takes one ``gmem`` parameter per operand (what it reads) and one per result
(what it writes). Each program (one tile of the launch, one per group) runs one tile of
every grid loop: it finds its loops' starts from its grid coordinates, loads the tile
of each operand the region reads (``tile.view`` + ``tile.load``), computes the region's
ops on register tiles (:mod:`tessera.ir.transforms.to_tile.ops`) and stores the tile of
each result. A result that does not run over some grid loop (a row vector computed
beside a matrix) is stored by the programs at coordinate 0 of those loops only, so no
two programs write one element.

A loop runs in tiles of the schedule's size (the whole loop when shorter), ``ceil(extent
/ tile)`` of them; along a loop the tile does not divide, the accesses are masked
(:mod:`tessera.ir.transforms.to_tile.edges`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tessera.errors import Loc
from tessera.ir.core import Block, Builder, Function, Instr, IRRegion, Op, Value, uses
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import blocked, edges, splitk
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.transforms.to_tile.attention import flash, keyblocks
from tessera.ir.transforms.to_tile.int_tiles import tensor_core_tiles
from tessera.ir.transforms.to_tile.matmul import emit_matmul
from tessera.ir.types import TensorType

#: grid axes the tile level launches (CUDA's three); more loops share one linear axis
MAX_GRID_AXES = 3


class Emitter:
    """Builds one kernel's body: index arithmetic, constants and the region's ops."""

    def __init__(self, block: Block, loop_of: dict[Any, int], tiles: Sequence[int],
                 loc: Loc) -> None:
        self.builder = Builder(block)
        self.loop_of = loop_of
        self.tiles = tuple(tiles)
        self.loc = loc
        self.starts: list[Value] = []
        #: each loop's extent (a loop the tile does not divide has edge tiles)
        self.extents: tuple[int, ...] = tuple(tiles)
        #: loops whose tiles reach past the extent although the tile divides it (the
        #: last slice of a split-K contraction): their accesses are masked too
        self.overrun: set[int] = set()
        #: constants already made in the kernel's top block, by (type, value)
        self.constants: dict[tuple[str, str], Value] = {}
        self.top = block
        #: inside a block of carried reductions: each reduction's accumulator
        #: (:mod:`tessera.ir.transforms.to_tile.blocked`)
        self.carry: dict[Instr, Value] = {}

    def create(self, op: Op, operands: Sequence[Value], instr: Instr | None = None) -> list[Value]:
        """``op(operands)`` at the end of the body, at ``instr``'s source line."""
        return self.builder.create(op, operands, loc=instr.loc if instr else self.loc)

    def index(self, value: int) -> Value:
        """An int64 scalar constant."""
        return self.full(tile_ops.SCALAR_INDEX, int(value))

    def full(self, t: TensorType, value: Any) -> Value:
        """A tile of ``t`` filled with ``value`` (a scalar constant for rank 0), made
        once per kernel in its top block."""
        key = (str(t), repr(value))
        top = self.builder.block is self.top
        if top and key in self.constants:
            return self.constants[key]
        if t.rank == 0:
            (v,) = self.create(tile_ops.Constant(value, t.element), [])
        else:
            (v,) = self.create(tc.Full(tuple(t.shape), value, t.element), [])
        if top:
            self.constants[key] = v
        return v

    def tile_type(self, v: Value) -> TensorType:
        """The type of one program's tile of the graph value ``v``."""
        t = v.type
        assert isinstance(t, TensorType)
        shape = tuple(self.tiles[self.loop_of[(v, k)]] if (v, k) in self.loop_of else d
                      for k, d in enumerate(t.shape))
        return t.with_shape(shape)



def _grid_axes(counts: Sequence[int]) -> list[int] | None:
    """The loops that take a grid axis, in order: every loop while there are at most
    :data:`MAX_GRID_AXES`, else the loops of more than one tile where they are few
    enough (a loop of one tile has coordinate 0: 4-D attention's batch, heads and
    queries); None: one linear axis, unfolded by division, whose coordinates are not
    affine in the grid (the simulator then gathers every tile instead of viewing it)."""
    if len(counts) <= MAX_GRID_AXES:
        return list(range(len(counts)))
    several = [k for k, n in enumerate(counts) if n > 1]
    return several if len(several) <= MAX_GRID_AXES else None


def coordinates(em: Emitter, counts: Sequence[int]) -> list[Value]:
    """Each loop's tile coordinate: a grid axis each, or one linear axis unfolded."""
    axes = _grid_axes(counts)
    if axes is not None:
        return [em.create(tile_ops.GridCoord(axes.index(k)), [])[0] if n > 1
                else em.index(0) for k, n in enumerate(counts)]
    gid = em.create(tile_ops.GroupId(), [])[0]
    coords = []
    for k, n in enumerate(counts):
        stride = em.index(math.prod(counts[k + 1:]))
        (q,) = em.create(tc.FloorDiv(), [gid, stride])
        coords.append(em.create(tc.Mod(), [q, em.index(n)])[0])
    return coords


def place(em: Emitter, counts: Sequence[int], grid_loops: Sequence[int]) -> list[Value]:
    """This program's coordinates (one per count; ``grid_loops`` the loops of the first
    ones), with the grid loops' starts set in ``em``; sequential loops start inside
    their loop."""
    coords = coordinates(em, counts)
    em.starts = [em.index(0)] * len(em.tiles)
    for c, k, n in zip(coords, grid_loops, counts):
        em.starts[k] = em.create(tc.Mul(), [c, em.index(em.tiles[k])])[0] if n > 1 else c
    return coords


def grid_of(counts: Sequence[int]) -> tuple[int, ...]:
    """The launch grid of a kernel with ``counts`` tiles per loop."""
    axes = _grid_axes(counts)
    if axes is None:
        return (math.prod(counts),)
    return tuple(counts[k] for k in axes) or (1,)


def build_kernel(instr: Instr, name: str, params: Sequence[str],
                 results: Sequence[str], mode: str = "exact",
                 partials: tuple[str, TensorType] | None = None
                 ) -> tuple[Function, tuple[int, ...]]:
    """The ``tile.kernel`` of the ``schedule.kernel`` ``instr`` and its launch grid;
    ``params`` and ``results`` name its operand and result buffers. With ``mode="fast"``
    attention over key blocks is the one-pass online softmax (:mod:`.flash`). With
    ``partials`` (the name and type of a split-K kernel's partial sums, a parameter
    after the operands) the matmul combines them (:mod:`.splitk`)."""
    op = instr.op
    assert isinstance(op, schedule_ops.ScheduledKernel)
    region = instr.regions[0].block
    space = schedule_ops.space_of(instr)
    users = uses(region)
    matmuls = [i for i in region.instrs if isinstance(i.op, graph_ops.MatMul)]
    streamed = {v for i in matmuls for v in i.operands
                if v in region.args and all(u in matmuls for u in users.get(v, []))}
    tiles = [edges.edge_tile(e, t) for e, t in zip(space.extents, op.tile or space.extents)]
    plan = keyblocks.plan_of(instr, space)
    rows = blocked.plan_of(instr, space, tiles)  # long rows walked in blocks
    walked = rows.loops if rows is not None else []
    for (v, _), loop in space.loop_of.items():
        # a K loop is walked in steps only by operands read from memory; a value the
        # kernel computes along it (the hidden row of a fused MLP) is held whole
        if space.kinds[loop] != "grid" and v not in streamed and loop not in walked:
            tiles[loop] = space.extents[loop]
    if plan is not None:  # attention's keys are walked in blocks (two_pass)
        tiles[plan.loop] = plan.block
    tensor_core_tiles(matmuls, streamed, space.loop_of, space.extents,
                      op.tile or space.extents, tiles)
    if partials:  # split-K's combine: an elementwise kernel over the product
        splitk.combine_tiles(space, tiles)
    grid_loops = [k for k, kind in enumerate(space.kinds) if kind == "grid"]
    counts = [edges.tile_count(space.extents[k], tiles[k]) for k in grid_loops]
    body = Block()
    loc = next((i.loc for i in region.instrs if not i.op.terminator), instr.loc)
    em = Emitter(body, space.loop_of, tiles, loc)
    em.extents = tuple(space.extents)
    mems_in = [body.add_arg(gmem(a.type), p) for a, p in zip(region.args, params)]
    mem_p = body.add_arg(gmem(partials[1]), partials[0]) if partials else None
    mems_out = [body.add_arg(gmem(r.type), n) for r, n in zip(instr.results, results)]
    coords = place(em, counts, grid_loops)
    env: dict[Value, Value] = {}
    mems = dict(zip(region.args, mems_in))
    for arg, mem in mems.items():
        if arg not in streamed and (plan is None or arg not in plan.args) and \
                (rows is None or arg not in rows.passes.args):
            # matmul operands are loaded tile by tile along K, keyed ones per key block
            env[arg] = edges.load(em, mem, arg)
    term = region.terminator
    assert term is not None
    grid_coords = dict(zip(grid_loops, coords))
    outs = dict(zip(term.operands, mems_out))

    def store_block(local: dict[Value, Value]) -> None:  # the results a block computed
        for value, mem in outs.items():
            if value in local:
                _store(em, grid_coords, space, tiles, mem, value, local[value])

    for inner in region.instrs if rows is None else rows.early:
        if inner is term or rules.folded(inner, users.get(inner.results[0], [])):
            continue
        if plan is not None and inner in plan.keyed:
            if inner is plan.softmax:
                order = list(region.instrs)
                if plan.pv is None:
                    keyblocks.emit_rows(em, plan, streamed, mems, env, users, order,
                                        store_block)
                    continue
                fast = mode == "fast" and flash.flash_applies(plan, order)
                emit = flash.emit_flash if fast else keyblocks.emit_attention
                env[plan.pv.results[0]] = emit(em, plan, streamed, mems, env, users, order)
            continue
        if inner in matmuls and mem_p is not None:  # the sum of split-K's slices
            env[inner.results[0]] = splitk.combine(em, inner, mem_p, op.split)
            continue
        if inner in matmuls:
            env[inner.results[0]] = emit_matmul(em, inner, streamed, mems, env)
            continue
        # a folded constant's broadcast reads the constant itself
        env[inner.results[0]] = rules.emit(em, inner, [env.get(v, v) for v in inner.operands])
    if rows is not None:  # the passes over the blocks, and what reads their sums
        blocked.emit_blocks(em, rows, mems, env, users, store_block)
    # (a reduced loop that no matmul contracts is held whole, its reductions finishing in
    # one program (see :mod:`.reduce`), unless a row softmax walks it in blocks)
    assert all(tiles[k] == space.extents[k] for k, kind in enumerate(space.kinds)
               if kind != "grid" and k not in space.contracted
               and (plan is None or k != plan.loop) and k not in walked)
    for value, mem in outs.items():
        if value in env:  # (a row block's results are stored by its pass)
            _store(em, grid_coords, space, tiles, mem, value, env[value])
    em.create(tile_ops.Return(), [])
    fn = Function(name, body, [], kind=tile_ops.KERNEL, loc=instr.loc,
                  attrs={"grid": list(grid_of(counts)), "group_size": 1,
                         "tiles": list(tiles)})
    return fn, grid_of(counts)


def _store(em: Emitter, coords: dict[int, Value], space: schedule_ops.IterationSpace,
           tiles: Sequence[int], mem: Value, value: Value, tile: Value) -> None:
    """Store ``tile`` (this program's tile of ``value``) into ``mem``; a result that
    does not span a grid loop of several tiles is stored by its first tiles only."""
    spans = space.grid_loops(value)
    others = [k for k in coords if space.extents[k] > tiles[k] and k not in spans]
    if not others:
        edges.store(em, mem, value, tile)
        return
    cond = None
    for k in others:
        (first,) = em.create(tc.Eq(), [coords[k], em.index(0)])
        cond = first if cond is None else em.create(tc.And(), [cond, first])[0]
    then, orelse = Block(), Block()
    outer = em.builder
    em.builder = Builder(then)
    edges.store(em, mem, value, tile)
    em.create(tile_ops.Yield(), [])
    em.builder = Builder(orelse)
    em.create(tile_ops.Yield(), [])
    em.builder = outer
    em.builder.create(tile_ops.If(), [cond], loc=em.loc,
                      regions=[IRRegion([then]), IRRegion([orelse])], result_types=[])


def gmem(t: Any) -> tile_ops.MemRefType:
    """The global memory of a tensor type."""
    assert isinstance(t, TensorType)
    return tile_ops.MemRefType("global", tuple(t.shape), t.element)


__all__ = ["Emitter", "build_kernel", "coordinates", "gmem", "grid_of", "place"]

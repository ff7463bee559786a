"""``tile``: give every kernel its tile sizes, reduction strategy, pipeline depth and
buffer placements.

Tile sizes come from ``op.matmul(..., tile_shape=(BM, BN, BK))`` hints where given
(BM and BN cut the matmul's row and column loops, BK its contracted loop), else from
this cost model, all sizes powers of two no larger than their loop needs:

* matmul rows and columns: 128; contracted loops: 64 elements of a 1- or 2-byte
  format, 32 of a 4-byte one (one 128-byte shared-memory row); batch loops: 1;
* other kernels: a tile holds 1024 elements (or one whole row, if longer),
  innermost loop first;
* reduced loops (reductions, softmax): the whole row. While the kernel's tiles do not
  fit the target, tiles are halved in the order of ``_shrink_order``; a row cut in
  pieces is reduced in two passes. In exact mode attention first halves its query
  tiles (down to ``MIN_GRID_TILE`` rows) to keep its key rows whole: one pass over the
  keys instead of three exact passes over key blocks (``_fit_whole_keys``). Float
  sums, means and mean squared errors over long rows are walked in blocks of at most
  ``blocked.BLOCK_TERMS`` terms carrying exact accumulators (``blocked``).

Reductions stay sequential in a fixed order (``in_tile``, ``two_pass`` or ``blocked``): in exact
mode a floating-point reduction is never split, because splitting would change its
rounding. ``split_k`` is chosen only for integer matmuls (their partial sums are exact)
or with ``mode="fast"``, when the grid has fewer tiles than half the target's SMs.
Matmul operands are staged through shared memory in as many pipeline stages (up to 4)
as fit beside the kernel's other shared buffers; values that feed a matmul inside a
kernel live in shared memory, index maps store nothing (``view``), everything else
lives in registers.

Hints are checked: a hint that is not 2 or 3 positive ints, two hints that cut one
loop differently, or tiles that need more shared memory or registers than the target
has are :class:`~tessera.ir.dialects.schedule.TileShapeError` at the matmul's line.
"""

from __future__ import annotations

import dataclasses
import math

from tessera.arch.limits import H100, TargetLimits
from tessera.ir.core import Block, Instr, Module, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.dialects.schedule.space import IterationSpace
from tessera.ir.passes import register_pass
from tessera.ir.transforms.schedule import blocked
from tessera.ir.transforms.schedule.build import is_index_map
from tessera.ir.transforms.schedule.cost import (
    MIN_GRID_TILE,
    ONE_TILE,
    element_bytes,
    tile_bytes,
)
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

ELEMENTWISE_TILE = 1024
MAX_STAGES = 4


def pow2(n: int) -> int:
    """The smallest power of two >= n."""
    return 1 << max(n - 1, 0).bit_length()


def _hint(mm: Instr) -> tuple[int, ...] | None:
    hint = mm.op.tile_shape
    if hint is None:
        return None
    ok = isinstance(hint, tuple) and len(hint) in (2, 3) and all(
        isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in hint)
    if not ok:
        raise schedule_ops.TileShapeError(f"tile_shape={hint!r} is not a tile shape",
                                         hint="give 2 or 3 positive ints (BM, BN[, BK])",
                                         loc=mm.loc)
    return hint


def _feeds_matmul(v: Value, users: dict[Value, list[Instr]]) -> bool:
    """Whether ``v`` is a matmul operand, directly or through index maps."""
    for user in users.get(v, []):
        if isinstance(user.op, graph_ops.MatMul):
            return True
        if is_index_map(user) and any(_feeds_matmul(r, users) for r in user.results):
            return True
    return False


@dataclasses.dataclass
class _Plan:
    """The tiles being chosen for one kernel, and which of them the user fixed."""

    instr: Instr
    space: IterationSpace
    tile: list[int]
    fixed: dict[int, Instr]


def _apply_hints(plan: _Plan, matmuls: list[Instr]) -> None:
    for mm in matmuls:
        hint = _hint(mm)
        if hint is None:
            continue
        a, out = mm.operands[0], mm.results[0]
        rank = out.type.rank
        axes = [(out, rank - 2), (out, rank - 1), (a, rank - 1)][:len(hint)]
        for size, axis in zip(hint, axes):
            loop = plan.space.loop_of.get(axis)
            if loop is None:
                continue  # an axis of extent 1: any size covers it
            if loop in plan.fixed and plan.tile[loop] != size:
                raise schedule_ops.TileShapeError(
                    f"tile_shape={hint} cuts a loop of this kernel into {size}, but the "
                    f"matmul at {plan.fixed[loop].loc} cuts it into {plan.tile[loop]}",
                    hint="give fused matmuls the same tile sizes on the loops they share",
                    loc=mm.loc)
            plan.tile[loop], plan.fixed[loop] = size, mm


def _defaults(plan: _Plan, matmuls: list[Instr], reduced: set[int]) -> None:
    space = plan.space
    rowcol: set[int] = set()
    for mm in matmuls:
        out = mm.results[0]
        rowcol |= {space.loop_of[(out, k)] for k in (out.type.rank - 2, out.type.rank - 1)
                   if (out, k) in space.loop_of}
    budget = ELEMENTWISE_TILE
    for k in reversed(range(len(space.extents))):
        if k in plan.fixed:
            continue
        extent = space.extents[k]
        if k in reduced:
            plan.tile[k] = pow2(extent)
            budget = max(budget // plan.tile[k], 1)
        elif k in space.contracted:
            sizes = [element_bytes(mm.operands[0].type) for mm in matmuls
                     if space.loop_of.get((mm.operands[0], mm.operands[0].type.rank - 1)) == k]
            plan.tile[k] = min(pow2(extent), 128 // int(max(min(sizes, default=4), 1)))
        elif matmuls:
            plan.tile[k] = min(pow2(extent), ONE_TILE) if k in rowcol else 1
        else:
            plan.tile[k] = min(pow2(extent), budget)
            budget = max(budget // plan.tile[k], 1)


def _placements(instr: Instr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    block = instr.regions[0].block
    users: dict[Value, list[Instr]] = {}
    for inner in block.instrs:
        for v in inner.operands:
            users.setdefault(v, []).append(inner)
    inputs = tuple("shared" if _feeds_matmul(v, users) else "global" for v in block.args)
    temps = []
    for inner in block.instrs[:-1]:
        for r in inner.results:
            temps.append("view" if is_index_map(inner) else
                         "shared" if _feeds_matmul(r, users) else "registers")
    return inputs, tuple(temps)


def footprint(instr: Instr, space: IterationSpace, tile: list[int], stages: int,
              inputs: tuple[str, ...], temps: tuple[str, ...]) -> tuple[float, float]:
    """(shared bytes, register bytes) of one program of a kernel with these choices."""
    block = instr.regions[0].block
    shared = registers = 0.0
    for v, place in zip(block.args, inputs):
        size = tile_bytes(v, space, tile)
        if place == "shared":
            shared += size * stages
        else:
            registers += size
    values = [r for inner in block.instrs[:-1] for r in inner.results]
    for v, place in zip(values, temps):
        size = tile_bytes(v, space, tile)
        if place == "shared":
            shared += size
        elif place == "registers":
            registers += size
    return shared, registers


def schedule_kernel(instr: Instr, limits: TargetLimits = H100, mode: str = "exact"
                    ) -> schedule_ops.ScheduledKernel:
    """The kernel op of ``instr`` with tiles, strategy, stages and placements chosen."""
    op = instr.op
    assert isinstance(op, schedule_ops.ScheduledKernel)
    space = schedule_ops.space_of(instr)
    block = instr.regions[0].block
    matmuls = [i for i in block.instrs if isinstance(i.op, graph_ops.MatMul)]
    reduced = {k for k, kind in enumerate(space.kinds) if kind == "seq"} - space.contracted
    reduced |= {k for k in space.contracted if _row_reduced(block, space, k)}
    plan = _Plan(instr, space, [1] * len(space.extents), {})
    _apply_hints(plan, matmuls)
    _defaults(plan, matmuls, reduced)
    inputs, temps = _placements(instr)
    start = list(plan.tile)
    if mode == "fast" or not _fit_whole_keys(plan, reduced, inputs, temps, limits, matmuls):
        plan.tile = start
        _fit(plan, reduced, inputs, temps, limits, matmuls)
    stages = _stages(instr, space, plan.tile, inputs, temps, limits) if matmuls else 1
    kinds = list(space.kinds)
    split = 1
    carried = blocked.walk_in_blocks(instr, space, plan.tile)
    if carried:
        blocked.cap_blocks(plan.tile, carried, blocked.block_weight(instr))
    if any(plan.tile[k] < space.extents[k] for k in carried):
        reduction = "blocked"
    elif any(plan.tile[k] < space.extents[k] for k in reduced):
        reduction = "two_pass"
    elif kinds.count("seq"):
        reduction = "in_tile"
        split = _split(space, plan.tile, matmuls, reduced, limits, mode)
        if split > 1:
            kinds[next(iter(space.contracted))] = "split"
            reduction = "split_k"
    else:
        reduction = "none"
    return dataclasses.replace(op, kinds=tuple(kinds), tile=tuple(plan.tile),
                               reduction=reduction, split=split, stages=stages,
                               inputs=inputs, temps=temps)


def _fits(plan: _Plan, inputs: tuple[str, ...], temps: tuple[str, ...],
          limits: TargetLimits, matmuls: list[Instr]) -> tuple[bool, float, float]:
    """Whether one program of the kernel with ``plan``'s tiles fits the target, and its
    (shared, register) bytes."""
    stages = _stages(plan.instr, plan.space, plan.tile, inputs, temps, limits) if matmuls else 1
    shared, regs = footprint(plan.instr, plan.space, plan.tile, stages, inputs, temps)
    return shared <= limits.shared_per_block and regs <= limits.register_bytes, shared, regs


def _fit_whole_keys(plan: _Plan, reduced: set[int], inputs: tuple[str, ...],
                    temps: tuple[str, ...], limits: TargetLimits,
                    matmuls: list[Instr]) -> bool:
    """Halve an attention kernel's grid tiles, largest first and down to
    :data:`~tessera.ir.transforms.schedule.cost.MIN_GRID_TILE`, while its key rows stay
    whole; whether a program then fits the target. In exact mode whole key rows are one
    pass over the keys, where rows cut into blocks cost three exact passes, each
    computing the block's scores again (``two_pass``); fewer query rows per program
    only read the keys and values more often."""
    keys = [k for k in reduced & plan.space.contracted if k not in plan.fixed]
    if not keys:
        return False
    # the scores' other loops (the query rows) give way first: a program holding fewer
    # of V's columns would compute the same scores again
    block = plan.instr.regions[0].block
    rows = {loop for k in keys for loop in _rows_of(block, plan.space, k) or ()}
    while True:
        fits, _, _ = _fits(plan, inputs, temps, limits, matmuls)
        if fits:
            return True
        shrink = [k for k, kind in enumerate(plan.space.kinds) if kind == "grid"
                  and k not in plan.fixed and plan.tile[k] > MIN_GRID_TILE]
        if not shrink:
            return False
        plan.tile[max(shrink, key=lambda k: (k in rows, plan.tile[k]))] //= 2


def _fit(plan: _Plan, reduced: set[int], inputs: tuple[str, ...], temps: tuple[str, ...],
         limits: TargetLimits, matmuls: list[Instr]) -> None:
    """Halve tiles in the order of :func:`_shrink_order` until a program fits the
    target; ``TileShapeError`` where the user's hints leave nothing to halve."""
    while True:
        fits, shared, regs = _fits(plan, inputs, temps, limits, matmuls)
        if fits:
            return
        shrink = [k for k in range(len(plan.tile)) if k not in plan.fixed and plan.tile[k] > 16]
        if not shrink:
            culprit = next(iter(plan.fixed.values()), None)
            op = plan.instr.op
            raise schedule_ops.TileShapeError(
                f"kernel {op.label} with tiles {tuple(plan.tile)} needs {shared / 1024:.0f} KiB "
                f"of shared memory and {regs / 1024:.0f} KiB of registers per block; "
                f"{limits.name} has {limits.shared_per_block // 1024} KiB and "
                f"{limits.register_bytes // 1024} KiB",
                hint="use a smaller tile_shape", loc=culprit.loc if culprit else plan.instr.loc)
        plan.tile[max(shrink, key=lambda k: _shrink_order(k, plan, reduced))] //= 2


def _shrink_order(k: int, plan: _Plan, reduced: set[int]) -> tuple[int, int]:
    """Which loop's tile to halve first when a kernel does not fit: rows that a matmul
    also contracts (attention's keys) down to ONE_TILE, as a flash-attention kernel
    streams them; then the grid tiles; then other rows (a row cut in pieces needs a
    second pass); contractions last."""
    tile, space = plan.tile[k], plan.space
    if k in reduced:
        return (3 if k in space.contracted and tile > ONE_TILE else 1, tile)
    return (0 if k in space.contracted else 2, tile)


def _stages(instr: Instr, space: IterationSpace, tile: list[int], inputs: tuple[str, ...],
            temps: tuple[str, ...], limits: TargetLimits) -> int:
    """Pipeline stages of the operands staged through shared memory: as many as fit
    beside the kernel's other shared buffers, at most MAX_STAGES and the K tiles."""
    k_tiles = max([math.ceil(space.extents[k] / tile[k]) for k in space.contracted], default=1)
    block = instr.regions[0].block
    stage = sum(tile_bytes(v, space, tile) for v, p in zip(block.args, inputs) if p == "shared")
    if k_tiles < 2 or not stage:
        return 1
    other, _ = footprint(instr, space, tile, 0, inputs, temps)
    return max(1, min(MAX_STAGES, k_tiles, int((limits.shared_per_block - other) // stage)))


def _row_reduced(block: Block, space: IterationSpace, loop: int) -> bool:
    """Whether a non-matmul op also reduces ``loop`` (attention's softmax rows; a
    single query row, whose other axes have no loop, too)."""
    return _rows_of(block, space, loop) is not None


def _rows_of(block: Block, space: IterationSpace, loop: int) -> set[int] | None:
    """The other loops of the values whose rows a non-matmul op reduces along ``loop``
    (attention's scores: the batch and query loops); None where no op reduces it."""
    rows: set[int] | None = None
    for inner in block.instrs:
        op = inner.op
        if isinstance(op, graph_ops.Softmax):
            x, axes = inner.results[0], [op.axis % inner.results[0].type.rank]
        elif isinstance(op, graph_ops.Reduce):
            (x,) = inner.operands
            axes = list(op.reduced_axes(x.type.rank))
        else:
            continue
        loops = [space.loop_of.get((x, a)) for a in range(x.type.rank)]
        if any(loops[a] == loop for a in axes):
            rows = (rows or set()) | {k for k in loops if k is not None and k != loop}
    return rows


def _split(space: IterationSpace, tile: list[int], matmuls: list[Instr], reduced: set[int],
           limits: TargetLimits, mode: str) -> int:
    """Split-K slices: only for a lone contraction of operands read from memory whose
    partial sums are exact (integer formats) or in fast mode, when the grid leaves SMs
    idle; a divisor of the K tiles."""
    if len(matmuls) != 1 or reduced or len(space.contracted) != 1 or \
            not all(v in matmuls[0].parent.args for v in matmuls[0].operands):  # type: ignore[union-attr]
        return 1  # (slices read their operands from memory: a prologue is held whole)
    (k,) = space.contracted
    element = matmuls[0].results[0].type
    exact = isinstance(element, TensorType) and storage_of(element.element).kind == "int"
    if mode != "fast" and not exact:
        return 1
    programs = math.prod(math.ceil(e / t) for e, t, kind in
                         zip(space.extents, tile, space.kinds) if kind == "grid")
    k_tiles = math.ceil(space.extents[k] / tile[k])
    if 2 * programs >= limits.sms or k_tiles < 4:
        return 1
    # slices of equal length (a constant trip count each): a divisor of the K tiles
    most = min(limits.sms // programs, k_tiles // 2)
    return max(d for d in range(1, most + 1) if k_tiles % d == 0)


@register_pass
class Tile:
    """Choose every kernel's tile sizes, reduction strategy, stages and placements."""

    name = "tile"

    def __init__(self, limits: TargetLimits = H100, mode: str = "exact") -> None:
        self.limits = limits
        self.mode = mode

    def apply(self, module: Module) -> Module:
        for fn in module.functions.values():
            if fn.kind != schedule_ops.FUNC:
                continue
            for instr in schedule_ops.kernels(fn):
                instr.op = schedule_kernel(instr, self.limits, self.mode)
        return module

"""Persistent CTAs for the warp-specialised sm_90a GEMM (``config={"persistent": True}``).

A persistent launch has one CTA per SM (at most :data:`SMS`, fewer for fewer output
tiles), and each CTA walks the output tiles ``t = ctaid.x, ctaid.x + G, ...`` (``G``
CTAs; in grouped order where the launch has it, :mod:`tessera.lower.geometry`), as
CUTLASS's persistent tile schedulers do. Its producer and consumer warpgroups each
walk the same tiles, so the producer fills the ring with the next tile's first K
steps while the consumers still run the last one's epilogue: the pipeline drains and
refills once per CTA instead of once per tile. The ring's stages and phases continue
from tile to tile: the ``i``-th K step of a CTA, over all its tiles, uses stage
``i % S`` in round ``i // S``, and the consumers release every stage they read, the
last of each tile included (after its ``wgmma.wait_group 0``).

What the tile program computes before its K loop from the tile's ids (a view's
offset) is computed again in each branch for each tile; what it does after the loop
(a fused epilogue, the store) runs in the consumers' walk. So a persistent kernel
returns nothing but its parameters, updates no memory in place (its tiles would be
applied in another order) and takes turns only at the cooperative schedule. The
epilogue's TMA staging tile has shared memory of its own: the ring is being refilled
while it is written, so the default number of stages leaves room for it where three
stages or more remain (else the ring keeps its stages and the epilogue stores with
``st.global``: an f32 128x256 tile would leave two).

Bits: every tile runs the same ``wgmma`` sequence in the same K order as in a launch
of one CTA per tile, so the result is the same, whichever CTA computes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tessera.arch.limits import H100
from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.geometry import grouped
from tessera.lower.sm90a.epilogue import staging_bytes
from tessera.lower.sm90a.warpspec import (
    SHARED_BUDGET,
    PipelinePlan,
    default_stages,
    index_op,
)
from tessera.lower.values import Lowered

#: CTAs of a persistent launch: one per SM of an H100 or H200 SXM (132)
SMS = H100.sms
#: the fewest stages the default keeps beside the TMA staging tile
MIN_STAGES = 3


def persistent_problem(fn: Function, pingpong: bool) -> str | None:
    """Why ``fn``'s warp-specialised GEMM cannot walk its tiles persistently (None when
    it can; see the module doc)."""
    if pingpong:
        return "schedule='pingpong' takes turns per K step, not per tile"
    if any(isinstance(i.op, tile_memory.Update) for i in walk(fn.body)):
        return "the kernel updates memory in place (its tiles would apply in another order)"
    term = fn.body.terminator
    if term is not None and any(v not in fn.body.args for v in term.operands):
        return "the kernel returns a tile (a persistent CTA stores only through views)"
    return None


def persist(fn: Function, plan: PipelinePlan, stages: int | None,
            tma_store: bool | None) -> PipelinePlan:
    """``plan`` walking its tiles persistently: an ``UnsupportedError`` where the kernel
    cannot; by default as many stages as leave room for the TMA staging tile."""
    why = persistent_problem(fn, plan.pingpong)
    if why is not None:
        raise refuse(fn, why)
    staging = staging_bytes(plan, tma_store)
    if stages is None:
        # room for the staging tile where three stages or more remain; else the ring
        # keeps its stages and the epilogue stores with st.global
        fit = (SHARED_BUDGET - staging) // (plan.gemm.stage_bytes + 16)
        stages = min(default_stages(plan.gemm), fit) if fit >= MIN_STAGES else plan.stages
    return dataclasses.replace(plan, stages=int(stages), persistent=True)


def ctas(n_tiles: int) -> int:
    """The CTAs of a persistent launch over ``n_tiles`` output tiles."""
    return max(1, min(n_tiles, SMS))


def walk_tiles(low: Lowerer, e: TargetEmitter, loop: Instr,
               body: Callable[[TargetEmitter, Value], None]) -> None:
    """Emit this CTA's walk over its output tiles into ``e``: for each, the group id
    the tile's ids read is that tile's, what the tile program computes before ``loop``
    from them is lowered again, and ``body(emitter, done)`` runs, ``done`` (``u32``)
    counting the tiles this CTA finished before."""
    g = low.geom
    assert g is not None
    before = low.fn.body.instrs[:low.fn.body.instrs.index(loop)]
    again = [i for i in before if index_op(i)]
    kept = low.ids.get("group")
    start = e.cvt(e.sreg("ctaid.x"), "s32", "u32")
    step = e.cvt(e.sreg("nctaid.x"), "s32", "u32")

    def tile(t: TargetEmitter, index: Value, done: Value) -> list[Value]:
        raster = low.extra.get("raster")
        low.ids["group"] = grouped(t, index, *g.grid, raster) if raster else index
        low.stack.append(t)
        try:
            for instr in again:
                low.lower_instr(instr, t)
            body(t, done)
        finally:
            low.stack.pop()
        return [t.add(done, t.const(1, "u32"), "u32")]

    e.for_(start, e.const(g.n_groups, "s32"), step, [e.const(0, "u32")], tile)
    if kept is None:
        low.ids.pop("group", None)
    else:
        low.ids["group"] = kept


def lowered_after(low: Lowerer, loop: Instr, e: TargetEmitter) -> None:
    """Lower what the tile program does after ``loop`` into ``e`` (the consumers'
    walk, for the current tile), and make the kernel's own pass over those
    instructions emit nothing: their values live in the walk's body."""
    after = low.fn.body.instrs[low.fn.body.instrs.index(loop) + 1:]
    low.stack.append(e)
    try:
        for instr in after:
            if not instr.op.terminator:
                low.lower_instr(instr, e)
    finally:
        low.stack.pop()
    for instr in after:
        low.overrides[id(instr)] = _bound


def _bound(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """An instruction the persistent walk has lowered already: its values as bound."""
    return [low.env.get(r) for r in instr.results]  # type: ignore[misc]


def refuse(fn: Function, why: str) -> UnsupportedError:
    """The error of ``persistent=True`` for a kernel that cannot have it."""
    return UnsupportedError(f"persistent=True: {why}", loc=fn.loc,
                            hint="drop persistent (one CTA per output tile)")


__all__ = ["SMS", "ctas", "lowered_after", "persist", "persistent_problem", "refuse",
           "walk_tiles"]

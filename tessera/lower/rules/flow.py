"""Lowering rules for structured control flow: ``tile.for``, ``tile.while``, ``tile.if``.

Tile regions become Target regions one to one. Loop-carried and if-merged values are
flattened to their registers (a distributed tensor carries all of its registers, in
layout order); the layout assignment guarantees that what a region yields has the
layout its results were given, which is checked here.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.errors import UnsupportedError
from tessera.ir.core import Block, Instr, IRRegion, Value
from tessera.ir.dialects.target import Condition, For, If, While, Yield
from tessera.ir.dialects.tile import For as TileFor
from tessera.ir.dialects.tile import If as TileIf
from tessera.ir.dialects.tile import While as TileWhile
from tessera.lower.core import Lowerer, rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.values import Dist, Lowered, Scalar


def flatten(lv: Lowered) -> list[Value]:
    """The registers of a lowered value (what control flow carries)."""
    if isinstance(lv, Scalar):
        return [lv.reg]
    if isinstance(lv, Dist):
        return list(lv.regs)
    raise UnsupportedError("a memory view cannot be carried by a loop or an if",
                           hint="index shared buffers with tile.select inside the loop")


def rebuild(like: Lowered, regs: Sequence[Value]) -> Lowered:
    """A lowered value shaped like ``like`` over new registers."""
    if isinstance(like, Scalar):
        return Scalar(regs[0], like.type)
    assert isinstance(like, Dist)
    return Dist(like.layout, list(regs), like.type)


def _regs(instr: Instr, outs: list[Lowered], like: list[Lowered]) -> list[Value]:
    regs: list[Value] = []
    for got, want in zip(outs, like):
        if isinstance(got, Dist) and isinstance(want, Dist) and got.layout != want.layout:
            raise UnsupportedError(f"{instr.op.name}: a value changes layout from "
                                   f"{want.layout} to {got.layout} across the region",
                                   loc=instr.loc)
        regs += flatten(got)
    return regs


def settle(low: Lowerer, e: TargetEmitter) -> None:
    """Commit TMA copies not yet committed at a control-flow boundary: a group's byte
    count is a constant of its ``mbarrier.arrive.expect_tx``, so a group cannot span
    regions (splitting a group only makes waits stricter)."""
    if low.extra.get("tma_bytes"):
        from tessera.lower.rules.block import commit_all

        commit_all(low, e, force=True)


def _scalar(low: Lowerer, lv: Lowered, instr: Instr) -> Value:
    if not isinstance(lv, Scalar):
        raise UnsupportedError(f"{instr.op.name} bounds must be scalars", loc=instr.loc)
    return lv.reg


@rule(TileFor)
def _for(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    e = low.em
    settle(low, e)
    lo, hi, step = (_scalar(low, a, instr) for a in args[:3])
    init = args[3:]
    block = Block()
    inner = e.nested(block)
    index = block.add_arg(lo.type)
    low.env[instr.regions[0].block.args[0]] = Scalar(index, "s32")
    for tv, lv in zip(instr.regions[0].block.args[1:], init):
        low.env[tv] = rebuild(lv, [block.add_arg(r.type) for r in flatten(lv)])
    outs = low.lower_block(instr.regions[0].block, inner)
    settle(low, inner)
    inner.op(Yield(), _regs(instr, outs, init))
    flat = [r for lv in init for r in flatten(lv)]
    results = e.op(For(), [lo, hi, step, *flat], regions=[IRRegion([block])])
    return rebuild_all(init, results)


def rebuild_all(like: list[Lowered], regs: Sequence[Value]) -> list[Lowered]:
    """:func:`rebuild` each of ``like`` from its run of the flat ``regs``."""
    out, k = [], 0
    for lv in like:
        n = len(flatten(lv))
        out.append(rebuild(lv, regs[k:k + n]))
        k += n
    return out


@rule(TileWhile)
def _while(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    e = low.em
    settle(low, e)
    cblock, bblock = Block(), Block()
    for tile_block, block in ((instr.regions[0].block, cblock), (instr.regions[1].block, bblock)):
        for tv, lv in zip(tile_block.args, args):
            low.env[tv] = rebuild(lv, [block.add_arg(r.type) for r in flatten(lv)])
    ce = e.nested(cblock)
    (cond,) = low.lower_block(instr.regions[0].block, ce)
    ce.op(Condition(), [_scalar(low, cond, instr)])
    be = e.nested(bblock)
    outs = low.lower_block(instr.regions[1].block, be)
    settle(low, be)
    be.op(Yield(), _regs(instr, outs, args))
    flat = [r for lv in args for r in flatten(lv)]
    results = e.op(While(), flat, regions=[IRRegion([cblock]), IRRegion([bblock])])
    return rebuild_all(args, results)


@rule(TileIf)
def _if(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    e = low.em
    settle(low, e)
    pred = _scalar(low, args[0], instr)
    regions, yields = [], []
    for k in (0, 1):
        block = Block()
        inner = e.nested(block)
        outs = low.lower_block(instr.regions[k].block, inner)
        settle(low, inner)
        regions.append((block, inner, outs))
        yields.append(outs)
    like = yields[0]
    for _block, inner, outs in regions:
        inner.op(Yield(), _regs(instr, outs, like))
    types = [r.type for lv in like for r in flatten(lv)]
    results = e.op(If(), [pred], regions=[IRRegion([b]) for b, _, _ in regions],
                   result_types=types)
    return rebuild_all(like, results)


__all__ = ["flatten", "rebuild", "rebuild_all"]

"""Reductions over rows longer than one program holds: one program walks the rows in
blocks, carrying each sum in an exact accumulator (the schedule's ``blocked`` strategy,
:mod:`tessera.ir.transforms.schedule.blocked`).

For each loop the schedule cut, a ``tile.for`` visits the blocks (nested, outermost
loop first). Each block loads its tiles of the kernel's operands (masked past a ragged
edge), computes the elementwise work on them, sets the terms past the edge to zero (a
zero adds nothing to an exact sum, whatever the prologue made of the masked loads) and
adds them to the carried accumulators: ``tile.reduce(terms, acc)`` with ``exact``, the
exact ``acc + sum(terms)``. After the last block:

* a **sum** is the accumulator itself, rounded once where it is stored or used;
* a **mean** is one more carried reduce, of a zero, with ``count`` the whole row's
  length: ``(acc + 0) / count`` rounded once, the graph's exact mean;
* a **mean squared error** is that mean of its ``16 n`` square terms
  (:mod:`tessera.ir.transforms.to_tile.loss`), rounded once to the result's element.

Every step is exact, so the bits are the graph interpreter's for any block size and
any order of the blocks. Results that run along the cut loops are stored block by block.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tessera.ir.core import Block, Builder, Instr, IRRegion, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.schedule.space import IterationSpace
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.schedule.blocked import MSE_TERMS, Passes, block_passes
from tessera.ir.transforms.to_tile import edges
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.types import TensorType
from tessera.numerics import dtype

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter


F64 = dtype("f64")


@dataclasses.dataclass
class BlockPlan:
    """The loops one kernel walks in blocks, what it computes in each pass, and what it
    computes before and after the passes."""

    passes: Passes
    loops: list[int]          #: the cut loops, outermost first
    early: list[Instr]        #: what the blocks read, computed before the first pass
    later: list[Instr]        #: what reads a reduction, outside the blocks
    outputs: set[Value]       #: the kernel's results


def plan_of(instr: Instr, space: IterationSpace, tiles: Sequence[int]) -> BlockPlan | None:
    """The block plan of a ``blocked`` kernel, or None (its rows are held whole)."""
    if getattr(instr.op, "reduction", None) != "blocked":
        return None
    passes = block_passes(instr, space, {k for k, t in enumerate(tiles)
                                         if t < space.extents[k]})
    if not passes.loops:
        return None
    region = instr.regions[0].block
    rest = [i for i in region.instrs if not i.op.terminator and i not in passes.keyed]
    term = region.terminator
    assert term is not None
    return BlockPlan(passes, sorted(passes.loops), [i for i in rest if not passes.of[i]],
                     [i for i in rest if passes.of[i]], set(term.operands))


def block_loop(em: Emitter, loop: int, block: int, inits: Sequence[Value], instr: Instr,
               body_fn: Callable[[list[Value]], list[Value]], name: str = "") -> list[Value]:
    """A ``tile.for`` over the blocks of ``loop`` carrying ``inits``; inside, the loop
    starts at the loop index (named ``name``, else ``b<loop>``)."""
    body = Block()
    index = body.add_arg(tile_ops.SCALAR_INDEX, name or f"b{loop}")
    carried = [body.add_arg(v.type, f"c{k}") for k, v in enumerate(inits)]
    outer, start = em.builder, em.starts[loop]
    em.builder = Builder(body)
    em.starts[loop] = index
    em.create(tile_ops.Yield(), body_fn(carried), instr)
    em.builder, em.starts[loop] = outer, start
    bounds = [em.index(0), em.index(em.extents[loop]), em.index(block)]
    return em.builder.create(tile_ops.For(), [*bounds, *inits], loc=instr.loc,
                             regions=[IRRegion([body])],
                             result_types=[v.type for v in inits])


def _type(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def _acc_type(em: Emitter, r: Instr) -> TensorType:
    """The accumulator of the reduction ``r``: one program's tile of its operand with
    the reduced axes removed (a mean squared error's: one value of its result)."""
    if isinstance(r.op, graph_ops.Mse):
        return TensorType((), _type(r.results[0]).element)
    x = r.operands[0]
    axes = set(r.op.reduced_axes(_type(x).rank))  # type: ignore[attr-defined]
    shape = em.tile_type(x).shape
    return TensorType(tuple(d for a, d in enumerate(shape) if a not in axes), _type(x).element)


def zero_outside(em: Emitter, v: Value, tile: Value, instr: Instr) -> Value:
    """``tile`` (this block's tile of the graph value ``v``) with zeros past the edge of
    a ragged block: unchanged outside a carried reduction."""
    if not em.carry:
        return tile
    starts, _, loops = edges.window(em, v)
    mask = edges.window_mask(em, v, starts, tuple(_type(tile).shape), loops, instr)
    if mask is None:
        return tile
    return em.create(tc.Where(), [mask, tile, em.full(_type(tile), 0)], instr)[0]


def exact_reduce(em: Emitter, instr: Instr, flat: Value, axis: int,
                 to: object = None) -> Value | None:
    """Inside a carried reduction's block: add ``flat``'s terms along ``axis`` to its
    accumulator and return the new one; None outside (the caller reduces whole)."""
    acc = em.carry.get(instr)
    if acc is None:
        return None
    op = tc.Reduce("sum", axis, exact=True, to=to)  # type: ignore[arg-type]
    return em.create(op, [flat, acc], instr)[0]


def _count(r: Instr) -> int:
    """Terms of the whole reduction ``r``."""
    x = r.operands[0]
    shape = _type(x).shape
    if isinstance(r.op, graph_ops.Mse):
        return MSE_TERMS * math.prod(shape)
    return math.prod(shape[a] for a in r.op.reduced_axes(len(shape)))  # type: ignore[attr-defined]


def _finish(em: Emitter, r: Instr, acc: Value) -> Value:
    """The reduction's tile after the last block (module docstring)."""
    if not isinstance(r.op, graph_ops.Sum):
        at = _type(acc)
        mse = isinstance(r.op, graph_ops.Mse)
        zero_t = TensorType((*at.shape, 1), F64 if mse else _type(r.operands[0]).element)
        op = tc.Reduce("mean", -1, exact=True, to=at.element if mse else None,
                       count=_count(r))
        (acc,) = em.create(op, [em.full(zero_t, 0.0), acc], r)
    shape = tuple(em.tile_type(r.results[0]).shape)
    if tuple(_type(acc).shape) != shape:
        (acc,) = em.create(tc.Reshape(shape), [acc], r)
    return rules.settle(em, r, acc)


def _needed(passes: Passes, roots: list[Value]) -> set[Instr]:
    """The per-block instructions that ``roots`` are computed from (a reduction of an
    earlier pass is read finished, not computed again)."""
    made = {r: i for i in passes.keyed for r in i.results}
    found: set[Instr] = set()
    todo = [made[v] for v in roots if v in made]
    while todo:
        i = todo.pop()
        if i not in found:
            found.add(i)
            todo += [made[v] for v in i.operands
                     if v in made and made[v] not in passes.reductions]
    return found


def emit_blocks(em: Emitter, plan: BlockPlan, mems: dict[Value, Value],
                env: dict[Value, Value], users: dict[Value, list[Instr]],
                store: Callable[[dict[Value, Value]], None]) -> None:
    """The passes of ``plan`` over the blocks, each block's results ``store``d, and the
    work between them; the finished reductions and what reads them go into ``env``."""
    passes = plan.passes
    first = passes.keyed[0]

    def emit(inner: Instr, values: dict[Value, Value]) -> None:
        if not rules.folded(inner, users.get(inner.results[0], [])):
            values[inner.results[0]] = rules.emit(
                em, inner, [values.get(v, v) for v in inner.operands])

    for p in range(passes.count):
        for inner in plan.later:
            if passes.of[inner] == p:
                emit(inner, env)
        reductions = [r for r in passes.reductions if passes.of[r] == p]
        stored = [r for i in passes.keyed if passes.of[i] == p and i not in reductions
                  for r in i.results if r in plan.outputs]
        needed = _needed(passes, [r.results[0] for r in reductions] + stored)
        # (each pass loads only the blocks of the operands its own work reads)
        loaded = [a for a in mems if a in passes.args and
                  any(a in i.operands for i in needed)]

        def block(carried: list[Value], reductions: list[Instr] = reductions,
                  stored: list[Value] = stored, needed: set[Instr] = needed,
                  loaded: list[Value] = loaded) -> list[Value]:
            local = dict(env)
            for arg in loaded:
                local[arg] = edges.load(em, mems[arg], arg)
            em.carry = dict(zip(reductions, carried))
            for inner in passes.keyed:
                if inner in needed:
                    emit(inner, local)
            em.carry = {}
            store({v: local[v] for v in stored})
            return [local[r.results[0]] for r in reductions]

        def nest(depth: int, carried: list[Value],
                 block: Callable[[list[Value]], list[Value]] = block) -> list[Value]:
            if depth == len(plan.loops):
                return block(carried)
            loop = plan.loops[depth]
            return block_loop(em, loop, em.tiles[loop], carried, first,
                              lambda c: nest(depth + 1, c, block))

        inits = [em.full(_acc_type(em, r), 0.0) for r in reductions]
        for r, acc in zip(reductions, nest(0, inits)):
            env[r.results[0]] = _finish(em, r, acc)
    for inner in plan.later:
        if passes.of[inner] >= passes.count:
            emit(inner, env)


__all__ = ["BlockPlan", "block_loop", "emit_blocks", "exact_reduce", "plan_of",
           "zero_outside"]

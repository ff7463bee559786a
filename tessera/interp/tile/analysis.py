"""What a kernel does to each memory parameter: read, written, reduced, written often.

The launch uses it to decide which sanitizer shadows a tensor needs: a tensor that is
both read and written tracks its readers; one written by a single op outside loops
needs no owner shadow in the vectorised schedule (that op's injectivity test sees every
program); one reduced into in a loop or by several ops remembers the last group that
reduced into each element, to keep reductions in group order.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory


@dataclass(frozen=True)
class Analysis:
    """What a kernel does to each memory parameter (by argument index)."""

    read: frozenset[int]
    written: frozenset[int]
    reduced_often: frozenset[int]  # updated in a loop or by several update ops
    written_often: frozenset[int]  # written in a loop or by several ops


def analyse(fn: Function) -> Analysis:
    """Find which parameters are read, written and reduced, following views."""
    owner: dict[int, Instr] = {}
    for instr in walk(fn.body):
        for region in instr.regions:
            for b in region.blocks:
                owner[id(b)] = instr
    params = {a: k for k, a in enumerate(fn.args) if isinstance(a.type, MemRefType)}

    def roots(v: Value, seen: set[int]) -> set[int]:
        if id(v) in seen:
            return set()
        seen.add(id(v))
        if v in params:
            return {params[v]}
        src = v.owner
        if isinstance(src, Instr):
            if isinstance(src.op, tile_memory.View):
                return roots(src.operands[0], seen)
            if isinstance(src.op, tile_memory.Select):
                return set().union(*(roots(o, seen) for o in src.operands[1:]))
            if isinstance(src.op, tile_memory.AllocShared):
                return set()
        if isinstance(src, Block) and id(src) in owner:
            return roots_of_region_arg(owner[id(src)], src, v, seen)
        return set(params.values())  # cannot tell: assume any parameter

    def roots_of_region_arg(instr: Instr, block: Block, v: Value, seen: set[int]) -> set[int]:
        k = block.args.index(v)
        if isinstance(instr.op, tile_ir.For):
            k -= 1
            if k < 0:
                return set()
            init = instr.operands[3 + k]
        else:
            init = instr.operands[k]
        out = roots(init, seen)
        term = instr.regions[-1].block.terminator
        if term is not None and k < len(term.operands):
            out |= roots(term.operands[k], seen)
        return out

    read: set[int] = set()
    written: set[int] = set()
    updates: dict[int, int] = {}
    writes: dict[int, int] = {}
    often: set[int] = set()
    w_often: set[int] = set()

    def visit(block: Block, in_loop: bool) -> None:
        for instr in block.instrs:
            op = instr.op
            if isinstance(op, (tile_memory.Load, tile_memory.LoadVector,
                               tile_memory.MaskedLoad)):
                read.update(roots(instr.operands[0], set()))
            elif isinstance(op, tile_memory.CpAsync):
                read.update(roots(instr.operands[1], set()))
            elif isinstance(op, (tile_memory.Store, tile_memory.StoreVector, tile_memory.Update,
                                 tile_memory.MaskedStore)):
                targets = roots(instr.operands[0], set())
                written.update(targets)
                for t in targets:
                    writes[t] = writes.get(t, 0) + 1
                    if in_loop:
                        w_often.add(t)
                if isinstance(op, tile_memory.Update):
                    for t in targets:
                        updates[t] = updates.get(t, 0) + 1
                        if in_loop:
                            often.add(t)
            for region in instr.regions:
                for b in region.blocks:
                    visit(b, in_loop or isinstance(op, (tile_ir.For, tile_ir.While)))

    visit(fn.body, False)
    often |= {t for t, n in updates.items() if n > 1}
    w_often |= {t for t, n in writes.items() if n > 1}
    return Analysis(frozenset(read), frozenset(written), frozenset(often), frozenset(w_often))


__all__ = ["Analysis", "analyse"]

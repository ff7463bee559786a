"""``dce``: remove pure instructions whose results are never used."""

from __future__ import annotations

from collections import Counter

from tessera.ir.core import Block, Module, Op, walk
from tessera.ir.passes import register_pass


def eliminate_dead(block: Block, only: tuple[type[Op], ...] | None = None) -> int:
    """Remove dead pure instructions of ``block`` (and nested blocks), or only those of
    the op classes ``only``; return how many."""
    removed = 0
    for instr in block.instrs:
        for region in instr.regions:
            for inner in region.blocks:
                removed += eliminate_dead(inner, only)
    counts = Counter(v for instr in walk(block) for v in instr.operands)
    # One backward sweep removes whole dead chains: removing a user decrements the counts
    # of its operands before their producers are visited.
    for instr in reversed(list(block.instrs)):
        if instr.op.pure and not instr.op.terminator and not any(
                counts[r] for r in instr.results) and (only is None or isinstance(instr.op, only)):
            block.instrs.remove(instr)
            removed += 1
            counts.subtract(v for i in walk(instr) for v in i.operands)
    return removed


@register_pass
class DeadCodeElimination:
    """Remove pure instructions whose results nobody uses."""

    name = "dce"

    def apply(self, module: Module) -> Module:
        for fn in module.functions.values():
            eliminate_dead(fn.body)
        return module

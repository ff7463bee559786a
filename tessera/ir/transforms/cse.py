"""``cse``: merge identical pure instructions (same op, attributes and operands)."""

from __future__ import annotations

from typing import Any

from tessera.ir.core import Block, Module, replace_all_uses
from tessera.ir.passes import register_pass


def eliminate_common(block: Block) -> int:
    """Merge duplicates in ``block``; ops are frozen values, so they key a dict directly."""
    seen: dict[Any, Any] = {}
    merged = 0
    for instr in list(block.instrs):
        if not instr.op.pure or instr.regions or instr.op.terminator:
            for region in instr.regions:
                for inner in region.blocks:
                    merged += eliminate_common(inner)
            continue
        key = (instr.op, tuple(id(v) for v in instr.operands))
        if key in seen:
            for old, new in zip(instr.results, seen[key].results):
                replace_all_uses(block, old, new)
            block.instrs.remove(instr)
            merged += 1
        else:
            seen[key] = instr
    return merged


@register_pass
class CommonSubexpressionElimination:
    """Merge identical pure instructions within each block."""

    name = "cse"

    def apply(self, module: Module) -> Module:
        for fn in module.functions.values():
            eliminate_common(fn.body)
        return module

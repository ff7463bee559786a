"""``canonicalize``: remove identity ops and fold op pairs that cancel.

Rules (each keyed by op class):
* cast to the operand's own element, reshape/broadcast to its own shape, transpose by the
  identity permutation: replaced by the operand;
* transpose of a transpose: one transpose by the composed permutation;
* neg of a neg, conj of a conj: the original value.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.ir.core import Block, Builder, Instr, Module, Value, replace_all_uses
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.passes import register_pass

Rule = Callable[[Instr, dict[Value, Instr]], Value | None]


def _identity(instr: Instr, producers: dict[Value, Instr]) -> Value | None:
    (x,) = instr.operands
    return x if x.type == instr.results[0].type else None


def _transpose(instr: Instr, producers: dict[Value, Instr]) -> Value | None:
    op = instr.op
    assert isinstance(op, graph_ir.Transpose)
    if op.perm == tuple(range(len(op.perm))):
        return instr.operands[0]
    inner = producers.get(instr.operands[0])
    if inner is None or not isinstance(inner.op, graph_ir.Transpose):
        return None
    perm = tuple(inner.op.perm[p] for p in op.perm)
    if perm == tuple(range(len(perm))):
        return inner.operands[0]
    builder = Builder(Block())
    (new,) = builder.create(graph_ir.Transpose(perm), [inner.operands[0]], loc=instr.loc)
    new_instr = builder.block.instrs[0]
    block = instr.parent
    assert block is not None
    block.instrs.insert(block.instrs.index(instr), new_instr)
    new_instr.parent = block
    return new


def _involution(instr: Instr, producers: dict[Value, Instr]) -> Value | None:
    inner = producers.get(instr.operands[0])
    if inner is not None and type(inner.op) is type(instr.op):
        return inner.operands[0]
    return None


RULES: dict[type, Rule] = {
    graph_ir.Cast: _identity, graph_ir.Reshape: _identity, graph_ir.Broadcast: _identity,
    graph_ir.Transpose: _transpose, graph_ir.Neg: _involution, graph_ir.Conj: _involution,
}


def canonicalize_block(block: Block) -> int:
    """Apply the rules to ``block`` until nothing changes; return the rewrite count."""
    rewrites = 0
    producers: dict[Value, Instr] = {}
    for instr in list(block.instrs):
        for region in instr.regions:
            for inner in region.blocks:
                rewrites += canonicalize_block(inner)
        rule = RULES.get(type(instr.op))
        replacement = rule(instr, producers) if rule else None
        if replacement is not None:
            replace_all_uses(block, instr.results[0], replacement)
            rewrites += 1
        for r in instr.results:
            producers[r] = instr
    return rewrites


@register_pass
class Canonicalize:
    """Remove identity ops and cancel inverse pairs (dead leftovers go with ``dce``)."""

    name = "canonicalize"

    def apply(self, module: Module) -> Module:
        for fn in module.functions.values():
            if canonicalize_block(fn.body) and fn.body.terminator is not None:
                # A returned value may now be one with a more precise type (an argument
                # placed on a mesh, for neg(neg(x))): the declared results follow it.
                fn.result_types = [v.type for v in fn.body.terminator.operands]
        return module

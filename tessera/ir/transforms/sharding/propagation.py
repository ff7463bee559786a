"""``shard-propagation``: give every value a placement and insert the collectives.

Starting from the placements of a function's arguments (an unplaced argument is
replicated on the mesh of the placed ones), the pass walks the instructions in order.
For each, the op's placement rule (:mod:`.rules`, keyed by op class) says which
placement every operand must be in and which placement the results get. Where an
operand is in another placement the pass inserts the collectives that move it
(:mod:`.convert`) right before the consumer, once per value and placement; where
it already is, nothing is inserted. Results the function returns are never partial.

A function without placed arguments is left as it is (it runs on one device). Errors
(an axis the mesh lacks, operands on different meshes, a collective whose operand
cannot be placed as it needs) are reported at the source line of the instruction.
"""

from __future__ import annotations

from tessera.errors import MeshError, TesseraError, UnsupportedError
from tessera.ir.core import Block, Builder, Function, Instr, Module, Value
from tessera.ir.passes import register_pass
from tessera.ir.transforms.sharding import collective, shape  # noqa: F401
from tessera.ir.transforms.sharding.check import PLACEMENT_RULES
from tessera.ir.transforms.sharding.convert import conversion
from tessera.ir.transforms.sharding.rules import Mesh, mesh_of, placement
from tessera.ir.types import Sharding, TensorType


def function_mesh(fn: Function) -> Mesh | None:
    """The mesh of a function's placed arguments (MeshError if they disagree)."""
    meshes = {t.sharding.mesh for t in (a.type for a in fn.args)
              if isinstance(t, TensorType) and t.sharding is not None}
    if len(meshes) > 1:
        shown = " and ".join(sorted(str(Sharding(m, ())).removesuffix("[]") for m in meshes))
        raise MeshError(f"the arguments of @{fn.name} live on different meshes: {shown}",
                        hint="put every distributed argument of one program on one mesh",
                        loc=fn.loc)
    return meshes.pop() if meshes else None


class _Propagation:
    """One function's walk: the mesh and the conversions made so far."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.converted: dict[tuple[Value, Sharding], Value] = {}

    def block(self, block: Block) -> None:
        for instr in list(block.instrs):
            if instr.regions:
                self.region_op(block, instr)
            else:
                self.instr(block, instr)

    def instr(self, block: Block, instr: Instr) -> None:
        op = instr.op
        rule = PLACEMENT_RULES.get(type(op))
        if rule is None:
            raise UnsupportedError(f"{op.name} cannot run on a mesh yet: it has no "
                                   "placement rule", loc=instr.loc,
                                   hint="compute it on one device (pass NumPy arrays)")
        try:
            plan = rule(op, [v.type for v in instr.operands],
                        [r.type.unplaced() for r in instr.results],  # type: ignore[attr-defined]
                        self.mesh)
        except TesseraError as err:
            raise type(err)(err.message, hint=err.hint, loc=instr.loc) from None
        self.move_operands(block, instr, plan.operands)
        for r, s in zip(instr.results, plan.results):
            r.type = r.type.placed(s)  # type: ignore[attr-defined]

    def region_op(self, block: Block, instr: Instr) -> None:
        # graph.custom: its region runs on the operands as they are placed (partial
        # values reduced first); its results take the placements the region yields.
        wants = [placement(v.type, self.mesh).with_partial(()) for v in instr.operands]
        self.move_operands(block, instr, wants)
        for region in instr.regions:
            inner = region.block
            for arg, v in zip(inner.args, instr.operands):
                arg.type = v.type
            self.block(inner)
            term = inner.terminator
            assert term is not None
            for r, v in zip(instr.results, term.operands):
                r.type = v.type

    def move_operands(self, block: Block, instr: Instr, wants: tuple[Sharding, ...] | list[
            Sharding]) -> None:
        for k, (v, want) in enumerate(zip(list(instr.operands), wants)):
            t = v.type
            assert isinstance(t, TensorType)
            if t.sharding is None:
                v.type = t = t.placed(Sharding.replicated(self.mesh, t.rank))
            if t.sharding != want:
                instr.operands[k] = self.convert(block, instr, v, want)

    def convert(self, block: Block, before: Instr, value: Value, want: Sharding) -> Value:
        key = (value, want)
        if key not in self.converted:
            builder = Builder(Block())
            current = value
            t = value.type
            assert isinstance(t, TensorType)
            try:
                ops = conversion(t, want)
            except TesseraError as err:
                raise type(err)(err.message, hint=err.hint, loc=before.loc) from None
            for op in ops:
                plan = PLACEMENT_RULES[type(op)](op, [current.type], [t.unplaced()],
                                                   self.mesh)
                (current,) = builder.create(op, [current], loc=before.loc,
                                            result_types=[t.placed(plan.results[0])])
            at = block.instrs.index(before)
            for new in builder.block.instrs:
                new.parent = block
            block.instrs[at:at] = builder.block.instrs
            self.converted[key] = current
        return self.converted[key]


def propagate_function(fn: Function, mesh: Mesh | None = None) -> Function:
    """Place every value of ``fn`` (in place) and return it."""
    mesh = mesh or function_mesh(fn) or mesh_of([a.type for a in fn.args])
    if mesh is None:
        return fn
    for arg in fn.args:
        t = arg.type
        if isinstance(t, TensorType) and t.sharding is None:
            arg.type = t.placed(Sharding.replicated(mesh, t.rank))
    _Propagation(mesh).block(fn.body)
    term = fn.body.terminator
    assert term is not None
    fn.result_types = [v.type for v in term.operands]
    return fn


@register_pass
class ShardPropagation:
    """Place every value on the arguments' mesh; insert collectives where needed."""

    name = "shard-propagation"

    def apply(self, module: Module) -> Module:
        for fn in module.functions.values():
            propagate_function(fn)
        return module


__all__ = ["ShardPropagation", "function_mesh", "propagate_function"]

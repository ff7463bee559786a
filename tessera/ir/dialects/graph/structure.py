"""Graph IR structure: constants, terminators and ``graph.custom`` (a call with a
user-defined derivative rule)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Instr, Op, Terminator, Type, register_op
from tessera.ir.dialects.graph import arity
from tessera.ir.types import Dense, Element, TensorType


@register_op
@dataclass(frozen=True)
class Constant(Op):
    """A constant tensor; ``value`` holds exact values, ``element`` the format."""

    name: ClassVar[str] = "graph.constant"
    value: Dense
    element: Element

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        arity(self, operands, 0)
        return (TensorType(self.value.array.shape, self.element),)


@register_op
@dataclass(frozen=True)
class Return(Terminator):
    """Ends a function; its operands are the function's results."""

    name: ClassVar[str] = "graph.return"


@register_op
@dataclass(frozen=True)
class Yield(Terminator):
    """Ends a region; its operands are the region's results."""

    name: ClassVar[str] = "graph.yield"


@register_op
@dataclass(frozen=True)
class Custom(Op):
    """A call of a function with a user-defined derivative rule.

    The region is the primal body (what the interpreter runs); ``rule`` names the
    registered ``custom_vjp`` / ``custom_jvp`` object that autodiff asks for the rule.
    The last ``captures`` operands are outer values the body closes over; the rule
    sees only the ones before them.
    """

    name: ClassVar[str] = "graph.custom"
    num_regions: ClassVar[int] = 1
    rule: str
    kind: str = "vjp"
    captures: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        raise IRVerifyError("graph.custom takes its result types from its region")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        if self.kind not in ("vjp", "jvp"):
            raise IRVerifyError(f"graph.custom kind must be 'vjp' or 'jvp', not {self.kind!r}")

    def verify_regions(self, instr: Instr) -> None:
        # Placements are compared only once both sides have them: a region traced on
        # one device is placed by shard propagation together with its operands.
        block = instr.regions[0].block
        if not _alike([a.type for a in block.args], [v.type for v in instr.operands]):
            raise IRVerifyError("graph.custom region arguments must match its operands")
        term = block.terminator
        if term is None or not _alike([v.type for v in term.operands],
                                      [r.type for r in instr.results]):
            raise IRVerifyError("graph.custom region must yield its result types")


def _alike(a: Sequence[Type], b: Sequence[Type]) -> bool:
    """Equal types, or equal but for a placement that one side does not have yet."""
    return len(a) == len(b) and all(
        x == y or (isinstance(x, TensorType) and isinstance(y, TensorType) and
                   (x.sharding is None or y.sharding is None) and x.unplaced() == y.unplaced())
        for x, y in zip(a, b))

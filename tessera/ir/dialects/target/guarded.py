"""Target IR guarded memory instructions: a ``ld`` or ``st`` under a predicate (PTX ISA
8.x, sec. 9.3.1 "Predicated execution", with sec. 9.7.9.8 "ld" and 9.7.9.10 "st").

``@%p ld`` leaves its destination unwritten when ``%p`` is false; in SSA form the
destination needs a value on both paths, so :class:`GuardedLoad` takes the value it
has where the guard is off (``other``), and renders as ``@%p ld ...; @!%p mov d,
other;``. A guarded-off thread touches no memory: it is never out of bounds and never
a race, which is how masked (edge-tile) accesses of Tile IR lower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import RegType, reg_of


def _address(op: Op, space: str, t: Type) -> None:
    if space not in ("global", "shared"):
        raise IRVerifyError(f"{op.name} accesses global or shared memory, not {space!r}")
    reg_of(op, t, "u64" if space == "global" else "u32")


@register_op
@dataclass(frozen=True)
class GuardedLoad(Op):
    """``@%p ld.<space>{.vN}.<type> d, [addr + offset]``, ``d = other`` where ``%p``
    is false; operands: the address, the ``pred`` guard and ``other`` (of the result's
    type)."""

    name: ClassVar[str] = "ptx.ld_guarded"
    pure: ClassVar[bool] = False  # memory may change between two identical loads
    space: str
    type: str
    vec: int = 1
    offset: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        _address(self, self.space, operands[0])
        reg_of(self, operands[1], "pred")
        out = RegType(self.type, self.vec)
        if operands[2] != out:
            raise IRVerifyError(f"ptx.ld_guarded of {out} needs an 'other' value of that "
                                f"type, got {operands[2]}")
        return (out,)


@register_op
@dataclass(frozen=True)
class GuardedStore(Op):
    """``@%p st.<space>{.vN}.<type> [addr + offset], a``; operands: the address, the
    value and the ``pred`` guard."""

    name: ClassVar[str] = "ptx.st_guarded"
    pure: ClassVar[bool] = False
    space: str
    type: str
    vec: int = 1
    offset: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        return ()

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 3)
        _address(self, self.space, operands[0])
        if operands[1] != RegType(self.type, self.vec):
            raise IRVerifyError(f"ptx.st_guarded stores reg<{self.vec}x{self.type}>, got "
                                f"{operands[1]}")
        reg_of(self, operands[2], "pred")


__all__ = ["GuardedLoad", "GuardedStore"]

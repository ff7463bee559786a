"""``wmma`` (PTX ISA sec. 9.7.14.4): warp-wide 16x16x16 matrix fragments loaded from
memory, multiplied and stored back, as nvcc's ``nvcuda::wmma`` emits them.

The ISA leaves which thread holds which element unspecified; a program may only load,
``mma`` and store fragments (and apply one operation to every element). The
interpreter's layout: lane ``l`` holds elements ``8l .. 8l + 7`` of the 256 in
row-major order of the logical matrix (A is m x k, B is k x n, C and D m x n); an f16
A or B fragment holds them twice (eight ``.f16x2`` registers), a bf16 one once (four
``.b32``), an f32 C or D fragment in eight registers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import RegType, reg_of

#: registers of an A/B fragment per element type
AB_REGS = {"f16": 8, "bf16": 4}


def _address(op: Op, t: Type, space: str) -> None:
    reg_of(op, t, "u32" if space == "shared" else "u64")


@register_op
@dataclass(frozen=True)
class WmmaLoad(Op):
    """``wmma.load.<frag>.sync.aligned.<layout>.m16n16k16{.space}.<type> r, [p], stride``:
    ``frag`` is ``a``, ``b`` (f16/bf16) or ``c`` (f32); ``layout`` ``row`` or ``col``
    is how the matrix lies in memory, ``stride`` (elements) its leading dimension."""

    name: ClassVar[str] = "ptx.wmma_load"
    pure: ClassVar[bool] = False
    frag: str
    layout: str
    space: str
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        _address(self, operands[0], self.space)
        reg_of(self, operands[1], "u32")
        if self.frag == "c":
            if self.type != "f32":
                raise IRVerifyError("wmma C fragments are f32 here")
            return (RegType("f32", 8),)
        if self.frag not in ("a", "b") or self.type not in AB_REGS:
            raise IRVerifyError(f"wmma.load.{self.frag}.{self.type} is not supported")
        return (RegType("b32", AB_REGS[self.type]),)


@register_op
@dataclass(frozen=True)
class WmmaMma(Op):
    """``wmma.mma.sync.aligned.<la>.<lb>.m16n16k16.f32.<...> d, a, b, c``: D = A B + C,
    products and sums exact, rounded to f32 when written."""

    name: ClassVar[str] = "ptx.wmma_mma"
    atype: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        frag = RegType("b32", AB_REGS.get(self.atype, 0) or 1)
        if self.atype not in AB_REGS or operands[0] != frag or operands[1] != frag:
            raise IRVerifyError(f"wmma.mma of {self.atype} takes {frag} A and B fragments")
        if operands[2] != RegType("f32", 8):
            raise IRVerifyError("wmma.mma accumulates eight f32 registers")
        return (RegType("f32", 8),)


@register_op
@dataclass(frozen=True)
class WmmaStore(Op):
    """``wmma.store.d.sync.aligned.<layout>.m16n16k16{.space}.f32 [p], d, stride``."""

    name: ClassVar[str] = "ptx.wmma_store"
    pure: ClassVar[bool] = False
    layout: str
    space: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        _address(self, operands[0], self.space)
        if operands[1] != RegType("f32", 8):
            raise IRVerifyError("wmma.store.d stores eight f32 registers")
        reg_of(self, operands[2], "u32")
        return ()


__all__ = ["AB_REGS", "WmmaLoad", "WmmaMma", "WmmaStore"]

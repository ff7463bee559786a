"""``wgmma`` with its A operand in registers (PTX ISA 8.x sec. 9.7.15.5):
``wgmma.mma_async.sync.aligned.m64nNk16.f32.<a>.<b> {d}, {a0, a1, a2, a3}, descB, p, 1, 1, tB``.

Each warp ``w`` of the warpgroup holds rows ``16w .. 16w + 15`` of the 64 x 16 A tile
in the ``mma.m16n8k16`` A fragment layout: thread ``(g, q) = (lane / 4, lane % 4)``
holds, in ``a0`` .. ``a3``, the 16-bit pairs at (row g, columns 2q, 2q + 1),
(g + 8, 2q ..), (g, 2q + 8 ..) and (g + 8, 2q + 8 ..), the lower column in the low
half. That is the f32 accumulator layout of a previous ``wgmma`` (register ``i`` of an
m64nN accumulator: row ``16w + g + 8((i >> 1) & 1)``, column ``8(i >> 2) + 2q + (i &
1)``) read eight registers at a time, so attention's ``P`` goes from the scores'
accumulators to ``P @ V`` without shared memory (FlashAttention-3, Shah et al. 2024).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Type, check_count, register_op
from tessera.ir.dialects.target import RegType, reg_of
from tessera.ir.dialects.target.async_ops import Wgmma

#: the A fragment of one m64k16 step: four b32 registers of two 16-bit elements
A_REGS = RegType("b32", 4)


@register_op
@dataclass(frozen=True)
class WgmmaRegA(Wgmma):
    """``wgmma`` whose A is four ``b32`` registers per thread (16-bit types only; no
    A transpose). Operands: the accumulator, A, the B descriptor, ``scale-d``."""

    name: ClassVar[str] = "ptx.wgmma_rs"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 4)
        if self.atype not in ("bf16", "f16") or self.trans_a:
            raise IRVerifyError("wgmma with A in registers takes untransposed bf16/f16 A, "
                                f"not {self.atype}{' transposed' if self.trans_a else ''}")
        if operands[1] != A_REGS:
            raise IRVerifyError(f"wgmma's register A is {A_REGS}, got {operands[1]}")
        super().infer([operands[0], RegType("u64"), operands[2], operands[3]])
        return (reg_of(self, operands[0], "f32"),)


__all__ = ["A_REGS", "WgmmaRegA"]

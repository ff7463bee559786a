"""Warp-specialisation instructions (:mod:`tessera.ir.dialects.target.warp_ops`).

``setmaxnreg`` changes only how ptxas and the hardware budget registers, so here it
checks what the PTX ISA (sec. 9.7.19.6) requires of its caller: all four warps of the
warpgroup execute it together. (``elect.sync`` is ``ptx.elect``, whose rule is in
:mod:`tessera.interp.target.ptx.rules`.)
"""

from __future__ import annotations

from tessera.interp.target.flow import check_warps
from tessera.interp.target.state import Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.warp_ops import SetMaxNReg


@step_rule(SetMaxNReg)
def _setmaxnreg(c: TargetCompiler, instr: Instr) -> Step:
    def step(fr: TargetFrame) -> None:
        check_warps(fr, instr, 128)
    return step


__all__: list[str] = []

"""Warp-specialisation instructions (:mod:`tessera.ir.dialects.target.warp_ops`).

``setmaxnreg`` changes only how ptxas and the hardware budget registers, so here it
checks what the PTX ISA (sec. 9.7.19.6) requires of its caller: all four warps of the
warpgroup execute it together. ``elect.sync`` (sec. 9.7.13.13) needs its whole warp
converged and elects the lowest lane.
"""

from __future__ import annotations

from tessera.interp.target.flow import check_warps
from tessera.interp.target.state import Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.warp_ops import ElectSync, SetMaxNReg


@step_rule(SetMaxNReg)
def _setmaxnreg(c: TargetCompiler, instr: Instr) -> Step:
    def step(fr: TargetFrame) -> None:
        check_warps(fr, instr, 128)
    return step


@step_rule(ElectSync)
def _elect(c: TargetCompiler, instr: Instr) -> Step:
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        check_warps(fr, instr, 32)
        fr.regs[out] = fr.mask & (fr.m.tid % 32 == 0)
    return step


__all__: list[str] = []

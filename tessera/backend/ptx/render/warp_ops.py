"""PTX rules of ``setmaxnreg`` and ``redux.sync`` (:mod:`tessera.ir.dialects.target.warp_ops`;
PTX ISA 8.x sec. 9.7.19.6, PTX 8.0, ``sm_90a``; sec. 9.7.13.11, ``sm_80``). ``elect.sync``
is ``ptx.elect`` (:mod:`tessera.backend.ptx.render.ptx_ops`)."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.warp_ops import Redux, SetMaxNReg


@rule(SetMaxNReg)
def _setmaxnreg(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    way = "inc" if instr.op.inc else "dec"
    e.out(f"setmaxnreg.{way}.sync.aligned.u32 {instr.op.count};")


@rule(Redux)
def _redux(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    src = e.regs.one(instr.operands[0])
    mask = e.regs.one(instr.operands[1]) if len(instr.operands) > 1 else f"{op.mask:#x}"
    e.out(f"redux.sync.{op.op}.{op.type} {e.regs.one(instr.result)}, {src}, {mask};")


__all__: list[str] = []

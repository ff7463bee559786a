"""PTX rules of the warp-specialisation instructions of
:mod:`tessera.ir.dialects.target.warp_ops`: ``setmaxnreg`` (PTX ISA 8.x sec. 9.7.19.6,
PTX 8.0, ``sm_90a``) and ``elect.sync`` (sec. 9.7.13.13, PTX 8.0, ``sm_90``)."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.warp_ops import ElectSync, SetMaxNReg


@rule(SetMaxNReg)
def _setmaxnreg(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    way = "inc" if instr.op.inc else "dec"
    e.out(f"setmaxnreg.{way}.sync.aligned.u32 {instr.op.count};")


@rule(ElectSync)
def _elect(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    # the sink `_` discards the elected lane's index; all 32 lanes are members
    e.out(f"elect.sync _|{e.regs.one(instr.results[0])}, 0xffffffff;")


__all__: list[str] = []

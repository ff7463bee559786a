"""PTX rules of ``setmaxnreg``, ``redux.sync`` and ``match.sync``
(:mod:`tessera.ir.dialects.target.warp_ops`; PTX ISA 8.x sec. 9.7.19.6, PTX 8.0,
``sm_90a``; sec. 9.7.13.10-11, ``sm_70``/``sm_80``). ``elect.sync`` and ``vote.sync`` are
in :mod:`tessera.backend.ptx.render.ptx_ops`."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.warp_ops import Match, Redux, SetMaxNReg


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


@rule(Match)
def _match(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    mask = e.regs.one(instr.operands[1]) if len(instr.operands) > 1 else f"{op.mask:#x}"
    dest = "|".join(e.regs.one(r) for r in instr.results)
    e.out(f"match.{op.mode}.sync.{op.type} {dest}, {e.regs.one(instr.operands[0])}, {mask};")


__all__: list[str] = []

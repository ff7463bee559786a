"""PTX rules of ``setmaxnreg``, ``redux.sync`` and ``match.sync``
(:mod:`tessera.ir.dialects.target.warp_ops`; PTX ISA 8.x sec. 9.7.19.6, PTX 8.0,
``sm_90a``; sec. 9.7.13.10-11, ``sm_70``/``sm_80``), and of the cluster instructions
``mapa``, ``getctarank`` and ``barrier.cluster`` (sec. 9.7.9.21-22 and 9.7.13.2, PTX 7.8,
``sm_90``; the barrier's memory orders PTX 8.0). ``elect.sync`` and ``vote.sync`` are
in :mod:`tessera.backend.ptx.render.ptx_ops`."""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import reg_of
from tessera.ir.dialects.target.mbarrier_ops import ClusterArrive, ClusterWait
from tessera.ir.dialects.target.memory_ops import GetCtaRank, Mapa
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


@rule(Mapa, GetCtaRank)
def _cluster_address(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    e.require((7, 8))
    op = instr.op
    head = "mapa" if isinstance(op, Mapa) else "getctarank"
    space = f".{op.space}" if op.space else ""
    elem = reg_of(op, instr.operands[0].type).elem
    args = ", ".join(e.regs.one(v) for v in (instr.result, *instr.operands))
    e.out(f"{head}{space}.{elem} {args};")


@rule(ClusterArrive, ClusterWait)
def _cluster_barrier(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    op = instr.op
    if isinstance(op, ClusterArrive):
        e.require((8, 0) if op.relaxed else (7, 8))
        kind = "arrive.relaxed" if op.relaxed else "arrive"
    else:
        e.require((7, 8))
        kind = "wait"
    e.out(f"barrier.cluster.{kind}{'.aligned' if op.aligned else ''};")


__all__: list[str] = []

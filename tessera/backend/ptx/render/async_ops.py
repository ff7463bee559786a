"""PTX rules of the asynchronous and matrix instructions of
:mod:`tessera.ir.dialects.target.async_ops` (PTX ISA 8.x, sec. 9.7.9 data movement, 9.7.13 mbarrier,
9.7.14 mma, 9.7.15 wgmma).

On ``sm_80`` the mbarrier instructions use the plain ``.shared`` state space and the
``test_wait`` poll (``try_wait`` and the ``.shared::cta`` spelling need sm_90 / PTX 7.8);
on ``sm_90a`` they name ``.shared::cta``. TMA writes ``.shared::cluster`` (the
``.shared::cta`` destination needs PTX 8.6, and a CTA's own window is part of its
cluster window).
"""

from __future__ import annotations

from tessera.backend.ptx.render.emit import PtxWriter, address, rule
from tessera.backend.ptx.render.regalloc import RenderError, braced
from tessera.ir.core import Instr
from tessera.ir.dialects.target.async_ops import (
    BulkCommit,
    BulkLoad,
    BulkWait,
    CpAsync,
    CpAsyncArrive,
    CpAsyncCommit,
    CpAsyncWait,
    Fence,
    Ldmatrix,
    MbarrierArrive,
    MbarrierInit,
    MbarrierInval,
    MbarrierWait,
    MmaSync,
    TmaLoad,
    TmaStore,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA

#: operand types of tensor-core instructions as PTX spells them
_MMA_TYPE = {"bf16": "bf16", "f16": "f16", "e4m3": "e4m3", "e5m2": "e5m2", "tf32": "tf32",
             "s8": "s8", "u8": "u8"}


def _mma_type(instr: Instr, name: str) -> str:
    try:
        return _MMA_TYPE[name]
    except KeyError:
        raise RenderError(f"{instr.op.name} has no PTX form for element type {name!r}",
                          loc=instr.loc) from None


# ---------------------------------------------------------------------------- sm_80
@rule(CpAsync)
def _cp_async(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    dst, src = (e.regs.one(v) for v in instr.operands[:2])
    tail = f", {e.regs.one(instr.operands[2])}" if len(instr.operands) == 3 else ""
    e.out(f"cp.async.{op.cache}.shared.global [{dst}], [{src}], {op.size}{tail};")


@rule(CpAsyncCommit)
def _cp_commit(e: PtxWriter, instr: Instr) -> None:
    e.out("cp.async.commit_group;")


@rule(CpAsyncWait)
def _cp_wait(e: PtxWriter, instr: Instr) -> None:
    e.out(f"cp.async.wait_group {instr.op.n};")


@rule(Ldmatrix)
def _ldmatrix(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    trans = ".trans" if op.trans else ""
    e.out(f"ldmatrix.sync.aligned.m8n8.x{op.num}{trans}.shared.b16 {e.regs.vec(instr.result)}, "
          f"{address(e, instr)};")


@rule(MmaSync)
def _mma(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    a, b = _mma_type(instr, op.atype), _mma_type(instr, op.btype)
    if ("e4m3" in (a, b) or "e5m2" in (a, b)) and e.target != "sm_89":
        e.sm90(instr)  # fp8 mma.sync needs sm_89 (or sm_90a) and PTX 8.4
    if "e4m3" in (a, b) or "e5m2" in (a, b):
        e.require((8, 4))
    d = e.regs.vec(instr.result)
    srcs = ", ".join(e.regs.vec(v) for v in instr.operands)
    sat = ".satfinite" if op.satfinite else ""
    e.out(f"mma.sync.aligned.{op.shape}.row.col{sat}.{op.ctype}.{a}.{b}.{op.ctype} {d}, "
          f"{srcs};")


# ------------------------------------------------------------------------ mbarrier
def _space(e: PtxWriter) -> str:
    return "shared::cta" if e.target == "sm_90a" else "shared"


@rule(MbarrierInit)
def _mbar_init(e: PtxWriter, instr: Instr) -> None:
    count = instr.op.count or e.regs.one(instr.operands[1])
    e.out(f"mbarrier.init.{_space(e)}.b64 {address(e, instr)}, {count};")


@rule(CpAsyncArrive)
def _cp_async_arrive(e: PtxWriter, instr: Instr) -> None:
    noinc = ".noinc" if instr.op.noinc else ""
    e.out(f"cp.async.mbarrier.arrive{noinc}.{_space(e)}.b64 {address(e, instr)};")


@rule(MbarrierArrive)
def _mbar_arrive(e: PtxWriter, instr: Instr) -> None:
    tx = e.regs.one(instr.operands[1]) if instr.op.tx_operand else instr.op.tx
    space = "shared::cluster" if instr.op.remote else "shared::cta"
    if tx:
        e.sm90(instr)
        e.out(f"mbarrier.arrive.expect_tx.{space}.b64 _, {address(e, instr)}, {tx};")
    elif instr.op.count != 1 or instr.op.count_operand:
        e.sm90(instr)
        count = e.regs.one(instr.operands[1]) if instr.op.count_operand else instr.op.count
        state = e.regs.one(instr.result) if instr.op.state else "_"
        e.out(f"mbarrier.arrive.{space}.b64 {state}, {address(e, instr)}, {count};")
    elif instr.op.remote or (e.target == "sm_90a" and not instr.op.state):
        e.sm90(instr)
        e.out(f"mbarrier.arrive.{space}.b64 _, {address(e, instr)};")
    else:  # before PTX 7.8 the state result cannot be the sink `_`
        state = e.regs.one(instr.result) if instr.op.state else e.regs.fresh("b64")[0]
        e.out(f"mbarrier.arrive.{_space(e)}.b64 {state}, {address(e, instr)};")


@rule(MbarrierWait)
def _mbar_wait(e: PtxWriter, instr: Instr) -> None:
    bar, phase = (e.regs.one(v) for v in instr.operands)
    (done,) = e.regs.fresh("pred")
    poll = "try_wait" if e.target == "sm_90a" else "test_wait"
    if poll == "test_wait":
        e.require((7, 1))  # mbarrier.test_wait.parity
    loop = e.new_label("wait")
    e.label(loop)
    e.out(f"mbarrier.{poll}.parity.{_space(e)}.b64 {done}, [{bar}], {phase};")
    e.out(f"@!{done} bra {loop};")


@rule(MbarrierInval)
def _mbar_inval(e: PtxWriter, instr: Instr) -> None:
    e.out(f"mbarrier.inval.{_space(e)}.b64 {address(e, instr)};")


@rule(Fence)
def _fence(e: PtxWriter, instr: Instr) -> None:
    sem, _, scope = instr.op.kind.rpartition("_")
    if sem == "membar":
        e.out(f"membar.{scope};")
        return
    if sem in ("sc", "acq_rel"):  # sm_70 on, the cluster scope sm_90
        if scope == "cluster":
            e.sm90(instr)
        e.out(f"fence.{sem}.{scope};")
        return
    e.sm90(instr)
    if instr.op.kind == "proxy_async":
        e.out("fence.proxy.async.shared::cta;")
    else:
        e.out("fence.mbarrier_init.release.cluster;")


# ---------------------------------------------------------------------------- sm_90a
@rule(TmaLoad)
def _tma_load(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    dst, tmap, c0, c1, bar, *mask = (e.regs.one(v) for v in instr.operands)
    multicast = ".multicast::cluster" if mask else ""
    e.out(f"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
          f"{multicast} [{dst}], [{tmap}, {braced((c0, c1))}], [{bar}]"
          f"{''.join(', ' + m for m in mask)};")


@rule(BulkLoad)
def _bulk_load(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    dst, src, size, bar = (e.regs.one(v) for v in instr.operands)
    # .shared::cluster (PTX 8.0) names the CTA's own shared memory outside a cluster;
    # .shared::cta needs PTX 8.6
    e.out("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
          f"[{dst}], [{src}], {size}, [{bar}];")


@rule(TmaStore)
def _tma_store(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    src, tmap, c0, c1 = (e.regs.one(v) for v in instr.operands)
    e.out("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group "
          f"[{tmap}, {braced((c0, c1))}], [{src}];")


@rule(BulkCommit)
def _bulk_commit(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    e.out("cp.async.bulk.commit_group;")


@rule(BulkWait)
def _bulk_wait(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    e.out(f"cp.async.bulk.wait_group{'.read' if instr.op.read else ''} {instr.op.n};")


@rule(WgmmaFence)
def _wgmma_fence(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    e.out("wgmma.fence.sync.aligned;")


@rule(WgmmaCommit)
def _wgmma_commit(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    e.out("wgmma.commit_group.sync.aligned;")


@rule(WgmmaWait)
def _wgmma_wait(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    e.out(f"wgmma.wait_group.sync.aligned {instr.op.n};")


@rule(Wgmma)
def _wgmma(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    op = instr.op
    a, b = _mma_type(instr, op.atype), _mma_type(instr, op.btype)
    acc = e.regs.of(instr.operands[0])
    if e.regs.of(instr.result) != acc:  # regalloc ties them; a mismatch is a renderer bug
        raise RenderError("wgmma result and accumulator registers differ", loc=instr.loc)
    desc_a, desc_b, scale_d = (e.regs.one(v) for v in instr.operands[1:])
    # scale-a = scale-b = 1 (no negation); the transpose immediates exist only for
    # 16-bit inputs (sec. 9.7.15.5.1): 0 is a K-major operand, 1 an MN-major one (a
    # row-major K x N B), as the interpreter reads the descriptors
    trans = f", {int(op.trans_a)}, {int(op.trans_b)}" if a in ("bf16", "f16") else ""
    # integer inputs take neither scale nor transpose immediates (sec. 9.7.15.5.2)
    imm = "" if op.ctype == "s32" else f", 1, 1{trans}"
    if op.ctype == "s32" and a != b:  # ptxas: "WGMMA with mixed integer types" needs 8.4
        e.require((8, 4))
    sat = ".satfinite" if op.satfinite else ""
    e.out(f"wgmma.mma_async.sync.aligned.m64n{op.n}k{op.k}{sat}.{op.ctype}.{a}.{b} "
          f"{e.regs.vec(instr.result)}, {desc_a}, {desc_b}, {scale_d}{imm};")


@rule(WgmmaRegA)
def _wgmma_rs(e: PtxWriter, instr: Instr) -> None:
    e.sm90(instr)
    op = instr.op
    acc = e.regs.of(instr.operands[0])
    if e.regs.of(instr.result) != acc:
        raise RenderError("wgmma result and accumulator registers differ", loc=instr.loc)
    desc_b, scale_d = (e.regs.one(v) for v in instr.operands[2:])
    # register A: scale-a, scale-b and only B's transpose immediate (sec. 9.7.15.5.1)
    e.out(f"wgmma.mma_async.sync.aligned.m64n{op.n}k{op.k}.f32.{op.atype}.{op.btype} "
          f"{e.regs.vec(instr.result)}, {e.regs.vec(instr.operands[1])}, {desc_b}, "
          f"{scale_d}, 1, 1, {int(op.trans_b)};")


__all__: list[str] = []

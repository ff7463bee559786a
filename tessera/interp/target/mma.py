"""Tensor-core instructions: ``ldmatrix``, ``mma.sync`` (sm_80) and ``wgmma`` (sm_90a).

Fragment layouts, the ldmatrix gather, descriptor decoding and the golden numerics come
from :mod:`tessera.arch` (PTX ISA sec. 9.7.14.5 and 9.7.15.5). Each instruction needs
its whole warp (``ldmatrix``, ``mma.sync``) or warpgroup of four warps (``wgmma``)
converged (``.sync.aligned``); every group with an active thread executes it, all at
once. Results are *wide*: float64 accumulators (D = C + the ascending-k float64 sum of
exact products, :func:`tessera.arch.mma.mma`).

``wgmma`` executes when issued: its accumulator is final at once, so reading it before
``wgmma.wait_group`` is not detected here (the kernel verifier checks that order).
Shared bytes it reads must be initialised and have no copy in flight, and bytes written
by ``st.shared`` need a ``fence.proxy.async`` before a wgmma reads them (PTX ISA,
"Proxies": st.shared is generic proxy, wgmma reads through the async proxy).
"""

from __future__ import annotations

import numpy as np

from tessera.arch.descriptor import operand_addresses
from tessera.arch.errors import ArchError
from tessera.arch.fragments import (
    from_fragments,
    mma_m16n8_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    to_fragments,
    unpack_registers,
    wgmma_accumulator,
)
from tessera.arch.ldmatrix import ldmatrix
from tessera.arch.mma import FORMATS, mma
from tessera.interp.target.flow import check_warps
from tessera.interp.target.memory.async_order import groups_of
from tessera.interp.target.state import F64, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async


@step_rule(target_async.Ldmatrix)
def _ldmatrix(c: TargetCompiler, instr: Instr) -> Step:
    num, trans = instr.op.num, instr.op.trans
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        m = fr.m
        warps = np.flatnonzero(check_warps(fr, instr))
        result = np.zeros((m.n, num), np.uint32)
        if len(warps):
            lanes = warps[:, None] * 32 + np.arange(32)
            rows = lanes[:, : 8 * num].ravel()  # the threads that give row addresses
            fail = m.failer(instr, rows)
            flat = m.shared.index(m.cta[rows], fr.regs[a][rows].astype(np.int64), 16, fail)
            m.shared.check_read(flat, rows, fail)
            smem = m.shared.data.reshape(m.ncta, m.shared.size)[m.cta[lanes[:, 0]]]
            try:
                regs = ldmatrix(smem, fr.regs[a][lanes].astype(np.int64), num, trans)
            except ArchError as err:
                raise m.fault(instr, "ldmatrix", err.message, int(rows[0])) from None
            result[lanes.ravel()] = regs.reshape(-1, num)
        fr.regs[out] = result
    return step


@step_rule(target_async.MmaSync)
def _mma_sync(c: TargetCompiler, instr: Instr) -> Step:
    fa, fb = instr.op.atype, instr.op.btype
    sa, sb, sc = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    bits = FORMATS[fa][1]
    la, lb = (mma_m16n8k16_a(), mma_m16n8k16_b()) if bits == 16 else (
        mma_m16n8k32_a(), mma_m16n8k32_b())
    lc = mma_m16n8_c()

    def step(fr: TargetFrame) -> None:
        m = fr.m
        warps = np.flatnonzero(check_warps(fr, instr))
        result = np.zeros((m.n, 4), F64)
        if len(warps):
            lanes = warps[:, None] * 32 + np.arange(32)
            av = from_fragments(unpack_registers(fr.regs[sa][lanes], bits), la)
            bv = from_fragments(unpack_registers(fr.regs[sb][lanes], bits), lb)
            cv = from_fragments(fr.regs[sc][lanes].astype(F64), lc)
            d = mma(av, bv, cv, fa, fb)
            result[lanes.ravel()] = to_fragments(d, lc).reshape(-1, 4)
        fr.regs[out] = result
    return step


def _uniform(fr: TargetFrame, instr: Instr, values: np.ndarray, groups: np.ndarray,
             what: str) -> np.ndarray:
    """One value per warpgroup; fault if the threads of a group disagree."""
    per = values.reshape(-1, 128)[groups]
    odd = (per != per[:, :1]).any(axis=1)
    if odd.any():
        g = int(groups[np.flatnonzero(odd)[0]])
        raise fr.m.fault(instr, "warp divergence", f"the {what} differs between threads "
                         "of one warpgroup; wgmma takes one value per warpgroup", g * 128)
    return per[:, 0]


def _operand(fr: TargetFrame, instr: Instr, ctas: np.ndarray, desc: np.ndarray, mn: int, k: int,
             eb: int, who: np.ndarray, k_major: bool = True) -> np.ndarray:
    """The (G, mn, k) element bit patterns a descriptor addresses in each CTA."""
    m = fr.m
    out = np.zeros((len(ctas), mn, k), np.uint16 if eb == 2 else np.uint8)
    fail = m.failer(instr, who)
    for d in np.unique(desc):
        sel = np.flatnonzero(desc == d)
        try:
            addr = operand_addresses(int(d), mn, k, eb, k_major=k_major)
        except ArchError as err:
            raise m.fault(instr, "wgmma descriptor", err.message, int(who[sel[0]])) from None
        span = addr.reshape(-1)
        if span.min() < 0 or span.max() + eb > m.shared.size:
            fail(int(sel[0]), "out of bounds", f"descriptor {int(d):#x} reaches shared byte "
                 f"{int(span.max())}, beyond the {m.shared.size} bytes of shared memory")
        flat = (ctas[sel, None] * m.shared.size + span[None, :])[:, :, None] + np.arange(eb)
        flat = flat.reshape(len(sel), -1)
        m.shared.check_read(flat, who[sel], m.failer(instr, who[sel]), race=False)
        reads = groups_of(m)  # read until a wait_group retires the group
        for i, w in enumerate(who[sel].tolist()):
            reads.read(int(w) // 128, flat[i])
        if m.shared.races:  # the whole warpgroup reads: a later writer must sync first
            first = who[sel].astype(np.int32)[:, None]
            np.minimum.at(m.shared.rmin, flat, np.broadcast_to(first, flat.shape))
            np.maximum.at(m.shared.rmax, flat, np.broadcast_to(first + 127, flat.shape))
        if m.shared.unfenced[flat].any():
            i = int(np.flatnonzero(m.shared.unfenced[flat].any(axis=1))[0])
            fail(int(sel[i]), "missing proxy fence", "wgmma reads shared memory written by "
                 "st.shared with no fence.proxy.async since")
        raw = m.shared.data[flat].reshape(len(sel), mn * k, eb)
        vals = raw[..., 0].astype(np.uint16)
        if eb == 2:
            vals = vals | (raw[..., 1].astype(np.uint16) << np.uint16(8))
        out[sel] = vals.reshape(len(sel), mn, k).astype(out.dtype)
    return out


@step_rule(target_async.Wgmma)
def _wgmma(c: TargetCompiler, instr: Instr) -> Step:
    n, fa, fb = instr.op.n, instr.op.atype, instr.op.btype
    acc, da, db, scale = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    layout = wgmma_accumulator(n)
    k = FORMATS[fa][2]
    eb = FORMATS[fa][1] // 8

    def step(fr: TargetFrame) -> None:
        m = fr.m
        groups = np.flatnonzero(check_warps(fr, instr, 128))
        result = np.zeros((m.n, n // 2), F64)
        if len(groups):
            threads = groups[:, None] * 128 + np.arange(128)
            who = threads[:, 0]
            ctas = m.cta[who]
            desc_a = _uniform(fr, instr, fr.regs[da], groups, "A descriptor")
            desc_b = _uniform(fr, instr, fr.regs[db], groups, "B descriptor")
            keep = _uniform(fr, instr, fr.regs[scale], groups, "scale-d predicate")
            av = _operand(fr, instr, ctas, desc_a, 64, k, eb, who, not instr.op.trans_a)
            bv = np.swapaxes(_operand(fr, instr, ctas, desc_b, n, k, eb, who,
                                      not instr.op.trans_b), 1, 2)
            cv = from_fragments(fr.regs[acc][threads].astype(F64), layout)
            cv = np.where(keep[:, None, None], cv, 0.0)  # scale-d false: D = A * B
            d = mma(av, bv, cv, fa, fb)
            result[threads.ravel()] = to_fragments(d, layout).reshape(-1, n // 2)
        fr.regs[out] = result
    return step


__all__: list[str] = []

"""Rules for the ``wmma`` instructions (:mod:`tessera.ir.dialects.target.wmma`; PTX ISA
8.x sec. 9.7.14): fragments loaded and stored by the warp, products summed exactly."""

from __future__ import annotations

import numpy as np

from tessera.interp.target.flow import check_warps
from tessera.interp.target.numeric import canonical_nans
from tessera.interp.target.ptx.memory import generic_access
from tessera.interp.target.state import Step, TargetCompiler, TargetFrame, narrow, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import ptx_ops
from tessera.ir.dialects.target import wmma as wmma_ops

U32 = np.dtype(np.uint32)

def _wmma_addresses(fr: TargetFrame, instr: Instr, lanes: np.ndarray, base: np.ndarray,
                    stride: np.ndarray, layout: str, space: str, eb: int) -> np.ndarray:
    """Generic addresses (W, 32, 8) of the elements each lane holds (lane ``l``:
    elements ``8l .. 8l + 7`` of the logical matrix in row-major order)."""
    for what, v in (("address", base), ("stride", stride)):
        per = v[lanes]
        if (per != per[:, :1]).any():
            w = int(np.flatnonzero((per != per[:, :1]).any(axis=1))[0])
            raise fr.m.fault(instr, "warp divergence", f"the {what} differs between the "
                             "lanes of a warp; wmma takes one per warp", int(lanes[w, 0]))
    e = (np.arange(32)[:, None] * 8 + np.arange(8)[None, :])[None]
    r, c = e // 16, e % 16
    ld = stride[lanes[:, 0]].astype(np.int64)[:, None, None]
    off = (r * ld + c) if layout == "row" else (c * ld + r)
    start = base[lanes[:, 0]].astype(np.int64)[:, None, None]
    if space == "shared":
        start = start + ptx_ops.SHARED_WINDOW
    return start + off * eb


@step_rule(wmma_ops.WmmaLoad)
def _wmma_load(c: TargetCompiler, instr: Instr) -> Step:

    op = instr.op
    a, s = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    eb = 4 if op.frag == "c" else 2
    nregs = instr.results[0].type.count  # type: ignore[attr-defined]

    def step(fr: TargetFrame) -> None:
        warps = np.flatnonzero(check_warps(fr, instr))
        result = np.zeros((fr.m.n, nregs), np.float32 if eb == 4 else U32)
        if len(warps):
            lanes = warps[:, None] * 32 + np.arange(32)
            addrs = _wmma_addresses(fr, instr, lanes, fr.regs[a], fr.regs[s], op.layout,
                                    op.space, eb)
            who = np.repeat(lanes.ravel(), 8)
            raw = generic_access(fr, instr, addrs.ravel(), who, eb)
            if eb == 4:
                result[lanes.ravel()] = raw.view(np.float32).reshape(-1, 8)
            else:
                halves = raw.view(np.uint16).reshape(-1, 8).astype(U32)
                pairs = halves[:, 0::2] | (halves[:, 1::2] << np.uint32(16))  # 4 registers
                result[lanes.ravel()] = np.tile(pairs, (1, nregs // 4))
        fr.regs[out] = result
    return step


def _wmma_matrix(values: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """The (W, 16, 16) logical matrices of per-lane fragments values (N, 8)."""
    return values[lanes].reshape(len(lanes), 16, 16)


@step_rule(wmma_ops.WmmaMma)
def _wmma_mma(c: TargetCompiler, instr: Instr) -> Step:
    import ml_dtypes

    from tessera.arch import mma_hopper
    from tessera.interp.target.tensorcore.model import result as model_result

    op_type = instr.op.atype
    half = np.dtype(np.float16) if op_type == "f16" else np.dtype(ml_dtypes.bfloat16)
    sa, sb, sc = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])

    def elements(regs: np.ndarray) -> np.ndarray:
        first = regs[:, :4].astype(U32)  # f16 fragments hold every element twice
        lo, hi = first & np.uint32(0xFFFF), first >> np.uint32(16)
        halves = np.stack([lo, hi], axis=2).reshape(len(regs), 8).astype(np.uint16)
        return halves.view(half).astype(np.float64)

    def step(fr: TargetFrame) -> None:
        warps = np.flatnonzero(check_warps(fr, instr))
        result = np.zeros((fr.m.n, 8), np.float64)
        if len(warps):
            lanes = warps[:, None] * 32 + np.arange(32)
            av = _wmma_matrix(elements(fr.regs[sa]), lanes)
            bv = _wmma_matrix(elements(fr.regs[sb]), lanes)
            cv = _wmma_matrix(narrow(fr.regs[sc], "f32").astype(np.float64), lanes)
            if fr.m.tensor_cores == "hopper" and mma_hopper.modelled(av, bv, cv, op_type):
                d = mma_hopper.mma_truncating(av, bv, cv, op_type)  # one k16 step
            else:
                d = np.einsum("wmk,wkn->wmn", av, bv) + cv  # exact products, float64 sums
            # a NaN of D has the canonical bits, as mma.sync's and wgmma's (model.step)
            result[lanes.ravel()] = canonical_nans(d, wide=True).reshape(-1, 8)
        fr.regs[out] = model_result(fr.m, result)
    return step


@step_rule(wmma_ops.WmmaStore)
def _wmma_store(c: TargetCompiler, instr: Instr) -> Step:

    op = instr.op
    a, d, s = (c.slot(v) for v in instr.operands)

    def step(fr: TargetFrame) -> None:
        warps = np.flatnonzero(check_warps(fr, instr))
        if not len(warps):
            return
        lanes = warps[:, None] * 32 + np.arange(32)
        addrs = _wmma_addresses(fr, instr, lanes, fr.regs[a], fr.regs[s], op.layout,
                                op.space, 4)
        values = narrow(fr.regs[d], "f32").astype(np.float32)[lanes.ravel()]
        data = values.reshape(-1, 1).view(np.uint8).reshape(-1, 4)
        generic_access(fr, instr, addrs.ravel(), np.repeat(lanes.ravel(), 8), 4, data)
    return step


__all__: list[str] = []

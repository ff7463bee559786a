"""``ptx.wgmma_rs`` (``wgmma`` with A in registers) in the Target IR interpreter: A is
gathered from each warp's four ``b32`` registers in the ``mma.m16n8k16`` A fragment
layout (warp ``w`` holds rows ``16w .. 16w + 15``), B read through its descriptor as
``wgmma`` reads it (:mod:`tessera.interp.target.tensorcore.mma`), the same exact accumulation."""

from __future__ import annotations

import numpy as np

from tessera.arch.fragments import (
    from_fragments,
    mma_m16n8k16_a,
    to_fragments,
    unpack_registers,
    wgmma_accumulator,
)
from tessera.arch.mma import FORMATS
from tessera.interp.target.flow import check_warps
from tessera.interp.target.state import F64, Step, TargetCompiler, TargetFrame, step_rule
from tessera.interp.target.tensorcore import model as tensor_core
from tessera.interp.target.tensorcore.mma import _operand, _uniform
from tessera.ir.core import Instr
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA


@step_rule(WgmmaRegA)
def _wgmma_rs(c: TargetCompiler, instr: Instr) -> Step:
    n, fa, fb = instr.op.n, instr.op.atype, instr.op.btype
    acc, ra, db, scale = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    layout, la = wgmma_accumulator(n), mma_m16n8k16_a()
    k = FORMATS[fa][2]
    eb = FORMATS[fb][1] // 8
    cache_b: dict = {}  # each B descriptor's addresses, as wgmma keeps them

    def step(fr: TargetFrame) -> None:
        m = fr.m
        groups = np.flatnonzero(check_warps(fr, instr, 128))
        result = np.zeros((m.n, n // 2), F64)
        if len(groups):
            threads = groups[:, None] * 128 + np.arange(128)
            who = threads[:, 0]
            desc_b = _uniform(fr, instr, fr.regs[db], groups, "B descriptor")
            keep = _uniform(fr, instr, fr.regs[scale], groups, "scale-d predicate")
            warps = fr.regs[ra][threads.reshape(-1, 32)]  # (G*4, 32, 4) registers
            av = from_fragments(unpack_registers(warps, 16), la).reshape(len(groups), 64, k)
            bv = np.swapaxes(_operand(fr, instr, m.cta[who], desc_b, n, k, eb, who,
                                      not instr.op.trans_b, cache_b), 1, 2)
            cv = from_fragments(fr.regs[acc][threads].astype(F64), layout)
            cv = np.where(keep[:, None, None], cv, 0.0)  # scale-d false: D = A * B
            d = tensor_core.step(m, av, bv, cv, fa, fb)
            result[threads.ravel()] = to_fragments(d, layout).reshape(-1, n // 2)
        fr.regs[out] = tensor_core.result(m, result)
    return step


__all__: list[str] = []

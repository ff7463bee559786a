"""Planted bugs in the sm_90a matrix kernels of test_gemm: a wrong stride byte offset,
a wrong swizzle mode, a wrong expect-tx count, and a missing wgmma.wait_group,
wgmma.fence or fence.proxy.async must each be caught (by ptxas's advisory, the kernel
checker or the Target IR interpreter), each as the rule the PTX ISA states."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tessera.arch.descriptor import decode_descriptor
from tessera.arch.swizzle import Swizzle
from tessera.errors import IRVerifyError, TesseraError
from tessera.interp.target import run_target
from tessera.ir.core import Block, Function, Instr
from tessera.ir.dialects.target.async_ops import MbarrierArrive, WgmmaFence, WgmmaWait
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.dialects.target.ops import Const
from tests.lower.sm90a.test_gemm import (
    attention_args,
    attention_pv,
    build_gemm,
    ptxas,
    run_gemm,
)


def strip(fn: Function, op_type: type) -> Function:
    """Remove every instruction of ``op_type`` (a planted bug)."""
    def walk(block: Block) -> None:
        block.instrs[:] = [i for i in block.instrs if not isinstance(i.op, op_type)]
        for instr in block.instrs:
            for region in instr.regions:
                walk(region.block)

    walk(fn.body)
    return fn


def test_planted_missing_wait_is_repaired_by_ptxas() -> None:
    """ptxas injects a missing wgmma.wait_group and says so only as (C7517): the check
    above would catch it."""
    assert "(C7517)" in ptxas(strip(build_gemm("bf16_mn_major_b"), WgmmaWait))


def test_planted_missing_fence_is_rejected() -> None:
    """A wgmma whose accumulators were just written (the packs) without wgmma.fence
    (PTX ISA sec. 9.7.15.6.1). ptxas 13.5 assembles this silently, with no advisory,
    so the kernel checker is what catches it."""
    fn = strip(build_gemm("bf16_mn_major_b"), WgmmaFence)
    with pytest.raises(IRVerifyError, match=r"wgmma\.fence"):
        check_kernel(fn)

def instrs(fn: Function) -> list[Instr]:
    out: list[Instr] = []

    def walk(block: Block) -> None:
        for instr in block.instrs:
            out.append(instr)
            for region in instr.regions:
                walk(region.block)

    walk(fn.body)
    return out


def replace_descriptor_fields(fn: Function, **fields: object) -> int:
    """Rewrite the static part (the u64 immediate) of every matrix descriptor."""

    hits = 0
    for instr in instrs(fn):
        op = instr.op
        if isinstance(op, Const) and op.type == "u64" and op.value >> 62:
            d = dataclasses.replace(decode_descriptor(op.value), **fields)
            instr.op = Const(d.encode(), "u64")
            hits += 1
    return hits


def caught(fn: Function, name: str) -> bool:
    """Whether a planted bug shows: an interpreter fault or a result that differs."""
    try:
        got, ref = run_gemm(fn, name)
    except TesseraError:
        return True
    return not np.array_equal(got, ref)


GOOD = "bf16_bm128_kmajor_b_3stage"


def test_planted_wrong_stride_byte_offset() -> None:
    """SBO 512 instead of 1024: 8-row groups read from the wrong rows (PTX ISA 'Matrix
    Descriptor Format', bits 32-45)."""
    fn = build_gemm(GOOD)
    assert replace_descriptor_fields(fn, stride_byte_offset=512) > 0
    assert caught(fn, GOOD)


def test_planted_wrong_swizzle_mode() -> None:
    """Layout code 2 (64B) for data TMA wrote with the 128B swizzle."""
    fn = build_gemm(GOOD)
    assert replace_descriptor_fields(fn, swizzle=Swizzle.B64) > 0
    assert caught(fn, GOOD)


@pytest.mark.parametrize("delta", [-1024, 1024])
def test_planted_wrong_expect_tx(delta: int) -> None:
    """arrive.expect_tx must announce the bytes of every load on the phase (PTX ISA sec.
    9.7.13.15.12): too few completes too early, too many never completes."""
    fn = build_gemm(GOOD)
    arrivals = [i for i in instrs(fn) if isinstance(i.op, MbarrierArrive)]
    assert arrivals and all(i.op.tx == (128 + 64) * 64 * 2 for i in arrivals)
    for i in arrivals:
        i.op = MbarrierArrive(i.op.tx + delta)
    with pytest.raises(TesseraError, match="mbarrier"):
        run_gemm(fn, GOOD)


def test_planted_missing_proxy_fence() -> None:
    """st.shared data read by wgmma with no fence.proxy.async in between."""
    from tessera.ir.dialects.target.async_ops import Fence

    fn = attention_pv(64, True)
    for instr in instrs(fn):
        if isinstance(instr.op, Fence) and instr.op.kind == "proxy_async":
            instr.parent.instrs.remove(instr)  # type: ignore[union-attr]
    args, _ = attention_args(64, True)
    with pytest.raises(TesseraError, match="proxy"):
        run_target(fn, args)

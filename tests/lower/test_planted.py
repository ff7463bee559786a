"""Planted emitter bugs in the lowered example kernels, each caught before a GPU would
see it: by the ordering rules of ``tessera.ir.dialects.target.check`` (PTX ISA sec. 9.7.15.6:
``wgmma.fence`` / ``commit_group`` / ``wait_group``; sec. 9.7.13.4: async-proxy
fences), by the Target IR interpreter (mbarrier transaction counts, sec. 9.7.13.15;
descriptors and swizzles, sec. 9.7.15.5.1.2), or by a result that differs from the
tile interpreter. Also: lowered kernels print, parse and verify as text."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tessera.errors import InterpretError, IRVerifyError
from tessera.frontend.kernel.backends.compile import (
    CompiledKernel,
    compile_kernel,
    target_arguments,
)
from tessera.interp.target import run_target
from tessera.ir.core import Instr, walk
from tessera.ir.dialects.target.async_ops import (
    CpAsyncWait,
    Fence,
    MbarrierArrive,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.dialects.target.ops import Const
from tessera.ir.text import parse_module, print_module
from tessera.ir.verifier import verify_function
from tests.lower.test_lowering import example

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(7)


def gemm_case(target: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 128)).astype(BF16)
    tile = (64, 64, 64) if target == "sm_90a" else (64, 64, 32)
    return example("gemm").gemm, (a, b, np.zeros((128, 128), np.float32)), {"tile_shape": tile}


def run_lowered(compiled: CompiledKernel, kernel: Any, args: tuple[Any, ...],
                launch: dict[str, Any]) -> np.ndarray:
    prep, _ = kernel.specialise(args, dict(launch))
    targs, _ = target_arguments(compiled, prep.runtime)
    run_target(compiled.kernel, targs)
    return targs[2]


def mutate(compiled: CompiledKernel, pick: Callable[[Instr], bool],
           change: Callable[[Instr], bool]) -> int:
    """Apply ``change`` to the instructions ``pick`` selects (False removes one)."""
    hits = 0
    for instr in list(walk(compiled.kernel.body)):
        if pick(instr):
            hits += 1
            if change(instr) is False:
                assert instr.parent is not None
                instr.parent.instrs.remove(instr)
    assert hits, "the planted bug found nothing to change"
    return hits


def is_op(cls: type) -> Callable[[Instr], bool]:
    return lambda i: isinstance(i.op, cls)


def test_lowered_kernels_round_trip_as_text() -> None:
    for target in ("sm_80", "sm_90a"):
        kernel, args, launch = gemm_case(target)
        compiled = compile_kernel(kernel, *args, target=target, **launch)
        text = print_module(_module(compiled))
        parsed = parse_module(text)
        assert print_module(parsed) == text
        verify_function(parsed.functions["gemm"])


def _module(compiled: CompiledKernel) -> Any:
    from tessera.ir.core import Module

    module = Module(compiled.name)
    module.add(compiled.kernel)
    return module


def test_missing_wgmma_fence_is_rejected() -> None:
    kernel, args, launch = gemm_case("sm_90a")
    compiled = compile_kernel(kernel, *args, target="sm_90a", **launch)
    mutate(compiled, is_op(WgmmaFence), lambda i: False)
    with pytest.raises(IRVerifyError, match=r"wgmma without a wgmma\.fence"):
        check_kernel(compiled.kernel)


def test_missing_commit_or_wait_is_rejected() -> None:
    for cls in (WgmmaCommit, WgmmaWait):
        kernel, args, launch = gemm_case("sm_90a")
        compiled = compile_kernel(kernel, *args, target="sm_90a", **launch)
        mutate(compiled, is_op(cls), lambda i: False)
        with pytest.raises(IRVerifyError, match=r"before wgmma\.wait_group retires it"):
            check_kernel(compiled.kernel)


@pytest.mark.parametrize("delta", [-128, 128])
def test_wrong_expect_tx_count_is_caught(delta: int) -> None:
    kernel, args, launch = gemm_case("sm_90a")
    compiled = compile_kernel(kernel, *args, target="sm_90a", **launch)
    mutate(compiled, is_op(MbarrierArrive),
           lambda i: setattr(i, "op", dataclasses.replace(i.op, tx=i.op.tx + delta)))
    with pytest.raises(InterpretError, match="mbarrier"):
        run_lowered(compiled, kernel, args, launch)


def _descriptor_constant(i: Instr) -> bool:
    return isinstance(i.op, Const) and i.op.type == "u64" and int(i.op.value) >> 32 != 0


@pytest.mark.parametrize("field, bits", [("stride byte offset", (32, 0x40)),
                                         ("swizzle mode", (62, 0x3))])
def test_wrong_descriptor_field_is_caught(field: str, bits: tuple[int, int]) -> None:
    """A wrong SBO (1024 -> 2048 bytes) or layout type (128B -> 32B) in the static
    part of every wgmma descriptor: a fault or a result that differs."""
    kernel, args, launch = gemm_case("sm_90a")
    want = kernel(*[np.copy(a) for a in args], **launch)
    compiled = compile_kernel(kernel, *args, target="sm_90a", **launch)
    shift, mask = bits

    def corrupt(i: Instr) -> None:
        value = int(i.op.value)
        i.op = dataclasses.replace(i.op, value=value ^ (mask << shift) if field == "swizzle mode"
                                   else value + (mask << shift))
    mutate(compiled, _descriptor_constant, corrupt)
    try:
        got = run_lowered(compiled, kernel, tuple(np.copy(a) for a in args), launch)
    except InterpretError:
        return
    assert not np.array_equal(got, want), field


def test_missing_proxy_fence_is_caught() -> None:
    """Flash attention on sm_90a stages P in shared memory for the P @ V wgmma: without
    fence.proxy.async the async proxy may read stale data."""
    fa = example("flash_attention").flash_attention
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(BF16) for _ in range(3))
    launch = {"is_causal": False, "config": dict(BLOCK_M=64, BLOCK_N=64, num_warps=4,
                                                 num_stages=2)}
    compiled = compile_kernel(fa, q, k, v, target="sm_90a", **launch)
    mutate(compiled, lambda i: isinstance(i.op, Fence) and i.op.kind == "proxy_async",
           lambda i: False)
    with pytest.raises(IRVerifyError, match=r"fence\.proxy\.async"):
        check_kernel(compiled.kernel)


def test_wrong_cp_async_wait_is_caught() -> None:
    """The double-buffered sm_80 GEMM waits with wait_group 1; waiting for fewer groups
    (wait_group 2) lets the mma read a stage still in flight."""
    mod = example("double_buffered_gemm")
    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 128)).astype(BF16)
    args = (a, b, np.zeros((128, 128), np.float32))
    launch = {"tile_shape": (64, 64, 32)}
    compiled = compile_kernel(mod.double_buffered_gemm, *args, target="sm_80", **launch)
    mutate(compiled, lambda i: isinstance(i.op, CpAsyncWait) and i.op.n == 1,
           lambda i: setattr(i, "op", CpAsyncWait(2)))
    with pytest.raises(InterpretError, match="async copy"):
        run_lowered(compiled, mod.double_buffered_gemm, args, launch)


def test_sm90a_ring_waits_as_the_kernel_says() -> None:
    """The double-buffered GEMM on sm_90a fills its run-time-selected stages with TMA
    through the mbarrier group ring; lowered from a kernel that waits for one group too
    few (wait_group 2 instead of 1), wgmma reads a stage still in flight."""
    from tessera.frontend.kernel.backends.compile import lower_and_render
    from tessera.ir.dialects.tile import memory as tile_memory

    mod = example("double_buffered_gemm")
    kernel = mod.double_buffered_gemm
    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 128)).astype(BF16)
    args = (a, b, np.zeros((128, 128), np.float32))
    launch = {"tile_shape": (64, 64, 64)}
    compiled = compile_kernel(kernel, *args, target="sm_90a", **launch)
    assert "cp.async.bulk.tensor" in compiled.ptx and "cp.async.cg" not in compiled.ptx
    tile = kernel.compile(*args, **launch).functions[kernel.name]
    for instr in walk(tile.body):
        if isinstance(instr.op, tile_memory.CpWaitGroup) and instr.op.n == 1:
            instr.op = tile_memory.CpWaitGroup(2)
    lowered, ptx, lines, _ = lower_and_render(tile, "sm_90a")
    bad = dataclasses.replace(compiled, kernel=lowered, ptx=ptx, line_map=lines)
    with pytest.raises(InterpretError, match=r"in flight|before its wait|mbarrier"):
        run_lowered(bad, kernel, tuple(np.copy(x) for x in args), launch)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_missing_war_barrier_is_caught(target: str) -> None:
    """A tile is a whole CTA: without the bar.sync the lowering puts before a run of
    copies, the double-buffered GEMM's next copies (cp.async on sm_80, TMA on sm_90a)
    overwrite a stage other warps may still be reading (a write-after-read race)."""
    from tessera.ir.dialects.target import If
    from tessera.ir.dialects.target.async_ops import CpAsync, TmaLoad
    from tessera.ir.dialects.target.ops import Bar

    mod = example("double_buffered_gemm")
    a = rng.standard_normal((128, 256)).astype(BF16)  # K = 256: stages are reused
    b = rng.standard_normal((256, 128)).astype(BF16)
    args = (a, b, np.zeros((128, 128), np.float32))
    launch = {"tile_shape": (64, 64, 64 if target == "sm_90a" else 32)}
    compiled = compile_kernel(mod.double_buffered_gemm, *args, target=target, **launch)
    run_lowered(compiled, mod.double_buffered_gemm, tuple(np.copy(x) for x in args), launch)

    def is_copy(instr: Instr) -> bool:
        if isinstance(instr.op, If):
            return any(isinstance(i.op, TmaLoad) for i in walk(instr.regions[0].block))
        return isinstance(instr.op, CpAsync)

    def before_copy(instr: Instr) -> bool:
        """A bar.sync whose next instruction with an effect is a copy."""
        block = instr.parent
        if not isinstance(instr.op, Bar) or block is None:
            return False
        for later in block.instrs[block.instrs.index(instr) + 1:]:
            if not later.op.pure:
                return is_copy(later)
        return False
    mutate(compiled, before_copy, lambda i: False)
    with pytest.raises(InterpretError, match="shared memory race"):
        run_lowered(compiled, mod.double_buffered_gemm, tuple(np.copy(x) for x in args), launch)

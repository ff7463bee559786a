"""Flash attention on sm_90a in the FlashAttention-3 manner: ``P`` stays in registers
as ``wgmma``'s A operand, a causal program stops at its diagonal and masks only the
blocks on it. Bits against the tile interpreter at several shapes; the structure on the
Target IR and the PTX; ptxas at the default tiles."""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.estimate import estimate
from tessera.backend.ptx.estimate.census import census, loops, trip_count
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.ir.core import walk
from tessera.ir.dialects.target import For
from tessera.ir.dialects.target.async_ops import Wgmma
from tessera.ir.dialects.target.ops import Store
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(33)


def config(bm: int, bn: int, **extra: Any) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=4 if bm == 64 else 8, num_stages=2, **extra)


def qkv(bh: int, seq: int, d: int) -> tuple[np.ndarray, ...]:
    return tuple(rng.standard_normal((bh, seq, d)).astype(BF16) for _ in range(3))


@pytest.mark.parametrize(("seq", "d", "bm", "bn", "causal"), [
    (256, 64, 64, 64, True), (256, 64, 64, 64, False), (256, 128, 128, 64, True),
    (192, 128, 64, 64, False), (256, 64, 64, 128, True), (128, 64, 128, 128, True)])
def test_bits_match_the_tile_interpreter(seq: int, d: int, bm: int, bn: int,
                                         causal: bool) -> None:
    q, k, v = qkv(2, seq, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=causal, backend="target",
                               target="sm_90a", config=config(bm, bn))


def test_attention_still_matches_float64_attention() -> None:
    from tessera.conformance.kernels.flash_attention import reference

    q, k, v = qkv(1, 256, 64)
    for causal in (True, False):
        out = ts.launch(flash_attention, None, (q, k, v), backend="target", target="sm_90a",
                        is_causal=causal, config=config(64, 64))
        err = np.abs(np.asarray(out).astype(np.float64) - reference(q, k, v, causal)).max()
        assert err <= 2.0**-8 * np.abs(v.astype(np.float64)).max() + 1e-4


def compiled(d: int, causal: bool, **extra: Any) -> Any:
    q = np.zeros((16, 2048, d), BF16)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(64, 64, **extra))


def test_p_is_wgmma_register_a_and_never_stored() -> None:
    fa3 = compiled(64, False)
    staged = compiled(64, False, register_a=False)
    ops = [i.op for i in walk(fa3.kernel)]
    # QK^T reads two descriptors (in the K/V ring's overlapped order twice: S_0 before
    # the loop, S_{m+1} in it); P @ V: one register-A wgmma per k16 step of the 64 keys
    overlapped = "overlaps the softmax" in fa3.kernel.attrs["kv_ring"]
    assert sum(isinstance(op, WgmmaRegA) for op in ops) == 64 // 16
    assert sum(type(op) is Wgmma for op in ops) == (2 if overlapped else 1) * (64 // 16)
    stores = [op for op in ops if isinstance(op, Store) and op.space == "shared"]
    staged_stores = [op for op in (i.op for i in walk(staged.kernel))
                     if isinstance(op, Store) and op.space == "shared"]
    assert len(staged_stores) - len(stores) == 64 * 64 // 128 // 2  # P's b32 pairs
    assert all(op.type != "b32" for op in stores)  # what is left: the ring's counters
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16 "
                     r"\{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+, %p\d+, 1, 1, 1;",
                     fa3.ptx)


def test_causal_programs_stop_at_the_diagonal() -> None:
    full, causal = compiled(64, False), compiled(64, True)
    grid = causal.kernel.attrs["grid"]
    trips = [trip_count(loop, grid) for loop, _, _ in loops(causal.kernel.body, grid=grid)]
    assert trips == [(2048 // 64 - 1) // 2 + 1, 1]  # mean 15.5 unmasked blocks, rounded
    assert census(causal.kernel).unknown_trips == 0
    # the unmasked loop's bound is the query block's: tile_m rounded down to BN
    loop = next(i for i in walk(causal.kernel) if isinstance(i.op, For))
    assert trip_count(loop, [1, 1, 1]) == 0 and trip_count(loop, [32, 1, 1]) == 16
    assert estimate(causal.kernel).flops < 0.55 * estimate(full.kernel).flops


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_no_advisory(d: int, causal: bool) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:
        stats = compiled(d, causal).assemble().stats["flash_attention"]  # advisories raise
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0


def test_register_a_wgmma_is_checked() -> None:
    from tessera.errors import IRVerifyError
    from tessera.ir.core import Block
    from tessera.ir.dialects.target import RegType
    from tessera.lower.emit import TargetEmitter

    block = Block()
    e = TargetEmitter(block)
    acc = block.add_arg(RegType("f32", 32))
    desc = block.add_arg(RegType("u64"))
    on = e.const(1, "pred")
    good = block.add_arg(RegType("b32", 4))
    e.one(WgmmaRegA(64, "bf16", "bf16", 0, 1), acc, good, desc, on)
    with pytest.raises(IRVerifyError, match="register A is reg<4xb32>"):
        e.one(WgmmaRegA(64, "bf16", "bf16", 0, 1), acc, desc, desc, on)
    with pytest.raises(IRVerifyError, match="untransposed bf16/f16"):
        e.one(WgmmaRegA(64, "e4m3", "e4m3", 0, 0), acc, good, desc, on)


def test_larger_p_tiles_keep_the_staged_form() -> None:
    """A 128x64 P is 64 values a thread: its fragments would sit beside two 64-row
    accumulators, so it is staged through shared memory as before."""
    q = np.zeros((1, 256, 64), BF16)
    big = ts.compile_kernel(flash_attention, q, q, q, is_causal=False, target="sm_90a",
                            config=config(128, 64))
    ops = [i.op for i in walk(big.kernel)]
    assert not any(isinstance(op, WgmmaRegA) for op in ops)
    assert any(isinstance(op, Store) and op.space == "shared" and op.type == "b32"
               for op in ops)

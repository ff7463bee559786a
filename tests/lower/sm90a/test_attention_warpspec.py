"""Warp-specialised flash attention on sm_90a (tessera.lower.sm90a.attention.split, .order): two
consumer warpgroups of 64 query rows over one K/V ring that a producer warpgroup fills.
The CTA's structure on Target IR, the bits against the one-warpgroup kernel and the tile
interpreter (every sanitizer of the Target IR interpreter on), the loads a CTA makes,
planted ordering bugs, ptxas, and the configurations that cannot have it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import _kv_block, flash_attention
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target import TargetFault, run_target
from tessera.ir.core import Block, Function, Instr, walk
from tessera.ir.dialects.target import For, If
from tessera.ir.dialects.target.async_ops import (
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
    WgmmaWait,
)
from tessera.ir.dialects.target.ops import Bar, Setp, Special
from tessera.ir.dialects.target.warp_ops import SetMaxNReg
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA
from tests.lower.sm90a.test_attention_ring import count_loads

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(90)


def config(warps: int = 12, stages: int = 2, bm: int = 64, bn: int = 64,
           **extra: Any) -> dict[str, Any]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages, **extra)


def qkv(bh: int, seq: int, d: int) -> tuple[np.ndarray, ...]:
    return tuple(rng.standard_normal((bh, seq, d)).astype(BF16) for _ in range(3))


def compiled(d: int = 64, causal: bool = False, seq: int = 2048, mode: str = "fast",
             **cfg: Any) -> Any:
    q = np.zeros((2, seq, d), BF16)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(**cfg), mode=mode)


def split(fn: Function) -> tuple[Block, Block]:
    """The producer's and the consumers' regions of the CTA's top-level ``ptx.if``."""
    (top,) = [i for i in fn.body.instrs if isinstance(i.op, If)
              and any(isinstance(j.op, SetMaxNReg) for j in walk(i.regions[0].block))]
    setp = top.operands[0].owner
    assert isinstance(setp, Instr) and isinstance(setp.op, Setp) and setp.op.cmp == "ge"
    tid = setp.operands[0].owner
    assert isinstance(tid, Instr) and isinstance(tid.op, Special) and tid.op.reg == "tid.x"
    return top.regions[0].block, top.regions[1].block


def key_loops(block: Block) -> list[Instr]:
    return [i for i in walk(block) if isinstance(i.op, For)
            and any(isinstance(j.op, WgmmaRegA) for j in walk(i.regions[0].block))]


def inside(loop: Instr, kind: type) -> list[Instr]:
    return [i for i in walk(loop.regions[0].block) if isinstance(i.op, kind)]


# ------------------------------------------------------------------------- structure
@pytest.mark.parametrize(("d", "causal"), [(64, False), (64, True), (128, False)])
def test_cta_is_two_consumers_and_a_producer(d: int, causal: bool) -> None:
    fn = compiled(d, causal, defer_pv=False).kernel  # the deferred P V: test_attention_defer
    assert fn.attrs["block"] == [384] and fn.attrs["grid"][0] == 2048 // 64 // 2
    assert fn.attrs["maxnreg"] == 168  # (2 * 240 + 24) / 3: the producer's release
    producer, consumers = split(fn)
    regs = [(i.op.count, i.op.inc) for i in walk(fn.body) if isinstance(i.op, SetMaxNReg)]
    assert sorted(regs) == [(24, False), (240, True)]  # FlashAttention-3's split
    # the producer loads every block after its stage's release: no wgmma, no release
    (fill,) = [i for i in walk(producer) if isinstance(i.op, For)]
    assert inside(fill, TmaLoad) and not inside(fill, WgmmaRegA)
    assert len(inside(fill, MbarrierWait)) == 2  # empty K, empty V
    assert all(i.op.tx == 64 * d * 2 for i in inside(fill, MbarrierArrive))
    # the consumers wait, compute and release; they never load K or V or synchronise
    loops = key_loops(consumers)
    assert len(loops) == (2 if causal else 1)
    for loop in loops:
        assert not inside(loop, TmaLoad) and not inside(loop, Bar)
        assert [i.op.tx for i in inside(loop, MbarrierArrive)] == [0, 0]  # empty K, V
        assert [i.op.n for i in inside(loop, WgmmaWait)] == [1, 0]  # S_{m+1} overlaps
    # every thread of both consumer warpgroups releases a stage
    inits = Counter(i.op.count for i in walk(fn.body) if isinstance(i.op, MbarrierInit))
    assert inits[256] == 2 * 2 and 128 not in inits
    assert "a producer warpgroup fills it for 2 consumer warpgroup(s)" in fn.attrs["kv_ring"]
    assert fn.attrs["ring_stages"] == 2


def test_a_last_cta_with_one_tile_expects_one_consumer() -> None:
    """320 rows are 5 tiles: the third CTA's second warpgroup has no tile, so that CTA
    initialises its empty barriers for 128 threads."""
    fn = compiled(64, True, seq=320).kernel
    assert fn.attrs["grid"][0] == 3
    inits = Counter(i.op.count for i in walk(fn.body) if isinstance(i.op, MbarrierInit))
    assert inits[256] == inits[128] == 2 * 2


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize(("seq", "d", "causal", "stages"), [
    (192, 64, True, 2), (320, 64, False, 2), (256, 128, True, 2), (192, 128, False, 3),
    (320, 128, True, 3), (448, 64, True, 3)])
def test_same_bits_as_one_warpgroup(seq: int, d: int, causal: bool, stages: int) -> None:
    """Each consumer runs the one-warpgroup kernel's products in its order: the same
    bits in fast mode (S not a multiple of 128 leaves a last CTA with one tile)."""
    q, k, v = qkv(2, seq, d)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=causal, mode="fast",
                                 config=config(warps, stages)))
            for warps in (12, 4)]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


@pytest.mark.parametrize(("seq", "d", "causal"), [(256, 64, True), (320, 128, False)])
def test_checked_mode_gives_the_tile_interpreters_bits(seq: int, d: int, causal: bool) -> None:
    q, k, v = qkv(1, seq, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=causal, backend="target",
                               target="sm_90a", config=config())


def test_fast_mode_stays_within_its_bound() -> None:
    q, k, v = qkv(2, 320, 64)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=True, backend="target",
                               target="sm_90a", mode="fast", config=config(stages=3))


def test_one_consumer_and_a_producer() -> None:
    """``num_warps=8`` with ``warp_specialize=True``: one consumer warpgroup."""
    c = compiled(64, True, seq=192, warps=8, warp_specialize=True)
    assert c.kernel.attrs["block"] == [256] and c.kernel.attrs["grid"][0] == 3
    q, k, v = qkv(1, 192, 64)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=True, mode="fast", config=cfg))
            for cfg in (config(8, warp_specialize=True), config(4))]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


# ---------------------------------------------------------------- the loads of a CTA
def test_the_two_tiles_of_a_cta_share_their_key_blocks(monkeypatch: Any) -> None:
    """Causal, 5 query tiles: CTAs (0, 1), (2, 3) and (4) load the blocks of their last
    tile once, 2 + 4 + 5 per tensor and batch (one warpgroup per tile loads 15)."""
    q, k, v = qkv(2, 320, 64)
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=True, target="sm_90a",
                          config=config())
    assert count_loads(monkeypatch, c, [q, k, v]) == [2 * 5, 2 * 11, 2 * 11]


# --------------------------------------------------------------------------- planted
def small(causal: bool = False) -> tuple[Any, list[np.ndarray]]:
    q, k, v = qkv(1, 384, 64)  # 6 key blocks: the two stages are refilled
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=causal, target="sm_90a",
                          config=config(), mode="fast")
    return c, [q, k, v]


def strip(block: Block, kind: type) -> None:
    """Remove ``kind`` from ``block`` and every region below it (a planted bug)."""
    block.instrs[:] = [i for i in block.instrs if not isinstance(i.op, kind)]
    for i in block.instrs:
        for r in i.regions:
            strip(r.block, kind)


def run(c: Any, arrays: list[np.ndarray]) -> None:
    args, _ = target_arguments(c, arrays)
    run_target(c.kernel, args)


def test_planted_missing_release_is_reported() -> None:
    """Consumers that never arrive on the empty barriers: the producer waits forever to
    refill the first stage."""
    c, arrays = small()
    (loop,) = key_loops(split(c.kernel)[1])
    strip(loop.regions[0].block, MbarrierArrive)
    with pytest.raises(TargetFault, match="never completes") as err:
        run(c, arrays)
    assert err.value.loc.file.endswith("flash_attention.py")


def test_planted_read_before_full_is_reported() -> None:
    """Consumers that read a stage without waiting for its full barrier: the wgmma
    reading K is reported at the kernel's S = Q Kᵀ line."""
    c, arrays = small()
    (loop,) = key_loops(split(c.kernel)[1])
    strip(loop.regions[0].block, MbarrierWait)
    with pytest.raises(TargetFault, match="async copy read before its wait") as err:
        run(c, arrays)
    source = (err.value.loc.file, err.value.loc.line)
    text = open(source[0]).read().splitlines()[source[1] - 1]
    assert "ts.tile.mma(smem_q, smem_k.T)" in text


def test_planted_refill_before_release_is_reported() -> None:
    """A producer that refills a stage without waiting for its release overwrites a
    block it is still loading (and the consumers may still read): reported at the K
    copy's line."""
    c, arrays = small()
    (fill,) = [i for i in walk(split(c.kernel)[0]) if isinstance(i.op, For)]
    strip(fill.regions[0].block, MbarrierWait)
    with pytest.raises(TargetFault, match="async copy overwritten before its wait") as err:
        run(c, arrays)
    source = (err.value.loc.file, err.value.loc.line)
    assert "ts.tile.cp_async(smem_k" in open(source[0]).read().splitlines()[source[1] - 1]


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_no_advisory(d: int, causal: bool) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = compiled(d, causal).assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
    assert stats.registers == 168  # the launch's count; setmaxnreg moves them


# ------------------------------------------------------------------ configurations
def test_insisting_on_a_tile_it_cannot_split_is_an_error() -> None:
    with pytest.raises(UnsupportedError, match="warp-specialised attention: a consumer "
                                               "warpgroup holds a 64-row tile") as err:
        compiled(64, True, bm=128, warps=8, warp_specialize=True)
    assert err.value.loc.file.endswith("flash_attention.py")


def test_num_warps_12_alone_falls_back_and_says_why() -> None:
    fn = compiled(64, True, bm=128, warps=12).kernel
    assert fn.attrs["block"] == [128]
    assert "one warpgroup (a consumer warpgroup holds a 64-row tile" in fn.attrs["kv_ring"]


def test_num_warps_8_alone_keeps_one_warpgroup() -> None:
    fn = compiled(64, False, warps=8).kernel
    assert fn.attrs["block"] == [128] and "one warpgroup;" in fn.attrs["kv_ring"]


def test_key_block_orders_of_a_cta() -> None:
    """The causal tiles 2 and 3 read blocks 0..2 and 0..3: a prefix one block shorter,
    so they share a ring."""
    from tessera.lower.sm90a.attention.order import block_sequence, sharing_problem
    from tessera.lower.sm90a.attention.plan import match_kv_loops

    q = np.zeros((1, 512, 64), BF16)
    fn = ts.compile_kernel(flash_attention, q, q, q, is_causal=True, target="sm_90a",
                           config=config()).tile
    matched = match_kv_loops(fn)
    assert matched is not None
    loops = matched[0]
    starts = [[k[0] for k, _ in block_sequence(fn, loops, g)] for g in (2, 3)]
    assert starts == [[0, 64, 128], [0, 64, 128, 192]]
    assert sharing_problem(fn, loops, 2) is None


def test_smaller_key_blocks_of_a_causal_cta_keep_one_warpgroup() -> None:
    """With 32-row key blocks a causal CTA's first tile reads two blocks fewer than its
    second (its diagonal is two blocks): not offered (attention.order's module doc says why)."""
    fn = compiled(64, True, seq=384, bn=32).kernel
    assert fn.attrs["block"] == [128]
    assert "one warpgroup (query tile 0 reads 2 blocks fewer than tile 1" in fn.attrs["kv_ring"]
    # non-causal tiles read the same blocks: shared, whatever their height
    assert compiled(64, False, seq=384, bn=32).kernel.attrs["block"] == [384]


def _later_keys(Q: ts.Tensor["B*H", "S", "D", ts.bf16], K: ts.Tensor["B*H", "S", "D", ts.bf16],
                V: ts.Tensor["B*H", "S", "D", ts.bf16]) -> ts.Tensor["B*H", "S", "D", ts.bf16]:
    """Attention of each query block to the keys from its own block on: the tiles of a
    CTA read different key blocks."""
    ctx = ts.tile.context()
    BM = ctx.BLOCK_M
    q_block = tile_m  # the tile's row offset, bound by the frontend
    smem_q = ts.tile.alloc_shared((BM, ctx.D), ts.bf16)
    smem_k = ts.tile.alloc_shared((ctx.BLOCK_N, ctx.D), ts.bf16)
    smem_v = ts.tile.alloc_shared((ctx.BLOCK_N, ctx.D), ts.bf16)
    ts.tile.cp_async(smem_q, Q[q_block:q_block + BM])
    acc = ts.tile.zeros((BM, ctx.D), ts.f32)
    m_i = ts.tile.full((BM,), -float("inf"), ts.f32)
    l_i = ts.tile.zeros((BM,), ts.f32)
    for kv_block in ts.tile.range(q_block, ctx.S, ctx.BLOCK_N):
        acc, m_i, l_i = _kv_block(smem_q, smem_k, smem_v, K, V, kv_block, q_block, acc,
                                  m_i, l_i, False, 0.125)
    return ts.tile.cast(acc / l_i[:, None], ts.bf16)


def test_tiles_that_read_different_blocks_keep_one_warpgroup() -> None:
    kernel = ts.kernel(_later_keys)
    q = np.zeros((1, 256, 64), BF16)
    fn = ts.compile_kernel(kernel, q, q, q, target="sm_90a", config=config()).kernel
    assert fn.attrs["block"] == [128]
    assert "one warpgroup (query tile 0 reads key blocks that are not a prefix of tile " \
           "1's)" in fn.attrs["kv_ring"]
    with pytest.raises(UnsupportedError, match="not a prefix"):
        ts.compile_kernel(kernel, q, q, q, target="sm_90a",
                          config=config(warp_specialize=True))

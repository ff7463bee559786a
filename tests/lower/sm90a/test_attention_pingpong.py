"""The ping-pong schedule of warp-specialised flash attention on sm_90a
(``schedule="pingpong"``, tessera.lower.sm90a.attention.loop and turns): the two consumer
warpgroups take turns issuing ``S = Q Kᵀ`` (FlashAttention-3, sec. 3.1). Its barriers,
its bits against the cooperative CTA and the tile interpreter, ptxas, the shapes it
refuses, and a planted deadlock."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.errors import UnsupportedError
from tessera.interp.target.barriers import BarrierDeadlock
from tessera.ir.core import walk
from tessera.ir.dialects.target import If
from tessera.ir.dialects.target.ops import Bar, BarArrive
from tests.lower.sm90a.test_attention_warpspec import (
    compiled,
    config,
    key_loops,
    qkv,
    run,
    split,
)

PINGPONG = {"schedule": "pingpong"}


def test_the_consumers_take_turns_at_the_scores() -> None:
    """One turn before the key loop and one per block: bar.sync on the warpgroup's own
    barrier (3 or 4, of 256 threads) and bar.arrive on the other's, beside the
    warpgroups' own barriers 1 and 2 (128 threads); warpgroup 1 starts by arriving."""
    c = compiled(64, False, seq=512, **PINGPONG)
    assert c.kernel.attrs["block"] == [384]
    consumer = split(c.kernel)[1]
    (loop,) = key_loops(consumer)
    body = list(walk(loop.regions[0].block))
    turns = {(i.op.id, i.op.count) for i in body if isinstance(i.op, Bar) and i.op.id > 2}
    arrives = sorted((i.op.id, i.op.count) for i in body if isinstance(i.op, BarArrive))
    assert turns == {(3, 256), (4, 256)} and arrives == [(3, 256), (4, 256)]
    before = sorted((i.op.id, i.op.count) for i in walk(consumer)
                    if isinstance(i.op, BarArrive) and i not in body)
    # the start, the first turn's hand-overs and those of the empty turn of a tile one
    # block short of the other (none here: the launch is not causal)
    assert before == [(3, 256), (3, 256), (3, 256), (4, 256), (4, 256)]
    assert "taking turns (ping-pong)" in c.kernel.attrs["kv_ring"]
    cooperative = compiled(64, False, seq=512)
    assert "bar.arrive" not in cooperative.ptx and "bar.arrive 4, 256;" in c.ptx


@pytest.mark.parametrize(("seq", "d", "causal", "stages"), [
    (256, 64, False, 2), (384, 128, False, 2), (512, 64, False, 3), (256, 64, True, 2),
    (512, 128, True, 3)])
def test_same_bits_as_the_cooperative_cta(seq: int, d: int, causal: bool,
                                          stages: int) -> None:
    """Causal: each CTA's first tile reads one block fewer and takes an empty turn."""
    q, k, v = qkv(2, seq, d)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=causal, mode="fast",
                                 config=config(12, stages, **extra)))
            for extra in (PINGPONG, {})]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


def test_checked_mode_gives_the_tile_interpreters_bits() -> None:
    q, k, v = qkv(1, 256, 64)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=False, backend="target",
                               target="sm_90a", config=config(**PINGPONG))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_ptxas_no_spills_no_advisory(d: int, causal: bool) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:
        stats = compiled(d, causal, **PINGPONG).assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
    assert stats.registers == 168


@pytest.mark.parametrize(("seq", "causal", "extra", "why"), [
    (256, True, {"bn": 32}, "at most one fewer is offered"),
    (320, False, {}, "the last CTA has 1 of 2 query tiles"),
    (256, False, {"warps": 8}, "alternates two consumer warpgroups"),
    (256, False, {"overlap_softmax": False}, "needs the overlapped order"),
])
def test_shapes_it_refuses(seq: int, causal: bool, extra: dict[str, Any], why: str) -> None:
    with pytest.raises(UnsupportedError, match=why) as err:
        compiled(64, causal, seq=seq, **{**PINGPONG, **extra})
    assert err.value.loc is not None and err.value.loc.file.endswith("flash_attention.py")


def test_planted_missing_first_turn_is_a_deadlock() -> None:
    """Without warpgroup 1's first arrival each consumer waits for the other's turn:
    reported at the kernel's S = Q Kᵀ line."""
    q, k, v = qkv(1, 256, 64)
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=False, target="sm_90a",
                          mode="fast", config=config(**PINGPONG))
    start = next(i for i in walk(split(c.kernel)[1]) if isinstance(i.op, If)
                 and [j.op for j in i.regions[1].block.instrs
                      if isinstance(j.op, BarArrive)] == [BarArrive(3, 256)]
                 and not i.regions[0].block.instrs[:-1])
    block = next(b for b in (r.block for i in walk(c.kernel.body) for r in i.regions)
                 if start in b.instrs)
    block.instrs.remove(start)
    with pytest.raises(BarrierDeadlock, match=r"never completes: 128 of 256") as err:
        run(c, [q, k, v])
    text = open(err.value.loc.file).read().splitlines()[err.value.loc.line - 1]
    assert "ts.tile.mma(smem_q, smem_k.T)" in text


def test_planted_missing_empty_turn_is_a_deadlock() -> None:
    """Causal: a CTA's first tile reads one block fewer than its second; without its
    empty turn after the key loops the second warpgroup waits for its last turn."""
    q, k, v = qkv(1, 256, 64)
    c = ts.compile_kernel(flash_attention, q, k, v, is_causal=True, target="sm_90a",
                          mode="fast", config=config(**PINGPONG))
    loop = key_loops(split(c.kernel)[1])[-1]
    block = next(b for b in (r.block for i in walk(c.kernel.body) for r in i.regions)
                 if loop in b.instrs)
    after = block.instrs[block.instrs.index(loop) + 1:]
    (empty,) = [i for i in after if isinstance(i.op, If) and any(
        isinstance(j.op, Bar) and j.op.id == 3 for j in walk(i.regions[0].block))]
    block.instrs.remove(empty)
    with pytest.raises(BarrierDeadlock, match=r"bar\.sync 4, 256 never completes: 128 of "
                                              r"256 threads arrived") as err:
        run(c, [q, k, v])
    text = open(err.value.loc.file).read().splitlines()[err.value.loc.line - 1]
    assert "ts.tile.mma(smem_q, smem_k.T)" in text

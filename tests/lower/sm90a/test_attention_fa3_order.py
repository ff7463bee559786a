"""FlashAttention-3's order of sm_90a attention's key loops (``defer_pv="fa3"``,
:mod:`tessera.lower.sm90a.attention.fa3`): ``S_m`` and ``P_{m-1} V_{m-1}`` issued together,
``wait_group 1`` before the softmax, the first and last blocks peeled. The structure on
Target IR, the bits against the overlapped order (fast) and the tile interpreter
(checked), causal attention (whose query tiles read different numbers of key blocks),
ptxas, and where it is refused."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.errors import ArgumentError
from tessera.ir.core import Instr, walk
from tessera.ir.dialects.target import For, If
from tessera.ir.dialects.target.async_ops import Fence, Wgmma, WgmmaWait
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA
from tests.lower.sm90a.test_attention_warpspec import config, qkv, split

BF16 = ml_dtypes.bfloat16
FA3 = {"defer_pv": "fa3"}


def compiled(d: int = 128, bn: int = 128, causal: bool = False, seq: int = 1024,
             mode: str = "fast", **cfg: Any) -> Any:
    q = np.zeros((2, seq, d), BF16)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(bn=bn, **FA3, **cfg), mode=mode)


def scores_loop(block: Any) -> Instr:
    """The key loop: the ``for`` whose body issues both products."""
    (loop,) = [i for i in walk(block) if isinstance(i.op, For)
               and any(isinstance(j.op, WgmmaRegA) for j in walk(i.regions[0].block))]
    return loop


def sequence(block: Any) -> list[str]:
    """The body's products, waits and fences in order: ``S`` (a Q Kᵀ wgmma group),
    ``PV`` (a register-A group), ``wait n``, ``fence``."""
    out: list[str] = []
    for i in walk(block):
        if type(i.op) is Wgmma and (not out or out[-1] != "S"):
            out.append("S")
        elif isinstance(i.op, WgmmaRegA) and (not out or out[-1] != "PV"):
            out.append("PV")
        elif isinstance(i.op, WgmmaWait):
            out.append(f"wait {i.op.n}")
        elif isinstance(i.op, Fence) and i.op.kind == "acq_rel_cta":
            out.append("fence")
    return out


# ------------------------------------------------------------------------- structure
@pytest.mark.parametrize(("d", "warps"), [(128, 12), (64, 12), (128, 4)])
def test_both_products_then_wait_group_1_then_the_softmax(d: int, warps: int) -> None:
    fn = compiled(d, 128 if warps == 12 else 64, warps=warps).kernel
    body = split(fn)[1] if warps == 12 else fn.body
    loop = scores_loop(body)
    # the fence keeps ptxas from moving wait_group 0 above the softmax
    assert sequence(loop.regions[0].block) == ["S", "PV", "wait 1", "fence", "wait 0"]
    # no select of the accumulator or of the scores in the loop: no ptx.if at all
    # besides the ring's own waits' branches is carrying values
    assert not [i for i in walk(loop.regions[0].block) if isinstance(i.op, If) and i.results]
    # the peeled first block (S, waited) comes before the loop, the last P V after it
    outer = loop.parent
    assert outer is not None
    order = sequence(outer)
    at = order.index("S")
    assert order[at:at + 2] == ["S", "wait 0"] and order[-2:] == ["PV", "wait 0"]
    assert "FlashAttention-3's order" in fn.attrs["kv_ring"]


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize(("seq", "d", "bn", "extra"), [
    (256, 128, 128, {}), (128, 128, 128, {}), (384, 64, 128, {"schedule": "pingpong"}),
    (320, 128, 64, {}), (320, 128, 64, {"warps": 4}), (256, 64, 64, {"warps": 4, "stages": 3})])
def test_same_bits_as_the_overlapped_order(seq: int, d: int, bn: int,
                                           extra: dict[str, Any]) -> None:
    """The same products in the same order: bit for bit the overlapped order's output
    (one block a loop, when only the peeled block runs, included)."""
    _orders_agree(seq, d, bn, extra, causal=False)


def _orders_agree(seq: int, d: int, bn: int, extra: dict[str, Any], causal: bool) -> None:
    """FlashAttention-3's order and the overlapped order give the same bits (fast)."""
    q, k, v = qkv(1, seq, d)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=causal, mode="fast",
                                 config=config(bn=bn, **order, **extra))).view(np.uint16)
            for order in (FA3, {})]
    assert np.array_equal(outs[0], outs[1])


def test_checked_mode_gives_the_tile_interpreters_bits() -> None:
    q, k, v = qkv(1, 384, 128)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=False, backend="target",
                               target="sm_90a", config=config(bn=128, **FA3))


# --------------------------------------------------------------------------- causal
@pytest.mark.parametrize(("d", "bn", "warps"), [(128, 64, 12), (64, 128, 12), (128, 64, 4)])
def test_every_causal_loop_takes_the_order(d: int, bn: int, warps: int) -> None:
    """Both key loops of a causal kernel (the blocks before the diagonal and those on
    it) issue both products, then wait_group 1, then the softmax."""
    fn = compiled(d, bn, causal=True, seq=512, warps=warps).kernel
    body = split(fn)[1] if warps == 12 else fn.body
    loops = [i for i in walk(body) if isinstance(i.op, For)
             and any(isinstance(j.op, WgmmaRegA) for j in walk(i.regions[0].block))]
    assert len(loops) == 2
    for loop in loops:
        assert sequence(loop.regions[0].block) == ["S", "PV", "wait 1", "fence", "wait 0"]
    assert "FlashAttention-3's order" in fn.attrs["kv_ring"]


def test_causal_tiles_read_no_one_or_more_blocks_before_the_diagonal() -> None:
    """The trip counts the peeled loop meets in a causal kernel at 64x64 blocks: tile 0
    reads no block before its diagonal (the loop keeps its values), tile 1 one (the
    peeled first and last blocks alone), later tiles more; every diagonal is one
    (masked) block, a loop of its own."""
    from tessera.lower.sm90a.attention.order import block_sequence, match_kv_loops

    tile = compiled(64, 64, causal=True, seq=256).tile
    found = match_kv_loops(tile)
    assert found is not None
    counts = [tuple(len(block_sequence(tile, (kv,), g)) for kv in found[0]) for g in range(4)]
    assert counts == [(0, 1), (1, 1), (2, 1), (3, 1)]


#: (S, D, BLOCK_N, config): at 64x64 blocks tile 0 reads its diagonal block alone (its
#: first loop has no block), tile 1 one block before it (only the peeled first and last
#: blocks), and the two tiles of a CTA one block apart
CAUSAL = [(256, 64, 64, {}), (512, 64, 64, {}), (384, 128, 64, {}), (512, 128, 128, {}),
          (384, 64, 128, {"schedule": "pingpong"}), (320, 128, 64, {"warps": 4}),
          (512, 64, 64, {"warps": 4, "stages": 3})]


@pytest.mark.parametrize(("seq", "d", "bn", "extra"), CAUSAL)
def test_causal_attention_has_the_overlapped_orders_bits(seq: int, d: int, bn: int,
                                                         extra: dict[str, Any]) -> None:
    """Query tiles that read different numbers of key blocks, each loop's last V block
    released after it: bit for bit the overlapped order's output."""
    _orders_agree(seq, d, bn, extra, causal=True)


@pytest.mark.parametrize(("seq", "d", "bn"), [(384, 64, 64), (256, 128, 64), (512, 128, 128)])
def test_causal_checked_mode_gives_the_tile_interpreters_bits(seq: int, d: int,
                                                              bn: int) -> None:
    q, k, v = qkv(1, seq, d)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=True, backend="target",
                               target="sm_90a", config=config(bn=bn, **FA3))


def test_causal_ctas_hang_in_lockstep_and_run_independently() -> None:
    """Why the interpreter runs this kernel with independent CTAs: in lockstep a CTA's
    shorter tile stays in its loop while the longer one runs on, and the longer one's
    last block waits for a stage only the shorter one's release after its loop frees.
    Run independently, the kernel gives the overlapped order's bits."""
    from tessera.frontend.kernel.backends.compile import target_arguments
    from tessera.interp.target import run_target
    from tessera.interp.target.state import TargetFault

    q, k, v = qkv(1, 384, 64)
    kernel = ts.compile_kernel(flash_attention, q, k, v, is_causal=True, target="sm_90a",
                               config=config(bn=64, **FA3), mode="fast")
    want = np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                target="sm_90a", is_causal=True, mode="fast",
                                config=config(bn=64)))
    prep, _ = flash_attention.specialise((q, k, v), {"is_causal": True})
    args, _ = target_arguments(kernel, prep.runtime)
    with pytest.raises(TargetFault, match="mbarrier phase never completes"):
        run_target(kernel.kernel, args, ctas="lockstep")
    args, out = target_arguments(kernel, prep.runtime)
    run_target(kernel.kernel, args, ctas="independent")
    assert np.array_equal(out.view(np.uint16), want.view(np.uint16))


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize(("d", "bn", "causal", "extra"), [
    (128, 128, False, {}), (128, 128, False, {"schedule": "pingpong"}), (64, 128, False, {}),
    (128, 64, False, {}), (128, 64, False, {"warps": 4}), (128, 128, True, {}),
    (64, 128, True, {}), (128, 64, True, {}), (64, 64, True, {}),
    (128, 128, True, {"schedule": "pingpong"}), (128, 64, True, {"warps": 4})])
def test_ptxas_no_spills_no_advisory(d: int, bn: int, causal: bool,
                                     extra: dict[str, Any]) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = compiled(d, bn, causal, **extra).assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0


# ---------------------------------------------------------------------------- refusals
def test_an_unknown_order_is_refused() -> None:
    with pytest.raises(ArgumentError, match="defer_pv='later' should be True, False or 'fa3'"):
        q = np.zeros((1, 256, 64), BF16)
        ts.compile_kernel(flash_attention, q, q, q, is_causal=False, target="sm_90a",
                          config=config(defer_pv="later"))

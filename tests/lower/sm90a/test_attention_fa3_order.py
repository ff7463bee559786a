"""FlashAttention-3's order of sm_90a attention's key loops (``defer_pv="fa3"``,
:mod:`tessera.lower.sm90a.kvfa3`): ``S_m`` and ``P_{m-1} V_{m-1}`` issued together,
``wait_group 1`` before the softmax, the first and last blocks peeled. The structure on
Target IR, the bits against the overlapped order (fast) and the tile interpreter
(checked), ptxas, and where it is refused."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.errors import UnsupportedError
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
    q, k, v = qkv(1, seq, d)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=False, mode="fast",
                                 config=config(bn=bn, **order, **extra))).view(np.uint16)
            for order in (FA3, {})]
    assert np.array_equal(outs[0], outs[1])


def test_checked_mode_gives_the_tile_interpreters_bits() -> None:
    q, k, v = qkv(1, 384, 128)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=False, backend="target",
                               target="sm_90a", config=config(bn=128, **FA3))


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize(("d", "bn", "extra"), [
    (128, 128, {}), (128, 128, {"schedule": "pingpong"}), (64, 128, {}), (128, 64, {}),
    (128, 64, {"warps": 4})])
def test_ptxas_no_spills_no_advisory(d: int, bn: int, extra: dict[str, Any]) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = compiled(d, bn, **extra).assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0


# ---------------------------------------------------------------------------- refusals
def test_refused_where_tiles_read_different_numbers_of_blocks() -> None:
    """A causal kernel's tiles differ: the order releases a loop's last V block after
    the loop, where the interpreter's consumers, in lockstep, would wait for the
    longest tile's loop. The error names the kernel's line and a tile that differs."""
    with pytest.raises(UnsupportedError, match="every query tile must read as many key "
                       "blocks: query tile 1 reads") as err:
        compiled(128, 64, causal=True, seq=256)
    assert err.value.loc.file.endswith("flash_attention.py")
    with pytest.raises(UnsupportedError, match="defer_pv='later'"):
        q = np.zeros((1, 256, 64), BF16)
        ts.compile_kernel(flash_attention, q, q, q, is_causal=False, target="sm_90a",
                          config=config(defer_pv="later"))

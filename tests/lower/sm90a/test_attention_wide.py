"""Warp-specialised sm_90a attention with 64x128 score blocks (FlashAttention-3's shape):
each consumer warpgroup holds ``P`` of a 64x128 block in registers as the ``P V``
``wgmma``'s register A, under ``setmaxnreg`` 240. The structure on Target IR, the bits
against the one-warpgroup kernel (which stages ``P`` of such a block through shared
memory) and the tile interpreter, ptxas, and what the plan says."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.ir.core import walk
from tessera.ir.dialects.target.async_ops import Wgmma, WgmmaWait
from tessera.ir.dialects.target.ops import Store
from tessera.ir.dialects.target.warp_ops import SetMaxNReg
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA
from tests.lower.sm90a.test_attention_warpspec import config, inside, key_loops, qkv, split

BF16 = ml_dtypes.bfloat16


def compiled(d: int = 128, causal: bool = False, seq: int = 1024, mode: str = "fast",
             **cfg: Any) -> Any:
    q = np.zeros((2, seq, d), BF16)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config(bn=128, **cfg), mode=mode)


def shared_pairs(c: Any) -> int:
    """``st.shared.b32`` of the kernel: the bf16 pairs of a ``P`` staged for ``wgmma``."""
    return sum(isinstance(i.op, Store) and i.op.space == "shared" and i.op.type == "b32"
               for i in walk(c.kernel.body))


# ------------------------------------------------------------------------- structure
@pytest.mark.parametrize(("d", "causal"), [(128, False), (128, True), (64, False)])
def test_p_of_a_64x128_block_stays_in_registers(d: int, causal: bool) -> None:
    c = compiled(d, causal)
    fn = c.kernel
    assert fn.attrs["block"] == [384] and fn.attrs["maxnreg"] == 168
    regs = sorted((i.op.count, i.op.inc) for i in walk(fn.body) if isinstance(i.op, SetMaxNReg))
    assert regs == [(24, False), (240, True)]
    _, consumers = split(fn)
    for loop in key_loops(consumers):
        # P V: one register-A wgmma per k16 step of the 128 keys, n = D
        pv = inside(loop, WgmmaRegA)
        assert len(pv) == 128 // 16 and {i.op.n for i in pv} == {d}
        # S_{m+1} = Q K^T: 128-wide, one per k16 step of D, issued before the softmax
        qk = [i for i in inside(loop, Wgmma) if type(i.op) is Wgmma]
        assert len(qk) == d // 16 and {i.op.n for i in qk} == {128}
        assert [i.op.n for i in inside(loop, WgmmaWait)] == [1, 0]
    assert shared_pairs(c) == 0  # nothing of P is stored
    assert "2 consumer warpgroup(s)" in fn.attrs["kv_ring"]
    assert "S of the next block overlaps the softmax" in fn.attrs["kv_ring"]


def test_one_warpgroup_stages_p_of_a_64x128_block() -> None:
    """Without the consumers' registers P of a 64x128 block goes through shared memory,
    and the plan says so."""
    c = compiled(128, warps=4)
    assert c.kernel.attrs["block"] == [128]
    assert shared_pairs(c) == 64 * 128 // 128 // 2
    assert "P of a 64x128 block is staged through shared memory" in c.kernel.attrs["kv_ring"]


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize(("seq", "d", "causal"), [(256, 128, True), (384, 64, False)])
def test_same_bits_as_one_warpgroup(seq: int, d: int, causal: bool) -> None:
    """Register A and the staged P are the same bf16 values in the same products."""
    q, k, v = qkv(2, seq, d)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=causal, mode="fast",
                                 config=config(warps, bn=128)))
            for warps in (12, 4)]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


def test_checked_mode_gives_the_tile_interpreters_bits() -> None:
    q, k, v = qkv(1, 256, 128)
    ts.check_against_reference(flash_attention, q, k, v, is_causal=True, backend="target",
                               target="sm_90a", config=config(bn=128))


def test_pingpong_gives_the_same_bits() -> None:
    q, k, v = qkv(1, 512, 64)
    outs = [np.asarray(ts.launch(flash_attention, None, (q, k, v), backend="target",
                                 target="sm_90a", is_causal=False, mode="fast",
                                 config=config(bn=128, **extra)))
            for extra in ({"schedule": "pingpong"}, {})]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize(("d", "causal", "mode", "extra"), [
    (128, False, "fast", {}), (128, True, "checked", {}), (64, True, "fast", {}),
    (128, False, "fast", {"schedule": "pingpong"}),
    (128, True, "fast", {"warps": 8, "warp_specialize": True})])
def test_ptxas_no_spills_no_advisory(d: int, causal: bool, mode: str,
                                     extra: dict[str, Any]) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    try:  # assemble raises on any ptxas advisory (a serialised wgmma, say)
        stats = compiled(d, causal, mode=mode, **extra).assemble().stats["flash_attention"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0


def test_p_v_waits_in_its_block_at_64x128() -> None:
    """Deferring P V a block would hold the next and this score tiles, the previous P
    and the accumulator (224 values a thread at D=128), which spills under 240
    registers: the plan says so, and insisting is an error at the kernel's line."""
    from tessera.errors import UnsupportedError

    line = compiled(128).kernel.attrs["kv_ring"]
    assert "P V waited in its block (registers:" in line and "224 values" in line
    with pytest.raises(UnsupportedError, match="224 values") as err:
        compiled(128, defer_pv=True)
    assert err.value.loc.file.endswith("flash_attention.py")

"""Persistent CTAs for the warp-specialised sm_90a GEMM (tessera.lower.sm90a.persistent):
the bits of the tile interpreter whatever the number of CTAs and tiles (the ring's
stages and phases carried from tile to tile), the structure (one CTA an SM, each
branch walking the tiles, the last stage of each tile released), ptxas's statistics,
the static estimate and the kernels that cannot walk their tiles."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import UnsupportedError
from tessera.ir.core import walk
from tessera.ir.dialects.target import For
from tessera.ir.dialects.target.async_ops import MbarrierArrive, WgmmaWait
from tessera.ir.dialects.target.ops import SharedAlloc, Special, Unpack
from tessera.ir.dialects.target.warp_ops import SetMaxNReg
from tessera.lower.sm90a import persistent
from tests.lower.sm90a import epilogue_kernels as ek
from tests.lower.sm90a.epilogue_kernels import product
from tests.lower.sm90a.test_pipeline import GEMM, compile_gemm, loops, operands, split

PERSISTENT = {"persistent": True}


@ts.kernel
def returns_its_tile(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16]
                     ) -> ts.Tensor["M", "N", ts.f32]:
    return product(A, B)


@settings(max_examples=8, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 3), k_steps=st.integers(1, 5),
       sms=st.integers(1, 7), config=st.sampled_from([
           {}, {"num_warps": 12}, {"group_m": 1}, {"tma_store": False},
           {"num_stages": 2}, {"num_warps": 12, "tma_store": False}]),
       output=st.sampled_from(["f32", "bf16", "bias_relu_bf16"]),
       seed=st.integers(0, 2**31 - 1))
def test_the_bits_whatever_the_ctas_and_tiles(rows: int, cols: int, k_steps: int, sms: int,
                                              config: dict[str, Any], output: str,
                                              seed: int) -> None:
    """``sms`` CTAs walk ``rows x cols`` tiles of ``k_steps`` K steps each: every tile's
    stages continue its CTA's ring (a K count that the stages do not divide wraps them
    across tiles), a fused epilogue reads its tile's bias, and the result is the tile
    interpreter's, bit for bit."""
    assume(output != "bias_relu_bf16" or config.get("num_warps") != 12)  # not split
    tile = (128, 128, 64)
    a, b, c = operands(128 * rows, 128 * cols, 64 * k_steps, seed)
    kernel, args = GEMM, (a, b, c)
    if output != "f32":
        c = c.astype(ml_dtypes.bfloat16)
        kernel, args = ek.gemm_bf16, (a, b, c)
    if output == "bias_relu_bf16":
        bias = np.random.default_rng(seed).standard_normal(c.shape[1]).astype(np.float32)
        kernel, args = ek.gemm_bias_relu_bf16, (a, b, bias, c)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(persistent, "SMS", sms)
        cfg = {**config, **PERSISTENT}
        compiled = ts.compile_kernel(kernel, *args, target="sm_90a", tile_shape=tile,
                                     config=cfg)
        assert compiled.grid[0] == min(sms, rows * cols)
        ts.check_against_reference(kernel, *args, backend="target", target="sm_90a",
                                   tile_shape=tile, config=cfg)


def _walks(block: Any) -> list[Any]:
    """The loops of ``block`` with loops inside: the walks over the tiles."""
    return [i for i in loops(block)
            if any(isinstance(j.op, For) for j in walk(i.regions[0].block))]


def test_each_branch_walks_the_tiles_once_set_up() -> None:
    """One CTA an SM; ``setmaxnreg`` once a branch, before its walk over the tiles
    (``for t = ctaid.x; t < tiles; t += nctaid.x``), inside which the K loops run; the
    consumers release each tile's last stage after its ``wgmma.wait_group 0``; the TMA
    staging tile has shared memory of its own (the ring refills meanwhile)."""
    compiled = compile_gemm(8192, 8192, 512, (128, 128, 64), PERSISTENT)
    fn = compiled.kernel
    assert compiled.grid == (132, 1, 1) and fn.attrs["persistent"] == \
        "132 CTAs walk 4096 output tiles"
    assert fn.attrs["epilogue"] == "tma_store"
    assert any(isinstance(i.op, SharedAlloc) and i.op.sym.startswith("epi_stage")
               for i in walk(fn.body))
    branch = split(fn)
    for region in branch.regions:
        block = region.block
        walks = _walks(block)
        assert len(walks) == 1
        step = walks[0].operands[2].owner.operands[0].owner
        assert isinstance(step.op, Special) and step.op.reg == "nctaid.x"
        assert all(not isinstance(i.op, SetMaxNReg) for i in walk(walks[0].regions[0].block))
        assert sum(isinstance(i.op, SetMaxNReg) for i in walk(block)) == 1
    body = _walks(branch.regions[1].block)[0].regions[0].block.instrs
    waits = [k for k, i in enumerate(body) if isinstance(i.op, WgmmaWait) and i.op.n == 0]
    assert len(waits) == 1  # the tile's K loop has drained: its last stage goes back
    after = [type(i.op) for i in body[waits[0]:]]
    assert MbarrierArrive in after[:after.index(Unpack)]  # before the epilogue


@pytest.mark.parametrize(("tile", "config"), [((128, 128, 64), {}),
                                              ((128, 256, 64), {"num_warps": 12}),
                                              ((256, 128, 64), {"num_warps": 12})])
def test_ptxas_assembles_without_spills(tile: tuple[int, int, int],
                                        config: dict[str, Any]) -> None:
    from tessera.backend.ptx.driver.assemble import ToolchainMissing

    compiled = compile_gemm(8192, 8192, 8192, tile, {**config, **PERSISTENT})
    try:  # assemble raises on any ptxas advisory
        stats = compiled.assemble().stats["gemm"]
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
    assert stats.spill_stores == stats.spill_loads == stats.stack_frame == 0


def test_the_estimate_counts_each_ctas_tiles() -> None:
    """The walk's trip count (a step of ``nctaid.x``) is known to the static estimate:
    each of the 132 CTAs runs 8 of the 1024 tiles' 64 K steps (the mean, 7.76, rounded),
    and the launch takes the time of 1024 CTAs of one tile (the model does not see the
    overlap of one tile's epilogue with the next tile's loads)."""
    from tessera.backend.ptx.estimate import estimate_compiled

    a, b, c = (np.zeros((4096, 4096), ml_dtypes.bfloat16),) * 2 + (
        np.zeros((4096, 4096), np.float32),)
    one, walk = (estimate_compiled(compile_gemm(4096, 4096, 4096, (128, 128, 64), cfg),
                                   [a, b, c]) for cfg in ({}, PERSISTENT))
    assert (one.ctas, one.runs, walk.ctas, walk.runs) == (1024, 64, 132, 8 * 64)
    assert walk.seconds == pytest.approx(one.seconds, rel=0.01)


@pytest.mark.parametrize(("target", "config", "kernel", "why"), [
    ("sm_90a", {"schedule": "pingpong"}, GEMM, "takes turns per K step"),
    ("sm_90a", {"warp_specialize": False}, GEMM, "does not lower to it"),
    ("sm_80", {}, GEMM, "this kernel on sm_80 does not lower to it"),
    ("sm_90a", {}, returns_its_tile, "the kernel returns a tile"),
])
def test_kernels_that_cannot_walk_their_tiles(target: str, config: dict[str, Any],
                                              kernel: Any, why: str) -> None:
    a, b, c = operands(256, 256, 128)
    args = (a, b) if kernel is returns_its_tile else (a, b, c)
    tile = (128, 128, 64 if target == "sm_90a" else 32)
    with pytest.raises(UnsupportedError, match=f"persistent=True: .*{why}") as info:
        ts.compile_kernel(kernel, *args, target=target, tile_shape=tile,
                          config={**config, **PERSISTENT})
    assert info.value.hint == "drop persistent (one CTA per output tile)"


def test_independent_ctas_and_either_order_give_the_same_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three CTAs walk 12 tiles of 5 K steps: run in lockstep and as one task a
    warpgroup (a producer a tile ahead of its consumers), in both CTA orders, the
    launch writes the same bits."""
    from tessera.frontend.kernel.backends.compile import target_arguments
    from tessera.interp.target import run_target

    monkeypatch.setattr(persistent, "SMS", 3)
    a, b, c = operands(512, 384, 320, seed=4)
    launch = {"tile_shape": (128, 128, 64), "config": PERSISTENT}
    compiled = ts.compile_kernel(GEMM, a, b, c, target="sm_90a", **launch)
    outs = []
    for ctas in ("lockstep", "independent"):
        for order in ("ascending", "descending"):
            prep, _ = GEMM.specialise((a, b, np.zeros_like(c)), dict(launch))
            args, _ = target_arguments(compiled, prep.runtime)
            run_target(compiled.kernel, args, ctas=ctas, cta_order=order)
            outs.append(args[2].view(np.uint32).copy())
    assert all(np.array_equal(o, outs[0]) for o in outs) and outs[0].any()

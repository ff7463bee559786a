"""The census of PTX text agrees with the Target IR census on Tessera's own PTX, and
reads a hand-written pipelined loop."""

from __future__ import annotations

import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.estimate import estimate, estimate_census
from tessera.backend.ptx.estimate.ptx_text import loops, ptx_census
from tessera.errors import ArgumentError

ROOT = Path(__file__).resolve().parents[4]

TMA = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
PIPELINED = f"""
.visible .entry mm(
    .param .u64 mm_param_0
)
.maxntid 128, 1, 1
{{
    .reg .pred %p<4>;
    mov.u32 %r1, 0;
$L__BB0_1:
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 16384;
    @%p1 {TMA} [%r3], [%rd1, {{%r4, %r5}}], [%r2];
    @%p1 {TMA} [%r6], [%rd2, {{%r4, %r5}}], [%r2];
$L__BB0_2:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r7], %r8;
    @!%p2 bra $L__BB0_2;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{%f1}}, %rd3, %rd4, %p3, 1, 1, 0, 1;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{%f1}}, %rd5, %rd6, %p3, 1, 1, 0, 1;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 1;
    add.s32 %r1, %r1, 1;
    setp.lt.s32 %p1, %r1, 64;
    @%p1 bra $L__BB0_1;
    st.global.v4.f32 [%rd9], {{%f1, %f2, %f3, %f4}};
    ret;
}}
"""


def test_a_hand_written_pipelined_loop() -> None:
    c = ptx_census(PIPELINED)
    it = c.iteration
    assert c.name == "mm" and c.threads == 128 and it is not None
    assert it.wgmma == 2 and sum(it.tensor_flops.values()) == 2 * 2 * 64 * 128 * 16
    assert it.tma_bytes == 16384 and it.tma_copies == 2 and it.mbarrier_waits == 1
    assert it.wgmma_waits == [1] and c.rest.global_store_bytes == 128 * 16
    est = estimate_census("mm", it, 64, c.rest, threads=128, ctas=132, shared=64 * 1024)
    assert est.loop_path is not None and not est.loop_path.serial_wgmma
    assert est.flops == 132 * 64 * sum(it.tensor_flops.values())


def test_loops_are_backward_branches() -> None:
    from tessera.backend.ptx.estimate.ptx_text import instructions

    lines = instructions(PIPELINED[PIPELINED.index("{"):])
    spans = loops(lines)
    assert len(spans) == 2  # the main loop and the try_wait retry loop inside it
    outer = max(spans, key=lambda s: s[1] - s[0])
    assert all(outer[0] <= s[0] and s[1] <= outer[1] for s in spans)


@pytest.mark.parametrize("target, tile", [("sm_90a", (128, 128, 64)), ("sm_80", (128, 128, 32))])
def test_text_census_agrees_with_the_target_ir_census(target: str,
                                                      tile: tuple[int, int, int]) -> None:
    gemm = runpy.run_path(str(ROOT / "examples/kernels/gemm.py"))["gemm"]
    a = np.zeros((512, 512), ml_dtypes.bfloat16)
    c = np.zeros((512, 512), np.float32)
    # the one-stage lowerings: a text census finds one main loop, which a warp-specialised
    # kernel's producer and consumer loops are not
    one_stage = {"warp_specialize": False} if target == "sm_90a" else {"num_stages": 1}
    compiled = ts.compile_kernel(gemm, a, a, c, target=target, tile_shape=tile,
                                 config=one_stage)
    ir = estimate(compiled.kernel).iteration
    text = ptx_census(compiled.ptx).iteration
    assert ir is not None and text is not None
    assert (text.wgmma, text.mma_sync) == (ir.wgmma, ir.mma_sync)
    assert text.tensor_flops == ir.tensor_flops
    assert text.tma_bytes == ir.tma_bytes and text.cp_async_bytes == ir.cp_async_bytes
    assert text.barriers == ir.barriers and text.async_waits == ir.async_waits
    assert text.wgmma_waits == ir.wgmma_waits


def test_no_entry() -> None:
    with pytest.raises(ArgumentError, match=r"no \.entry"):
        ptx_census("// nothing")

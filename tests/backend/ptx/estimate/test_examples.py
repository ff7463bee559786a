"""The static estimate of the example GEMM and flash attention, against counts derived
from their tile shapes, and ``tessera ptx --estimate``."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.estimate import H100_SXM, estimate, format_estimate
from tessera.backend.ptx.estimate.census import census
from tessera.cli import main

ROOT = Path(__file__).resolve().parents[4]
BF16 = ml_dtypes.bfloat16


def example(name: str) -> Any:
    return runpy.run_path(str(ROOT / "examples" / "kernels" / f"{name}.py"))[name]


#: the one-stage lowering (each K step waits for its own copies), which the pipelined
#: default replaces: ``warp_specialize`` on sm_90a, ``num_stages`` on sm_80
ONE_STAGE = {"sm_90a": {"warp_specialize": False}, "sm_80": {"num_stages": 1}}


def gemm_estimate(target: str, tile: tuple[int, int, int], n: int = 1024,
                  config: dict[str, Any] | None = None) -> Any:
    a = np.zeros((n, n), BF16)
    c = np.zeros((n, n), np.float32)
    launch = {"config": config} if config else {}
    compiled = ts.compile_kernel(example("gemm"), a, a, c, target=target, tile_shape=tile,
                                 **launch)
    return estimate(compiled.kernel, registers=128, unique_bytes=2 * a.nbytes + c.nbytes)


def test_gemm_sm90a_128x128x64() -> None:
    n, (bm, bn, bk) = 1024, (128, 128, 64)
    est = gemm_estimate("sm_90a", (bm, bn, bk), n, ONE_STAGE["sm_90a"])
    it, p = est.iteration, est.loop_path
    assert it is not None and p is not None
    assert est.runs == n // bk and est.ctas == (n // bm) * (n // bn)
    assert sum(it.tensor_flops.values()) == 2 * bm * bn * bk
    assert it.wgmma == (bm // 64) * (bk // 16)  # m64 row blocks x k16 steps
    assert p.resources["tensor"] == 2 * bm * bn * bk / 4096
    assert it.tma_bytes == (bm * bk + bk * bn) * 2 and it.cp_async_bytes == 0
    # each iteration waits for the boxes it just issued and for its own wgmma group
    assert p.lead == 0 and p.exposed == H100_SXM.memory_latency and p.serial_wgmma
    assert est.flops == 2 * n ** 3
    assert est.bound in ("latency", "memory (L2 to SM)", "tensor core")
    # the warp-specialised default issues its copies stages ahead: no latency exposed,
    # no wgmma serialised, never slower
    piped = gemm_estimate("sm_90a", (bm, bn, bk), n)
    assert piped.loop_path is not None
    assert piped.loop_path.lead >= 2 and piped.loop_path.exposed == 0
    assert not piped.loop_path.serial_wgmma and piped.cycles <= est.cycles


def test_gemm_sm80_128x128x32() -> None:
    n, (bm, bn, bk) = 1024, (128, 128, 32)
    est = gemm_estimate("sm_80", (bm, bn, bk), n, ONE_STAGE["sm_80"])
    it = est.iteration
    assert it is not None and est.loop_path is not None
    assert it.mma_sync == bm * bn * bk // (16 * 8 * 16) and it.wgmma == 0
    assert it.cp_async_bytes == (bm * bk + bk * bn) * 2 and it.tma_bytes == 0
    assert est.loop_path.lead == 0 and not est.loop_path.serial_wgmma
    assert est.flops == 2 * n ** 3
    piped = gemm_estimate("sm_80", (bm, bn, bk), n)  # the 3-stage cp.async ring
    assert piped.loop_path is not None and piped.loop_path.lead == 2
    assert piped.cycles <= est.cycles


def test_double_buffering_is_estimated_faster_than_waiting_each_step() -> None:
    a = np.zeros((1024, 1024), BF16)
    c = np.zeros((1024, 1024), np.float32)
    times = {}
    for name in ("gemm", "double_buffered_gemm"):
        compiled = ts.compile_kernel(example(name), a, a, c, target="sm_80",
                                     tile_shape=(128, 128, 32), config=ONE_STAGE["sm_80"])
        est = estimate(compiled.kernel, registers=128)
        assert est.loop_path is not None
        times[name] = (est.loop_path.lead, est.loop_path.exposed, est.cycles)
    assert times["gemm"][:2] == (0, H100_SXM.memory_latency)
    assert times["double_buffered_gemm"][0] == 1
    assert times["double_buffered_gemm"][1] < times["gemm"][1]
    assert times["double_buffered_gemm"][2] < times["gemm"][2]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_exp_no_longer_binds_the_f64_pipe(target: str, causal: bool) -> None:
    """Checked ``exp`` is six f64-pipe instructions per element on its fast path (its
    specified slow path is a rare branch the estimate leaves out), so the kernel is
    bound by instruction issue, not the f64 pipe; a causal program runs the unmasked
    loop up to its diagonal (the mean over the query blocks) and one masked block."""
    bh, seq, d, block = 2, 512, 64, 64
    q = np.zeros((bh, seq, d), BF16)
    config = dict(BLOCK_M=block, BLOCK_N=block, num_warps=4, num_stages=2)
    compiled = ts.compile_kernel(example("flash_attention"), q, q, q, target=target,
                                 is_causal=causal, config=config)
    est = estimate(compiled.kernel, registers=110)
    it, p = est.iteration, est.loop_path
    blocks = seq // block
    # causal: block i runs i unmasked iterations, mean (blocks - 1) / 2 = 3.5, rounded
    assert it is not None and p is not None and est.runs == (4 if causal else blocks)
    assert census(compiled.kernel).unknown_trips == 0
    assert sum(it.tensor_flops.values()) == 2 * 2 * block * block * d  # QK^T and PV
    f64_per_thread = it.warp_instrs["f64"] / 4  # 32 score elements a thread
    assert 6 * 32 <= f64_per_thread <= 10 * 32
    assert est.bound != "f64 pipe" and max(p.resources, key=lambda k: p.resources[k]) != "f64"


def test_cli_prints_the_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gemm.ptx"
    code = main(["ptx", str(ROOT / "examples/kernels/gemm.py") + ":gemm", "--target", "sm_80",
                 "--arg", "A=256x256:bf16", "--arg", "B=256x256:bf16", "--arg",
                 "C=256x256:f32", "--tile-shape", "128,128,32", "-o", str(out), "--estimate"])
    err = capsys.readouterr().err
    assert code == 0 and ".target sm_80" in out.read_text()
    assert "gemm on H100 SXM (static estimate, not a measurement)" in err
    assert "main loop: 8 iterations per CTA" in err and "bound: " in err
    assert "4 CTAs x 128 threads" in err


def test_format_names_every_part() -> None:
    text = format_estimate(gemm_estimate("sm_90a", (64, 128, 64), 512, ONE_STAGE["sm_90a"]))
    for part in ("tensor core: 4 wgmma", "by TMA", "copies ahead: 0 iterations",
                 "wgmma serialised", "CTAs per SM", "TFLOP/s", "% of the dense peak"):
        assert part in text, part


@pytest.mark.parametrize("stages", [2, 3])
def test_flash_attention_k_v_ring_hides_the_copies(stages: int) -> None:
    """sm_90a attention over its K/V ring: blocks are loaded ``stages - 1`` iterations
    ahead (the kernel's ``ring_stages``), so no copy latency is exposed, and with three
    stages the next scores overlap the softmax; one CTA's iteration is shorter than the
    tile program's load-wait-compute sequence (``num_stages=1``)."""
    q = np.zeros((2, 512, 64), BF16)

    def path(n: int) -> Any:
        # the overlapped order waiting P V in its block (the model reads the deferred
        # order's one wait_group 0 an iteration as a serialised pipeline)
        config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=n, defer_pv=False)
        compiled = ts.compile_kernel(example("flash_attention"), q, q, q, target="sm_90a",
                                     is_causal=False, config=config)
        return estimate(compiled.kernel, registers=128).loop_path
    ring, plain = path(stages), path(1)
    assert ring.lead == stages - 1 and ring.exposed == 0 and plain.exposed == 600
    tensor = ring.resources["tensor"]
    if stages == 3:  # the next scores overlap the softmax (two stages: sequential)
        assert ring.busy == max(ring.non_tensor, tensor / 2) + tensor / 2 \
            + H100_SXM.wgmma_latency
    else:
        assert ring.busy == ring.non_tensor + tensor + H100_SXM.wgmma_latency
    assert ring.total < plain.total


def test_two_key_blocks_a_trip_count_two_of_the_producers_loads() -> None:
    """A warp-specialised consumer loop of two key blocks a trip (``unroll=2``) is fed
    by two of the producer's iterations a trip: its copies count twice in the
    iteration, none is left outside the loop, and the estimate is at least the one
    block a trip's (the same products, fewer copies of the next scores)."""
    q = np.zeros((2, 2048, 128), BF16)

    def est(**extra: Any) -> Any:
        config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=12, num_stages=2, **extra)
        compiled = ts.compile_kernel(example("flash_attention"), q, q, q, target="sm_90a",
                                     is_causal=False, mode="fast", config=config)
        return estimate(compiled.kernel, registers=168)
    pair, one = est(unroll=2), est()
    assert pair.runs * 2 == one.runs
    assert pair.iteration.tma_bytes == 2 * one.iteration.tma_bytes > 0
    assert pair.outside.resources["memory"] == one.outside.resources["memory"]
    assert pair.tflops >= one.tflops

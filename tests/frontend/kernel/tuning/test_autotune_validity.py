"""The autotuner only chooses configurations valid for the call's shapes and an H100:
blocks that fit the shapes, shared memory, threads and registers within the limits;
tuning_report() says why each dropped configuration was dropped."""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.frontend.kernel.errors import AutotuneError
from tessera.frontend.kernel.tuning.autotune import check
from tessera.frontend.kernel.tuning.bounds import sure_violations
from tessera.frontend.kernel.tuning.regs import OVERHEAD, RegisterEstimate
from tessera.tile import SanitizerError
from tests.tile.test_seeds import EXAMPLES, example

RNG = np.random.default_rng(5)


FA = example("flash_attention")


@ts.kernel.autotune(space=dict(BLOCK_M=[16, 32, 64], num_warps=[4, 8]))
def double_rows(x: ts.Tensor["M", "N", ts.f32], y: ts.Tensor["M", "N", ts.f32]):
    y[tile_m:tile_m + BM] = x[tile_m:tile_m + BM] * 2.0


@ts.kernel.autotune(space=dict(BLOCK_M=[16, 32], BLOCK_N=[16, 32], BLOCK_K=[8, 16, 32]))
def small_gemm(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
               C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN], acc)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel.autotune(space=dict(BLOCK_M=[64, 512]))
def big_stage(x: ts.Tensor["M", "D", ts.f32], y: ts.Tensor["M", "D", ts.f32]):
    buf = ts.tile.alloc_shared((BM, 128), ts.f32)
    buf[0:BM, 0:128] = x[tile_m:tile_m + BM, 0:128]
    ts.tile.barrier()
    y[tile_m:tile_m + BM, 0:128] = buf[0:BM, 0:128]


@ts.kernel.autotune(space=dict(WIDTH=[1, 2]))
def guarded(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    if i < n:  # tiles past n are guarded: never a sure violation
        y[i] = x[i] * ts.tile.context().WIDTH


def _bf16(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("seq", [192, 320])
@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_runs_at_sequences_no_128_block_divides(seq: int, causal: bool) -> None:
    q, k, v = _bf16(2, seq, 64), _bf16(2, seq, 64), _bf16(2, seq, 64)
    out = FA.flash_attention(q, k, v, is_causal=causal)
    cfg = FA.flash_attention.last_config
    assert seq % cfg["BLOCK_M"] == 0 and seq % cfg["BLOCK_N"] == 0
    ref = FA.reference(q, k, v, causal)  # float64 NumPy
    err = np.abs(out.astype(np.float64) - ref).max()
    # one bf16 rounding of the output (|out| <= max|v|) plus f32 softmax arithmetic
    assert err <= 2.0 ** -8 * np.abs(v.astype(np.float64)).max() + 1e-4


@settings(max_examples=6, deadline=None)
@given(st.integers(1, 8), st.sampled_from([32, 64]))
def test_flash_attention_blocks_divide_the_sequence(blocks: int, d: int) -> None:
    q = np.zeros((1, 64 * blocks, d), ml_dtypes.bfloat16)
    FA.flash_attention.compile(q, q, q)
    cfg = FA.flash_attention.last_config
    assert (64 * blocks) % cfg["BLOCK_M"] == 0 and (64 * blocks) % cfg["BLOCK_N"] == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 24).map(lambda m: 16 * m), st.integers(1, 4))
def test_chosen_rows_block_divides_the_rows(m: int, n: int) -> None:
    x = RNG.standard_normal((m, n)).astype(np.float32)
    y = np.zeros_like(x)
    double_rows(x, y)
    assert m % double_rows.last_config["BLOCK_M"] == 0
    assert np.array_equal(y, x * np.float32(2))


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6).map(lambda m: 16 * m), st.integers(1, 6).map(lambda n: 16 * n),
       st.integers(1, 8).map(lambda k: 8 * k))
def test_chosen_gemm_blocks_divide_m_n_and_k(m: int, n: int, k: int) -> None:
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    small_gemm(a, b, c)
    cfg = small_gemm.last_config
    assert m % cfg["BLOCK_M"] == 0 and n % cfg["BLOCK_N"] == 0 and k % cfg["BLOCK_K"] == 0
    ref = a.astype(np.float64) @ b.astype(np.float64)
    gamma = k * 2.0**-24 / (1 - k * 2.0**-24)
    bound = gamma * np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(c - ref) <= bound + 2.0**-24 * np.abs(ref))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5),
       st.sampled_from([(16, 16, 8), (32, 16, 16), (16, 32, 32), (32, 32, 8)]))
def test_a_sure_violation_is_reported_by_the_simulator_too(mb: int, nb: int, kb: int,
                                                           blocks: tuple[int, int, int]) -> None:
    """No false alarms: a configuration the analysis drops for an access out of bounds
    does make that access when it runs; one it keeps runs clean."""
    m, n, k = 8 * mb, 8 * nb, 8 * kb
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    c = np.zeros((m, n), np.float32)
    cfg = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), blocks))
    fn = small_gemm.compile(a, b, c, config=cfg).functions["small_gemm"]
    sure = sure_violations(fn)
    fits = m % blocks[0] == 0 and n % blocks[1] == 0 and k % blocks[2] == 0
    assert bool(sure) == (not fits)
    if sure:
        with pytest.raises(SanitizerError, match="out of bounds"):
            small_gemm(a, b, c, config=cfg)
    else:
        small_gemm(a, b, c, config=cfg)
        assert np.array_equal(c, np.full((m, n), k, np.float32))


def test_tuning_report_says_why_each_configuration_was_dropped() -> None:
    q = np.zeros((1, 192, 64), ml_dtypes.bfloat16)
    FA.flash_attention.compile(q, q, q)
    rows = FA.flash_attention.tuning_report().splitlines()
    assert len(rows) == 16
    valid = [r for r in rows if r.endswith("us (model)")]
    dropped = [r for r in rows if ": dropped: " in r]
    assert len(valid) == 4 and len(dropped) == 12
    assert all("'BLOCK_M': 64, 'BLOCK_N': 64" in r for r in valid)
    src = str(EXAMPLES / "flash_attention.py")
    line_q = next(i for i, t in enumerate(open(src), 1) if "cp_async(smem_q, Q[" in t)
    line_k = next(i for i, t in enumerate(open(src), 1) if "cp_async(smem_k, K[" in t)
    for r in dropped:
        if "'BLOCK_M': 128" in r:  # the second query block reads rows 128..255
            assert f"flash_attention.py:{line_q}: Q[128:256] along axis 0, which has 192 " \
                   "elements" in r
        else:  # BLOCK_N 128: the second key block
            assert f"flash_attention.py:{line_k}: K[128:256] along axis 0, which has 192 " \
                   "elements" in r
        if "'BLOCK_M': 128, 'BLOCK_N': 128" in r:  # 128x128 scores spill on one warpgroup
            assert "registers per thread (estimate), over the 255 of sm_90" in r


def test_register_spills_and_shared_memory_drop_configurations() -> None:
    q = np.zeros((1, 256, 64), ml_dtypes.bfloat16)
    FA.flash_attention.compile(q, q, q)
    report = FA.flash_attention.tuning_report()
    spills = [r for r in report.splitlines() if ": dropped: " in r]
    assert len(spills) == 4 and all("'BLOCK_M': 128, 'BLOCK_N': 128" in r and
                                    "it would spill" in r for r in spills)
    x = np.ones((512, 128), np.float32)
    y = np.zeros_like(x)
    big_stage(x, y)  # 512 x 128 f32 is 256 KiB of shared memory: over 227 KiB
    assert big_stage.last_config == {"BLOCK_M": 64} and np.array_equal(x, y)
    (row,) = [r for r in big_stage.tuning_report().splitlines() if "dropped" in r]
    assert row.startswith("{'BLOCK_M': 512}: dropped: does not compile for these arguments")
    assert "resource limit" in row and "262144 bytes of shared memory" in row


def test_no_valid_configuration_is_an_error_listing_every_reason() -> None:
    x = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)  # no block of 16, 32, 64 fits
    y = np.zeros_like(x)
    with pytest.raises(AutotuneError) as info:
        double_rows(x, y)
    err = info.value
    assert Path(err.loc.file).resolve() == Path(__file__).resolve()
    text = str(err)
    assert "no configuration of kernel 'double_rows' is valid for x of shape (40, 3), y " \
           "of shape (40, 3)" in text
    assert text.count("out of bounds for these shapes") == 6 and "hint:" in text
    assert not y.any()
    with pytest.raises(AutotuneError, match="a group needs 2048 threads"):
        double_rows(np.zeros((64, 2), np.float32), np.zeros((64, 2), np.float32),
                    group_size=16)  # 16 tiles of 128 threads: over a CUDA block


def test_guarded_accesses_are_never_dropped() -> None:
    x = np.arange(10, dtype=np.float32)
    y = np.zeros_like(x)
    guarded(x, y, grid=3, group_size=4)  # 12 tiles for 10 elements
    assert guarded.last_config == {"WIDTH": 1} and np.array_equal(y, x)
    assert "dropped" not in guarded.tuning_report()


def test_register_estimate_counts_live_tiles() -> None:
    """In the K loop the peak is where the column origin is computed: acc (BM x BN f32,
    one register per element over 128 threads) is live with three int64 scalars (two
    registers each): the loop index, grid_coord(1) and its product with BN. The
    operands (BM x 8 and 8 x BN) die at the mma, whose result accumulates in place."""
    a, b = np.zeros((64, 32), np.float32), np.zeros((32, 64), np.float32)
    c = np.zeros((64, 64), np.float32)
    for bm, bn in [(16, 16), (32, 32)]:
        cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=8)
        fn = small_gemm.compile(a, b, c, config=cfg).functions["small_gemm"]
        regs = RegisterEstimate(fn)
        assert regs.threads == 128
        acc = math.ceil(bm * bn / 128)
        assert regs.per_thread() == OVERHEAD + acc + 3 * 2
        assert check(fn) == []

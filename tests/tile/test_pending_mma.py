"""K loops whose accumulator only feeds ``mma`` defer the products to one call at the
loop's end (:class:`tessera.interp.tile.fastpaths.pending.PendingMma`); the result is the per-trip
accumulation's, and loops that read the accumulator otherwise are left alone."""


from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.tile import fastpaths
from tessera.interp.tile.fastpaths.pending import PendingMma
from tests.tile.test_simulator import gemm_f32


@ts.kernel
def staged(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
           C: ts.Tensor["M", "N", ts.f32]):
    sa = ts.tile.alloc_shared((BM, BK), ts.bf16)
    sb = ts.tile.alloc_shared((BK, BN), ts.bf16)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(sa, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(sb, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.cp_wait_group(0)
        ts.tile.barrier()
        acc = ts.tile.mma(sa, sb, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def plus_equals(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.full((BM, BN), 0.5, ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc += ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN])
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def scaled(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
           C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.full((BM, BN), 1.0, ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN],
                          acc * 0.5)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def ragged(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
           C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, tile_m + BK, BK):  # the trip count differs per program
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN], acc)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


def bf16(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def launch(kernel, a, b, tile, mode="checked", defer=True, schedule="auto"):  # type: ignore[no-untyped-def]
    with fastpaths.disabled(*(() if defer else ("deferred_mma",))):
        c = np.zeros((a.shape[0], b.shape[1]), np.float32)
        kernel(a, b, c, tile_shape=tile, mode=mode, schedule=schedule)
    return c


@settings(max_examples=20, deadline=None)
@given(tm=st.sampled_from([8, 16, 32]), tn=st.sampled_from([8, 16, 32]),
       tk=st.sampled_from([4, 8, 16]), gm=st.integers(1, 3), gn=st.integers(1, 3),
       trips=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_deferred_equals_per_trip_accumulation(tm: int, tn: int, tk: int, gm: int, gn: int,
                                               trips: int, seed: int) -> None:
    """bf16 products are exact in float64 and these sums too, so every order agrees; the
    float64 reference is the exact product rounded once."""
    rng = np.random.default_rng(seed)
    a, b = bf16(rng, gm * tm, trips * tk), bf16(rng, trips * tk, gn * tn)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for kernel, extra in ((staged, 0.0), (plus_equals, 0.5)):
        got = launch(kernel, a, b, (tm, tn, tk))
        assert np.array_equal(got, launch(kernel, a, b, (tm, tn, tk), defer=False))
        assert np.array_equal(got, (exact + extra).astype(np.float32))


def test_f32_gemm_agrees_across_schedules_and_is_accurate() -> None:
    """float32 products are not exact in float64 sums: the schedules still agree, and
    both modes are within the float32 error bound."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((96, 512)).astype(np.float32)
    b = rng.standard_normal((512, 64)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = 513 * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b))
    auto = launch(gemm_f32, a, b, (32, 32, 64))
    assert np.array_equal(auto, launch(gemm_f32, a, b, (32, 32, 64), schedule="sequential"))
    for mode in ("checked", "fast"):
        got = launch(gemm_f32, a, b, (32, 32, 64), mode=mode)
        assert np.all(np.abs(got - ref) <= bound)


def test_flush_at_max_k_keeps_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    a, b = bf16(rng, 32, 256), bf16(rng, 256, 32)
    want = launch(staged, a, b, (16, 16, 16))
    monkeypatch.setattr(PendingMma, "MAX_K", 40)  # two trips of 16 per product
    assert np.array_equal(launch(staged, a, b, (16, 16, 16)), want)


def test_which_loops_defer() -> None:
    """The GEMM loops defer; a loop that scales the accumulator, or whose trip count
    differs between programs, computes every trip (and still gets the right answer)."""
    deferred = fastpaths.path("deferred_mma")
    rng = np.random.default_rng(4)
    a, b = bf16(rng, 32, 64), bf16(rng, 64, 32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for kernel, defers in ((staged, True), (plus_equals, True), (scaled, False)):
        before = deferred.taken
        launch(kernel, a, b, (16, 16, 16))
        assert (deferred.taken > before) is defers, kernel
    before = deferred.taken
    got = launch(ragged, a, b, (16, 16, 16))
    assert deferred.taken == before
    # rows 0-15 sum K in [0, 16), rows 16-31 in [0, 32)
    for rows, k in ((slice(0, 16), 16), (slice(16, 32), 32)):
        want = (a[rows, :k].astype(np.float64) @ b[:k].astype(np.float64)).astype(np.float32)
        assert np.array_equal(got[rows], want)
    assert exact.shape == got.shape


@ts.kernel
def staged_scaled(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                  C: ts.Tensor["M", "N", ts.f32]):
    sa = ts.tile.alloc_shared((BM, BK), ts.bf16)
    sb = ts.tile.alloc_shared((BK, BN), ts.bf16)
    q = A[tile_m:tile_m + BM, 0:BK]  # loop-invariant: widened once
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(sa, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(sb, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.cp_wait_group(0)
        ts.tile.barrier()
        acc = ts.tile.mma(sa, sb, acc * 0.5) + ts.tile.mma(q, sb)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


def test_remembered_operands_follow_the_data() -> None:
    """Shared buffers refilled every trip and an operand fixed for the loop: each trip
    multiplies the data of that trip (a remembered widening is never stale)."""
    rng = np.random.default_rng(5)
    a, b = bf16(rng, 32, 64), bf16(rng, 64, 32)
    got = launch(staged_scaled, a, b, (16, 16, 16))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((32, 32), np.float32)
    for k in range(0, 64, 16):
        part = (a64[:, k:k + 16] @ b64[k:k + 16]).astype(np.float64)
        prod = (np.float64(1) * acc * np.float32(0.5)).astype(np.float32).astype(np.float64)
        acc = (part + prod).astype(np.float32) + \
            (a64[:, :16] @ b64[k:k + 16]).astype(np.float32)
    assert np.allclose(got, acc, rtol=1e-5, atol=1e-5)


def test_consecutive_k_slices_are_copied_as_one_view() -> None:
    """A deferred loop's operands that are consecutive K slices of one array join into
    one read-only view (one copy at the loop's end); gaps, other arrays or other
    strides keep the slice-by-slice copy, and both fill the same buffer."""
    from tessera.interp.tile.fastpaths.pending import _gather, _joined

    x = np.arange(6 * 40, dtype=np.float32).reshape(6, 40)
    pieces = [x[:, k:k + 8] for k in range(0, 32, 8)]
    whole = _joined(pieces, -1)
    assert whole is not None and not whole.flags.writeable
    assert np.array_equal(whole, x[:, :32])
    rows = [x[k:k + 2] for k in range(0, 6, 2)]  # consecutive along axis -2
    assert np.array_equal(_joined(rows, -2), x)
    assert _joined([x[:, 0:8], x[:, 16:24]], -1) is None  # a gap
    assert _joined([x[:, 0:8], x.copy()[:, 8:16]], -1) is None  # another array
    assert _joined([x[:, 0:8], x[::2, 8:16]], -1) is None  # other strides
    for parts in (pieces, [x[:, 0:8], x[:, 16:24], x[:, 8:16], x[:, 24:32]]):
        out = np.empty((6, 32))
        _gather(out, parts, -1)
        assert np.array_equal(out, np.concatenate(parts, axis=-1))

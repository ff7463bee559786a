"""The tile simulator: schedules agree bit for bit, divergence, shared memory per group,
reduce order, numerics of the golden mma accumulation, fast mode."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.interp.tile.mma import folded_matmul
from tessera.interp.tile.numeric import widen

RNG = np.random.default_rng(3)


@ts.kernel
def gemm_acc(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
             C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc += ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN])
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def gemm_f32(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
             C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN], acc)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def split_k(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
            C: ts.Tensor["M", "N", ts.f32]):
    for k in ts.tile.range(tile_k, tile_k + BK, 4):  # several reduces per group
        C[tile_m:tile_m + BM, tile_n:tile_n + BN] += ts.tile.mma(
            A[tile_m:tile_m + BM, k:k + 4], B[k:k + 4, tile_n:tile_n + BN])


def test_golden_mma_does_not_depend_on_the_tile_shape() -> None:
    a = RNG.standard_normal((96, 128)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    results = []
    for tile in [(32, 32, 16), (96, 64, 128), (16, 64, 32), (48, 32, 8)]:
        c = np.zeros((96, 64), np.float32)
        gemm_acc(a, b, c, tile_shape=tile)
        results.append(c)
    exact = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    for c in results:
        assert np.array_equal(c, exact)


def test_fast_mode_is_close_but_labelled_non_bitwise() -> None:
    a = RNG.standard_normal((64, 256)).astype(np.float32)
    b = RNG.standard_normal((256, 64)).astype(np.float32)
    exact, fast = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
    gemm_f32(a, b, exact, tile_shape=(32, 32, 64))
    gemm_f32(a, b, fast, tile_shape=(32, 32, 64), mode="fast")
    bound = 256 * 2.0 ** -24 * (np.abs(a) @ np.abs(b))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.all(np.abs(fast - ref) <= bound) and np.all(np.abs(exact - ref) <= bound)


@pytest.mark.parametrize("kernel, args, launch", [
    (gemm_f32, lambda: (RNG.standard_normal((64, 48)).astype(np.float32),
                        RNG.standard_normal((48, 32)).astype(np.float32),
                        np.zeros((64, 32), np.float32)), dict(tile_shape=(16, 16, 16))),
    (split_k, lambda: (RNG.standard_normal((32, 64)).astype(np.float32),
                       RNG.standard_normal((64, 32)).astype(np.float32),
                       np.zeros((32, 32), np.float32)), dict(tile_shape=(16, 16, 16))),
])
def test_vectorised_and_sequential_schedules_agree_bitwise(kernel, args, launch) -> None:
    base = args()
    outs = []
    for schedule in ("vectorized", "sequential", "auto"):
        a = [x.copy() for x in base]
        try:
            kernel(*a, schedule=schedule, **launch)
        except Exception as err:  # vectorized may refuse an order it cannot follow
            assert schedule == "vectorized", err
            continue
        outs.append(a[-1])
    assert len(outs) >= 2
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])


def test_runs_are_deterministic() -> None:
    a = RNG.standard_normal((32, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 32)).astype(np.float32)
    first = np.zeros((32, 32), np.float32)
    split_k(a, b, first, tile_shape=(16, 16, 16))
    for _ in range(2):
        again = np.zeros((32, 32), np.float32)
        split_k(a, b, again, tile_shape=(16, 16, 16))
        assert np.array_equal(first, again)


@ts.kernel
def leak(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((1,), ts.f32)
    if ts.tile.group_id() == 0:
        buf[0] = 5.0
    out[ts.tile.group_id()] = buf[0]


def test_every_group_gets_fresh_poisoned_shared_memory() -> None:
    out = np.zeros(3, np.float32)
    leak(out, grid=3, mode="fast")  # group 1 and 2 never wrote: they read poison
    assert out[0] == 5.0 and np.isnan(out[1:]).all()
    with pytest.raises(ts.tile.SanitizerError, match="uninitialised read") as info:
        leak(np.zeros(3, np.float32), grid=3)
    assert info.value.group == 1


@ts.kernel
def divergent(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    acc = ts.tile.zeros((4,), ts.f32)
    for k in ts.tile.range(0, i % 5):
        if k % 2 == 0:
            acc = acc + x[i]
        else:
            acc = acc * 2.0
    out[i] = ts.tile.reduce_sum(acc, 0) if i % 3 else -1.0


def test_divergent_branches_and_loops_merge_per_tile() -> None:
    x = np.arange(12, dtype=np.float32)
    out = np.zeros(12, np.float32)
    divergent(x, out)
    ref = []
    for i in range(12):
        acc = 0.0
        for k in range(i % 5):
            acc = acc + x[i] if k % 2 == 0 else acc * 2
        ref.append(4 * acc if i % 3 else -1.0)
    assert np.array_equal(out, np.array(ref, np.float32))


@ts.kernel
def barrier_completes_copies(A: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    lid = ts.tile.local_id()
    if lid == 0:
        ts.tile.cp_async(buf, A[0:4])
    ts.tile.barrier()  # completes the copy and publishes it to the group
    out[ts.tile.linear_id()] = buf[lid]


def test_barrier_completes_async_copies_for_the_group() -> None:
    out = np.zeros(4, np.float32)
    barrier_completes_copies(np.arange(4, dtype=np.float32), out, grid=1, group_size=4)
    assert np.array_equal(out, np.arange(4, dtype=np.float32))


def test_folded_mma_equals_per_program_products() -> None:
    for sa, sb in [((1, 3, 1, 1), (1, 1, 2, 1)), ((2, 3, 1), (2, 1, 1)), ((), (4,)),
                   ((5,), ()), ((2, 3, 1), (1, 3, 4))]:
        a, b = RNG.standard_normal((*sa, 4, 3)), RNG.standard_normal((*sb, 3, 5))
        assert np.allclose(folded_matmul(a, b), np.matmul(a, b))


def test_in_place_arrays_and_dtype_conversion() -> None:
    @ts.kernel
    def bump(x: ts.Tensor["N", ts.bf16]):
        x[ts.tile.linear_id()] += 1.0

    x = np.arange(4, dtype=np.float32)  # not bf16: converted, and written back
    bump(x)
    assert np.array_equal(x, np.arange(1, 5, dtype=np.float32))


def test_reduce_order_is_fixed_across_schedules() -> None:
    """Many groups += one element several times: applied in group order both ways."""
    @ts.kernel
    def many(vals: ts.Tensor["N", ts.f32], out: ts.Tensor[1, ts.f32]):
        g = ts.tile.group_id()
        for k in ts.tile.range(0, 3):
            out[0] += vals[g * 3 + k]

    vals = (RNG.standard_normal(30) * 1e4).astype(np.float32)
    outs = []
    for schedule in ("auto", "sequential"):
        out = np.zeros(1, np.float32)
        many(vals, out, grid=10, schedule=schedule)
        outs.append(out[0])
    seq = np.float32(0)
    for v in vals:
        seq = np.float32(seq + v)
    assert outs[0] == outs[1] == seq


def _example_cases():
    from tests.tile.test_seeds import example

    fa, gemm, dbuf = example("flash_attention"), example("gemm"), example("double_buffered_gemm")
    red, chunks = example("cooperative_reduction"), example("process_chunks")
    bf = lambda *s: RNG.standard_normal(s).astype(ml_dtypes.bfloat16)  # noqa: E731
    cfg = dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2)
    return [
        (fa.flash_attention, lambda: (bf(2, 64, 16), bf(2, 64, 16), bf(2, 64, 16)),
         dict(config=cfg, is_causal=True)),
        (gemm.gemm, lambda: (bf(64, 32), bf(32, 64), np.zeros((64, 64), np.float32)),
         dict(tile_shape=(32, 32, 16))),
        (dbuf.double_buffered_gemm, lambda: (bf(64, 64), bf(64, 32),
                                             np.zeros((64, 32), np.float32)),
         dict(tile_shape=(32, 32, 16))),
        (red.block_reduction, lambda: (RNG.standard_normal(300).astype(np.float32),
                                       np.zeros(1, np.float32)), dict(grid=3, group_size=8)),
        (chunks.process_chunks, lambda: (RNG.standard_normal(300).astype(np.float32),
                                         np.zeros(300, np.float32)),
         dict(grid=3, group_size=4)),
    ]


@pytest.mark.parametrize("case", range(5))
def test_corrected_examples_give_the_same_bits_in_both_schedules(case: int) -> None:
    kernel, make, launch = _example_cases()[case]
    args = make()
    results = []
    for schedule in ("vectorized", "sequential"):
        a = [x.copy() for x in args]
        r = kernel(*a, schedule=schedule, **launch)
        results.append(r if r is not None and not any(r is x for x in a) else a[-1])
    assert np.array_equal(np.asarray(results[0]), np.asarray(results[1]))


@ts.kernel
def into_one(vals: ts.Tensor["N", ts.f32], out: ts.Tensor[1, ts.f32]):
    out[0] += vals[ts.tile.linear_id()]


def test_every_tile_adding_into_one_element_adds_in_tile_order() -> None:
    """Tiles in ascending linear id (groups in order, then local ids), each add rounded."""
    rng = np.random.default_rng(8)
    for grid, group in ((1, 1), (7, 1), (3, 16), (16, 256)):
        n = grid * group
        vals = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)).astype(np.float32)
        vals[::5] = -0.0
        start = np.float32(-0.0)
        want = start
        for v in vals:
            want = np.float32(want + v)
        for schedule in ("auto", "sequential"):
            out = np.array([start], np.float32)
            into_one(vals, out, grid=grid, group_size=group, schedule=schedule)
            assert out.view(np.uint32)[0] == np.array([want]).view(np.uint32)[0]


@ts.kernel
def into_one_f16(vals: ts.Tensor["N", ts.f16], out: ts.Tensor[1, ts.f16]):
    out[0] += vals[ts.tile.linear_id()]


def test_narrow_totals_round_per_add() -> None:
    """f16 totals: each add in float32, rounded to f16 (1 + 2^-11 is a tie that rounds
    back to 1, every time; one rounding at the end would give 1 + 2^-8)."""
    vals = np.full(8, 2.0**-11, np.float16)
    out = np.ones(1, np.float16)
    into_one_f16(vals, out, grid=8)
    want = np.float16(1)
    for v in vals:
        want = ts.numerics.convert(np.array(np.float32(want) + np.float32(v)), ts.f16)
    assert out[0] == want == 1.0


@pytest.mark.parametrize("fmt", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                 ml_dtypes.float6_e2m3fn, ml_dtypes.float4_e2m1fn,
                                 ml_dtypes.float8_e8m0fnu, ml_dtypes.bfloat16, np.int8])
def test_widening_one_byte_formats_by_table_is_the_cast(fmt: type) -> None:
    """Every bit pattern (NaNs included) of a one-byte format widens to the bits of
    NumPy's cast, in any layout; other formats are cast as they are."""
    size = np.dtype(fmt).itemsize
    pattern = np.arange(256 ** size, dtype=f"u{size}").view(fmt)
    for x in (pattern.reshape(-1, 16), pattern.reshape(16, -1).T, pattern[::3], pattern[5]):
        for dt in (np.dtype(np.float32), np.dtype(np.float64)):
            with np.errstate(invalid="ignore"):  # (signalling NaNs)
                want = np.asarray(x).astype(dt)
                got = widen(np.asarray(x), dt)
            assert type(got) is np.ndarray and got.shape == want.shape
            assert got.tobytes() == want.tobytes()

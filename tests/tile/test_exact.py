"""Exact accumulation at the tile level: ``mma(..., exact=True)`` and exact row sums and
means give the exact value rounded once (numerics' ``matmul_rounded`` / ``sum_rounded``,
and Fractions), whatever the tile shape and mode; the IR checks and prints them; the
PTX lowering refuses them at the user's line."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import IRVerifyError, UnsupportedError
from tessera.interp.tile.fastpaths.pending import PendingMma
from tessera.ir import parse_module
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.numerics import dtype, matmul_rounded, sum_rounded
from tessera.numerics.reductions.accumulator import reference as ref_acc
from tests.tile.fastpaths import taken


@ts.kernel
def exact_gemm(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
               C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = A @ B with an exact accumulator carried over the K loop, rounded at the store."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc, exact=True)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C


@ts.kernel
def register_gemm(A: ts.Tensor["M", "K", ts.f32], BT: ts.Tensor["N", "K", ts.f32],
                  C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = (2 A) @ BT^T, exactly: both operands are register tiles computed per trip."""
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        a = A[tile_m:tile_m + BM, k:k + BK] * 2.0
        bt = BT[tile_n:tile_n + BN, k:k + BK] + 0.0
        acc = ts.tile.mma(a, bt.T, acc, exact=True)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C


@ts.kernel
def exact_rows(X: ts.Tensor["M", "N", ts.f32], S: ts.Tensor["M", ts.f32],
               Mu: ts.Tensor["M", ts.f32]) -> None:
    x = X[tile_m:tile_m + BM, 0:N]
    S[tile_m:tile_m + BM] = ts.tile.row_sum(x, exact=True)
    Mu[tile_m:tile_m + BM] = ts.tile.reduce_mean(x, -1)


HARD_A = [1.0, 2.0**-24, 2.0**-40]
HARD_B = [1.0, 1.0, 2.0**-40]


def _gemm(a: np.ndarray, b: np.ndarray, tile: tuple[int, int, int], mode: str) -> np.ndarray:
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    exact_gemm(a, b, c, tile_shape=tile, mode=mode)
    return c


@pytest.mark.parametrize("mode", ["checked", "reference"])
@pytest.mark.parametrize("tile", [(32, 32, 16), (64, 16, 96), (16, 32, 8)])
def test_exact_gemm_is_the_correctly_rounded_product(mode: str, tile: tuple) -> None:
    rng = np.random.default_rng(sum(tile))
    a = rng.standard_normal((64, 96)).astype(np.float32)
    b = rng.standard_normal((96, 32)).astype(np.float32)
    a[0, :3], a[0, 3:], b[:3, 0] = HARD_A, 0.0, HARD_B
    c = _gemm(a, b, tile, mode)
    assert c.tobytes() == matmul_rounded(a, b, "f32").tobytes()
    assert c[0, 0] == np.float32(1 + 2.0**-23)  # a float64 sum gives 1.0


def _narrow_gemm(A: ts.Tensor["M", "K"], B: ts.Tensor["K", "N"],
                 C: ts.Tensor["M", "N", ts.f32]) -> None:
    """Operands read straight from global memory; the cast rounds the accumulator."""
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK],
                          B[k:k + BK, tile_n:tile_n + BN], acc, exact=True)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.cast(acc, ts.f32)


@pytest.mark.parametrize("fmt", [ml_dtypes.bfloat16, np.float16])
def test_narrow_operands(fmt: type) -> None:
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((32, 64)) * 2.0 ** rng.integers(-10, 10, (32, 64))).astype(fmt)
    b = rng.standard_normal((64, 32)).astype(fmt)
    c = np.zeros((32, 32), np.float32)
    ts.kernel(_narrow_gemm)(a, b, c, tile_shape=(16, 16, 16))
    assert c.tobytes() == matmul_rounded(a, b, "f32").tobytes()


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.data())
def test_hypothesis_hard_values(trips: int, data: st.DataObject) -> None:
    values = st.sampled_from([1.0, -1.0, 2.0**-24, -(2.0**-24), 2.0**-40, 2.0**-80, 0.0,
                              3.0e38, -3.0e38, 2.0**-149, 1.5, 2.0**60])
    k = 8 * trips
    a = np.array(data.draw(st.lists(values, min_size=16 * k, max_size=16 * k)),
                 np.float32).reshape(16, k)
    b = np.array(data.draw(st.lists(values, min_size=k * 16, max_size=k * 16)),
                 np.float32).reshape(k, 16)
    got = _gemm(a, b, (8, 16, 8), "checked")
    want = matmul_rounded(a, b, "f32")
    assert np.array_equal(got, want, equal_nan=True)


def test_exact_rows_are_correctly_rounded_sums_and_means() -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 96)) * 2.0 ** rng.integers(-30, 30, (64, 96))).astype(
        np.float32)
    x[0, :3] = HARD_A  # 1 + 2^-24 + 2^-40 rounds up; the midpoint would round to even
    x[0, 3:] = 0.0
    for mode in ("checked", "reference"):
        s, mu = np.zeros(64, np.float32), np.zeros(64, np.float32)
        exact_rows(x, s, mu, tile_shape=(16, 96), mode=mode)
        assert s.tobytes() == sum_rounded(x, -1, False, "f32").tobytes()
        assert mu.tobytes() == sum_rounded(x, -1, False, "f32", divisor=96).tobytes()
        assert s[0] == np.float32(1 + 2.0**-23)


def test_ir_round_trip_and_checks() -> None:
    x = np.zeros((64, 96), np.float32)
    text = exact_rows.inspect_ir("tile", x, np.zeros(64, np.float32),
                                 np.zeros(64, np.float32), tile_shape=(16, 96))
    assert 'exact = true' in text and 'kind = "mean"' in text
    assert str(parse_module(text)) == text
    f32 = TensorType((4, 8), dtype("f32"))
    with pytest.raises(IRVerifyError, match="mean"):
        tile_compute.Reduce("mean").infer([f32])
    with pytest.raises(IRVerifyError, match="float"):
        tile_compute.Reduce("sum", exact=True).infer([TensorType((4, 8), dtype("int32"))])
    with pytest.raises(IRVerifyError, match="at most 32 bits"):
        f64 = TensorType((4, 4), dtype("f64"))
        tile_compute.Mma(dtype("f64"), exact=True).infer([f64, f64])


def test_lowering_refuses_exact_ops_at_their_line() -> None:
    a = np.zeros((64, 32), np.float32)
    lines, start = inspect.getsourcelines(exact_gemm.fn)
    line = start + next(k for k, text in enumerate(lines) if "exact=True" in text)
    with pytest.raises(UnsupportedError, match=r"tile\.mma \(exact\)") as err:
        exact_gemm.inspect_ir("target", a, np.zeros((32, 32), np.float32),
                              np.zeros((64, 32), np.float32), tile_shape=(64, 32, 16))
    assert err.value.loc.line == line


@ts.kernel
def ragged_exact(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                 C: ts.Tensor["M", "N", ts.f32]) -> None:
    """Programs run different numbers of trips: the exact accumulators of the programs
    that leave early are set aside and merged back when the last program leaves."""
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, tile_m + BK, BK):
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN],
                          acc, exact=True)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def branch_exact(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                 C: ts.Tensor["M", "N", ts.f32]) -> None:
    """Only the first column of programs accumulates: the branches' values (an exact
    accumulator, a narrow start) are merged into one exact accumulator."""
    acc = ts.tile.zeros((BM, BN), ts.f32)
    if tile_n == 0:
        acc = ts.tile.mma(A[tile_m:tile_m + BM, 0:K], B[0:K, tile_n:tile_n + BN], acc,
                          exact=True)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def two_branches_exact(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                       E: ts.Tensor["K", "N", ts.f32], C: ts.Tensor["M", "N", ts.f32]) -> None:
    """Both branches accumulate products of the same shapes: their exact accumulators
    are merged operand by operand."""
    acc = ts.tile.zeros((BM, BN), ts.f32)
    if tile_n == 0:
        acc = ts.tile.mma(A[tile_m:tile_m + BM, 0:K], B[0:K, tile_n:tile_n + BN], acc,
                          exact=True)
    else:
        acc = ts.tile.mma(A[tile_m:tile_m + BM, 0:K], E[0:K, tile_n:tile_n + BN], acc,
                          exact=True)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def update_exact(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                 C: ts.Tensor["M", "N", ts.bf16], D: ts.Tensor["M", "N", ts.f16]) -> None:
    """``+=`` and ``-=`` of an exact accumulator: the stored value joins the exact sum,
    which is rounded once, to the memory's format."""
    acc = ts.tile.mma(A[tile_m:tile_m + BM, 0:K], B[0:K, tile_n:tile_n + BN], exact=True)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += acc
    D[tile_m:tile_m + BM, tile_n:tile_n + BN] -= acc


def _hard_operands(seed: int, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * 2.0 ** rng.integers(-40, 40, (m, k))).astype(
        np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[0, :3], a[0, 3:], b[:3, 0] = HARD_A, 0.0, HARD_B
    return a, b


@pytest.mark.parametrize("mode,schedule", [("checked", "auto"), ("checked", "sequential"),
                                           ("reference", "auto")])
def test_divergent_trips_and_branches_keep_the_exact_sum(mode: str, schedule: str) -> None:
    a, b = _hard_operands(7, 48, 48, 32)
    c = np.zeros((48, 32), np.float32)
    ragged_exact(a, b, c, tile_shape=(16, 16, 16), mode=mode, schedule=schedule)
    for i in range(0, 48, 16):
        want = matmul_rounded(a[i:i + 16, :i + 16], b[:i + 16], "f32")
        assert c[i:i + 16].tobytes() == want.tobytes()
    c = np.full((48, 32), np.nan, np.float32)
    branch_exact(a, b, c, tile_shape=(16, 16, 16), mode=mode, schedule=schedule)
    assert c[:, :16].tobytes() == matmul_rounded(a, b[:, :16], "f32").tobytes()
    assert c[:, 16:].tobytes() == np.zeros((48, 16), np.float32).tobytes()
    e = -b[::-1].copy()
    two_branches_exact(a, b, e, c, tile_shape=(16, 16, 16), mode=mode, schedule=schedule)
    assert c[:, :16].tobytes() == matmul_rounded(a, b[:, :16], "f32").tobytes()
    assert c[:, 16:].tobytes() == matmul_rounded(a, e[:, 16:], "f32").tobytes()


@pytest.mark.parametrize("mode", ["checked", "reference"])
def test_updates_round_the_joined_exact_sum_once(mode: str) -> None:
    a, b = _hard_operands(8, 32, 24, 32)
    rng = np.random.default_rng(9)
    c0 = rng.standard_normal((32, 32)).astype(ml_dtypes.bfloat16)
    d0 = (rng.standard_normal((32, 32)) * 1e-3).astype(np.float16)
    c, d = c0.copy(), d0.copy()
    update_exact(a, b, c, d, tile_shape=(16, 16, 16), mode=mode)
    # the reference Kulisch accumulator of Python integers
    prod = ref_acc.exact_products(a, b)
    want_c = ref_acc.round_exact(ref_acc.add_exact(ref_acc.to_exact(c0), prod), "bf16")
    want_d = ref_acc.round_exact(ref_acc.add_exact(ref_acc.to_exact(d0), np.negative(prod)),
                                 "f16")
    assert c.tobytes() == want_c.tobytes()
    assert d.tobytes() == want_d.tobytes()


def test_k_loops_defer_exact_and_fast_accumulators() -> None:
    """A K loop whose accumulator feeds only the next trip's ``mma`` keeps the trips'
    operands and makes one product over the whole K: in checked mode the exact
    products (the correctly rounded result), in fast mode, which ignores ``exact``, an
    ordinary product within float32's error bound."""
    a, b = _hard_operands(11, 64, 96, 32)
    before = taken("deferred_mma")
    checked = _gemm(a, b, (32, 32, 16), "checked")
    assert taken("deferred_mma") == before + 1
    assert checked.tobytes() == matmul_rounded(a, b, "f32").tobytes()
    a[0] = 0.0  # (the hard row needs the exact sum; fast mode does not give it)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 97 * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b))
    fast = _gemm(a, b, (32, 32, 16), "fast")
    assert taken("deferred_mma") == before + 2
    assert np.all(np.abs(fast - exact) <= bound)


def test_deferred_exact_loops_flush_and_repeat_with_the_same_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The staged loop's later trips derived from the first, the next launch's trips
    derived from the launch before, and a flush of the kept K columns into the exact
    accumulator all keep the exact sum."""
    a, b = _hard_operands(12, 64, 128, 32)
    want = matmul_rounded(a, b, "f32").tobytes()
    staged, first = taken("staged_loop"), taken("staged_first_trip")
    assert _gemm(a, b, (32, 32, 16), "checked").tobytes() == want
    assert _gemm(a, b, (32, 32, 16), "checked").tobytes() == want
    assert taken("staged_loop") > staged and taken("staged_first_trip") > first
    monkeypatch.setattr(PendingMma, "MAX_K", 40)  # two trips of 16 per kept product
    assert _gemm(a, b, (32, 32, 16), "checked").tobytes() == want
    assert _gemm(a, b, (16, 16, 16), "reference").tobytes() == want

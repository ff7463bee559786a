"""Carried exact sums at the tile level: ``reduce_sum(x, axis, exact=True, acc=c)`` and
``reduce_mean(x, axis, acc=c, count=n)`` walk a row block by block and give the exact
sum (or mean) of the whole row rounded once, whatever the block size; the IR checks
and prints them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import IRVerifyError, TesseraError
from tessera.ir import parse_module
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.numerics import dtype, sum_rounded


@ts.kernel
def block_sums(X: ts.Tensor["M", "N", ts.f32], S: ts.Tensor["M", ts.f32],
               Mu: ts.Tensor["M", ts.f32]) -> None:
    """Row sums and means of rows longer than one tile, BN columns at a time."""
    acc = ts.tile.zeros((BM,), ts.f32)
    for j in ts.tile.range(0, N - BN, BN):
        acc = ts.tile.reduce_sum(X[tile_m:tile_m + BM, j:j + BN], -1, exact=True, acc=acc)
    last = X[tile_m:tile_m + BM, N - BN:N]
    S[tile_m:tile_m + BM] = ts.tile.reduce_sum(last, -1, exact=True, acc=acc)
    Mu[tile_m:tile_m + BM] = ts.tile.reduce_mean(last, -1, acc=acc, count=N)


@ts.kernel
def block_sums_bf16(X: ts.Tensor["M", "N", ts.bf16], S: ts.Tensor["M", ts.bf16]) -> None:
    acc = ts.tile.zeros((BM,), ts.bf16)
    for j in ts.tile.range(0, N, BN):
        acc = ts.tile.row_sum(X[tile_m:tile_m + BM, j:j + BN], exact=True, acc=acc)
    S[tile_m:tile_m + BM] = acc


def _run(x: np.ndarray, bn: int, mode: str = "checked") -> tuple[np.ndarray, np.ndarray]:
    s, mu = np.zeros(x.shape[0], np.float32), np.zeros(x.shape[0], np.float32)
    block_sums(x, s, mu, tile_shape=(8, bn), mode=mode)
    return s, mu


@settings(max_examples=30, deadline=None)
@given(blocks=st.integers(1, 6), bn=st.sampled_from([4, 8, 32]),
       seed=st.integers(0, 2**16), spread=st.integers(0, 120))
def test_carried_sums_are_the_whole_rows_sums(blocks: int, bn: int, seed: int,
                                               spread: int) -> None:
    rng = np.random.default_rng(seed)
    n = blocks * bn
    x = (rng.standard_normal((16, n)) * 2.0 ** rng.integers(-spread, spread + 1, (16, n))
         ).astype(np.float32)
    s, mu = _run(x, bn)
    assert s.tobytes() == sum_rounded(x, -1, False, "f32").tobytes()
    assert mu.tobytes() == sum_rounded(x, -1, False, "f32", divisor=n).tobytes()


def test_block_size_and_mode_do_not_change_a_bit() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((16, 96)) * 2.0 ** rng.integers(-60, 60, (16, 96))
         ).astype(np.float32)
    x[0, :3], x[0, 3:] = [1.0, 2.0**-24, 2.0**-40], 0.0  # rounds up: not a float64 sum
    x[1, 5], x[2, 7], x[2, 70] = np.nan, np.inf, -np.inf  # NaN; infinities of both signs
    x[3, 9], x[3, 90] = np.inf, np.inf
    runs = [_run(x, bn, mode) for bn in (4, 16, 32) for mode in ("checked", "reference")]
    for s, mu in runs:
        assert s.tobytes() == runs[0][0].tobytes() and mu.tobytes() == runs[0][1].tobytes()
    s, mu = runs[0]
    assert s[0] == np.float32(1 + 2.0**-23)
    assert np.isnan(s[1]) and np.isnan(s[2]) and s[3] == np.inf and mu[3] == np.inf
    want = sum_rounded(x, -1, False, "f32")
    assert s.tobytes() == np.where(np.isnan(want), np.float32(np.nan), want).tobytes()


@pytest.mark.parametrize("schedule", ["auto", "sequential", "vectorized"])
def test_every_simulator_schedule_gives_the_same_bits(schedule: str) -> None:
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((32, 64)) * 2.0 ** rng.integers(-40, 40, (32, 64))
         ).astype(np.float32)
    s, mu = np.zeros(32, np.float32), np.zeros(32, np.float32)
    block_sums(x, s, mu, tile_shape=(8, 16), schedule=schedule)
    assert s.tobytes() == sum_rounded(x, -1, False, "f32").tobytes()
    assert mu.tobytes() == sum_rounded(x, -1, False, "f32", divisor=64).tobytes()


def test_narrow_accumulators_round_once_to_their_format() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 64)).astype(ml_dtypes.bfloat16)
    s = np.zeros(8, ml_dtypes.bfloat16)
    block_sums_bf16(x, s, tile_shape=(8, 16))
    assert s.tobytes() == sum_rounded(x, -1, False, "bf16").tobytes()


def test_ir_prints_parses_and_checks_carried_sums() -> None:
    x = np.zeros((16, 64), np.float32)
    text = block_sums.inspect_ir("tile", x, np.zeros(16, np.float32),
                                 np.zeros(16, np.float32), tile_shape=(8, 16))
    assert 'kind = "mean", exact = true, count = 64' in text
    assert str(parse_module(text)) == text
    row, acc = TensorType((4, 8), dtype("f32")), TensorType((4,), dtype("f32"))
    with pytest.raises(IRVerifyError, match="count"):
        tile_compute.Reduce("mean", exact=True).infer([row, acc])  # no count
    with pytest.raises(IRVerifyError, match="count"):
        tile_compute.Reduce("sum", exact=True, count=8).infer([row, acc])
    with pytest.raises(IRVerifyError, match="exact sum or mean continues"):
        tile_compute.Reduce("max").infer([row, acc])
    with pytest.raises(IRVerifyError, match="accumulator"):
        tile_compute.Reduce("sum", exact=True).infer([row, TensorType((8,), dtype("f32"))])
    with pytest.raises(IRVerifyError, match="accumulator"):
        tile_compute.Reduce("sum", exact=True).infer([row, TensorType((4,), dtype("bf16"))])


@ts.kernel
def no_count(X: ts.Tensor["M", "N", ts.f32], Mu: ts.Tensor["M", ts.f32]) -> None:
    acc = ts.tile.zeros((BM,), ts.f32)
    Mu[tile_m:tile_m + BM] = ts.tile.reduce_mean(X[tile_m:tile_m + BM, 0:N], -1, acc=acc)


def test_a_carried_mean_without_its_length_is_an_error_at_its_line() -> None:
    with pytest.raises(TesseraError, match=r"count=.*test_carried.py:\d+|test_carried.py:\d+"
                       r".*count="):
        no_count(np.zeros((8, 8), np.float32), np.zeros(8, np.float32), tile_shape=(8, 8))

"""The measured accumulation of Hopper's tensor cores (tessera.arch.mma_hopper).

``data/tensorcore_h200.npz`` holds operands and an H200's results of the example GEMMs
lowered for sm_80 (``mma.sync.m16n8k16``, bf16) and sm_90a (``wgmma.m64nNk16`` bf16,
``wgmma.m64nNk32`` e4m3), K of 16 to 256, operands standard-normal, spread over many
binades, or with large cancelling terms (``benchmarks/tensorcore_probe.py`` made them;
a 32 x 16 corner of each 256 x 256 output is kept; fp8 B is stored N x K). Each output
is a chain of steps in ascending k.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import mma as golden_mma
from tessera.arch import mma_hopper

DATA = Path(__file__).parent / "data" / "tensorcore_h200.npz"


def _chain(a: np.ndarray, b: np.ndarray, step, fmt: str = "bf16") -> np.ndarray:
    k = 32 if fmt == "e4m3" else 16
    acc = np.zeros((a.shape[0], b.shape[1]))
    for s in range(0, a.shape[1], k):
        acc = np.asarray(step(a[:, s:s + k], b[s:s + k], acc, fmt), np.float64)
        acc = acc.astype(np.float32).astype(np.float64)  # the f32 accumulator register
    return acc.astype(np.float32)


def _cases() -> list[str]:
    with np.load(DATA) as d:
        return sorted({k[:-2] for k in d.files})


@pytest.mark.parametrize("case", _cases())
def test_reproduces_the_h200_bit_for_bit(case: str) -> None:
    """Every measured output, where the golden convention differs from many of them."""
    with np.load(DATA) as d:
        a, b, want = d[case + "_a"], d[case + "_b"], d[case + "_c"]
    fmt = "e4m3" if case.endswith("fp8") else "bf16"
    if fmt == "e4m3":
        a = a.view(ml_dtypes.float8_e4m3fn)
        b = np.ascontiguousarray(b.view(ml_dtypes.float8_e4m3fn).T)
    got = _chain(a, b, mma_hopper.mma, fmt)
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    if "cancel" in case or fmt == "e4m3":  # where truncation loses what exact sums keep
        assert (_chain(a, b, golden_mma, fmt) != want).mean() > 0.3


def _bf16(values: list[float], shape: tuple[int, int]) -> np.ndarray:
    return np.asarray(values, np.float64).reshape(shape).astype(ml_dtypes.bfloat16)


finite_bf16 = st.floats(-2.0 ** 20, 2.0 ** 20, allow_nan=False, allow_infinity=False,
                        allow_subnormal=False, width=32)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite_bf16, min_size=64, max_size=64),
       st.lists(finite_bf16, min_size=64, max_size=64),
       st.lists(finite_bf16, min_size=16, max_size=16))
def test_error_is_within_the_truncation_bound(av: list[float], bv: list[float],
                                              cv: list[float]) -> None:
    """Against the exact sum: at most one quantum ``2**(E - 25)`` lost per term (16
    products and C) plus the final rounding toward zero (under one f32 ulp)."""
    a, b = _bf16(av, (4, 16)), _bf16(bv, (16, 4))
    c = np.asarray(cv, np.float32).reshape(4, 4).astype(np.float64)
    got = mma_hopper.mma(a, b, c, "bf16")
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    exact = np.array([[float(Fraction(c[i, j]) + sum(Fraction(fa[i, k]) * Fraction(fb[k, j])
                                                       for k in range(16)))
                        for j in range(4)] for i in range(4)])  # one rounding, to float64
    ea, eb = np.frexp(fa)[1] - 1, np.frexp(fb)[1] - 1
    pe = np.where(fa[:, None, :] * fb.T[None] == 0, -999, ea[:, None, :] + eb.T[None])
    top = np.maximum(pe.max(-1), np.where(c == 0, -999, np.frexp(c)[1] - 1))
    ulp = np.spacing(np.abs(got).astype(np.float32)).astype(np.float64)
    bound = 17 * np.ldexp(1.0, top - 25) + ulp
    assert (np.abs(got - exact) <= bound * (1 + 2.0 ** -40)).all()
    assert got.astype(np.float32).astype(np.float64).tolist() == got.tolist()


def test_sums_that_need_no_truncation_are_exact_then_rounded_toward_zero() -> None:
    """Small integers: nothing falls below the quantum, so the only difference from the
    golden convention is the direction of the final rounding."""
    a = _bf16(list(range(1, 17)), (1, 16))
    b = _bf16([3.0] * 16, (16, 1))
    c = np.array([[2.0 ** 24 + 1]])  # not an f32: 2**24 + 1 + 408 rounds toward zero
    got = mma_hopper.mma(a, b, c, "bf16")
    assert got[0, 0] == 2.0 ** 24 + 408  # RZ; round-to-nearest-even gives the same here
    c = np.array([[2.0 ** 24 + 3]])
    assert mma_hopper.mma(a, b, c, "bf16")[0, 0] == 2.0 ** 24 + 410  # 411 -> 410 (RZ)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_unmeasured_operands_keep_the_golden_convention(bad: float) -> None:
    """Infinities and NaNs were not measured: the golden convention."""
    a = _bf16([bad] + [1.0] * 15, (1, 16))
    b = _bf16([1.0] * 16, (16, 1))
    c = np.zeros((1, 1))
    got, want = mma_hopper.mma(a, b, c, "bf16"), golden_mma(a, b, c, "bf16")
    np.testing.assert_array_equal(got, want)
    assert not mma_hopper.modelled(a.astype(np.float64), b.astype(np.float64), c, "bf16")


def test_e4m3_sums_keep_14_significant_bits() -> None:
    """32 products of 1 * 1 and one of 2**-10 sum exactly to 32 + 2**-10 in the golden
    convention; the hardware's sum keeps 13 bits below its own exponent (2**5), so the
    2**-10 goes; 31 + 2**-8 keeps its 2**-8 (13 bits below 2**4 reach 2**-9)."""
    b = np.ones((32, 1), ml_dtypes.float8_e4m3fn)
    a = np.ones((1, 32), np.float64)
    c = np.array([[2.0 ** -10]])
    got = mma_hopper.mma(a.astype(ml_dtypes.float8_e4m3fn), b, c, "e4m3")
    assert got[0, 0] == 32.0 and golden_mma(a.astype(ml_dtypes.float8_e4m3fn), b, c,
                                            "e4m3")[0, 0] == 32 + 2.0 ** -10
    a[0, 0] = 0.0
    got = mma_hopper.mma(a.astype(ml_dtypes.float8_e4m3fn), b, np.array([[2.0 ** -8]]), "e4m3")
    assert got[0, 0] == 31 + 2.0 ** -8


def test_e5m2_is_not_modelled() -> None:
    a = np.ones((1, 32), ml_dtypes.float8_e5m2)
    b = np.ones((32, 1), ml_dtypes.float8_e5m2)
    assert "e5m2" not in mma_hopper.MODELLED
    np.testing.assert_array_equal(mma_hopper.mma(a, b, np.zeros((1, 1)), "e5m2"), [[32.0]])


def test_subnormal_operands_count_with_the_smallest_exponent() -> None:
    """Subnormal f16 operands (2**-20) are modelled, not sent to the golden convention:
    beside a product of 2**10 (quantum 2**-15) they vanish, beside 2**-14 they stay."""
    a = np.array([[2.0 ** 10, 2.0 ** -20] + [0.0] * 14], np.float16)
    b = np.ones((16, 1), np.float16)
    got = mma_hopper.mma(a, b, np.zeros((1, 1)), "f16")
    assert got[0, 0] == 2.0 ** 10  # 2**-20 < 2**-15: truncated away
    small = np.array([[2.0 ** -14, 2.0 ** -20] + [0.0] * 14], np.float16)
    assert mma_hopper.mma(small, b, np.zeros((1, 1)), "f16")[0, 0] == 2.0 ** -14 + 2.0 ** -20


def test_reproduces_the_h100_tf32_wgmma_bit_for_bit() -> None:
    """``data/tensorcore_h100_tf32.npz``: a 64 x 64 corner of an H100's tf32 GEMM
    (``wgmma.m64nNk8`` chains, K = 128, standard-normal tf32 operands, B stored N x K)
    as the GPU cross-check kept it. The bf16 rule with steps of 8 gives every output;
    the golden convention about one in twenty."""
    with np.load(Path(__file__).parent / "data" / "tensorcore_h100_tf32.npz") as d:
        a, bt, want = d["a"], d["bt"], d["c"]
    b = np.ascontiguousarray(bt.T)  # tf32 values in f32 storage
    steps = []
    for rule in (mma_hopper.mma, golden_mma):
        acc = np.zeros(want.shape)
        for s in range(0, a.shape[1], 8):
            acc = np.asarray(rule(a[:, s:s + 8], b[s:s + 8], acc, "tf32"), np.float64)
            acc = acc.astype(np.float32).astype(np.float64)
        steps.append(acc.astype(np.float32))
    np.testing.assert_array_equal(steps[0].view(np.uint32), want.view(np.uint32))
    assert (steps[1] == want).mean() < 0.1

"""Exact ``mma`` chains held in one f64 per element (tessera.lower.exact.f64acc): fp8_e4m3
products whose count per element stays within the bound under which f64 sums them
exactly take ``fma.rn.f64`` instead of the long accumulators, and give the exact sum
rounded once; longer contractions, and formats whose products span more than f64
holds (e5m2, bf16, f32), keep the long accumulators."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts

TARGETS = ("sm_80", "sm_90a")


def matmul(x, w):  # type: ignore[no-untyped-def]
    return x @ w


def _ones(shape: tuple[int, ...], fmt: object) -> np.ndarray:
    return ts.Tensor(np.ones(shape), fmt).array


@pytest.mark.parametrize(("k", "fmt", "f64"), [
    (300, ts.fp8_e4m3, True), (171_000, ts.fp8_e4m3, True),
    # 171,196 is the bound, but the K loop's last block of 128 counts whole
    (171_196, ts.fp8_e4m3, False), (171_197, ts.fp8_e4m3, False),
    (300, ts.fp8_e5m2, False), (300, ts.bf16, False)])
def test_which_chains_one_f64_holds(k: int, fmt: object, f64: bool) -> None:
    x, w = _ones((1, k), fmt), _ones((k, 1), fmt)
    ptx = str(ts.jit(matmul).lower(x, w).ptx("sm_80"))
    assert ("fma.rn.f64" in ptx) == f64
    assert ("ld.shared.u64" in ptx) == (not f64)  # the long accumulators' words


@pytest.mark.parametrize("target", TARGETS)
def test_a_sum_spanning_more_than_f32_holds_is_exact(target: str) -> None:
    # 448 * 448 + 2^-6 * 2^-3 - 448 * 448 = 2^-9, the smallest e4m3 subnormal: f32
    # accumulation (tensor cores) would lose it under 448^2 and give 0
    x = ts.Tensor(np.array([[448.0, 2.0**-6, -448.0]] * 3), ts.fp8_e4m3).array
    w = ts.Tensor(np.array([[448.0, 1.0], [2.0**-3, 1.0], [448.0, 1.0]]), ts.fp8_e4m3).array
    lowered = ts.jit(matmul).lower(x, w)
    assert "fma.rn.f64" in str(lowered.ptx(target))
    out = np.asarray(lowered.run(x, w, backend="target", target=target).array,
                     np.float64)
    assert (out[:, 0] == 2.0**-9).all() and (out[:, 1] == 2.0**-6).all()
    assert np.asarray(lowered.run(x, w).array).tobytes() == np.asarray(
        lowered.run(x, w, backend="target", target=target).array).tobytes()

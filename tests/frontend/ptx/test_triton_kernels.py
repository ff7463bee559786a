"""Triton's tutorial-style kernels for sm_90a (tests/ir/text/ptx/ptx_corpus/
triton_kernels.py made the PTX): a row softmax of f16, a layer norm of bf16, packed f16
arithmetic, a cast to fp8 e4m3, a GELU through libdevice and a spin-locked sum, run on
the CPU by ``ts.ptx`` against NumPy in float64. The launches are those the comments in
the PTX give (Triton's metadata)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tests.frontend.ptx.corpus import CORPUS

PTX = CORPUS / "triton_kernels_sm90a.ptx"
rng = np.random.default_rng(39)
SCRATCH = [np.zeros(1, np.uint8), np.zeros(1, np.uint8)]  # Triton's two scratch pointers


@pytest.fixture(scope="module")
def mod() -> ts.ptx.PtxProgram:
    return ts.ptx.load(PTX)


def launch(name: str) -> tuple[int, int]:
    """(threads, dynamic shared bytes) of kernel ``name``, from the comment before it."""
    m = re.search(rf"// {name}: (\d+) threads, (\d+) bytes", PTX.read_text())
    assert m is not None
    return int(m[1]), int(m[2])


def ulps(got: np.ndarray, want: np.ndarray, dt: np.dtype) -> np.ndarray:
    """|got - want| in units in the last place of ``dt`` at ``want``."""
    spacing = np.abs(np.spacing(np.abs(want).astype(dt)).astype(np.float64))
    return np.abs(got.astype(np.float64) - want) / spacing


def test_softmax(mod) -> None:
    """``exp`` is ``ex2.approx.f32`` of ``x * log2(e)``, the quotient ``div.full.f32``:
    within one f16 ulp of the float64 softmax."""
    rows, cols = 3, 200
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float16)
    out = np.zeros_like(x)
    threads, shared = launch("softmax_kernel")
    mod.kernel("softmax_kernel").run(grid=rows, block=threads, shared_bytes=shared,
                                     args=[out, x, np.int32(cols), *SCRATCH])
    e = np.exp(x - x.astype(np.float64).max(axis=1, keepdims=True))
    assert ulps(out, e / e.sum(axis=1, keepdims=True), np.dtype(np.float16)).max() <= 1


def test_layer_norm(mod) -> None:
    rows, cols = 3, 200
    x = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal(cols).astype(ml_dtypes.bfloat16)
    out = np.zeros_like(x)
    threads, shared = launch("layer_norm_kernel")
    mod.kernel("layer_norm_kernel").run(grid=rows, block=threads, shared_bytes=shared,
                                        args=[out, x, w, np.int32(cols), np.float32(1e-5),
                                              *SCRATCH])
    d = x.astype(np.float64) - x.astype(np.float64).mean(axis=1, keepdims=True)
    want = d / np.sqrt((d * d).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
    assert ulps(out, want, np.dtype(ml_dtypes.bfloat16)).max() <= 1


def test_packed_half_arithmetic(mod) -> None:
    """``max(x * y + x, y - x)``: ``fma.rn.f16x2``, ``sub.f16x2`` and ``max.f16x2``, each
    rounded once (NumPy rounds float64 to f16 directly), bit for bit."""
    n = 3000
    x, y = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    out = np.zeros(n, np.float16)
    threads, _ = launch("half_axpy_kernel")
    mod.kernel("half_axpy_kernel").run(grid=-(-n // 1024), block=threads,
                                       args=[out, x, y, np.int32(n), *SCRATCH])
    a, b = x.astype(np.float64), y.astype(np.float64)
    want = np.maximum((a * b + a).astype(np.float16), (b - a).astype(np.float16))
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))


def test_cast_to_fp8(mod) -> None:
    """``cvt.rn.satfinite.e4m3x2.f32``: one rounding, saturating at 448, bit for bit."""
    n = 3000
    x = (rng.standard_normal(n) * 300).astype(np.float32)
    x[:3] = [np.inf, -1e9, 464]  # saturate; 464 ties to even, down to 448
    out = np.zeros(n, np.uint8)
    threads, _ = launch("to_fp8_kernel")
    mod.kernel("to_fp8_kernel").run(grid=-(-n // 1024), block=threads,
                                    args=[out, x, np.int32(n), *SCRATCH])
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(out, want)


def test_gelu_through_the_math_library(mod) -> None:
    """libdevice's ``erff``, ``tanhf`` and ``log1pf`` (which rounds ``1 + |x|`` toward
    zero, ``add.rz.ftz.f32``): each within CUDA's documented 2 ulps, so the sum within
    2^-21 of the sum of the terms' magnitudes."""
    from math import erf

    n = 3000
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:4] = [0.0, -0.0, 1e-30, -5e-39]  # zeros, a tiny value, a subnormal
    out = np.zeros(n, np.float32)
    threads, _ = launch("gelu_kernel")
    mod.kernel("gelu_kernel").run(grid=-(-n // 1024), block=threads,
                                  args=[out, x, np.int32(n), *SCRATCH])
    d = x.astype(np.float64)
    terms = [0.5 * d * (1 + np.vectorize(erf)(d / np.sqrt(2))), np.tanh(d),
             np.log1p(np.abs(d))]
    scale = sum(np.abs(t) for t in terms)
    assert (np.abs(out - sum(terms)) <= 2.0 ** -21 * scale).all()


def test_programs_take_turns_through_a_spin_lock(mod) -> None:
    """Each program adds its partial sum to one float under a lock it takes with
    ``atom.cas`` in a loop: the waiting programs spin at a block that comes first, the
    holder still runs on. The programs add in the order they took the lock (the same on
    every run): within an f32 rounding per program of the float64 sum."""
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    threads, shared = launch("locked_sum_kernel")
    sums = []
    for _ in range(2):
        out, lock = np.zeros(1, np.float32), np.zeros(1, np.int32)
        mod.kernel("locked_sum_kernel").run(grid=4, block=threads, shared_bytes=shared,
                                            args=[out, x, lock, np.int32(n), *SCRATCH])
        assert lock[0] == 0
        sums.append(out[0])
    want = x.astype(np.float64).sum()
    assert abs(sums[0] - want) <= 8 * 2.0 ** -24 * np.abs(x).sum() and sums[0] == sums[1]

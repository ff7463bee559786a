"""fp8 (e4m3, e5m2) and int8 matmuls under ``backend="target"``: the generated kernels
give the graph interpreter's bits on sm_80 and sm_90a, and their PTX assembles with no
advisory and no spills.

fp8 products are summed by the exact ``mma`` (long accumulators, one rounding: tensor
cores' f32 accumulation would truncate a sum of e4m3 products, which spans about 54
bits); int8 products are summed on tensor cores in s32 where no sum can leave it
(:mod:`tessera.lower.sm80.intmma`), else per thread in 64-bit registers and saturated
to int32 once (:mod:`tessera.lower.exact.intmma`); the int8 epilogue's int64
arithmetic runs in ``s32`` registers where interval bounds prove it stays in range
(:mod:`tessera.lower.int64`). Shapes are drawn so that the schedule's tiles do and do
not divide them; values include subnormals, each format's largest finite value, NaN
and infinities for fp8, and -128 and 127 for int8."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tests.frontend.graph.lowered.same import (
    TARGETS,
    assembles_clean,
    multiplies,
    same_on_target,
)

FORMATS = {"fp8_e4m3": ts.fp8_e4m3, "fp8_e5m2": ts.fp8_e5m2, "int8": ts.int8}
#: planted values: the smallest and largest subnormal, the largest finite value, NaN
#: (and infinities where the format has them)
SPECIAL = {"fp8_e4m3": [2.0**-9, 7 * 2.0**-9, 448.0, -448.0, np.nan, -0.0],
           "fp8_e5m2": [2.0**-16, 3 * 2.0**-16, 57344.0, -57344.0, np.nan, np.inf, -np.inf],
           "int8": [-128, 127, -1, 0]}


def linear_relu(x, w, b):  # type: ignore[no-untyped-def]
    return op.relu(x @ w + b)


def linear_sub(x, w, b):  # type: ignore[no-untyped-def]
    return x @ w - b


def mlp_relu(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1 + b1) @ w2 + b2


def _values(rng: np.random.Generator, shape: tuple[int, ...], fmt: str,
            special: bool) -> np.ndarray:
    """Values of ``fmt``: int8 uniform over -4..4 (sums that mostly fit int8), or over
    its whole range with ``special``; fp8 normal values times 4 rounded once; with
    ``special``, a few elements replaced by :data:`SPECIAL` values."""
    if fmt == "int8":
        x = rng.integers(-128, 128, shape) if special else rng.integers(-4, 5, shape)
        x = x.astype(np.float64)
    else:
        x = rng.standard_normal(shape) * 4
    if special and x.size:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, 1 + flat.size // 8)
        flat[picks] = rng.choice(np.array(SPECIAL[fmt], np.float64), picks.size)
    if fmt == "int8":
        return x.astype(np.int8)
    return ts.Tensor(x, FORMATS[fmt]).array


side = st.integers(1, 72)


@settings(max_examples=12, deadline=None)
@given(m=side, k=side, n=side, fmt=st.sampled_from(sorted(FORMATS)),
       fn=st.sampled_from([linear_relu, linear_sub]), special=st.booleans(),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16))
def test_narrow_matmuls_with_epilogues_on_target_give_the_graph_bits(
        m: int, k: int, n: int, fmt: str, fn, special: bool,  # type: ignore[no-untyped-def]
        target: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    args = [_values(rng, s, fmt, special) for s in [(m, k), (k, n), (n,)]]
    same_on_target(fn, args, (target,))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_narrow_mlps_on_target_give_the_graph_bits(fmt: str) -> None:
    # tensor-core-sized matmuls (64 x 32 @ 32 x 64): the tiles that took tensor cores
    rng = np.random.default_rng(len(fmt))
    args = [_values(rng, s, fmt, True) for s in [(64, 32), (32, 64), (64,), (64, 16), (16,)]]
    same_on_target(mlp_relu, args, TARGETS)


def test_int8_sums_at_the_extremes() -> None:
    # every product 2^14 (or -127 * 128): sums of 70 far beyond int8, saturated by the
    # epilogue's casts; the bias at -128 and 127
    x = np.full((5, 70), -128, np.int8)
    w = np.where(np.arange(70 * 9).reshape(70, 9) % 2, -128, 127).astype(np.int8)
    b = np.array([-128, 127, 0, -1, 1, 127, -128, 5, -5], np.int8)
    same_on_target(linear_relu, [x, w, b])
    same_on_target(linear_sub, [x, w, b])
    # the definition: the exact sum saturated to int8, then the bias added and saturated
    h = np.clip(x.astype(np.int64) @ w.astype(np.int64), -128, 127) + b
    want = np.maximum(np.clip(h, -128, 127), 0).astype(np.int8)
    got = ts.jit(linear_relu).lower(x, w, b).run(x, w, b, backend="target", target="sm_80")
    assert np.array_equal(np.asarray(got.array), want)


def _tessera_side():  # type: ignore[no-untyped-def]
    root = str(Path(__file__).resolve().parents[4])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.compilers import tessera_side

    return tessera_side


@pytest.mark.parametrize("target", TARGETS)
def test_narrow_mlp_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    side_ = _tessera_side()
    rng = np.random.default_rng(9)
    cases = [(name, side_.FUNCTIONS[name], side_.arguments(name))
             for name in ("mlp_relu_fp8", "mlp_relu_int8")]
    cases += [(fmt, linear_relu, [_values(rng, s, fmt, False) for s in [(33, 70), (70, 9),
                                                                          (9,)]])
              for fmt in sorted(FORMATS)]
    for name, fn, args in cases:
        kernels = ts.jit(fn).lower(*args).target(target).kernels
        assert kernels, name
        for kernel in kernels:
            assembles_clean(kernel)
            if name.endswith("fp8") or name.startswith("fp8"):
                # no tensor cores: their f32 accumulation would truncate fp8 sums
                assert "mma.sync" not in kernel.ptx and "wgmma" not in kernel.ptx, name
            elif multiplies(kernel):  # (split-K's combine adds partial sums: no products)
                # int8 sums of K < 2^17 products stay inside s32: tensor cores
                assert ".s32.s8.s8" in kernel.ptx, name

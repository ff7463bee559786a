"""The models of the approximate instructions (``ex2.approx{.ftz}`` of f32, f16 and
bf16, ``lg2.approx{.ftz}.f32``, ``sqrt``/``rcp.approx``): correctly rounded against
exact decimal arithmetic, the ``.ftz`` flushes of the PTX ISA, and the same bits
whatever the platform's float64 ``exp2``/``log2`` return within a few ulps."""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target import approx
from tessera.numerics.transcendental import exact as exact_math

F32 = np.float32


def exact_round(x: float, fn: str, dt: type = F32) -> np.float32:
    """The ``dt`` value nearest 2^x or log2(x), from 50-digit decimal arithmetic: the
    values around the float64 rounding are compared by their distance."""
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        a = decimal.Decimal(x)
        v = decimal.Decimal(2) ** a if fn == "ex2" else a.ln() / decimal.Decimal(2).ln()
        c = np.array(float(v)).astype(dt)[()]
        cands = [np.nextafter(c, dt(-np.inf)), c, np.nextafter(c, dt(np.inf))]
        return min(cands, key=lambda y: abs(decimal.Decimal(float(y)) - v))


floats = st.floats(-126, 127.5, width=32)


@settings(max_examples=300, deadline=None)
@given(st.lists(floats, min_size=1, max_size=20))
def test_ex2_is_correctly_rounded(xs: list[float]) -> None:
    x = np.array(xs, F32)
    got = approx.ex2_approx_ftz(x)
    want = np.array([exact_round(float(v), "ex2") for v in x], F32)
    # subnormal results (x < -126) are flushed; the strategy stays at or above -126
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(2.0**-126, 2.0**127, width=32), min_size=1, max_size=20))
def test_lg2_is_correctly_rounded(xs: list[float]) -> None:
    x = np.array(xs, F32)
    got = approx.lg2_approx_ftz(x)
    want = np.array([exact_round(float(v), "lg2") for v in x], F32)
    assert np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(st.floats(-1e4, -126, width=32, exclude_max=True))
def test_ex2_flushes_subnormal_results_to_zero(x: float) -> None:
    """PTX ISA 9.7.3.21: ``.ftz`` flushes subnormal results to sign-preserving zero;
    2^x is positive, so every x below -126 gives +0 (no -0)."""
    got = approx.ex2_approx_ftz(np.array([x], F32))
    assert got.view(np.uint32)[0] == 0


def test_special_values_and_flushed_inputs() -> None:
    sub = F32(1e-40)  # a subnormal: read as zero
    x = np.array([-np.inf, np.inf, -0.0, 0.0, sub, -sub, np.nan, 128.0, -126.0], F32)
    got = approx.ex2_approx_ftz(x)
    assert list(got[:6]) == [0.0, np.inf, 1.0, 1.0, 1.0, 1.0]
    assert got.view(np.uint32)[6] == 0x7FFFFFFF  # the canonical NaN
    assert got[7] == np.inf and got[8] == F32(2.0**-126)
    lg = approx.lg2_approx_ftz(np.array([0.0, sub, -1.0, np.inf, 1.0, 0.25], F32))
    assert lg[0] == -np.inf and lg[1] == -np.inf and lg.view(np.uint32)[2] == 0x7FFFFFFF
    assert list(lg[3:]) == [np.inf, 0.0, -2.0]


#: inputs whose float64 2^x (log2 x) lies within 256 float64 ulps of a float32 midpoint
HARD_EX2 = np.array([0x3F800B8B, 0x3F89E147, 0x3FA34F65, 0x3FA5A5D7, 0x3FE69390],
                    np.uint32).view(F32)
HARD_LG2 = np.array([0x40707492, 0x408D2702, 0x408D64DE, 0x4093EB97], np.uint32).view(F32)


def test_hard_inputs_are_correctly_rounded() -> None:
    assert [exact_round(float(v), "ex2") for v in HARD_EX2] == list(
        approx.ex2_approx_ftz(HARD_EX2))
    assert [exact_round(float(v), "lg2") for v in HARD_LG2] == list(
        approx.lg2_approx_ftz(HARD_LG2))


@pytest.mark.parametrize("ulps", [-200, 40, 200])
def test_models_do_not_depend_on_the_platforms_float64_functions(
        monkeypatch: pytest.MonkeyPatch, ulps: int) -> None:
    """A libm whose exp2/log2 are some float64 ulps off gives the same bits: elements
    near a rounding boundary are decided exactly (rounding the skewed values directly
    would change some of them)."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-120, 120, 2000), HARD_EX2]).astype(F32)
    pos = np.concatenate([rng.uniform(0.5, 2, 2000), HARD_LG2]).astype(F32)
    want_e, want_l = approx.ex2_approx_ftz(x), approx.lg2_approx_ftz(pos)
    real_exp2, real_log2 = np.exp2, np.log2
    skewed = [(real(v.astype(np.float64)).view(np.int64) + ulps).view(np.float64).astype(F32)
              for real, v in ((real_exp2, HARD_EX2), (real_log2, HARD_LG2))]
    assert not (np.array_equal(skewed[0], approx.ex2_approx_ftz(HARD_EX2))
                and np.array_equal(skewed[1], approx.lg2_approx_ftz(HARD_LG2)))

    def skew(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        def off(v: np.ndarray) -> np.ndarray:
            y = fn(v)
            return (y.view(np.int64) + ulps).view(np.float64)
        return off
    monkeypatch.setattr(approx.np, "exp2", skew(real_exp2))
    monkeypatch.setattr(approx.np, "log2", skew(real_log2))
    assert np.array_equal(approx.ex2_approx_ftz(x), want_e)
    assert np.array_equal(approx.lg2_approx_ftz(pos), want_l)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-149.5, -120, width=32), min_size=1, max_size=20))
def test_ex2_without_ftz_rounds_into_the_subnormals(xs: list[float]) -> None:
    """``ex2.approx.f32`` (no ``.ftz``) keeps subnormal results, rounded once."""
    x = np.array(xs, F32)
    want = np.array([exact_round(float(v), "ex2") for v in x], F32)
    assert np.array_equal(approx.ex2_model(x, False).view(np.uint32), want.view(np.uint32))
    flushed = approx.ex2_model(x, True)
    assert not flushed[x < -126].any()


@pytest.mark.parametrize("dt, ftz", [(np.float16, False), (ml_dtypes.bfloat16, True)])
def test_ex2_of_16_bit_floats_rounds_once(dt: type, ftz: bool) -> None:
    """``ex2.approx.f16`` and ``ex2.approx.ftz.bf16``: 2^x rounded once to the format,
    not through float32 (which would round twice)."""
    x = np.linspace(-24 if dt is np.float16 else -126, 15, 4001).astype(dt)
    got = approx.ex2_model(x, ftz)
    want = np.array([exact_round(float(v), "ex2", dt) for v in x], dt)
    assert got.dtype == x.dtype and np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_lg2_without_ftz_reads_subnormals() -> None:
    sub = np.array([2.0**-140, 2.0**-149, 3 * 2.0**-149], F32)
    assert list(approx.lg2_model(sub, False)[:2]) == [-140.0, -149.0]
    assert approx.lg2_model(sub, False)[2] == exact_round(float(sub[2]), "lg2")
    assert (approx.lg2_model(sub, True) == -np.inf).all()


def test_sqrt_and_rcp_approx_are_ieee_and_flush_with_ftz() -> None:
    x = np.array([2.0, 3.0, 1e-40, -0.0, np.inf], F32)
    sqrt, rcp = approx.unary_model("sqrt", "approx.ftz", "f32"), approx.unary_model(
        "rcp", "approx", "f32")
    assert sqrt is not None and rcp is not None
    assert list(sqrt(x)) == [np.sqrt(F32(2)), np.sqrt(F32(3)), 0.0, -0.0, np.inf]
    assert list(rcp(x)[:3]) == [F32(0.5), F32(1) / F32(3), np.inf]  # 1e40 overflows
    assert approx.unary_model("sqrt", "rn", "f32") is None


@pytest.mark.parametrize("fn, ref", [("sin", math.sin), ("cos", math.cos),
                                     ("tanh", math.tanh), ("rsqrt", lambda v: v ** -0.5)])
def test_the_exact_referee_agrees_with_float64(fn: str, ref: Callable[[float], float]) -> None:
    """``exact_math`` against the float64 functions (within 2 float64 ulps), including
    arguments a float32 reaches only far from zero, where sin and cos reduce by 2 pi to
    more than 100 digits (sin(1e22) is a classic of argument reduction)."""
    xs = [0.5, 1.0, 2.5, 3.14159, 1e-30, 20.0, 100.0, 1e22, 3.4e38, 7.0e5]
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        for x in xs:
            got = float(exact_math.evaluate(fn, decimal.Decimal(x)))
            assert abs(got - ref(x)) <= 2 * math.ulp(ref(x)), (fn, x)
    assert float(exact_math.pi(30)) == math.pi


@pytest.mark.parametrize("fn", ["sin", "cos", "tanh", "rsqrt"])
def test_function_models_are_correctly_rounded(fn: str) -> None:
    """``sin``/``cos``/``tanh``/``rsqrt.approx.f32``: float32 nearest the exact value."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-10, 10, 300), rng.uniform(0.001, 1e6, 100)])
    x = np.abs(x).astype(F32) if fn == "rsqrt" else x.astype(F32)
    got = approx.function_model(fn, False)(x)
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        for v, g in zip(x, got):
            exact = exact_math.evaluate(fn, decimal.Decimal(float(v)))
            near = F32(float(exact))
            cands = [np.nextafter(near, F32(-np.inf)), near, np.nextafter(near, F32(np.inf))]
            want = min(cands, key=lambda y: abs(decimal.Decimal(float(y)) - exact))
            assert g == want, (fn, v)


def test_function_models_special_values() -> None:
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    rsqrt = approx.function_model("rsqrt", True)(np.array([0.0, -1.0, inf, 1e-40, 4.0], F32))
    assert rsqrt[0] == inf and np.isnan(rsqrt[1]) and rsqrt[2] == 0 and rsqrt[3] == inf
    assert rsqrt[4] == 0.5  # 1e-40 is flushed to +0 with .ftz: 1/sqrt(+0) = +inf
    sin = approx.function_model("sin", False)(np.array([inf, nan, -0.0], F32))
    assert sin.view(np.uint32)[0] == sin.view(np.uint32)[1] == 0x7FFFFFFF
    assert sin.view(np.uint32)[2] == 0x80000000  # sin(-0) = -0
    assert list(approx.function_model("tanh", False)(np.array([inf, -inf], F32))) == [1, -1]


def test_bounds_cite_the_ptx_isa() -> None:
    for name, bound in approx.BOUNDS.items():
        assert name == bound.instruction and "PTX ISA" in bound.source
        assert 0 < bound.relative <= 2.0**-21

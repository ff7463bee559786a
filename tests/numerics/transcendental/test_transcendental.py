"""The specified f32 exp against exact references (``decimal`` at 60 digits, Fractions).

Correct rounding of a batch is established without a libm: :func:`misrounded` takes
the binary64 value ``v`` the algorithm rounds and proves ``RN32(e^x) == RN32(v)``
whenever ``v`` is farther than ``EPS`` = 2^-50 (relative) from every binary32 rounding
boundary (the error of ``v`` is below 2.7 * 2^-53 by analysis and below 2^-52 as
measured in ``test_wide_value_error``); the few inputs closer to a boundary are decided
exactly with ``decimal``. The exhaustive
sweep over every binary32 input in [-104, 89] quoted in the module docstring is
``misrounded_in_range(-104.0, 89.0)`` (about 2^31 inputs, a few minutes).
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental import exp as tr
from tessera.numerics.transcendental.exp import exp_f32, exp_f32_specified, exp_f32_unrounded

EPS = 2.0**-50
F32_MAX = float(np.finfo(np.float32).max)
OVERFLOW = F32_MAX + 2.0**103  # the midpoint between FLT_MAX and 2^128: RN gives inf above


def exact_exp(x: float) -> Decimal:
    """e^x to 60 significant digits (``Decimal.exp`` is correctly rounded)."""
    with localcontext() as ctx:
        ctx.prec = 60
        return Decimal(x).exp()


def round_f32(d: Decimal) -> np.float32:
    """The binary32 nearest to a positive ``d`` (ties cannot occur for e^x, x != 0)."""
    if d >= Decimal(OVERFLOW):
        return np.float32(np.inf)
    guess = np.float32(float(d))  # within one binary32 step of the answer
    candidates = [np.nextafter(guess, np.float32(-1)), guess,
                  np.nextafter(guess, np.float32(np.inf))]
    finite = [c for c in candidates if np.isfinite(c) and c >= 0]
    return min(finite, key=lambda c: abs(Decimal(float(c)) - d))


def boundaries(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rounding interval (lo, hi) of each binary32 result ``f >= 0``, in float64."""
    up = np.nextafter(f, np.float32(np.inf)).astype(np.float64)
    down = np.nextafter(f, np.float32(-np.inf)).astype(np.float64)
    f64 = f.astype(np.float64)
    # an unbounded exponent puts 2^128 after FLT_MAX: the overflow threshold is their midpoint
    up[f64 == F32_MAX] = 2.0**128
    top = np.isinf(f64)
    f64[top], down[top], up[top] = 2.0**128, F32_MAX, np.inf
    with np.errstate(over="ignore"):
        return (f64 + down) / 2, (f64 + up) / 2


def misrounded(x: np.ndarray) -> tuple[list[float], int]:
    """The inputs (binary32, finite) whose :func:`exp_f32_specified` is not the correctly
    rounded e^x, and how many needed an exact decision."""
    v = exp_f32_unrounded(x)
    got = exp_f32_specified(x)
    lo, hi = boundaries(got)
    with np.errstate(over="ignore"):
        safe = (v * (1 - EPS) > lo) & (v * (1 + EPS) < hi)
    close = x[~safe]
    bad = [float(c) for c, g in zip(close, got[~safe])
           if round_f32(exact_exp(float(c))).view(np.uint32) != g.view(np.uint32)]
    return bad, int(close.size)


def f32_code(v: float) -> int:
    """The binary32 encoding of ``v``."""
    return int(struct.unpack("<I", struct.pack("<f", v))[0])


def all_f32(lo: float, hi: float) -> np.ndarray:
    """Every binary32 in [lo, hi] (both of one sign, lo < hi)."""
    a, b = f32_code(lo), f32_code(hi)
    return np.arange(min(a, b), max(a, b) + 1, dtype=np.uint32).view(np.float32)


def misrounded_in_range(lo: float, hi: float, chunk: int = 1 << 24) -> tuple[int, int, int]:
    """Exhaustive sweep: (inputs, misrounded, decided exactly) over every binary32 in
    [lo, hi] (lo < 0 < hi), ``chunk`` encodings at a time."""
    total = bad = close = 0
    for start, stop in ((f32_code(0.0), f32_code(hi)), (f32_code(-0.0), f32_code(lo))):
        for k in range(start, stop + 1, chunk):
            part = np.arange(k, min(k + chunk, stop + 1), dtype=np.uint32).view(np.float32)
            wrong, near = misrounded(part)
            total, bad, close = total + part.size, bad + len(wrong), close + near
    return total, bad, close


def test_constants_are_what_the_docstring_says() -> None:
    with localcontext() as ctx:
        ctx.prec = 60
        ln2 = Decimal(2).ln()
        assert tr.LOG2E == float(1 / ln2)
        assert tr.LN2_LO == float(ln2 - Decimal(tr.LN2_HI))
    # 42 significant bits: n * LN2_HI is exact for |n| < 2^11 (we need |n| <= 150)
    mant = Fraction(tr.LN2_HI) * 2**42
    assert mant.denominator == 1 and 2**41 <= mant.numerator < 2**42
    assert abs(Fraction(tr.LN2_HI) + Fraction(tr.LN2_LO) - Fraction(ln2)) < Fraction(1, 2**98)
    coeffs, bound = tr.economized_coefficients()
    assert tr.COEFFS == tuple(float(c) for c in reversed(coeffs))
    assert bound < Fraction(1, 2**64)
    assert tr.COEFFS[-2:] == (1.0, 1.0)
    # the clamp only affects inputs whose result is already +inf or +0
    assert exact_exp(tr.CLAMP_HI) > Decimal(OVERFLOW)
    assert exact_exp(tr.CLAMP_LO) < Decimal(2) ** -150


def poly_error(coeffs: list[Fraction], points: int = 250) -> Decimal:
    """max |P(r) / e^r - 1| over a grid of |r| <= RADIUS, P evaluated exactly."""
    radius = Fraction(tr.RADIUS)
    worst = Decimal(0)
    for j in range(-points, points + 1):
        r = radius * j / points
        p = Fraction(0)
        for c in coeffs:
            p = p * r + c
        with localcontext() as ctx:
            ctx.prec = 60
            e = (Decimal(r.numerator) / Decimal(r.denominator)).exp()
            worst = max(worst, abs(Decimal(p.numerator) / Decimal(p.denominator) - e) / e)
    return worst


def test_polynomial_error() -> None:
    """Against e^r on |r| <= ln(2)/2 + eps: below 2^-63 with the exact economized
    coefficients, below 2^-59 once they are rounded to binary64 (what runs)."""
    assert Fraction(tr.RADIUS) > Fraction(math.log(2)) / 2 + Fraction(1, 2**30)
    exact, _ = tr.economized_coefficients()
    assert poly_error(exact[::-1]) < Decimal(2) ** -63
    assert poly_error([Fraction(c) for c in tr.COEFFS]) < Decimal(2) ** -59
    # the plain Taylor polynomial of the same degree is far worse: the check can fail
    taylor = [Fraction(1, math.factorial(k)) for k in range(tr.DEGREE, -1, -1)]
    assert poly_error(taylor, 10) > Decimal(2) ** -53


def test_wide_value_error() -> None:
    """The binary64 value before the final rounding is within 2^-52 of e^x (EPS is 4x that)."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-104, 89, 1500), rng.uniform(-1, 1, 500)]).astype(np.float32)
    v = exp_f32_unrounded(x)
    with localcontext() as ctx:
        ctx.prec = 60
        worst = max(abs(Decimal(float(w)) / exact_exp(float(a)) - 1) for a, w in zip(x, v))
    assert worst < Decimal(2) ** -52


def test_specials() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-30, -1e-30, 200.0, -200.0], np.float32)
    want = np.array([1, 1, np.inf, 0, 1, 1, np.inf, 0], np.float32)
    got = exp_f32(x)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # -inf gives +0


def test_nan_is_quieted_keeping_its_payload() -> None:
    """IEEE 754-2019 sec. 6.2.3: a NaN result should carry an input NaN's payload."""
    codes = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0xFF812345], np.uint32)
    got = exp_f32(codes.view(np.float32)).view(np.uint32)
    assert got.tolist() == [0x7FC00000, 0xFFC00001, 0x7FC00001, 0xFFC12345]


def test_overflow_and_subnormal_thresholds() -> None:
    # the largest input with a finite result, and the next binary32 up
    big = np.float32(88.72283)
    nxt = np.nextafter(big, np.float32(np.inf))
    assert exact_exp(float(big)) < Decimal(OVERFLOW) < exact_exp(float(nxt))
    got = exp_f32(np.array([big, nxt], np.float32))
    assert got[0] == round_f32(exact_exp(float(big))) < np.inf and got[1] == np.inf
    # the smallest input with a nonzero (subnormal) result, and the one below it
    x = all_f32(-103.96, -103.98)
    got = exp_f32(x)
    first = np.flatnonzero(got == 0)
    assert first.size and got[first[0] - 1] == np.float32(2.0**-149)
    assert exact_exp(float(x[first[0]])) < Decimal(2) ** -150 < exact_exp(float(x[first[0] - 1]))


def test_agrees_with_decimal_on_a_sample() -> None:
    """Independent of the EPS argument: each result is the correctly rounded e^x."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(-105, 90, 600), rng.uniform(-103.5, -87.5, 100),
                        rng.normal(0, 1e-6, 100)]).astype(np.float32)
    got = exp_f32(x)
    want = np.array([round_f32(exact_exp(float(a))) for a in x], np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(("lo", "hi"), [
    (1.0, 2.0),  # normal results around e
    (-104.0, -64.0),  # subnormal results and the underflow to zero
    (64.0, 89.0),  # large results and the overflow to inf
    (-2.0**-24, -2.0**-25),  # results just below 1
])
def test_correctly_rounded_on_whole_binades(lo: float, hi: float) -> None:
    x = all_f32(lo, hi)
    bad, _ = misrounded(x)
    assert bad == []


def test_correctly_rounded_on_random_inputs() -> None:
    x = np.random.default_rng(3).uniform(-110, 90, 1_000_000).astype(np.float32)
    bad, _ = misrounded(x)
    assert bad == []


def test_misrounded_detects_an_error() -> None:
    """The checker itself: one binary32 step off is caught."""
    x = np.array([1.5, -3.25], np.float32)
    v = exp_f32(x)
    wrong = np.nextafter(v, np.float32(np.inf))
    _, hi = boundaries(v)
    assert np.all(wrong.astype(np.float64) > hi)
    assert [round_f32(exact_exp(float(a))) for a in x] == v.tolist()


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False))
def test_any_float_is_correctly_rounded(x: float) -> None:
    got = exp_f32(np.array([x], np.float32))[0]
    if x >= 89:
        assert got == np.inf
    elif x <= -104:
        assert got == 0 and not np.signbit(got)
    else:
        assert got.view(np.uint32) == round_f32(exact_exp(x)).view(np.uint32)


def test_shapes_and_layouts() -> None:
    x = np.random.default_rng(1).uniform(-5, 5, (6, 7)).astype(np.float32)
    flat = exp_f32(x.reshape(-1)).reshape(6, 7)
    for view in (x, x.T, x[::2, ::3]):
        got = exp_f32(view)
        assert got.shape == view.shape and got.dtype == np.float32
    assert np.array_equal(exp_f32(x.T), flat.T)
    assert exp_f32(np.float32(0)).shape == ()
    assert exp_f32(np.zeros((0, 3), np.float32)).shape == (0, 3)
    big = np.random.default_rng(2).uniform(-5, 5, 3 * (1 << 15) + 7).astype(np.float32)
    assert np.array_equal(exp_f32(big)[-50:], exp_f32(big[-50:]))  # chunking is invisible


# -- the fast evaluations give the algorithm's bits --------------------------------------

@pytest.fixture(params=["native", "numpy"])
def evaluation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways :func:`exp_f32` evaluates: the compiled loop and the NumPy shortcut."""
    from tessera.numerics.transcendental import exp_native

    if request.param == "numpy":
        monkeypatch.setenv("TESSERA_NATIVE_EXP", "0")
    elif exp_native.native_exp() is None:
        pytest.skip(f"no compiled exp here: {exp_native.UNAVAILABLE}")
    return str(request.param)


def fast_and_specified_differ(x: np.ndarray) -> int:
    got, want = exp_f32(x).view(np.uint32), exp_f32_specified(x).view(np.uint32)
    return int(np.count_nonzero(got != want))


def test_fast_equals_specified_on_a_sweep_of_all_bit_patterns(evaluation: str) -> None:
    """Every 509th binary32 bit pattern: both signs, NaNs, infinities, subnormals."""
    codes = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32)
    assert fast_and_specified_differ(codes.view(np.float32)) == 0


@pytest.mark.parametrize(("lo", "hi"), [(-104.5, -86.0), (-1.0, -0.5), (0.5, 2.0), (88.0, 89.0)])
def test_fast_equals_specified_on_whole_ranges(lo: float, hi: float, evaluation: str) -> None:
    assert fast_and_specified_differ(all_f32(lo, hi)) == 0


def test_fast_path_defers_what_it_cannot_prove() -> None:
    """Inputs near a rounding boundary, small results and NaNs take the algorithm, and
    only those: with a zero margin nothing near a boundary would be deferred."""
    x = all_f32(1.0, 1.5)
    out = np.empty(x.size, np.float32)
    buf, low = np.empty(x.size), np.empty(x.size, np.int64)
    hard = tr._fast_into(x, out, buf, low)
    assert hard is not None and 0 < np.count_nonzero(hard) < x.size * 2.0**-16
    special = np.array([np.nan, -95.0, -87.4, -200.0, -np.inf], np.float32)
    out = np.empty(5, np.float32)
    hard = tr._fast_into(special, out, np.empty(5), np.empty(5, np.int64))
    assert hard is not None and hard.tolist() == [True, True, True, False, False]
    calm = np.array([0.25, -3.0, 10.0], np.float32)  # far from boundaries, not small
    assert tr._fast_into(calm, np.empty(3, np.float32), np.empty(3),
                         np.empty(3, np.int64)) is None


def test_exp_keeps_the_memory_order_of_its_input(evaluation: str) -> None:
    """A transposed (column-major) tile gets a column-major result with the same bits;
    a strided view gets a C-order one."""
    x = np.random.default_rng(4).uniform(-20, 5, (64, 48)).astype(np.float32)
    want = tr.exp_f32(x)
    got = tr.exp_f32(np.asfortranarray(x))
    assert got.flags.f_contiguous and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    strided = tr.exp_f32(x[::2, ::3])
    assert strided.flags.c_contiguous
    assert np.array_equal(strided.view(np.uint32), want[::2, ::3].view(np.uint32))

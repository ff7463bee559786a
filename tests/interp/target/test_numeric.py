"""Numerics of Target IR register instructions against independent references:
Python integers, ``fractions.Fraction``, NumPy and ml_dtypes.

Every kernel here is one thread per element (``run_map``): the op under test between a
global load and a global store.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.interp.target.numeric import fma_f64
from tests.interp.target.kit import run_map

BF16 = ml_dtypes.bfloat16
#: (precision incl. the hidden bit, smallest normal exponent, largest finite) per format
FMT = {"f32": (24, -126, float(np.finfo(np.float32).max)),
       "bf16": (8, -126, float(ml_dtypes.finfo(BF16).max)),
       "f16": (11, -14, 65504.0)}


def round_ref(q: Fraction, fmt: str, mode: str = "rn") -> float:
    """``q`` rounded to ``fmt`` in ``mode`` (rn, rz, rm, rp): IEEE 754 sec. 4.3."""
    p, emin, big = FMT[fmt]
    if q == 0:
        return 0.0
    e = max(math.floor(math.log2(abs(q))), emin)
    while Fraction(2) ** e > abs(q) and e > emin:  # log2 of a Fraction may be off by one
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - p + 1)
    m = q / quantum
    fl = math.floor(m)
    if mode == "rn":
        r = fl + 1 if m - fl > Fraction(1, 2) or (m - fl == Fraction(1, 2) and fl % 2) else fl
    else:
        r = {"rz": math.trunc(m), "rm": fl, "rp": math.ceil(m)}[mode]
    out = r * quantum
    if out == 0:  # underflow keeps the sign of the exact value
        return -0.0 if q < 0 else 0.0
    if abs(out) > big:  # overflow: inf, or the largest finite value rounding toward it
        toward = {"rn": True, "rz": False, "rm": out < 0, "rp": out > 0}[mode]
        return math.copysign(math.inf if toward else big, out)
    return float(out)


#: the NaN an H100 writes for a NaN result, by storage size (f16 and bf16, f32, f64)
CANONICAL_NAN = {2: 0x7FFF, 4: 0x7FFFFFFF, 8: 0x7FFFFFFFFFFFFFFF}


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, equal signs of zero, and NaN where ``want`` is NaN, with the
    canonical NaN's bits whatever NaN ``want`` holds."""
    g = np.asarray(got, np.float64)
    w = np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), (got, want)
    size = np.asarray(got).dtype.itemsize
    nan_bits = np.asarray(got).view(f"u{size}")[np.isnan(g)]
    assert [hex(int(b)) for b in nan_bits if b != CANONICAL_NAN[size]] == []
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g[ok], w[ok])
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]))


def _fma_ref(a: float, b: float, c: float, fmt: str) -> float:
    if not all(map(math.isfinite, (a, b, c))):
        with np.errstate(invalid="ignore"):
            return float(np.float64(a) * np.float64(b) + np.float64(c))
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:  # IEEE 754 sec. 6.3: exact zero sums are +0 unless both terms are -0
        prod_neg = math.copysign(1, a) * math.copysign(1, b) < 0
        return -0.0 if a * b == 0 and prod_neg and math.copysign(1, c) < 0 else 0.0
    if fmt != "f64":
        return round_ref(q, fmt)
    sign = -1.0 if q < 0 else 1.0
    try:
        return math.copysign(float(q), sign)  # int / int true division: correctly rounded
    except OverflowError:
        return sign * math.inf


f32s = st.floats(width=32, allow_nan=False)
triples32 = st.lists(st.tuples(f32s, f32s, f32s), min_size=16, max_size=16)


@settings(max_examples=60, deadline=None)
@given(triples32)
def test_fma_rn_f32_is_correctly_rounded(triples: list[tuple[float, float, float]]) -> None:
    """fma.rn.f32 rounds a*b+c once, subnormals included (PTX ISA, "Floating Point
    Instructions: fma")."""
    a, b, c = (np.array(x, np.float32) for x in zip(*triples))
    got = run_map(lambda k, x: k.fma("f32", *x), [a, b, c], ["f32"] * 3, "f32", block=16)
    want = [_fma_ref(float(x), float(y), float(z), "f32") for x, y, z in zip(a, b, c)]
    same_bits(got, np.array(want, np.float32))


def test_fma_rn_f32_double_rounding_case() -> None:
    """a = b = 1 + 2^-12: a*b = 1 + 2^-11 + 2^-24 is a float32 tie. With c = 2^-70 the
    exact value lies just above it (rounds up to 1 + 2^-11 + 2^-23), but float64 rounds
    the sum back onto the tie, which then goes to even (1 + 2^-11)."""
    a = np.full(64, 1 + 2.0**-12, np.float32)
    c = np.array([0.0, 2.0**-70] * 32, np.float32)
    got = run_map(lambda k, x: k.fma("f32", *x), [a, a, c], ["f32"] * 3, "f32")
    assert got[0] == np.float32(1 + 2.0**-11)  # an exact tie: to even
    assert got[1] == np.float32(1 + 2.0**-11 + 2.0**-23)
    naive = np.float32(np.float64(a[1]) * np.float64(a[1]) + np.float64(c[1]))
    assert naive != got[1]  # the float64 shortcut double-rounds here


f64s = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def cancelling(draw: st.DrawFn) -> tuple[float, float, float]:
    """Triples where c nearly cancels a*b (the hard case of an fma)."""
    a, b = draw(f64s), draw(f64s)
    p = a * b
    if not math.isfinite(p):
        return a, b, draw(f64s)
    ulps = draw(st.integers(-4, 4))
    c = -p
    for _ in range(abs(ulps)):
        c = math.nextafter(c, math.inf if ulps > 0 else -math.inf)
    return a, b, c


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(f64s, f64s, f64s), cancelling()))
def test_fma_rn_f64_matches_fraction(t: tuple[float, float, float]) -> None:
    """fma.rn.f64 is a*b+c rounded once: compared with exact rationals."""
    got = fma_f64(np.array([t[0]]), np.array([t[1]]), np.array([t[2]]))
    same_bits(got, np.array([_fma_ref(*t, "f64")]))


def test_fma_rn_f64_in_a_kernel() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(64), rng.standard_normal(64)
    c = -(a * b) + rng.standard_normal(64) * 2.0**-60
    got = run_map(lambda k, x: k.fma("f64", *x), [a, b, c], ["f64"] * 3, "f64")
    same_bits(got, np.array([_fma_ref(*t, "f64") for t in zip(a, b, c)]))


SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.5, math.inf, -math.inf, math.nan]


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    x, y = np.meshgrid(np.array(SPECIALS, np.float32), np.array(SPECIALS, np.float32))
    return x.ravel(), y.ravel()


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu",
                                 "leu", "gtu", "geu", "num", "nan"])
def test_setp_nan_rules(cmp: str) -> None:
    """setp (PTX ISA, "setp", table "Floating-Point Comparison Operators"): ordered comparisons are
    false on NaN (ne too); the u forms are true on NaN; num/nan test for NaN."""
    x, y = _pairs()
    got = run_map(lambda k, v: k.cvt("u32", "u16", k.selp(
        "u16", k.const(1, "u16"), k.const(0, "u16"), k.setp(cmp, "f32", *v))),
        [x, y], ["f32", "f32"], "u32")
    ops = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
    want = []
    for a, b in zip(x.tolist(), y.tolist()):
        nan = math.isnan(a) or math.isnan(b)
        if cmp == "num":
            want.append(not nan)
        elif cmp == "nan":
            want.append(nan)
        elif cmp.endswith("u"):
            want.append(nan or ops[cmp[:-1]](a, b))
        else:
            want.append(not nan and ops[cmp](a, b))
    np.testing.assert_array_equal(got, np.array(want, np.uint32))


@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_nan_and_signed_zero(op: str) -> None:
    """min/max.f32 (PTX ISA, "min"/"max"): one NaN operand yields the other operand,
    two NaNs the canonical NaN 0x7fffffff; -0.0 counts as below +0.0."""
    x, y = _pairs()
    got = run_map(lambda k, v: k.bin(op, "f32", *v), [x, y], ["f32", "f32"], "f32")
    want = []
    for a, b in zip(x.tolist(), y.tolist()):
        if math.isnan(a) or math.isnan(b):
            want.append(b if math.isnan(a) else a)
        elif a == b == 0:
            neg = (math.copysign(1, a) < 0) + (math.copysign(1, b) < 0)
            want.append(-0.0 if (neg >= 1 if op == "min" else neg == 2) else 0.0)
        else:
            want.append(min(a, b) if op == "min" else max(a, b))
    same_bits(got, np.array(want, np.float32))
    both = np.isnan(x) & np.isnan(y)
    assert np.all(got.view(np.uint32)[both] == 0x7FFFFFFF)


def test_rn_arithmetic_is_ieee() -> None:
    """add/sub/mul/div.rn.f32 and sqrt.rn/rcp.rn round once (exact rationals)."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(256) * 1e3).astype(np.float32)
    y = (rng.standard_normal(256) * 1e-3).astype(np.float32)
    for op, fn in [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b),
                   ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b)]:
        got = run_map(lambda k, v, op=op: k.bin(op, "f32", *v, mode="rn"), [x, y],
                      ["f32", "f32"], "f32")
        want = [round_ref(fn(Fraction(float(a)), Fraction(float(b))), "f32")
                for a, b in zip(x, y)]
        same_bits(got, np.array(want, np.float32))
    got = run_map(lambda k, v: k.un("rcp", "f32", v[0], mode="rn"), [x], ["f32"], "f32")
    same_bits(got, np.array([round_ref(1 / Fraction(float(a)), "f32") for a in x],
                            np.float32))


def test_bf16_arithmetic_rounds_once_to_bf16() -> None:
    """add.rn.bf16 (sm_90) is the exact sum rounded to bf16."""
    rng = np.random.default_rng(8)
    x, y = (rng.standard_normal(128).astype(BF16) for _ in range(2))
    got = run_map(lambda k, v: k.bin("add", "bf16", *v, mode="rn"), [x, y],
                  ["bf16", "bf16"], "bf16", target="sm_90a")
    want = [round_ref(Fraction(float(a)) + Fraction(float(b)), "bf16") for a, b in zip(x, y)]
    same_bits(got, np.array(want).astype(BF16))


def test_ex2_approx_of_integers_is_exact() -> None:
    """ex2.approx.f32 is modelled by NumPy's exp2 (not bit-exact to hardware in general);
    integer inputs give exact powers of two."""
    x = np.arange(-32, 32, dtype=np.float32)
    got = run_map(lambda k, v: k.un("ex2", "f32", v[0], mode="approx"), [x], ["f32"], "f32")
    np.testing.assert_array_equal(got, np.exp2(x.astype(np.float64)).astype(np.float32))

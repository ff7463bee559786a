"""The fast exact paths of ``matmul_rounded`` and ``sum_rounded`` against Fractions.

Covered: the exactness proof for narrow inputs (it must never accept a float64 product
that is not exact), the line quanta it rests on, the pairwise and double-double levels
(forced on every element), the exact rounding of double-double values, and ties built
on purpose, all compared bit for bit with exact rational arithmetic.
"""

from __future__ import annotations

import math
import threading
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tessera.numerics as ts
from tessera.numerics.reductions import sums as sums_module
from tessera.numerics.reductions.exact import min_quantum, refine_sum
from tessera.numerics.reductions.matmul import dots as matmul_dots
from tessera.numerics.reductions.matmul import operands as matmul_operands
from tessera.numerics.reductions.matmul import product as matmul_product
from tessera.numerics.reductions.rounding import gamma, round_double_double
from tests.numerics.reference import fraction_round

NARROW = [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
          ml_dtypes.float6_e2m3fn, ml_dtypes.float4_e2m1fn, np.int8]
TARGETS = ["f32", "bf16", "f16", "f64", "fp8_e4m3", "fp8_e5m2", "tf32", "fp4_e2m1"]
INT_RANGE = {"int8": (-128, 127), "int32": (-(2**31), 2**31 - 1)}


def ref_round(q: Fraction, to: str) -> float:
    """RNE of an exact rational into ``to`` (satfinite for narrow formats), by Fractions."""
    if to in INT_RANGE:
        lo, hi = INT_RANGE[to]
        return float(min(max(round(q), lo), hi))  # round() on a Fraction: half to even
    if q == 0:
        return 0.0
    fmt = ts.dtype(to).format
    out = fraction_round(q, fmt.nmant + 1, fmt.emin, fmt.max)
    if math.isinf(out) and fmt.saturating:
        out = math.copysign(fmt.max, out)
    return out


def same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    g = np.asarray(got).astype(np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return g.shape == e.shape and bool(np.array_equal(g.view(np.uint64), e.view(np.uint64)))


def fractions(x: np.ndarray) -> np.ndarray:
    return np.vectorize(Fraction, otypes=[object])(ts.to_f64(x))


def ref_matmul(a: np.ndarray, b: np.ndarray, to: str) -> np.ndarray:
    exact = np.matmul(fractions(a), fractions(b))
    return np.vectorize(lambda q: ref_round(q, to), otypes=[np.float64])(exact)


def _spread(np_type: object) -> int:
    """How far below and above 1 the exponents of test values of a format reach."""
    if np_type in (ml_dtypes.bfloat16, np.float32):
        return 135  # normals and subnormals
    if np_type == np.int8:
        return 0
    return int(-ml_dtypes.finfo(np_type).minexp) + int(ml_dtypes.finfo(np_type).nmant) + 2


@st.composite
def narrow_operand(draw: st.DrawFn, shape: tuple[int, int], np_type: object,
                   spread: int | None = None) -> np.ndarray:
    """Values over the format's whole range (subnormals included, or a narrower band),
    zeros of both signs, all-zero lines, and cancelling pairs."""
    n = math.prod(shape)
    if np_type == np.int8:
        x = np.array(draw(st.lists(st.integers(-128, 127), min_size=n, max_size=n)),
                     dtype=np.int8)
    else:
        lim = _spread(np_type) if spread is None else spread
        top = int(math.log2(float(ml_dtypes.finfo(np_type).max)))
        mant = draw(st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n))
        expo = draw(st.lists(st.integers(-lim, min(lim, top)), min_size=n, max_size=n))
        with np.errstate(all="ignore"):
            x = (np.array(mant) * np.exp2(np.array(expo, dtype=np.float64))).astype(np_type)
        x = np.where(np.isfinite(x.astype(np.float64)), x, np.zeros((), np_type))
    x = x.reshape(shape)
    if draw(st.booleans()) and shape[1] >= 2:  # cancellation inside each line
        x[:, -1] = -x[:, 0]
    if draw(st.booleans()):  # an all-zero row and column
        x[draw(st.integers(0, shape[0] - 1))] = 0
        x[:, draw(st.integers(0, shape[1] - 1))] = 0
    return x


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_narrow_matmul_matches_fractions(data: st.DataObject) -> None:
    m, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    k = data.draw(st.sampled_from([1, 2, 3, 7, 16, 40]))
    ta, tb = data.draw(st.sampled_from(NARROW)), data.draw(st.sampled_from(NARROW))
    band = data.draw(st.sampled_from([None, 4, 12]))  # full range, or a narrow band
    a = data.draw(narrow_operand((m, k), ta, band))
    b = data.draw(narrow_operand((n, k), tb, band)).T  # columns as lines
    to = data.draw(st.sampled_from(TARGETS))
    got = ts.matmul_rounded(a, b, to)
    assert same_bits(got, ref_matmul(a, b, to)), (a, b, to)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_exactness_proof_never_accepts_an_inexact_product(data: st.DataObject) -> None:
    """Where alpha_i * beta_j < limit, the sum of |products| is below 2**53 times a power
    of two dividing every product: every partial sum, in any order, is a float64."""
    m, n = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    k = data.draw(st.sampled_from([2, 5, 17, 64, 200]))
    ta, tb = data.draw(st.sampled_from(NARROW[:5])), data.draw(st.sampled_from(NARROW[:5]))
    band = data.draw(st.sampled_from([None, 6, 10, 16]))  # spans near the 53-bit limit
    a = data.draw(narrow_operand((m, k), ta, band))
    b = data.draw(narrow_operand((n, k), tb, band)).T
    a64, b64 = ts.to_f64(a), ts.to_f64(b)
    pa, pb = matmul_operands.precision(a.dtype), matmul_operands.precision(b.dtype)
    qa = matmul_operands.line_quanta(a, -1, a64, pa)
    qb = matmul_operands.line_quanta(b, 0, b64, pb)
    alpha = np.ldexp(np.sqrt(np.einsum("ik,ik->i", a64, a64)), -qa)
    beta = np.ldexp(np.sqrt(np.einsum("kj,kj->j", b64, b64)), -qb)
    limit = 2.0**53 * (1 - 8 * gamma(k + 1))
    fa, fb = fractions(a), fractions(b)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    for i in range(m):
        for j in range(n):
            if not alpha[i] * beta[j] < limit:
                continue
            quantum = Fraction(2) ** int(qa[i] + qb[j])
            terms = [fa[i, t] * fb[t, j] for t in range(k)]
            assert all((p / quantum).denominator == 1 for p in terms)
            assert sum(abs(p) for p in terms) < 2**53 * quantum
            exact = sum(terms, Fraction(0))
            prods = a64[i] * b64[:, j]
            for _ in range(3):  # any order gives the exact value
                assert Fraction(float(np.add.reduce(rng.permutation(prods)))) == exact
            assert Fraction(float(a64[i] @ b64[:, j])) == exact


@pytest.mark.parametrize("np_type", [*NARROW, np.float32, np.float64, ml_dtypes.float8_e8m0fnu,
                                     ml_dtypes.float6_e3m2fn, np.int32, np.bool_])
def test_line_quanta_divide_every_entry(np_type: object) -> None:
    rng = np.random.default_rng(5)
    if np.dtype(np_type).kind in "ib":
        x = rng.integers(-100, 100, (6, 9)).astype(np_type)
    else:
        info = ml_dtypes.finfo(np_type)
        expo = rng.integers(int(info.minexp) - int(info.nmant), int(info.maxexp) - 1, (6, 9))
        with np.errstate(all="ignore"):
            x = (rng.uniform(1, 2, (6, 9)) * np.exp2(expo.astype(float))).astype(np_type)
        if np_type != ml_dtypes.float8_e8m0fnu:  # e8m0 has no zero
            x[0] = 0  # an all-zero line
        x[1, ::2] = x[1, 0]  # one repeated value: the quantum is that value's ulp
    x64 = ts.to_f64(x)
    prec = matmul_operands.precision(x.dtype)
    for axis in (-1, 0):
        q = matmul_operands.line_quanta(x, axis, x64, prec)
        lines = x64 if axis == -1 else x64.T
        for line, qi in zip(lines, q):
            assert all((Fraction(float(v)) / Fraction(2) ** int(qi)).denominator == 1
                       for v in line)
    if np.dtype(np_type).kind == "f" and np_type != np.float64:
        one = np.ones((1, 3), np_type)  # 1.0 is a multiple of exactly 2**-(p-1)
        assert matmul_operands.line_quanta(one, -1, ts.to_f64(one), prec)[0] == 1 - prec


def _f32_ties(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """bf16 rows and a column of ones whose exact products sum to f32 ties."""
    rows = []
    for _ in range(count):
        e = int(rng.integers(-100, 100))
        sig = int(rng.integers(2**23, 2**24))  # a 24-bit f32 significand
        parts = [(sig >> 16) << 16, ((sig >> 8) & 0xFF) << 8, sig & 0xFF, 1 << -1 + 1]
        vals = [math.ldexp(p, e - 23) for p in parts[:3]] + [math.ldexp(0.5, e - 23)]
        sign = -1.0 if rng.integers(2) else 1.0
        rows.append([sign * v for v in vals])
    a = np.array(rows).astype(ml_dtypes.bfloat16)
    assert np.array_equal(ts.to_f64(a), np.array(rows))  # every piece is a bf16
    return a, np.ones((4, 1), ml_dtypes.bfloat16)


def test_constructed_ties_round_to_even_without_fractions(monkeypatch) -> None:
    rng = np.random.default_rng(11)
    a, ones = _f32_ties(rng, 300)
    calls = {"dot": 0, "sum": 0}
    dot, total = matmul_dots.exact_dot, sums_module.exact_sum

    def counting_dot(*args: object, **kwargs: object) -> object:
        calls["dot"] += 1
        return dot(*args, **kwargs)

    def counting_sum(*args: object, **kwargs: object) -> object:
        calls["sum"] += 1
        return total(*args, **kwargs)

    monkeypatch.setattr(matmul_dots, "exact_dot", counting_dot)
    monkeypatch.setattr(sums_module, "exact_sum", counting_sum)
    want = ref_matmul(a, ones, "f32")
    exact = np.matmul(fractions(a), fractions(ones)).ravel()
    assert all((2 * Fraction(float(w)) - 2 * q) != 0 for w, q in zip(want.ravel(), exact))
    assert same_bits(ts.matmul_rounded(a, ones, ts.f32), want)
    # The same ties as a K=4 product against a wide, mixed B (per-element proof path).
    wide = np.concatenate([ones, np.full((4, 7), 2.0**-60, ml_dtypes.bfloat16)], axis=1)
    assert same_bits(ts.matmul_rounded(a, wide, ts.f32), ref_matmul(a, wide, "f32"))
    assert same_bits(ts.matmul_rounded(a, ones, ts.f64), ref_matmul(a, ones, "f64"))
    sums = ts.sum_rounded(a, 1, False, ts.f32)
    assert same_bits(sums, want.ravel())
    assert calls == {"dot": 0, "sum": 0}


def test_tie_by_hand() -> None:
    a = np.array([[1.0, 2.0**-23, 2.0**-24], [-1.0, -(2.0**-23), -(2.0**-24)]],
                 ml_dtypes.bfloat16)
    ones = np.ones((3, 1), ml_dtypes.bfloat16)
    got = ts.matmul_rounded(a, ones, ts.f32).ravel()
    assert got.tolist() == [1 + 2.0**-22, -(1 + 2.0**-22)]  # ties to the even neighbour
    b = np.array([[1.0, 2.0**-24]], ml_dtypes.bfloat16)
    assert ts.matmul_rounded(b, np.ones((2, 1), ml_dtypes.bfloat16), ts.f32)[0, 0] == 1.0


def _all_pairs(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.divmod(np.arange(m * n), n)
    return i, j


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_second_level_on_every_element_matches_fractions(data: st.DataObject) -> None:
    """``_level2`` (pairwise tree, double-double, exactness proof, Fractions) forced on
    every element, for operands of every kind of width."""
    m, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    k = data.draw(st.sampled_from([1, 3, 33, 130]))
    np_type = data.draw(st.sampled_from([np.float32, np.float64, ml_dtypes.bfloat16]))
    lim = 40 if np_type == np.float64 else 120
    mant = data.draw(st.lists(st.floats(-2, 2, width=32), min_size=m * k + k * n,
                              max_size=m * k + k * n))
    expo = data.draw(st.lists(st.integers(-lim, lim), min_size=m * k + k * n,
                              max_size=m * k + k * n))
    vals = (np.array(mant) * np.exp2(np.array(expo, dtype=np.float64))).astype(np_type)
    a, b = vals[:m * k].reshape(m, k), vals[m * k:].reshape(k, n)
    if data.draw(st.booleans()) and k >= 2:
        a[:, -1] = -a[:, 0]
        b[-1] = b[0]
    to = data.draw(st.sampled_from(["f32", "bf16", "f64", "fp8_e5m2"]))
    fmt = ts.dtype(to)
    pa, pb = matmul_operands.precision(a.dtype), matmul_operands.precision(b.dtype)
    products_exact = pa + pb <= 53
    cols = matmul_operands.prepare_columns(b, products_exact, False, pb)
    a64 = ts.to_f64(a)
    row_norms = np.sqrt(np.einsum("ik,ik->i", a64, a64)) if products_exact else \
        matmul_operands.two_norms(a64, -1, scaled=True)
    plan = matmul_operands.ProductPlan(fmt, products_exact, False, pa, pb, gamma(k), 2.0**52, 0.0)
    i, j = _all_pairs(m, n)
    got = matmul_dots.level2(a, cols, i, j, row_norms, plan).reshape(m, n)
    assert same_bits(got, ref_matmul(a, b, to)), (a, b, to)
    settled = np.array([
        matmul_dots.rounded_dots(ts.to_f64(a[r:r + 1]), cols.b64[:, c:c + 1].T,
                                 row_norms[r:r + 1] * cols.norms[c:c + 1] * 1.001, plan,
                                 True, settle=True)[0]
        for r, c in zip(i, j)]).reshape(m, n)
    assert same_bits(settled, ref_matmul(a, b, to))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_double_double_matches_fractions(data: st.DataObject) -> None:
    to = data.draw(st.sampled_from([*TARGETS, "fp8_e4m3", "int8", "int32"]))
    if data.draw(st.booleans()):
        s = data.draw(st.floats(allow_nan=False, allow_infinity=False, width=64))
        t = data.draw(st.floats(allow_nan=False, allow_infinity=False, width=64))
    else:
        # A tie of the target (or of an integer), nudged by a tiny or no remainder.
        base = data.draw(st.floats(-1e6, 1e6, allow_nan=False, width=32))
        if to in INT_RANGE:
            s = math.floor(base) + 0.5
        elif to == "f64":
            s = base
        else:
            fmt = ts.dtype(to).format
            v = float(ts.convert(np.array(base), to).astype(np.float64))
            e = max(math.frexp(v)[1] - 1 if v else fmt.emin, fmt.emin)
            s = v + math.copysign(math.ldexp(1.0, e - fmt.nmant - 1), base or 1.0)
        t = data.draw(st.sampled_from([0.0, 1e-300, -1e-300, 2.0**-70, -(2.0**-70)]))
    with np.errstate(all="ignore"):
        hi = np.float64(s) + np.float64(t)
    assume(np.isfinite(hi))
    back = hi - s
    lo = (s - (hi - back)) + (t - back)  # TwoSum: hi + lo == s + t exactly
    got = round_double_double(np.array([hi]), np.array([lo]), to)
    want = ref_round(Fraction(s) + Fraction(t), to)
    assert same_bits(got.astype(np.float64), np.array([want])), (s, t, to, got, want)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_refine_sum_with_quantum_is_exact_where_it_says_so(data: st.DataObject) -> None:
    rows, k = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 60))
    prec = data.draw(st.sampled_from([16, 24, 48, 53]))
    lim = data.draw(st.sampled_from([10, 40, 200, 1000]))
    mant = data.draw(st.lists(st.integers(-(2**prec) + 1, 2**prec - 1), min_size=rows * k,
                              max_size=rows * k))
    expo = data.draw(st.lists(st.integers(-lim, lim), min_size=rows * k,
                              max_size=rows * k))
    terms = np.array([math.ldexp(v, e - prec) for v, e in zip(mant, expo)]).reshape(rows, k)
    if data.draw(st.booleans()) and k >= 2:
        terms[:, -1] = -terms[:, 0]
    exact = [sum((Fraction(float(v)) for v in r), Fraction(0)) for r in terms]
    q = min_quantum(terms, prec)
    for r, qr in zip(terms, q):
        assert all((Fraction(float(v)) / Fraction(2) ** int(qr)).denominator == 1
                   for v in r if v)
    approx, err, eta = refine_sum(terms.copy(), None, q)
    for f in range(rows):
        if eta[f] == 0:
            assert Fraction(float(approx[f])) + Fraction(float(err[f])) == exact[f]
        else:
            assert abs(Fraction(float(approx[f])) + Fraction(float(err[f])) - exact[f]) \
                <= Fraction(float(eta[f]))
    if lim <= 10 and prec <= 24:
        assert (eta == 0).all()  # a modest exponent range is always proven exact


def test_bf16_product_takes_no_slow_path(monkeypatch) -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((192, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 160)).astype(ml_dtypes.bfloat16)
    a[3, 7] = 2.0**-40  # one tiny entry: row 3 fails the exactness test
    calls = {"level2": 0, "fractions": 0}
    level2, dot = matmul_dots.level2, matmul_dots.exact_dot

    def counting_level2(*args: object) -> np.ndarray:
        calls["level2"] += args[2].size
        return level2(*args)

    def counting_dot(*args: object, **kwargs: object) -> object:
        calls["fractions"] += 1
        return dot(*args, **kwargs)

    monkeypatch.setattr(matmul_product, "level2", counting_level2)
    monkeypatch.setattr(matmul_dots, "exact_dot", counting_dot)
    got = {to: ts.matmul_rounded(a, b, to) for to in ("f32", "f64", "bf16")}
    assert calls["fractions"] == 0
    assert calls["level2"] < 0.01 * a.shape[0] * b.shape[1]
    for to, out in got.items():
        for r in (0, 3, 100):
            assert same_bits(out[r], ref_matmul(a[r:r + 1], b, to)[0])
    # Beyond the double-double's reach (a 130-bit exponent range), ties of the larger
    # terms are broken by Fractions, still correctly.
    a[3, 7] = 2.0**-120
    assert same_bits(ts.matmul_rounded(a[3:4], b, ts.f32), ref_matmul(a[3:4], b, "f32"))


def test_long_f32_product_with_cancellation_matches_fractions() -> None:
    rng = np.random.default_rng(9)
    k = 589
    a = (rng.standard_normal((9, k)) * np.exp2(rng.integers(-12, 12, (9, k)))
         ).astype(np.float32)
    b = (rng.standard_normal((k, 7)) * np.exp2(rng.integers(-12, 12, (k, 7)))
         ).astype(np.float32)
    a[:, 1::2] = -a[:, ::2][:, :k // 2]  # heavy cancellation: many elements go deeper
    for to in ("f32", "bf16", "fp8_e4m3"):
        assert same_bits(ts.matmul_rounded(a, b, to), ref_matmul(a, b, to))


def test_batches_share_or_switch_the_right_operand() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 5, 6)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((6, 4)).astype(ml_dtypes.bfloat16)
    bb = rng.standard_normal((2, 1, 6, 4)).astype(np.float16)
    got = ts.matmul_rounded(a, b, ts.f32)
    for t in range(3):
        assert same_bits(got[t], ts.matmul_rounded(a[t], b, ts.f32))
    got = ts.matmul_rounded(a, bb, ts.f32)
    assert got.shape == (2, 3, 5, 4)
    for s in range(2):
        for t in range(3):
            assert same_bits(got[s, t], ref_matmul(a[t], bb[s, 0], "f32"))


def test_threads_and_reused_work_arrays_give_the_same_bits() -> None:
    rng = np.random.default_rng(8)
    cases = [(rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt))
             for m, k, n, dt in [(70, 300, 50, np.float32), (40, 520, 90, ml_dtypes.bfloat16),
                                 (90, 64, 30, ml_dtypes.float8_e4m3fn),
                                 (33, 700, 20, np.float32)]]
    want = [ts.matmul_rounded(a, b, ts.f32) for a, b in cases]
    failures: list[int] = []

    def work(offset: int) -> None:
        for r in range(6):
            c = (r + offset) % len(cases)
            if not same_bits(ts.matmul_rounded(*cases[c], ts.f32), want[c]):
                failures.append(c)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    a, b = cases[3]
    assert same_bits(want[3][:2], ref_matmul(a[:2], b, "f32"))


def test_narrow_non_finite_inputs() -> None:
    a = np.array([[np.inf, 1.0], [np.nan, 1.0], [1.0, 2.0]], ml_dtypes.bfloat16)
    b = np.array([[1.0, 0.0], [1.0, -np.inf]], ml_dtypes.bfloat16)
    got = ts.matmul_rounded(a, b, ts.f32)
    assert got[0, 0] == np.inf and np.isnan(got[0, 1]) and np.isnan(got[1]).all()
    assert got[2, 0] == 3.0 and got[2, 1] == -np.inf


def test_exact_zero_is_positive_and_tiny_negatives_keep_their_sign() -> None:
    a = np.array([[-0.0, -0.0], [1.0, -1.0], [2.0**-100, 0.0]], ml_dtypes.bfloat16)
    b = np.array([[1.0], [1.0]], ml_dtypes.bfloat16)
    for to in ("f32", "f64", "bf16"):
        got = ts.matmul_rounded(a, -b, to).astype(np.float64).ravel()
        assert not np.signbit(got[0]) and not np.signbit(got[1])
        assert got[2] == -(2.0**-100)
    got = ts.matmul_rounded(a, -b, "fp8_e4m3").astype(np.float64).ravel()
    assert got[2] == 0 and np.signbit(got[2])  # rounds to zero, keeps its sign


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_narrow_sums_match_fractions(data: st.DataObject) -> None:
    rows, n = data.draw(st.integers(1, 5)), data.draw(st.sampled_from([1, 2, 5, 33, 100]))
    np_type = data.draw(st.sampled_from(NARROW[:6]))
    band = data.draw(st.sampled_from([None, 3, 12]))
    x = data.draw(narrow_operand((rows, n), np_type, band))
    to = data.draw(st.sampled_from(["f32", "bf16", "f64", "fp8_e4m3"]))
    divisor = data.draw(st.sampled_from([1, 1, 3]))
    got = ts.sum_rounded(x, 1, False, to, divisor=divisor)
    want = [ref_round(sum((Fraction(float(v)) for v in r), Fraction(0)) / divisor, to)
            for r in ts.to_f64(x)]
    assert same_bits(got, np.array(want)), (x, to, divisor)

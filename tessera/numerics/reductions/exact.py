"""Exact sums and dot products of float64 values, as Fractions (the rare, slow path).

These are the references the correctly rounded reductions fall back to when the fast
float64 result cannot decide the rounding. Infinities and NaNs get a rule that does
not depend on the order of summation: NaN if any term is NaN (``inf * 0`` included)
or infinite terms of both signs occur, else an infinite term gives that infinity.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def _nonfinite_class(terms_nan: bool, inf_signs: np.ndarray) -> float | None:
    """The order-independent result when terms are not all finite, else None."""
    if terms_nan:
        return math.nan
    if inf_signs.size == 0:
        return None
    if np.all(inf_signs > 0):
        return math.inf
    if np.all(inf_signs < 0):
        return -math.inf
    return math.nan


def _sum_bigint(mant: np.ndarray, expo: np.ndarray) -> Fraction:
    """Exact sum of ``mant[k] * 2**expo[k]`` (Python ints, any size)."""
    if mant.size == 0:
        return Fraction(0)
    base = int(expo.min())
    total = sum(int(m) << (int(e) - base) for m, e in zip(mant.tolist(), expo.tolist()))
    return Fraction(total) * Fraction(2) ** base


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer mantissas (|m| < 2**53) and exponents with x == m * 2**e exactly."""
    frac, expo = np.frexp(x)
    return (frac * 2.0**53).astype(np.int64), expo.astype(np.int64) - 53


def exact_sum(values: np.ndarray) -> Fraction | float:
    """The exact sum of finite float64 values (a float only for inf/NaN results)."""
    vals = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(vals)):
        inf = vals[np.isinf(vals)]
        res = _nonfinite_class(bool(np.isnan(vals).any()), np.sign(inf))
        assert res is not None
        return res
    if not vals.any():
        return Fraction(0)  # an exact zero rounds to +0, as from a +0-initialised accumulator
    terms = vals.tolist()
    parts: list[float] = []
    try:
        # fsum is the correctly rounded sum; subtracting it and summing again yields the
        # next 53 bits of the exact value, until nothing is left. Usually 1-3 rounds.
        while True:
            s = math.fsum(terms)
            if s == 0.0:
                break
            parts.append(s)
            terms.append(-s)
    except OverflowError:
        mant, expo = _split(vals)
        return _sum_bigint(mant, expo)
    return sum((Fraction(p) for p in parts), Fraction(0))


def exact_dot(a: np.ndarray, b: np.ndarray, *, products_exact: bool) -> Fraction | float:
    """The exact value of ``sum(a * b)`` for float64 vectors.

    ``products_exact`` says every ``a[k] * b[k]`` is exact in float64 (inputs of at most
    53 significand bits together and within float32's range); then the products go to
    :func:`exact_sum`. Otherwise mantissas are multiplied as Python integers.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        a_inf, b_inf = np.isinf(a), np.isinf(b)
        nan = bool(np.isnan(a).any() or np.isnan(b).any()
                   or np.any(a_inf & (b == 0)) or np.any(b_inf & (a == 0)))
        inf = a_inf | b_inf
        res = _nonfinite_class(nan, np.sign(a[inf]) * np.sign(b[inf]))
        assert res is not None
        return res
    if products_exact:
        return exact_sum(a * b)
    if np.all((a == 0) | (b == 0)):
        return Fraction(0)  # an exact zero rounds to +0, as from a +0-initialised accumulator
    ma, ea = _split(a)
    mb, eb = _split(b)
    keep = (ma != 0) & (mb != 0)
    mant = [int(x) * int(y) for x, y in zip(ma[keep].tolist(), mb[keep].tolist())]
    return _sum_bigint(np.array(mant, dtype=object), ea[keep] + eb[keep])


def refine_sum(terms: np.ndarray, cap: np.ndarray | None = None,
               quantum: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A double-double sum of each row of ``terms`` (F, K), with its error bound.

    Returns ``(approx, err, eta)`` with ``|approx + err - sum| <= eta``, where ``approx``
    and ``err`` are float64 and ``eta`` is tiny. ``terms`` must be finite and is
    overwritten; ``cap`` bounds ``max |terms|`` per row (computed if None).

    Each term is split against sigma = 2**m * 2**ceil(log2 cap), 2**m >= K + 2, into a
    high part q, a multiple of u*sigma, and a low part r = term - q with |r| <= u*sigma
    (Rump, Ogita and Oishi, "Accurate floating-point summation", SIAM J. Sci. Comput.
    31, 2008, ExtractVector). The q add up exactly in any order, so only the r carry
    error: at most gamma_K * K * u * sigma. TwoSum makes the last addition exact.
    Rows whose terms or sums overflow get an infinite ``eta``.

    ``quantum`` (from :func:`min_quantum`) says every term of row f is a multiple of
    ``2**quantum[f]``. Then every r is a multiple of 2**min(quantum, log2(u*sigma)), and
    where ``K * u * sigma < 2**53`` times that power of two, every partial sum of the r
    is a float64: their sum is exact too, ``approx + err`` is the exact sum, and ``eta``
    is 0 for that row.
    """
    from tessera.numerics.reductions.rounding import U, gamma

    k = terms.shape[-1]
    if cap is None:
        cap = np.max(np.abs(terms), axis=-1)
    _, expo = np.frexp(np.where(cap > 0, cap, 1.0))
    m = max(k + 2, 2).bit_length()  # 2**m > k + 2
    with np.errstate(over="ignore", invalid="ignore"):
        sigma = np.ldexp(1.0, expo.astype(np.int64) + m)[:, None]
        high = terms + sigma
        high -= sigma
        terms -= high  # the low parts, exactly
        t, s = high.sum(axis=-1), terms.sum(axis=-1)
        approx = t + s
        back = approx - t
        err = (t - (approx - back)) + (s - back)  # TwoSum: t + s == approx + err exactly
        eta = gamma(max(k, 1)) * k * U * sigma[:, 0]
    bad = ~(np.isfinite(eta) & np.isfinite(approx) & np.isfinite(err))
    if quantum is not None:
        # sigma = 2**(expo + m), so u*sigma = 2**(expo + m - 53) and K < 2**k.bit_length():
        # K * u * sigma < 2**(53 + quantum) when quantum >= expo + m + bit_length - 106
        # (if quantum >= log2(u*sigma) instead, K < 2**53 is all it takes).
        exact = quantum >= expo.astype(np.int64) + (m + k.bit_length() - 106)
        eta = np.where(exact, 0.0, eta)
    return (np.where(bad, 0.0, approx), np.where(bad, 0.0, err),
            np.where(bad, np.inf, eta))


NO_QUANTUM = 1 << 20  # min_quantum of a row without nonzero terms: no constraint


def min_quantum(terms: np.ndarray, precision: int = 53, axis: int = -1) -> np.ndarray:
    """Per row of finite float64 ``terms`` (F, K): an exponent q with every term a
    multiple of 2**q, given that no term has more than ``precision`` significant bits.
    (Along ``axis`` instead of the last one, when given.)

    A term t != 0 with 2**e <= |t| < 2**(e+1) is a multiple of 2**(e - precision + 1);
    a float64 subnormal is a multiple of 2**-1074. The smallest nonzero magnitude gives
    the smallest of these. Rows of zeros get ``NO_QUANTUM``.
    """
    mag = terms.view(np.uint64) & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    mag -= np.uint64(1)  # zeros wrap around to the top: the minimum skips them
    low = mag.min(axis=axis)
    zero = low == np.uint64(0xFFFF_FFFF_FFFF_FFFF)
    expo = ((low + np.uint64(1)) >> np.uint64(52)).astype(np.int64)
    q = np.where(expo == 0, -1074, expo - 1023 - (precision - 1))
    return np.where(zero, NO_QUANTUM, q)


#: Veltkamp's splitter for float64 (2**27 + 1): ``c = VELTKAMP_SPLITTER * x; hi = c - (c - x)``
#: leaves ``hi`` and ``x - hi`` with at most 26 significant bits each
VELTKAMP_SPLITTER = 2.0**27 + 1


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``p, e`` with ``p + e == a * b`` exactly (Dekker), for products and factors
    well inside the float64 range (``safe_for_two_product``)."""
    p = a * b
    ca, cb = VELTKAMP_SPLITTER * a, VELTKAMP_SPLITTER * b
    ah = ca - (ca - a)
    bh = cb - (cb - b)
    al, bl = a - ah, b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def safe_for_two_product(x: np.ndarray) -> bool:
    """Whether every nonzero value is in [2**-450, 2**450]: then products of two such
    values and the parts of Veltkamp's split neither overflow nor underflow."""
    mag = np.abs(x[x != 0])
    return bool(mag.size == 0 or (mag.min() >= 2.0**-450 and mag.max() <= 2.0**450))

"""Bit-exact floating-point rules of Target IR: fused multiply-add, min/max, cvt.

* ``fma.rn.f32`` (PTX ISA, "Floating Point Instructions: fma"): the product of two
  float32 is exact in float64; the float64 sum is made *round-to-odd* with an error-free
  TwoSum, and round-to-odd to 53 bits followed by RNE to 24 bits equals one RNE of the
  exact value (Boldo and
  Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
  rounding to odd", IEEE TC 2008: p >= 2q + 2 suffices).
* ``fma.rn.f64``: TwoProduct (Veltkamp/Dekker), TwoSum, round-to-odd of the tail, one
  RNE addition (the same paper's emulation). Elements where the error-free transforms
  could underflow or overflow are decided with ``fractions.Fraction`` instead.
* ``min``/``max`` (PTX ISA, "min"/"max"): a NaN operand yields the other operand, two NaNs
  the canonical NaN; -0.0 is taken as less than +0.0.
* NaN results (:func:`canonical_nans`): an instruction that computes an f32, f16, bf16
  or fp8 value writes that format's canonical NaN, whatever the operands' payloads and
  signs; f64 arithmetic keeps IEEE's (NumPy's) NaN bits, as the GPU does.
* ``add``/``sub``/``mul`` ``.rz``/``.rm``/``.rp`` and ``fma`` of f32 so
  (:func:`directed`): the exact value held as a float64 pair (TwoSum, TwoProduct), or
  rounded to odd in float64 for an f32 result (which no f32 value lies strictly
  between), then rounded in the direction; an exact zero sum is -0 under ``.rm``
  (IEEE 754, 6.3).
* ``cvt`` (PTX ISA, "cvt"): RNE narrowing exactly once (float64 sources via round-to-odd
  float32, :mod:`tessera.numerics.formats.convert`); ``rz``/``rm``/``rp`` by stepping the RNE
  result one ulp when it lies on the wrong side; float to integer rounds (``rzi``,
  ``rni``, ``rmi``, ``rpi``), saturates and maps NaN to 0; ``satfinite`` clamps to the
  largest finite value.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import ml_dtypes
import numpy as np

from tessera.numerics import extrema
from tessera.numerics.formats.convert import round_to_odd_f32

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
_SPLIT = 2.0**27 + 1
# By storage size: f32, f64 (what min/max of two NaNs write), f16 and bf16 (the same
# bits), e4m3 and e5m2 (see canonical_nans for which of these were measured).
_CANONICAL_NAN = {4: np.uint32(0x7FFFFFFF), 8: np.uint64(0x7FF8000000000000),
                  2: np.uint16(0x7FFF), 1: np.uint8(0x7F)}
#: an f32 value held wide (float64) whose NaN must round to f32's canonical 0x7FFFFFFF
_WIDE_F32_NAN = np.uint64(0x7FFFFFFFE0000000)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s = fl(a + b)`` and the exact error ``e = a + b - s`` (Knuth; no overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def add_round_to_odd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` in float64 rounded to odd: truncate, set the last bit if inexact."""
    s, e = two_sum(a, b)
    fix = (e != 0) & ((s.view(np.uint64) & np.uint64(1)) == 0) & np.isfinite(s)
    if fix.any():
        s = s.copy()
        s[fix] = np.nextafter(s[fix], np.where(e[fix] > 0, np.inf, -np.inf))
    return s


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fma.rn.f32``: ``a * b + c`` rounded once to float32."""
    with np.errstate(all="ignore"):
        p = a.astype(F64) * b.astype(F64)  # exact: 48 significand bits, no overflow
        c64 = c.astype(F64)
        s = add_round_to_odd(p, c64)
        plain = ~np.isfinite(p) | ~np.isfinite(c64)
        if plain.any():  # infinities and NaN: the IEEE special-value rules of float64
            s = np.where(plain, p + c64, s)
        return canonical_nans(s.astype(F32))


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def _fma_fraction(a: float, b: float, c: float) -> float:
    """One fma of finite operands with a nonzero product, by exact rational arithmetic."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact)  # int/int true division rounds correctly; exact 0 gives +0
    except OverflowError:
        return float("inf") if exact > 0 else float("-inf")


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fma.rn.f64``: ``a * b + c`` rounded once to float64."""
    a, b, c = np.broadcast_arrays(*(np.asarray(x, F64) for x in (a, b, c)))
    with np.errstate(all="ignore"):
        ph = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl  # ph + pl == a * b exactly
        th, tl = two_sum(c, ph)
        out = th + add_round_to_odd(tl, pl)
        finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        nonzero = (a != 0) & (b != 0) & finite
        big = 2.0**990
        # The error-free transforms are exact only without underflow of the product's
        # tail and without overflow; results near the subnormal range are decided by
        # Fractions too (the round-to-odd proof assumes no underflow).
        risky = nonzero & ((np.abs(ph) < 2.0**-960) | (np.abs(ph) > big) | (np.abs(a) > big)
                           | (np.abs(b) > big) | (np.abs(c) > big) | (np.abs(out) < 2.0**-960))
        out = np.where(nonzero, out, a * b + c)  # a zero product: c itself, IEEE zero signs
        slow = np.flatnonzero(risky.ravel())
        if slow.size:
            out = out.copy()
            flat = out.reshape(-1)
            for i in slow:
                flat[i] = _fma_fraction(float(a.flat[i]), float(b.flat[i]), float(c.flat[i]))
    return out


def fmin_fmax(a: np.ndarray, b: np.ndarray, is_max: bool) -> np.ndarray:
    """PTX ``min``/``max`` of floats: NaN loses, two NaNs give the canonical NaN."""
    with np.errstate(invalid="ignore"):
        pick_a = a > b if is_max else a < b
        out = extrema.signed_zeros(np.where(pick_a, a, b), a, b, is_max)  # -0 < +0
        na, nb = np.isnan(a), np.isnan(b)
        out = np.where(na, b, np.where(nb, a, out)).astype(a.dtype)
        out = canonical_nan_where(na & nb, out)
    return out


#: the smallest normal magnitude of each float type: ``.ftz`` flushes what lies below
SMALLEST_NORMAL = {"f16": 2.0**-14, "bf16": 2.0**-126, "f32": 2.0**-126, "f64": 2.0**-1022}


def flush_subnormals(x: np.ndarray, elem: str) -> np.ndarray:
    """``.ftz``: the subnormal values of ``x``, values of PTX type ``elem`` (a float64
    array may hold f32 values), become zeros of their sign."""
    with np.errstate(invalid="ignore"):
        small = np.abs(x.astype(F64)) < SMALLEST_NORMAL[elem]
    if not small.any():
        return x
    return np.where(small, np.copysign(np.zeros((), x.dtype), x), x).astype(x.dtype)


def with_ftz(fn: Callable[..., np.ndarray], elem: str, result: bool = True
             ) -> Callable[..., np.ndarray]:
    """``fn`` under ``.ftz``: its operands' subnormals made zeros of their sign, and its
    result's too (unless ``result`` is False: a predicate)."""
    def flushed(*xs: np.ndarray) -> np.ndarray:
        out = fn(*(flush_subnormals(x, elem) for x in xs))
        return flush_subnormals(out, elem) if result else out
    return flushed


def canonical_nan_where(mask: np.ndarray, x: np.ndarray, value: int | None = None
                        ) -> np.ndarray:
    """``x`` with the canonical NaN (PTX ISA: ``0x7FFFFFFF`` for f32), or the bits
    ``value``, where ``mask``."""
    if not mask.any():
        return x
    bits = np.array(x).view(_UINT[x.dtype.itemsize]).copy()
    bits[np.broadcast_to(mask, bits.shape)] = \
        _CANONICAL_NAN[x.dtype.itemsize] if value is None else value
    return bits.view(x.dtype)


def canonical_nans(x: np.ndarray, *, wide: bool = False) -> np.ndarray:
    """``x`` with every NaN replaced by the canonical NaN of its format: the NaN bits an
    arithmetic instruction writes.

    The PTX ISA leaves the payload of a NaN result to the implementation; an NVIDIA
    H100 (sm_80 and sm_90a code) was measured to write ``0x7FFFFFFF`` for f32
    ``add``/``sub``/``mul``/``fma``/``ex2`` and ``0x7FFF`` for ``cvt`` to f16 and bf16,
    whether the NaN came from an operand (of any payload and sign) or from an invalid
    operation (``inf - inf``, ``0 * inf``), where NumPy writes ``0xFFC00000``, and
    ``0x7F`` for a conversion to e4m3 (e5m2's ``0x7F`` is by analogy, not measured).
    f64 arithmetic is left alone: there the GPU wrote IEEE's bits, as NumPy does
    (``0xFFF8000000000000`` for an invalid operation, a NaN operand's payload, quieted).
    ``wide``: a float64 ``x`` holds f32 values (a wide accumulator), whose NaN is given
    bits that round to f32's canonical NaN. Costs one ``isnan`` scan when no
    element is NaN, the common case.
    """
    x = np.asarray(x)
    if x.dtype.itemsize == 8 and not wide:
        return x
    if x.dtype.kind == "f":
        nan = np.isnan(x)
    else:  # ml_dtypes formats: isnan of a signalling bf16 NaN warns "invalid"
        with np.errstate(invalid="ignore"):
            nan = np.isnan(x)
    return canonical_nan_where(nan, x, _WIDE_F32_NAN if x.dtype.itemsize == 8 else None)


def _widens(src: np.dtype, dst: np.dtype) -> bool:
    """Whether every ``src`` value is exact in ``dst``."""
    return src == dst or dst == F64 or (dst == F32 and src.itemsize <= 2)


def _narrow_rne(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Round float values (float64 included) once, RNE, to ``dt``."""
    with np.errstate(over="ignore", invalid="ignore"):
        if _widens(x.dtype, dt):
            return x.astype(dt)
        if x.dtype == F64 and dt != F32:
            return round_to_odd_f32(x).astype(dt)  # one rounding, see numerics.convert
        return x.astype(F32).astype(dt)  # f32 (or f16 <-> bf16, exact in f32) -> dt


def _step(y: np.ndarray, up: np.ndarray) -> np.ndarray:
    """``y`` moved one ulp toward +inf where ``up``, else toward -inf."""
    nbits = 8 * y.dtype.itemsize
    u = _UINT[y.dtype.itemsize]
    bits = y.view(u).astype(np.int64)
    top = np.int64(1) << np.int64(nbits - 1)
    negative = (bits & top) != 0
    is_zero = (bits & (top - 1)) == 0
    new = np.where(up != negative, bits + 1, bits - 1)  # magnitude grows or shrinks
    # From a zero the step is the smallest subnormal of the direction's sign.
    new = np.where(is_zero, np.where(up, 1, top | 1), new)
    return new.astype(u).view(y.dtype)


def toward(s: np.ndarray, side: np.ndarray, rnd: str) -> np.ndarray:
    """``s``, a value rounded to nearest (or faithfully), rounded toward zero (``rz``),
    -inf (``rm``) or +inf (``rp``) instead: one ulp further in the direction where the
    exact value lies beyond ``s`` that way (``side``: the sign of exact - ``s``; an
    overflowed ``s`` steps back to the largest finite value)."""
    wrong = {"rz": side * np.sign(s) < 0, "rm": side < 0, "rp": side > 0}[rnd]
    if not np.any(wrong):
        return s
    up = s < 0 if rnd == "rz" else np.full(np.shape(s), rnd == "rp")
    return np.where(wrong, _step(s, up), s)


def cvt_float(x: np.ndarray, dt: np.dtype, rnd: str, sat: bool) -> np.ndarray:
    """Float to float conversion rounding ``rn`` (or ``""``), ``rz``, ``rm`` or ``rp``."""
    y = _narrow_rne(x, dt)
    if rnd in ("rz", "rm", "rp") and not _widens(x.dtype, dt):
        with np.errstate(invalid="ignore", over="ignore"):
            x64, y64 = x.astype(F64), y.astype(F64)
            y = toward(y, np.where(np.isnan(x64), 0.0, np.sign(x64 - y64)), rnd)
    if sat:
        big = np.array(ml_dtypes.finfo(dt).max, dt)
        y64 = y.astype(F64)
        y = np.where(np.isinf(y64), np.where(y64 < 0, -big, big), y)
    y = np.asarray(y).astype(dt)
    # To a 16-bit or narrower float, and from f16 to f32, the GPU writes the canonical
    # NaN (f16 to f32 measured on an H200, ptxas 13.5); from f64 or bf16 to f32, rounding
    # f32 to an integral f32 and widening to f64 keep the payload, as NumPy's and
    # ml_dtypes' conversions do (f64 to f32 measured on an H100).
    if dt.itemsize <= 2 or (dt == F32 and np.dtype(x.dtype) == np.float16):
        return canonical_nans(y)
    return y


def cvt_float_to_int(x: np.ndarray, dt: np.dtype, rnd: str) -> np.ndarray:
    """Float to integer: round per ``rnd``, saturate to the range, NaN to 0."""
    fn = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil, "": np.trunc}[rnd]
    x64 = x.astype(F64)
    with np.errstate(invalid="ignore"):
        r = fn(np.where(np.isnan(x64), 0.0, x64))
        info = np.iinfo(dt)
        top = r >= float(info.max)  # float(2**63 - 1) rounds up: compare, then set
        out = np.clip(r, float(info.min), float(info.max)).astype(np.float64)
        res = np.where(top, 0, out).astype(dt)
    res[top] = info.max
    return res


def round_integral(x: np.ndarray, rnd: str) -> np.ndarray:
    """``cvt.rni.f32.f32`` and friends: round to an integral value in the same format."""
    fn = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}[rnd]
    with np.errstate(invalid="ignore"):  # a NaN keeps its bits (NumPy would quiet it)
        return np.where(np.isnan(x), x, fn(x)).astype(x.dtype)


def _f64_pair(op: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a op b`` of float64 values as ``s + e`` exactly, ``s`` the float64 rounding
    (TwoSum, Dekker's TwoProduct; no overflow, a product's tail needs no underflow)."""
    if op != "mul":
        return two_sum(a, -b if op == "sub" else b)
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def directed(op: str, a: np.ndarray, b: np.ndarray, rnd: str,
             c: np.ndarray | None = None) -> np.ndarray:
    """``add``/``sub``/``mul`` of f32 or f64 operands (``c`` given: ``fma`` of f32)
    rounded toward zero (``rz``), -inf (``rm``) or +inf (``rp``), in the operands' type."""
    dt = np.asarray(a).dtype
    a64, b64 = np.asarray(a, F64), np.asarray(b, F64)
    c64 = None if c is None else np.asarray(c, F64)
    with np.errstate(all="ignore"):
        terms = (a64 * b64, c64) if c64 is not None else (a64, -b64 if op == "sub" else b64)
        plain = a64 * b64 if op == "mul" and c64 is None else terms[0] + terms[1]
        finite = np.isfinite(a64) & np.isfinite(b64) & (True if c64 is None
                                                         else np.isfinite(c64))
        if dt == F32:  # exact (a product), or rounded to odd at 53 bits: then once
            odd = plain if op == "mul" and c64 is None else add_round_to_odd(*terms)
            out = cvt_float(np.where(finite, odd, plain), F32, rnd, False)
        else:
            # s is the nearest float64; it is wrong where the exact value lies on the
            # other side of it than the direction allows (an overflow: beyond it)
            s, e = _f64_pair(op, a64, b64)
            over = finite & np.isinf(s)
            tail = np.where(over, -s, e)
            if op == "mul":  # where Dekker's split over- or underflows: exact rationals
                big, tiny = 2.0**990, 2.0**-960
                risky = finite & ~over & (a64 != 0) & (b64 != 0) & (
                    (np.abs(s) < tiny) | (np.abs(a64) > big) | (np.abs(b64) > big))
                for i in np.flatnonzero(risky.ravel()):
                    x = Fraction(float(a64.flat[i])) * Fraction(float(b64.flat[i]))
                    rounded = Fraction(float(s.flat[i]))
                    tail.flat[i] = (x > rounded) - (x < rounded)  # the sign of the tail
            side = np.where(finite, np.sign(tail), 0.0)
            out = toward(np.where(finite, s, plain), side, rnd)
        if rnd == "rm" and not (op == "mul" and c64 is None):
            # an exact zero sum is -0 unless both terms are +0 (IEEE 754, 6.3)
            positive = (terms[0] == 0) & ~np.signbit(terms[0]) & (terms[1] == 0) & \
                ~np.signbit(terms[1])
            out = np.where((out == 0) & finite & ~positive, -0.0, out).astype(dt)
    return canonical_nans(np.asarray(out).astype(dt)) if dt == F32 else np.asarray(out, dt)


__all__ = ["add_round_to_odd", "canonical_nan_where", "canonical_nans", "cvt_float",
           "cvt_float_to_int", "directed", "fma_f32", "fma_f64", "fmin_fmax",
           "round_integral", "toward", "two_sum"]

"""A specified, reproducible f32 ``exp``: the meaning of ``tile.exp`` in checked mode.

Library ``exp`` functions differ between machines (NumPy's SIMD loops, glibc, CUDA's
``__expf``), so a tile kernel's exact bits cannot rest on one. :func:`exp_f32` is
instead defined by an algorithm that uses only IEEE-754 binary64 ``add``/``sub``/``mul``
(each correctly rounded to nearest even, never fused), integer and bit operations,
comparisons and selects, and one final round-to-nearest-even conversion to binary32.
A GPU runs the same sequence with ``mul.rn.f64``, ``add.rn.f64``/``sub.rn.f64``,
``cvt.rni.s32.f64``, ``cvt.rn.f64.s32``, ``mul.lo.s32`` + ``mov.b64`` (to build 2^n),
``setp``/``selp`` and ``cvt.rn.f32.f64``, so both get identical bits
(:func:`tessera.lower.arith.mathlib.emit_exp_f32` emits it op for op).

The algorithm, for a binary32 ``x`` widened exactly to binary64:

1. NaN: remembered (``x != x``) and answered at the end with ``x`` quieted (the quiet
   bit ``0x00400000`` set, payload kept, as IEEE 754-2019 sec. 6.2.3 recommends).
2. Clamp: ``x = x < 89 ? x : 89`` then ``x = x > -104 ? x : -104`` (a NaN becomes 89,
   so no NaN reaches the arithmetic; PTX ``min``/``max`` would drop it silently).
   exp(89) overflows binary32 and exp(-104) < 2^-150 rounds to zero, so the clamp only
   touches inputs whose result is already +inf or +0 (+inf and -inf included).
3. ``n = rne(x * LOG2E)`` (an integer in [-150, 128]).
4. Cody-Waite reduction ``r = (x - n*LN2_HI) - n*LN2_LO``: ``LN2_HI`` is ln 2 cut to 42
   significant bits, so ``n*LN2_HI`` is exact and so is the subtraction (its result is
   a multiple of ulp(LN2_HI) below 1/2); ``LN2_LO`` is the next 53 bits.
   ``|r| <= ln(2)/2 + 2^-40``.
5. ``p ~ e^r``: a degree-12 polynomial in Horner form,
   ``p = ((c12*r + c11)*r + ... + c1)*r + c0``, each step one ``mul`` then one ``add``.
   The coefficients are the degree-20 Taylor polynomial Chebyshev-economized to degree
   12 on |r| <= 0.35 in exact rational arithmetic (:func:`economized_coefficients`),
   then rounded to binary64 (c1 and c0 are exactly 1). Approximation error: below
   2^-63.7 relative with the exact coefficients, below 2^-59 with the rounded ones.
6. ``v = p * 2^n``, 2^n built from its bit pattern ``(n + 1023) << 52`` (a normal
   binary64 for every n above, so the product is exact), then one RNE conversion to
   binary32, which also makes the binary32 subnormals and the overflow to +inf.

Error of ``v``: the last Horner add (u = 2^-53 relative), the last multiply and the
rounding of the previous Horner step (about 0.6 u each), the rounding of ``r`` (|r| u)
and the deeper steps sum to below 2.7 u = 2^-51.5; the largest error measured against
``decimal`` on 25000 inputs is 1.46 u = 2^-52.45. The binary32 result is therefore the
correctly rounded e^x unless e^x lies within about 2^-51.5 (relative) of a binary32
rounding boundary. Measured: over every binary32 input in [-104, 89] (2,239,889,410
values, run exhaustively) and over 10^7 random inputs in [-110, 90], **0 results
differ from the correctly rounded e^x**: every ``v`` farther than 2^-50 from a boundary
is proven correct by the bound, and the 9 inputs closer than that were decided exactly
with ``decimal`` at 60 digits (all correct). Special values: +-0 -> 1, +inf -> +inf,
-inf -> +0, NaN -> the input NaN quieted, subnormal results below x ~ -87.34, +0 below
x ~ -103.97, +inf from x ~ 88.72284 up.

Fast evaluation. Because the algorithm is correctly rounded on every binary32 input,
any method that provably returns the correctly rounded e^x gives its bits.
:func:`exp_f32` uses one: ``y = exp(x)`` in binary64 by the platform's ``exp`` (NumPy's
SIMD loop or libm), rounded once to binary32. That rounding is the correct one unless
e^x lies within the error of ``y`` of a binary32 rounding boundary. Library binary64
``exp`` functions are accurate to within a few ulps (glibc's manual lists at most 1 for
``exp`` on x86_64), so every ``y`` farther than 2^-44 (relative, 256 binary64 ulps)
from a boundary is rounded correctly; the inputs whose ``y`` is closer (about one in
2^20), whose result is a binary32 subnormal, or that are NaN go through the algorithm
itself (:func:`exp_f32_specified`). Compared over all 2^32 binary32 bit patterns,
the two give the same bits everywhere; the fast one costs about a third as much.
Where llvmlite is installed, :func:`exp_f32` runs the algorithm itself instead, compiled
to a native vector loop (:mod:`tessera.numerics.transcendental.exp_native`): the same
IEEE operations in the same order, so the same bits again, at a few nanoseconds per value
on any CPU (NumPy's float64 ``exp`` is a SIMD loop only with AVX-512F).

The binary64 value ``v`` of steps 1-6, for binary64 inputs and with binary64 range
limits, is :func:`tessera.numerics.transcendental.exp64.exp_f64_specified`: the meaning of
``tile.exp`` on f64 tiles and of the graph softmax's terms.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

#: the degree of the polynomial for e^r
DEGREE = 12
#: the reduced argument's bound used to build the polynomial (above ln(2)/2 + 2^-40)
RADIUS = Fraction(7, 20)
#: Horner coefficients, highest degree first: :func:`economized_coefficients` rounded
#: to binary64 (c1 and c0 round to exactly 1)
COEFFS: tuple[float, ...] = tuple(float.fromhex(h) for h in (
    "0x1.1f9ac9a0e1905p-29", "0x1.af7ddbd608ddcp-26", "0x1.27e4c116d257bp-22",
    "0x1.71dde415860a9p-19", "0x1.a01a01b39bcf8p-16", "0x1.a01a01b976c56p-13",
    "0x1.6c16c16c1368ep-10", "0x1.111111110d711p-7", "0x1.555555555555ep-5",
    "0x1.5555555555564p-3", "0x1.0000000000000p-1", "0x1.0000000000000p+0",
    "0x1.0000000000000p+0"))
LOG2E = float.fromhex("0x1.71547652b82fep+0")  # RN(1/ln 2)
LN2_HI = float.fromhex("0x1.62e42fefa3800p-1")  # ln 2 cut to 42 significant bits
LN2_LO = float.fromhex("0x1.ef35793c76730p-45")  # RN(ln 2 - LN2_HI)
CLAMP_HI = 89.0  # exp(89) > 2^128: overflows binary32
CLAMP_LO = -104.0  # exp(-104) < 2^-150: rounds to +0 in binary32
QUIET_BIT = 0x00400000
#: elements per chunk: keeps the temporaries in cache (the loop is over chunks, not elements)
_CHUNK = 1 << 15
#: n + 2^52 + 1023 is exact and holds the integer n + 1023 in its low bits
_SHIFTER = float(2**52 + 1023)


def chebyshev(k: int) -> list[int]:
    """The power-basis coefficients of the Chebyshev polynomial T_k, constant first."""
    lower, upper = [1], [0, 1]
    if k == 0:
        return lower
    for _ in range(k - 1):
        nxt = [0, *(2 * c for c in upper)]
        for i, c in enumerate(lower):
            nxt[i] -= c
        lower, upper = upper, nxt
    return upper


def economized_coefficients(degree: int = DEGREE, radius: Fraction = RADIUS,
                            taylor: int = 20) -> tuple[list[Fraction], Fraction]:
    """Exact coefficients (constant first) of e^r's Taylor polynomial of degree
    ``taylor``, economized down to ``degree`` on ``[-radius, radius]``: each top term
    a_k r^k is replaced by its Chebyshev remainder a_k (r^k - radius^k T_k(r/radius) /
    2^(k-1)), of lower degree. Also returns the bound sum of |a_k| radius^k / 2^(k-1)
    on the absolute error this adds (the Taylor tail beyond ``taylor`` is < 2^-90)."""
    a = [Fraction(1, math.factorial(k)) for k in range(taylor + 1)]
    bound = Fraction(0)
    for k in range(taylor, degree, -1):
        cheb = chebyshev(k)
        scale = a[k] * radius**k / cheb[k]  # cancels r^k exactly
        for i, c in enumerate(cheb):
            a[i] -= scale * c / radius**i
        bound += abs(scale)
    return a[:degree + 1], bound


def reduce_and_approximate(x: np.ndarray, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Steps 3-5 on a clamped binary64 chunk ``x``: ``n`` gets rne(x * LOG2E), and the
    result (``x``'s buffer, reused) is the polynomial ``p ~ e^r`` of the Cody-Waite
    reduced ``r`` (which ``r`` holds)."""
    np.multiply(x, LOG2E, out=n)
    np.rint(n, out=n)  # cvt.rni.s32.f64 then cvt.rn.f64.s32: both exact here
    np.multiply(n, LN2_HI, out=r)
    np.subtract(x, r, out=r)
    p = x  # x is dead from here on: reuse its buffer
    np.multiply(n, LN2_LO, out=p)
    np.subtract(r, p, out=r)
    np.multiply(r, COEFFS[0], out=p)
    np.add(p, COEFFS[1], out=p)
    for c in COEFFS[2:]:  # Horner: mul.rn.f64 then add.rn.f64, never fused
        np.multiply(p, r, out=p)
        np.add(p, c, out=p)
    return p


def _wide_into(x32: np.ndarray, out: np.ndarray, buf: np.ndarray) -> None:
    """Steps 2-6 for a flat chunk: ``out`` (binary64, or binary32 for the final RNE
    conversion) gets ``v``; ``buf`` is scratch of shape (3, >= len)."""
    m = x32.size
    x, n, r = buf[0, :m], buf[1, :m], buf[2, :m]
    np.copyto(x, x32)  # cvt.f64.f32: exact
    # equals the two setp+selp of the spec for every non-NaN x; NaN lanes are replaced
    np.clip(x, CLAMP_LO, CLAMP_HI, out=x)
    p = reduce_and_approximate(x, n, r)
    np.add(n, _SHIFTER, out=n)
    bits = n.view(np.int64)
    np.left_shift(bits, 52, out=bits)  # the pattern (n + 1023) << 52 of 2^n
    np.multiply(p, bits.view(np.float64), out=out, casting="unsafe")


def _run(x: np.ndarray, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty(flat.shape, dtype)
    buf = np.empty((3, min(_CHUNK, flat.size)), np.float64)
    # overflow to +inf is specified; NaN lanes (invalid) are answered separately
    with np.errstate(over="ignore", invalid="ignore"):
        for lo in range(0, flat.size, _CHUNK):
            _wide_into(flat[lo:lo + _CHUNK], out[lo:lo + _CHUNK], buf)
    return flat, out


def exp_f32_unrounded(x: np.ndarray) -> np.ndarray:
    """The binary64 value :func:`exp_f32` rounds, for a binary32 array ``x`` (NaN for
    a NaN input); for error analysis."""
    _, out = _run(x, np.float64)
    return out.reshape(np.shape(x))


def quiet_nan(x32: np.ndarray) -> np.ndarray:
    """``x32`` with the binary32 quiet bit set (a NaN stays a NaN, payload kept)."""
    bits = np.ascontiguousarray(x32, dtype=np.float32).view(np.uint32) | np.uint32(QUIET_BIT)
    return bits.view(np.float32)


def exp_f32_specified(x: np.ndarray) -> np.ndarray:
    """e^x for a binary32 array, computed step by step by the algorithm of this module's
    docstring: the same bits on every machine and on the GPU (correctly rounded on
    every binary32 input)."""
    flat, out = _run(x, np.float32)  # the binary32 out makes the final RNE conversion
    nan = np.isnan(flat)
    if nan.any():
        out[nan] = quiet_nan(flat[nan])
    return out.reshape(np.shape(x))


#: binary64 ulps a platform ``exp`` result may be from e^x before it is not trusted
FAST_MARGIN_ULPS = 256
#: the 29 binary64 significand bits that binary32 rounding drops, and their midpoint
_DROPPED, _HALF = np.int64((1 << 29) - 1), 1 << 28
#: x in [-104, -87.33] (centre, radius; a little wider for the float32 sum) may give a
#: binary32 subnormal, whose rounding boundaries are elsewhere: e^-87.33 > 2^-126, the
#: smallest normal; below -104 the result is +0 (e^-104 < 2^-150 / 1.03), and rounding
#: the binary64 value gives that too
_SMALL_MID, _SMALL_RADIUS = np.float32(95.665), np.float32(8.34)
#: a chunk whose least x is at least this has no small result (and no NaN)
_SMALL_TOP = -_SMALL_MID + _SMALL_RADIUS


def _fast_into(x32: np.ndarray, out: np.ndarray, buf: np.ndarray,
               low: np.ndarray) -> np.ndarray | None:
    """The platform binary64 ``exp`` of a flat chunk, rounded into ``out``; returns the
    mask of elements whose rounding it has not proven (near a boundary, small, NaN), or
    None when there are none."""
    m = x32.size
    y, lo = buf[:m], low[:m]
    np.exp(x32, out=y, dtype=np.float64)
    np.copyto(out, y, casting="same_kind")
    # distance of y's dropped bits from the midpoint, offset so |d| <= margin is one
    # unsigned test, and one min tells whether any element passes it (no mask to make)
    np.bitwise_and(y.view(np.int64), _DROPPED, out=lo)
    np.subtract(lo, _HALF - FAST_MARGIN_ULPS, out=lo)
    near = lo.view(np.uint64)
    limit = np.uint64(2 * FAST_MARGIN_ULPS)
    # one pass decides whether any element can be small or NaN (min propagates NaN)
    small = bool(m) and not x32.min() >= _SMALL_TOP
    if not small and not (m and near.min() <= limit):
        return None
    hard = near <= limit
    if small:
        hard |= ~(np.abs(x32 + _SMALL_MID) > _SMALL_RADIUS)  # NaN compares false: here
    return hard


def exp_f32(x: np.ndarray) -> np.ndarray:
    """e^x for a binary32 array: the bits of :func:`exp_f32_specified` (the algorithm of
    this module's docstring), by the algorithm compiled to native code
    (:mod:`tessera.numerics.transcendental.exp_native`) or, without llvmlite, by the fast evaluation
    that docstring proves equal."""
    x = np.asarray(x, dtype=np.float32)
    # in the array's own memory order (a transposed tile stays transposed)
    result = np.empty_like(x)
    flat, out = np.ravel(x, order="K"), np.ravel(result, order="K")
    if not np.may_share_memory(out, result):  # not one block in any order: C order
        flat, result = np.ascontiguousarray(x).reshape(-1), np.empty(x.shape, np.float32)
        out = result.reshape(-1)
    from tessera.numerics.transcendental.exp_native import native_exp  # it imports this module

    kernel = native_exp()
    if kernel is not None:  # the algorithm itself, compiled: the same bits
        kernel(flat, out)
        return result
    size = min(_CHUNK, flat.size)
    buf, low = np.empty(size, np.float64), np.empty(size, np.int64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for lo in range(0, flat.size, _CHUNK):
            chunk = slice(lo, lo + _CHUNK)
            hard = _fast_into(flat[chunk], out[chunk], buf, low)
            if hard is not None and hard.any():
                idx = np.flatnonzero(hard)
                out[chunk][idx] = exp_f32_specified(flat[chunk][idx])
    return result


__all__ = ["CLAMP_HI", "CLAMP_LO", "COEFFS", "DEGREE", "LN2_HI", "LN2_LO", "LOG2E",
           "QUIET_BIT", "RADIUS", "economized_coefficients", "exp_f32", "exp_f32_specified",
           "exp_f32_unrounded", "quiet_nan"]

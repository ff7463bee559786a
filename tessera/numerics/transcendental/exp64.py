"""A specified binary64 ``exp``: the meaning of the graph softmax's ``e`` and of ``tile.exp``
on f64 tiles.

NumPy's float64 ``exp`` is the platform's (a SIMD loop, glibc, or another libm), so its
last bits differ between machines and no GPU program can promise them.
:func:`exp_f64_specified` is instead *defined* by the algorithm of
:mod:`tessera.numerics.transcendental.exp` (steps 1-6 of its docstring) without the final
binary32 rounding, on binary64 inputs, with binary64 range limits:

1. NaN: remembered (``x != x``) and answered at the end with ``x`` quieted (the binary64
   quiet bit ``0x0008000000000000`` set, payload kept).
2. Clamp: ``c = x < 710 ? x : 710`` then ``c = c > -104 ? c : -104`` (a NaN becomes 710).
3. ``n = rne(c * LOG2E)`` (an integer in [-150, 1024]).
4. ``r = (c - n*LN2_HI) - n*LN2_LO`` (Cody-Waite, the constants of ``exp``; ``n*LN2_HI``
   is exact for |n| < 2^11, and the subtraction is exact by Sterbenz's lemma or n = 0).
5. ``p``: the same degree-12 Horner polynomial in ``r``, each step one ``mul`` then one
   ``add`` (never fused).
6. ``v = (p * 2^(n-1)) * 2``, 2^(n-1) built from its bit pattern ``(n + 1022) << 52``
   (a normal binary64 for every n above, so the first product is exact); the doubling is
   exact too, unless it overflows to +inf (from x ~ 709.78 up, +inf included). For the
   inputs of the f32 ``exp`` this is the same value ``p * 2^n``.
7. Domain: ``x < -104`` (``-inf`` included) gives ``+0``, a select on the original ``x``.

Step 7 is part of the definition. Its reason: a softmax's terms ``e^(x - max)`` then lie
in ``{0} U [e^-104, 1]``, whose exact sum a GPU accumulates in a fixed-point register of
bounded width (quanta down to 2^-203: ``v >= 2^-151`` carries 53 significant bits). It
changes no binary32 softmax output (``e^-104 / total`` rounds to +0 in binary32 for any
``total >= 1``, and the largest term ``e^0`` is exactly 1). It can change the correctly
rounded binary64 *sum* of a row compared to summing the unflushed terms, but only when
that sum is within ``N * e^-104`` of a binary64 rounding boundary; since the unflushed
terms are themselves this algorithm's (not the real e^x), the flush is simply part of
what the sum means. A clamp alone (``-inf`` -> ``v(-104)``, about 6.8e-46) would make
masked entries (``-inf``) nonzero terms, which the flush avoids.

Accuracy: for -104 <= x <= 709.78, ``v`` is within about 2.7 binary64 ulps of e^x
(the bound of ``exp``'s docstring: the steps are the same). Below -104 it is 0, so it
is *not* a general-purpose f64 ``exp`` for small results: use it where results below
e^-104 (about 6.8e-46) do not matter, as in a softmax. ``graph.exp`` of f64 values still
uses NumPy's ``exp``.
"""

from __future__ import annotations

import numpy as np

from tessera.numerics.transcendental.exp import CLAMP_LO, reduce_and_approximate

#: the upper clamp: e^710 overflows binary64, and n = rne(710 * LOG2E) = 1024 still has
#: a normal 2^(n-1)
CLAMP_HI_F64 = 710.0
#: the binary64 quiet-NaN bit
QUIET_BIT_F64 = 0x0008000000000000
#: n + 2^52 + 1022 is exact and holds the integer n - 1 + 1023 in its low bits
SHIFTER_F64 = float(2**52 + 1022)
_CHUNK = 1 << 15


def _chunk_into(x: np.ndarray, out: np.ndarray, buf: np.ndarray) -> None:
    """Steps 2-6 and 7 for a flat binary64 chunk ``x`` into ``out``; ``buf`` is scratch
    of shape (3, >= len)."""
    m = x.size
    c, n, r = buf[0, :m], buf[1, :m], buf[2, :m]
    # equals the two setp+selp of the spec for every non-NaN x; NaN lanes are replaced
    np.clip(x, CLAMP_LO, CLAMP_HI_F64, out=c)
    p = reduce_and_approximate(c, n, r)  # steps 3-5, exactly as the f32 exp
    np.add(n, SHIFTER_F64, out=n)
    bits = n.view(np.int64)
    np.left_shift(bits, 52, out=bits)  # the pattern (n + 1022) << 52 of 2^(n-1)
    np.multiply(p, bits.view(np.float64), out=out)
    np.multiply(out, 2.0, out=out)
    out[x < CLAMP_LO] = 0.0  # step 7 (NaN compares false: answered by the caller)


def exp_f64_specified(x: np.ndarray) -> np.ndarray:
    """e^x for a binary64 array by the algorithm of this module's docstring: the same
    bits on every machine and on a GPU; +0 for x < -104 (-inf included), the input NaN
    quieted for a NaN."""
    arr = np.asarray(x, dtype=np.float64)
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.shape, np.float64)
    buf = np.empty((3, min(_CHUNK, flat.size)), np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to +inf is specified
        for lo in range(0, flat.size, _CHUNK):
            _chunk_into(flat[lo:lo + _CHUNK], out[lo:lo + _CHUNK], buf)
    nan = np.isnan(flat)
    if nan.any():
        quiet = flat[nan].view(np.uint64) | np.uint64(QUIET_BIT_F64)
        out[nan] = quiet.view(np.float64)
    return out.reshape(arr.shape)


__all__ = ["CLAMP_HI_F64", "QUIET_BIT_F64", "SHIFTER_F64", "exp_f64_specified"]

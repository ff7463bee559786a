"""A specified binary64 natural logarithm: the meaning of ``graph.log`` of real formats
and of ``tile.log``, the same bits in NumPy and in PTX.

NumPy's ``log`` is the platform's, so :func:`log_f64_specified` is instead *defined* by
the method of fdlibm's ``e_log.c`` (Sun Microsystems, 1993), without its branches, in
IEEE binary64 operations rounded to nearest even (never fused). For a binary64 ``x``:

1. Subnormals: ``t = x < 2^-1022 ? x * 2^54 : x`` and ``b = x < 2^-1022 ? -54 : 0``.
2. Reduction (integer operations on the high word ``h`` of ``t``):
   ``i = ((h & 0xfffff) + 0x95f64) & 0x100000``; ``m`` is ``t`` with the high word
   ``(h & 0xfffff) | (i ^ 0x3ff00000)`` (so ``sqrt(2)/2 <= m < sqrt(2)``) and
   ``k = (h >> 20) - 1023 + (i >> 20) + b``, so ``x = m 2^k``.
3. ``f = m - 1`` (exact), ``s = f / (2 + f)``, ``z = s*s``, ``w = z*z``,
   ``R = z*(L1 + w*(L3 + w*(L5 + w*L7))) + w*(L2 + w*(L4 + w*L6))`` (fdlibm's ``Lg1``..
   ``Lg7``, each step one ``mul`` then one ``add``), ``q = (0.5*f)*f``.
4. ``v = k*LN2_HI - ((q - (s*(q + R) + k*LN2_LO)) - f)`` (``LN2_HI`` has 32 significant
   bits, so ``k*LN2_HI`` is exact).
5. Domain: ``x == +-0 -> -inf``, ``x < 0 -> NaN`` (the default quiet NaN
   ``0x7ff8000000000000``), ``+inf -> +inf``, a NaN -> the input NaN quieted.

fdlibm chooses between two final formulas by the mantissa; this algorithm always takes
the one fdlibm calls the more accurate (step 4). Measured against ``decimal`` at 60
digits on 20,000 inputs over [2^-1074, 2^1023] and near 1: within 0.77 binary64 ulps
(the tests check 1). ``log(1) = +0``.

:func:`log_steps` is written over
:class:`tessera.numerics.transcendental.arith64.Arith`; the PTX emitter
(:mod:`tessera.lower.arith.mathlib_steps`) runs it on registers. The coefficients are those
of fdlibm's ``e_log.c``, whose notice reads: "Copyright (C) 1993 by Sun Microsystems,
Inc. All rights reserved. Developed at SunSoft, a Sun Microsystems, Inc. business.
Permission to use, copy, modify, and distribute this software is freely granted,
provided that this notice is preserved."
"""

from __future__ import annotations

import numpy as np

from tessera.numerics.transcendental.arith64 import Arith, P, V, run_numpy

LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
#: fdlibm's Lg1..Lg7
LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
      2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
      1.479819860511658591e-01)
TWO54 = 2.0**54
SMALLEST_NORMAL = 2.0**-1022

assert LN2_HI.hex() == "0x1.62e42fee00000p-1" and LN2_LO.hex() == "0x1.a39ef35793c76p-33"


def _horner(ar: Arith[V, P], coeffs: tuple[float, ...], w: V) -> V:
    h = ar.const(coeffs[0])
    for c in coeffs[1:]:
        h = ar.add(ar.mul(h, w), ar.const(c))
    return h


def log_steps(ar: Arith[V, P], x: V) -> V:
    """log(x) by steps 1-5 of this module's docstring, in ``ar``'s operations."""
    zero = ar.const(0.0)
    sub = ar.less(x, ar.const(SMALLEST_NORMAL))
    t = ar.select(sub, ar.mul(x, ar.const(TWO54)), x)
    m, k = ar.exponent_split(t)
    k = ar.add(k, ar.select(sub, ar.const(-54.0), zero))  # exact: small integers
    f = ar.sub(m, ar.const(1.0))
    s = ar.div(f, ar.add(ar.const(2.0), f))
    z = ar.mul(s, s)
    w = ar.mul(z, z)
    odd = ar.mul(z, _horner(ar, (LG[6], LG[4], LG[2], LG[0]), w))
    even = ar.mul(w, _horner(ar, (LG[5], LG[3], LG[1]), w))
    r = ar.add(odd, even)
    q = ar.mul(ar.mul(ar.const(0.5), f), f)
    inner = ar.sub(q, ar.add(ar.mul(s, ar.add(q, r)), ar.mul(k, ar.const(LN2_LO))))
    v = ar.sub(ar.mul(k, ar.const(LN2_HI)), ar.sub(inner, f))
    inf = ar.const(float("inf"))
    v = ar.select(ar.less(x, inf), v, x)  # +inf stays
    v = ar.select(ar.less(x, zero), ar.const(float("nan")), v)
    v = ar.select(ar.less(ar.abs(x), ar.const(5e-324)), ar.neg(inf), v)  # +-0
    return ar.quiet_nan_of(x, v)


def log_f64_specified(x: np.ndarray) -> np.ndarray:
    """log of a binary64 array by the algorithm of this module's docstring (the same
    bits on every machine and on a GPU); NaN (0x7ff8000000000000) below zero."""
    return run_numpy(log_steps, x)


__all__ = ["LG", "LN2_HI", "LN2_LO", "log_f64_specified", "log_steps"]

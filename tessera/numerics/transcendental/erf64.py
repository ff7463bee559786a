"""A specified binary64 error function: the meaning of ``graph.erf``, of ``tile.erf`` and
``tile.erfc`` and (through :mod:`tessera.numerics.transcendental.gelu64`) of the
erf-form ``graph.gelu``, the same bits in NumPy and in PTX.

The C library's ``erf`` differs between platforms and no GPU instruction sequence
promises its bits, so :func:`erf_f64_specified` and :func:`erfc_f64_specified` are
*defined* by the method of fdlibm's ``s_erf.c`` (Sun Microsystems, 1993: rational
approximations on four intervals, ``exp`` for the tail) evaluated branch-free with IEEE
binary64 ``add``/``sub``/``mul``/``div`` (each rounded to nearest even, never fused),
comparisons, selects, a bit mask and the specified exp
(:mod:`tessera.numerics.transcendental.exp64`). For a binary64 ``x``:

1. ``a = |x|``; ``c = a < 28 ? a : 28`` (a NaN becomes 28).
2. The interval ``k`` of ``c``: 0 below 0.84375, 1 below 1.25, 2 below ``1/0.35``
   (binary64 2.857142857142857), 3 above.
3. ``v = c*c`` (k = 0), ``c - 1`` (k = 1) or ``1 / (c*c)`` (k >= 2).
4. ``y = N_k(v) / (1 + v * D_k(v))``: ``N_k`` and ``D_k`` are Horner polynomials of 8
   coefficients (fdlibm's, the missing leading ones 0, which changes no value: the
   first steps give ``+-0 + coefficient``), each step one ``mul`` then one ``add``.
5. The tail: ``s`` = ``c`` with the low 32 bits of its pattern cleared (21 significant
   bits, so ``s*s`` and ``-0.5625 - s*s`` are exact);
   ``t = (exp(-0.5625 - s*s) * exp((s - c) * (s + c) + y)) / c``.
6. ``erf``: ``x + x*y`` (k = 0), else ``e = ERX + y`` (k = 1) or ``1 - t`` (k >= 2),
   negated where ``x < 0``.
   ``erfc``: k = 0: ``1 - (x + x*y)`` where ``x < 1/4``, else
   ``0.5 - (x*y + (x - 0.5))``; k = 1: ``(1 - ERX) - y`` for ``x > 0``, else
   ``1 + (ERX + y)``; k >= 2: ``t`` for ``x > 0``, else ``2 - t``.
7. NaN: the input NaN quieted (the quiet bit set, payload kept), as the exp's.

``ERX`` is fdlibm's ``0.84506291151`` rounded to binary32 (so ``1 - ERX`` is exact).
Every step is a correctly rounded IEEE operation or the specified exp, so the same
sequence of ``mul.rn.f64``/``add.rn.f64``/``sub.rn.f64``/``div.rn.f64``, ``setp``,
``selp`` and ``mov.b64`` gives the same bits on a GPU:
:func:`erf_steps` and :func:`erfc_steps` are written over the operations of
:class:`tessera.numerics.transcendental.arith64.Arith`: the PTX emitter
(:mod:`tessera.lower.arith.mathlib_steps`) runs them on registers, the functions here on
NumPy arrays (all four intervals are computed for every element, then selected).

Accuracy. fdlibm bounds its approximations' errors by 2^-57.9 (k = 0), 2^-59.06
(k = 1) and 2^-61.5 (k >= 2) and its ``erf`` by one ulp; the specified exp adds at
most 2.7 binary64 ulps per call (its docstring's bound) to the tail's ``t``. Measured
against ``decimal`` at 130 digits on 20,000 inputs spread over [0, 10.15] (the signs
are symmetric): ``erf`` is within 0.82 ulp everywhere, ``erfc`` within 2.94 ulps (of
its own magnitude; 2.2 below 0.84375, 1.7 below 1.25, 2.9 in the tail).
tests/numerics/transcendental/test_erf64.py checks the bounds 1 and 4 ulps on its
samples. Limits: ``exp`` gives +0 below ``e^-104``, so ``erfc(x)`` is +0 from
``x ~ 10.17`` on, where the exact value is below 7e-47 (an absolute error; binary32
results there are +0 in any case). Special values: ``erf(+-0) = +-0``,
``erf(+-inf) = +-1``, ``erfc(+-0) = 1``, ``erfc(+inf) = +0``, ``erfc(-inf) = 2``.

The coefficients are those of fdlibm's ``s_erf.c``, whose notice reads: "Copyright (C)
1993 by Sun Microsystems, Inc. All rights reserved. Developed at SunPro, a Sun
Microsystems, Inc. business. Permission to use, copy, modify, and distribute this
software is freely granted, provided that this notice is preserved."
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tessera.numerics.transcendental.arith64 import Arith, P, V, run_numpy

#: fdlibm's erx: 0.84506291151 rounded to binary32
ERX = 8.45062911510467529297e-01
#: the interval bounds of step 2, and the clamp of step 1
BOUNDS = (0.84375, 1.25, 1 / 0.35)
CLAMP = 28.0

#: numerators N_k, highest coefficient first (k = 0: pp4..pp0, 1: pa6..pa0,
#: 2: ra7..ra0, 3: rb6..rb0), padded with leading zeros to 8
NUMERATORS: tuple[tuple[float, ...], ...] = (
    (0.0, 0.0, 0.0, -2.37630166566501626084e-05, -5.77027029648944159157e-03,
     -2.84817495755985104766e-02, -3.25042107247001499370e-01, 1.28379167095512558561e-01),
    (0.0, -2.16637559486879084300e-03, 3.54783043256182359371e-02,
     -1.10894694282396677476e-01, 3.18346619901161753674e-01, -3.72207876035701323847e-01,
     4.14856118683748331666e-01, -2.36211856075265944077e-03),
    (-9.81432934416914548592e+00, -8.12874355063065934246e+01, -1.84605092906711035994e+02,
     -1.62396669462573470355e+02, -6.23753324503260060396e+01, -1.05586262253232909814e+01,
     -6.93858572707181764372e-01, -9.86494403484714822705e-03),
    (0.0, -4.83519191608651397019e+02, -1.02509513161107724954e+03,
     -6.37566443368389627722e+02, -1.60636384855821916062e+02, -1.77579549177547519889e+01,
     -7.99283237680523006574e-01, -9.86494292470009928597e-03),
)
#: denominators D_k (the polynomial after ``1 + v *``), highest first (qq5..qq1,
#: qa6..qa1, sa8..sa1, sb7..sb1), padded with leading zeros to 8
DENOMINATORS: tuple[tuple[float, ...], ...] = (
    (0.0, 0.0, 0.0, -3.96022827877536812320e-06, 1.32494738004321644526e-04,
     5.08130628187576562776e-03, 6.50222499887672944485e-02, 3.97917223959155352819e-01),
    (0.0, 0.0, 1.19844998467991074170e-02, 1.36370839120290507362e-02,
     1.26171219808761642112e-01, 7.18286544141962662868e-02, 5.40397917702171048937e-01,
     1.06420880400844228286e-01),
    (-6.04244152148580987438e-02, 6.57024977031928170135e+00, 1.08635005541779435134e+02,
     4.29008140027567833386e+02, 6.45387271733267880336e+02, 4.34565877475229228821e+02,
     1.37657754143519042600e+02, 1.96512716674392571292e+01),
    (0.0, -2.24409524465858183362e+01, 4.74528541206955367215e+02,
     2.55305040643316442583e+03, 3.19985821950859553908e+03, 1.53672958608443695994e+03,
     3.25792512996573918826e+02, 3.03380607434824582924e+01),
)


def _choose(ar: Arith[V, P], below: Sequence[P], values: Sequence[V]) -> V:
    """``values[k]`` for the interval ``k`` (``below[i]``: the value lies below bound i)."""
    out = values[-1]
    for p, v in zip(reversed(below), reversed(values[:-1])):
        out = ar.select(p, v, out)
    return out


def _horner(ar: Arith[V, P], coeffs: Sequence[V], v: V) -> V:
    h = coeffs[0]
    for c in coeffs[1:]:
        h = ar.add(ar.mul(h, v), c)
    return h


def _common(ar: Arith[V, P], x: V) -> tuple[list[P], V, V]:
    """Steps 1-5: the interval predicates (``c`` below each bound), the rational ``y``
    and the tail's ``t``."""
    a = ar.abs(x)
    lim = ar.const(CLAMP)
    c = ar.select(ar.less(a, lim), a, lim)
    below = [ar.less(c, ar.const(b)) for b in BOUNDS]
    sq = ar.mul(c, c)
    inv = ar.div(ar.const(1.0), sq)
    v = _choose(ar, below, [sq, ar.sub(c, ar.const(1.0)), inv, inv])
    num = [_choose(ar, below, [ar.const(n[j]) for n in NUMERATORS]) for j in range(8)]
    den = [_choose(ar, below, [ar.const(d[j]) for d in DENOMINATORS]) for j in range(8)]
    y = ar.div(_horner(ar, num, v), ar.add(ar.const(1.0), ar.mul(v, _horner(ar, den, v))))
    s = ar.high_part(c)
    big = ar.exp(ar.sub(ar.const(-0.5625), ar.mul(s, s)))
    small = ar.exp(ar.add(ar.mul(ar.sub(s, c), ar.add(s, c)), y))
    return below, y, ar.div(ar.mul(big, small), c)


def erf_steps(ar: Arith[V, P], x: V) -> V:
    """erf(x) by steps 1-7 of this module's docstring, in ``ar``'s operations."""
    below, y, t = _common(ar, x)
    one = ar.const(1.0)
    e = _choose(ar, below[1:], [ar.add(ar.const(ERX), y), ar.sub(one, t), ar.sub(one, t)])
    signed = ar.select(ar.less(x, ar.const(0.0)), ar.neg(e), e)
    small = ar.add(x, ar.mul(x, y))
    return ar.quiet_nan_of(x, ar.select(below[0], small, signed))


def erfc_steps(ar: Arith[V, P], x: V) -> V:
    """erfc(x) by steps 1-7 of this module's docstring, in ``ar``'s operations."""
    below, y, t = _common(ar, x)
    one, half, zero = ar.const(1.0), ar.const(0.5), ar.const(0.0)
    xy = ar.mul(x, y)
    near = ar.select(ar.less(x, ar.const(0.25)), ar.sub(one, ar.add(x, xy)),
                     ar.sub(half, ar.add(xy, ar.sub(x, half))))
    positive = ar.less(zero, x)
    mid = ar.select(positive, ar.sub(ar.const(1.0 - ERX), y),
                    ar.add(one, ar.add(ar.const(ERX), y)))
    tail = ar.select(positive, t, ar.sub(ar.const(2.0), t))
    return ar.quiet_nan_of(x, _choose(ar, below, [near, mid, tail, tail]))


def erf_f64_specified(x: np.ndarray) -> np.ndarray:
    """erf of a binary64 array by the algorithm of this module's docstring (the same
    bits on every machine and on a GPU); the input NaN quieted for a NaN."""
    return run_numpy(erf_steps, x)


def erfc_f64_specified(x: np.ndarray) -> np.ndarray:
    """erfc = 1 - erf of a binary64 array by the algorithm of this module's docstring,
    accurate also where erf is near 1; the input NaN quieted for a NaN."""
    return run_numpy(erfc_steps, x)


__all__ = ["BOUNDS", "CLAMP", "DENOMINATORS", "ERX", "NUMERATORS", "erf_f64_specified",
           "erf_steps", "erfc_f64_specified", "erfc_steps"]

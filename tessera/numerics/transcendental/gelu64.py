"""Specified binary64 GELUs, tanh form and erf form: the meaning of ``graph.gelu`` on every
real float format, in the graph interpreter, the tile kernels and PTX alike.

The tanh form ``0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``, equals
``x / (1 + e^z)`` with ``z = -2u`` (since ``1 + tanh(u) = 2 / (1 + e^-2u)``).
:func:`gelu_tanh_f64_specified` is *defined* as that quotient evaluated by these IEEE
binary64 operations, each correctly rounded to nearest even and never fused, on ``x``
widened exactly to binary64:

1. ``s = x * x``, ``c = s * x`` (the cube, two ``mul``);
2. ``i = x + A * c`` (one ``mul``, one ``add``), ``A = 0.044715`` rounded to binary64
   (``0x1.6e4e26d4801f7p-5``);
3. ``z = K * i``, ``K = -2 sqrt(2/pi)`` rounded to binary64 (``-0x1.9884533d43651p+0``);
4. ``e = exp_f64_specified(z)`` (:mod:`tessera.numerics.transcendental.exp64`: +0 for
   ``z < -104``, +inf from ``z ~ 709.78`` up);
5. ``d = 1 + e``, ``g = x / d`` (one ``add``, one ``div``);
6. where ``d == 2`` and ``g != 0`` (``|x| < 2^-54``): ``g = g + |g| * 2^-52`` (one
   ``mul``, one ``add``). There the quotient is exactly ``x / 2`` while the GELU is
   ``x / 2 + x^2 / sqrt(2 pi) + ...``, above ``x / 2`` for either sign by less than
   binary64 resolves; for a subnormal binary32 ``x`` with an odd last bit, ``x / 2`` is
   a binary32 rounding midpoint, so the exact value's side of it must be kept: the
   step moves ``g`` up by one or two binary64 ulps, which changes no other rounding.

A result in a narrower format is ``g`` rounded once to it (to nearest even). Every step
is a correctly rounded IEEE operation or the specified exp, so a GPU running
``mul.rn.f64`` / ``add.rn.f64`` / ``div.rn.f64`` and the specified exp's instructions in
this order gets the same bits; the tile kernels emit exactly these steps as f64 tile ops
(:mod:`tessera.ir.transforms.to_tile.ops`).

Error. With ``u = 2^-53``: ``x`` and ``A x^3`` have the same sign, so ``i`` is within
about 4u (plus u for ``A``'s rounding) of ``x + 0.044715 x^3``, and ``z`` within 7u
(relative); ``e`` is within ``2.7u`` of ``e^z`` (the exp's bound) times the effect of
``z``'s error, ``e^(7u|z|)``; adding 1 and dividing add u each. So for normal results

    |g - gelu(x)| <= (4.7 + 7|z|) u |gelu(x)|   (to first order)

where ``gelu`` is the tanh form with the exact constants 0.044715 and sqrt(2/pi). A
binary32 result is nonzero only for ``|z| < 106.4`` (``x > -10.78``), where the bound
is below 2^-43.4 (step 6 adds at most 2u): the binary32 result is the correctly rounded
GELU unless the exact value lies within 2^-43.4 (relative) of a binary32 rounding
boundary (a share of about 2^-19 of the inputs can lie so close). Measured against
``decimal`` at 60 digits: on 3000 points of [-10.8, 11] the largest error is 203 u
(0.43 of the bound there); on the test suite's samples, subnormal inputs included,
every binary32 result is the correctly rounded one. Unlike the formula with a library
``tanh``, the quotient does not cancel: for ``x = -6`` the library formula's
``1 + tanh(u)`` is off by 2^-21.8 (relative), so its binary32 GELU by several ulps.

Special values: ``+-0 -> +-0`` (step 6 leaves zeros alone), ``+inf -> +inf``,
``-inf -> NaN`` (``-inf / +inf``, as the library formula's ``-inf * 0``), NaN -> NaN
(the caller settles it to the default NaN). For ``z`` above 709.78 (``x < -21.16``)
``e`` overflows and the result is -0, where the exact GELU is below ``|x| e^-709.78``
in magnitude; below ``z = -104`` (``x > 10.68``) ``e`` is +0 and the result is ``x``,
within ``e^-104`` of the exact value.

The erf form ``0.5 x (1 + erf(x / sqrt 2))`` (``approximate=False``) cancels in
``1 + erf`` for negative ``x`` (at ``x = -10`` it is 1.5e-23 while erf rounds to -1), so
:func:`gelu_erf_f64_specified` is *defined* through ``erfc`` (``1 + erf(-a) = erfc(a)``,
``1 + erf(a) = 2 - erfc(a)``) by these steps, with the specified ``erfc`` of
:mod:`tessera.numerics.transcendental.erf64`:

1. ``a = |x| * R`` (one ``mul``), ``R = 1/sqrt 2`` rounded to binary64
   (``0x1.6a09e667f3bcdp-1``);
2. ``c = erfc_f64_specified(a)`` (+0 from ``a ~ 10.17`` on);
3. ``g = x > 0 ? x * (1 - 0.5 c) : (0.5 x) * c`` (``0.5 c`` and ``0.5 x`` are exact);
4. where ``c == 1`` and ``g != 0`` (``|x| < 2^-53.7``): ``g = g + |g| * 2^-52``, as
   step 6 of the tanh form and for the same reason (the exact GELU lies above ``x / 2``).

Error. The roundings of ``R`` and of ``a`` (together at most 1.61 u relative, with
``u = 2^-53``) move ``erfc(a)`` by about ``2a^2 + 1 = x^2 + 1`` times as much; erfc adds
at most 2.94 binary64 ulps (5.9 u, its measured bound) and the last product u. So for
normal results

    |g - gelu(x)| <= (9 + 1.7 x^2) u |gelu(x)|

and for ``x > 0``, where ``erfc(a) <= e^(-x^2/2)`` damps that term, below 4 u. A
binary32 result is nonzero only for ``x > -14.357``, where the bound is below 2^-44.5.
Measured against ``decimal`` at 130 digits on 3600 points of [-14.38, 12] (tiny
magnitudes included): at most 0.91 of the bound (217 u at ``x = -11.6``), and 2.6 u
for positive ``x``. Special values: ``+-0 -> +-0``, ``+inf -> +inf``, ``-inf -> NaN``
(``-inf * 0``, as the library formula), NaN -> NaN (the caller settles it). Below
``x ~ -14.383`` ``c`` is +0 and the result -0, where the exact GELU is above -5e-46
(binary32 results are -0 from ``x ~ -14.357`` on in any case).
"""

from __future__ import annotations

import math

import numpy as np

from tessera.numerics.transcendental.erf64 import erfc_f64_specified
from tessera.numerics.transcendental.exp64 import exp_f64_specified

#: the cubic's coefficient, 0.044715 rounded to binary64
CUBIC = 0.044715
#: -2 sqrt(2/pi) rounded to binary64: z = K * (x + A x^3) is -2u
K = -2.0 * math.sqrt(2.0 / math.pi)

#: step 6's factor: |g| * 2^-52 is one or two binary64 ulps of g
NUDGE = 2.0**-52

#: 1/sqrt(2) rounded to binary64: the erf form's a = |x| * R
R = math.sqrt(0.5)

assert CUBIC.hex() == "0x1.6e4e26d4801f7p-5" and K.hex() == "-0x1.9884533d43651p+0"
assert R.hex() == "0x1.6a09e667f3bcdp-1"


def gelu_tanh_f64_specified(x: np.ndarray) -> np.ndarray:
    """The tanh-form GELU of a binary64 array by steps 1-6 of this module's docstring
    (the same bits on every machine and on a GPU); NaN for NaN and -inf inputs."""
    w = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflows and -inf/inf specified
        c = (w * w) * w
        z = K * (w + CUBIC * c)
        d = 1.0 + exp_f64_specified(z)
        g = w / d
        tiny = (d == 2.0) & (g != 0.0)  # step 6: keep the exact value's side of x / 2
        return np.where(tiny, g + np.abs(g) * NUDGE, g)


def gelu_erf_f64_specified(x: np.ndarray) -> np.ndarray:
    """The erf-form GELU of a binary64 array by steps 1-4 of the erf form in this
    module's docstring (the same bits on every machine and on a GPU); NaN for NaN and
    -inf inputs."""
    w = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # -inf * 0 is specified
        c = erfc_f64_specified(np.abs(w) * R)
        g = np.where(w > 0, w * (1.0 - 0.5 * c), (0.5 * w) * c)
        tiny = (c == 1.0) & (g != 0.0)  # step 4: keep the exact value's side of x / 2
        return np.where(tiny, g + np.abs(g) * NUDGE, g)


__all__ = ["CUBIC", "NUDGE", "K", "R", "gelu_erf_f64_specified", "gelu_tanh_f64_specified"]

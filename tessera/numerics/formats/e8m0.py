"""Conversion to ``e8m0``, the exponent-only scale format of the OCP MX formats.

OCP Microscaling Formats (MX) Specification v1.0: E8M0 is 8 exponent bits with bias
127 and nothing else. Encodings 0..254 are the powers of two 2**-127 .. 2**127; 0xFF
is NaN; there is no zero, no sign and no infinity. The specification defines the
encoding, and the shared scale of an MX block as ``2**(floor(log2(amax)) - emax)``
(a power of two rounded *down*), but no general rounding rule for converting a float
to E8M0. PTX has only ``cvt.rz.satfinite.ue8m0x2.f32`` and ``cvt.rp.satfinite...``
(toward zero and toward +inf; there is no ``.rn`` form), and ``ml_dtypes``'s
``float8_e8m0fnu`` rounds to nearest with ties *up* (not to even) and maps 0,
negatives and infinities to NaN.

Tessera's rule (docs/numerics.md, "The e8m0 scale format"):

* ``convert(x, e8m0)`` rounds to nearest, ties to even, over the E8M0 values, as every
  tessera conversion does: ``x`` goes to ``2**k`` or ``2**(k+1)`` (``2**k <= x <
  2**(k+1)``), whichever is nearer; the midpoint ``1.5 * 2**k`` goes to the one whose
  encoding (``k + 127`` or ``k + 128``) is even.
* ``rounding="rz"`` and ``"rp"`` are PTX's two modes (``rz`` is also the MX
  specification's scale rule).
* Saturation, as PTX ``.satfinite``: above ``2**127`` (``+inf`` included) gives
  ``2**127``; below ``2**-127``, and ``+0``/``-0``, gives ``2**-127`` (an all-zero MX
  block then gets the smallest scale and still decodes to zeros).
* NaN gives NaN, and so do negative values and ``-inf``: E8M0 has no sign, so a
  negative value has no encoding (as an invalid IEEE operation gives NaN).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.errors import ArgumentError, DTypeError

BIAS = 127
MAX_CODE = 254  # 2**127; 255 is NaN
NAN_CODE = 255
ROUNDINGS = ("rn", "rz", "rp")


def to_e8m0(x: Any, rounding: str = "rn") -> np.ndarray:
    """Real values to ``float8_e8m0fnu`` storage with one rounding (see module docstring).

    ``rounding`` is ``"rn"`` (nearest, ties to even: what ``convert`` does), ``"rz"``
    (toward zero, PTX ``cvt.rz.satfinite.ue8m0x2.f32``) or ``"rp"`` (toward +inf, PTX
    ``cvt.rp.satfinite.ue8m0x2.f32``).
    """
    if rounding not in ROUNDINGS:
        raise ArgumentError(f"unknown e8m0 rounding {rounding!r}",
                            hint=f"use one of {', '.join(ROUNDINGS)}")
    if np.iscomplexobj(x):  # NumPy would drop the imaginary part with a warning
        raise DTypeError("cannot convert complex values to e8m0",
                         hint="take x.real, x.imag or abs(x) first")
    with np.errstate(invalid="ignore"):  # NaN comparisons below are meant
        v = np.asarray(x, dtype=np.float64)
        positive = v > 0  # False for NaN, zeros, negatives and -inf
        finite = positive & np.isfinite(v)
        # frexp is exact: v = m * 2**e with 0.5 <= m < 1, so 2**(e-1) <= v < 2**e.
        m, e = np.frexp(np.where(finite, v, 1.0))
        k = e.astype(np.int64) - 1
        frac = 2.0 * m  # in [1, 2): exact
        if rounding == "rz":
            up = np.zeros(v.shape, bool)
        elif rounding == "rp":
            up = frac > 1.0
        else:
            # Round to nearest: the midpoint of 2**k and 2**(k+1) is 1.5 * 2**k; at it the
            # even encoding wins. k + 127 is even exactly when k is odd, so a tie rounds
            # up when k is even.
            up = (frac > 1.5) | ((frac == 1.5) & (k % 2 == 0))
        code = np.clip(k + up + BIAS, 0, MAX_CODE)
        code = np.where(finite, code, np.where(positive, MAX_CODE, 0))  # +inf saturates
        invalid = np.isnan(v) | (v < 0)
        code = np.where(invalid, NAN_CODE, code)
    return code.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


__all__ = ["ROUNDINGS", "to_e8m0"]

"""Independent references the cases compare against.

Formats are described here from their written definitions (precision, smallest normal
exponent, largest finite value, which specials exist), not read from Tessera; rounding
is exact rational arithmetic (``fractions.Fraction``); sums and products are float64
or exact. Nothing here calls Tessera's conversion code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``precision`` significand bits (the implicit
    one included), ``emin`` the exponent of the smallest normal, ``emax`` the largest
    exponent and ``max`` the largest finite value; ``inf``/``nan``: whether it encodes
    them; ``saturate``: whether conversion clamps to ``max`` (PTX ``satfinite``)."""

    name: str
    precision: int
    emin: int
    emax: int
    max: float
    inf: bool
    nan: bool
    saturate: bool
    np_type: type

    @property
    def min_subnormal(self) -> Fraction:
        return Fraction(2) ** (self.emin - self.precision + 1)

    def ulp(self, value: Fraction) -> Fraction:
        """The spacing of the format at ``value`` (>= 0)."""
        e = self.emin if value == 0 else max(_exponent(value), self.emin)
        return Fraction(2) ** (e - self.precision + 1)

    def round(self, x: Fraction | float) -> float:
        """Round-to-nearest-even of an exact value, with this format's overflow rule."""
        if isinstance(x, float) and math.isnan(x):
            return math.nan if self.nan else self.max
        if isinstance(x, float) and math.isinf(x):
            return math.copysign(self.max if self.saturate else math.inf, x)
        q = Fraction(x)
        if q == 0:
            return math.copysign(0.0, float(x)) if isinstance(x, float) else 0.0
        mag = abs(q)
        quantum = self.ulp(mag)
        n = mag / quantum
        floor = n.numerator // n.denominator
        rest = n - floor
        if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2 == 1):
            floor += 1
        value = floor * quantum
        if value > Fraction(self.max):
            out = self.max if self.saturate else math.inf
        else:
            out = float(value)
        return math.copysign(out, q)


def _exponent(value: Fraction) -> int:
    e = math.floor(math.log2(value))
    while Fraction(2) ** e > value:
        e -= 1
    while Fraction(2) ** (e + 1) <= value:
        e += 1
    return e


#: the formats of docs/numerics.md, written out from their definitions
FORMATS = {
    "bf16": Format("bf16", 8, -126, 127, (2 - 2**-7) * 2.0**127, True, True, False,
                   ml_dtypes.bfloat16),
    "f16": Format("f16", 11, -14, 15, 65504.0, True, True, False, np.float16),
    "tf32": Format("tf32", 11, -126, 127, (2 - 2**-10) * 2.0**127, True, True, False,
                   np.float32),
    "fp8_e4m3": Format("fp8_e4m3", 4, -6, 8, 448.0, False, True, True,
                       ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": Format("fp8_e5m2", 3, -14, 15, 57344.0, True, True, True,
                       ml_dtypes.float8_e5m2),
    "fp6_e2m3": Format("fp6_e2m3", 4, 0, 2, 7.5, False, False, True, ml_dtypes.float6_e2m3fn),
    "fp6_e3m2": Format("fp6_e3m2", 3, -2, 4, 28.0, False, False, True,
                       ml_dtypes.float6_e3m2fn),
    "fp4_e2m1": Format("fp4_e2m1", 2, 0, 2, 6.0, False, False, True, ml_dtypes.float4_e2m1fn),
}
F32 = Format("f32", 24, -126, 127, float(np.finfo(np.float32).max), True, True, False,
             np.float32)


def same_values(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise equality of values as float64, NaN equal to NaN and the sign of zero
    significant."""
    g = np.asarray(got).astype(np.float64)
    w = np.asarray(want, dtype=np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    return both_nan | ((g == w) & (np.signbit(g) == np.signbit(w)))


def mismatch(x: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    """A short account of the first disagreements, for an assertion message."""
    ok = same_values(got, want)
    bad = np.flatnonzero(~ok.ravel())[:4]
    flat_x, flat_g = np.asarray(x).ravel(), np.asarray(got).astype(np.float64).ravel()
    flat_w = np.asarray(want, dtype=np.float64).ravel()
    items = ", ".join(f"{flat_x[i]!r} -> {flat_g[i]!r} (want {flat_w[i]!r})" for i in bad)
    return f"{int((~ok).sum())} of {ok.size} differ: {items}"


def exact_sum(values: np.ndarray) -> Fraction:
    """The exact sum of float values."""
    return sum((Fraction(float(v)) for v in np.asarray(values, np.float64).ravel()),
               Fraction(0))


def f32_of(value: Fraction) -> np.float32:
    """An exact value rounded once to float32 (RNE)."""
    return np.float32(F32.round(value))


__all__ = ["F32", "FORMATS", "Format", "exact_sum", "f32_of", "mismatch", "same_values"]

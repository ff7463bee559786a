"""Independent rounding references for the numerics tests.

Nothing here uses tessera's conversion code or an ml_dtypes *cast*: a format's values
are decoded from every bit pattern (decoding is exact), and rounding is a nearest-value
search with ties broken towards the even encoding.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Table:
    """All non-negative finite values of a float format, with their encodings."""

    def __init__(self, np_type: object, *, bits: int, code_shift: int = 0,
                 container: object = None) -> None:
        self.np_type = np.dtype(np_type)
        self.sign_code = 1 << (bits - 1)
        self.code_shift = code_shift
        self.container = container
        codes = np.arange(self.sign_code, dtype=np.uint64)
        patterns = (codes << np.uint64(code_shift)).astype(_UINT[self.np_type.itemsize])
        with np.errstate(invalid="ignore"):
            values = patterns.view(self.np_type).astype(np.float64)
        keep = np.isfinite(values)
        self.values, self.codes = values[keep], codes[keep]
        assert np.all(np.diff(self.values) > 0), "positive values must grow with the code"
        self.max = float(self.values[-1])
        top = self.values[-1] - self.values[-2]
        self.next_up = self.max + top  # the value one step past max, unbounded exponent

    def round(self, x: np.ndarray, *, saturate: bool, nan_to_max: bool = False) -> np.ndarray:
        """RNE of float64 values, as float64 values (+-inf for overflow)."""
        x = np.asarray(x, dtype=np.float64)
        mag = np.abs(x)
        vals = np.append(self.values, self.next_up)
        codes = np.append(self.codes, self.codes[-1] + 1)
        hi = np.clip(np.searchsorted(vals, mag, side="left"), 1, len(vals) - 1)
        lo = hi - 1
        v_lo, v_hi = vals[lo], vals[hi]
        mid = (v_lo + v_hi) / 2  # exact in float64 for every format up to f32
        pick_hi = (mag > mid) | ((mag == mid) & (codes[hi] % 2 == 0))
        pick_hi &= mag > v_lo
        out = np.where(pick_hi, v_hi, v_lo)
        out = np.where(mag >= self.next_up, self.next_up, out)
        over = out > self.max
        out = np.where(over, self.max if saturate else np.inf, out)
        out = np.copysign(out, x)
        nan = np.isnan(x)
        return np.where(nan, self.max if nan_to_max else np.nan, out)


TABLES = {
    "bf16": Table(ml_dtypes.bfloat16, bits=16),
    "f16": Table(np.float16, bits=16),
    "fp8_e4m3": Table(ml_dtypes.float8_e4m3fn, bits=8),
    "fp8_e5m2": Table(ml_dtypes.float8_e5m2, bits=8),
    "fp6_e2m3": Table(ml_dtypes.float6_e2m3fn, bits=6),
    "fp6_e3m2": Table(ml_dtypes.float6_e3m2fn, bits=6),
    "fp4_e2m1": Table(ml_dtypes.float4_e2m1fn, bits=4),
    # tf32: float32 patterns whose low 13 bits are zero.
    "tf32": Table(np.float32, bits=19, code_shift=13),
}
SATURATING = {"fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1"}
NAN_TO_MAX = {"fp6_e2m3", "fp6_e3m2", "fp4_e2m1"}


def reference_round(x: np.ndarray, name: str) -> np.ndarray:
    """RNE of float64 values into format ``name`` with the satfinite rules, as float64."""
    return TABLES[name].round(x, saturate=name in SATURATING, nan_to_max=name in NAN_TO_MAX)


def fraction_round(q: Fraction, precision: int, emin: int, max_value: float) -> float:
    """RNE of an exact rational to a binary format (overflow gives inf), by Fractions."""
    if q == 0:
        return 0.0
    mag = abs(q)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()  # within one of log2
    while Fraction(2) ** e > mag:
        e -= 1
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - (precision - 1))
    n = mag / quantum
    floor = n.numerator // n.denominator
    rest = n - floor
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2 == 1):
        floor += 1
    value = floor * quantum
    result = math.inf if value > Fraction(max_value) else float(value)
    return -result if q < 0 else result


def bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: same bit pattern (all NaNs of a format count as equal)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    ua = a.view(_UINT[a.dtype.itemsize])
    ub = b.view(_UINT[b.dtype.itemsize])
    with np.errstate(invalid="ignore"):
        both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return (ua == ub) | both_nan

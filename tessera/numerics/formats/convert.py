"""Conversion of arrays between formats, rounding exactly once.

Rounding is round-to-nearest-even (RNE), done by NumPy and ``ml_dtypes`` casts from
float32, which are exact RNE. ``ml_dtypes`` casts *from float64* are not: they go
through float32 and round twice (a float64 just above an fp8 midpoint can land on the
midpoint in float32 and then tie to even, the wrong way). So float64 values are
first rounded to float32 with *round-to-odd* (truncate, then set the last bit if
anything was dropped); RNE from that float32 to any format with at most 22 mantissa
bits equals RNE of the original float64, because round-to-odd with two or more spare
bits never creates or destroys a midpoint.

Out of range values, following PTX ``cvt ... .satfinite`` for the narrow formats:

* fp8_e4m3, fp8_e5m2, fp6_*, fp4_e2m1: values beyond the largest finite value,
  infinities included, become +-max finite. NaN stays NaN where the format has a NaN
  (fp8); fp6 and fp4 have none, and a NaN becomes **+max finite** (PTX: "NaN results
  are converted to positive MAX_NORM" for formats without a NaN encoding).
* e8m0 (unsigned powers of two, no zero): :mod:`tessera.numerics.formats.e8m0`. Nearest with
  ties to even, saturating at 2**127 and 2**-127 (zeros give 2**-127); negative values
  and NaN give NaN.
* f64, f32, tf32, bf16, f16: IEEE behaviour, overflow rounds to +-inf.
* int8/int32/int64: round half to even, then saturate to the int range; NaN becomes 0
  (like ``cvt.rni.sat``).
* Float to bool and complex to real are errors (DTypeError): say what you mean
  (``x != 0``, ``x.real``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from tessera.errors import DTypeError
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.formats.e8m0 import to_e8m0

_EXACT_INT = 2**53  # integers up to this magnitude are exact in float64


def real_kind(dt: np.dtype) -> str:
    """'bool', 'int', 'float' or 'complex' for any NumPy or ml_dtypes dtype."""
    if dt.kind == "b":
        return "bool"
    if dt.kind in "iu":
        return "int"
    if dt.kind == "f":
        return "float"
    if dt.kind == "c":
        return "complex"
    try:
        ml_dtypes.finfo(dt)
    except (ValueError, TypeError):
        raise DTypeError(f"arrays of dtype {dt} cannot be converted",
                         hint="use a numeric array (float, int, bool or complex)") from None
    return "float"


def round_to_odd_f32(x64: np.ndarray) -> np.ndarray:
    """float64 to float32, truncating and setting the last bit when bits were dropped.

    Values beyond float32's range become +-max float32 (its last bit is 1), which every
    narrower format rounds like the original value.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        y = x64.astype(np.float32)
    back = y.astype(np.float64)
    fix = (back != x64) & ~np.isnan(x64)
    bits = y.view(np.uint32)
    fix &= (bits & 1) == 0
    if fix.any():
        # RNE gave the even neighbour; the odd one is one step away, toward x.
        step = np.where(np.abs(back) > np.abs(x64), -1, 1)[fix]
        bits = bits.copy()
        bits[fix] = (bits[fix].astype(np.int64) + step).astype(np.uint32)
        y = bits.view(np.float32)
    return y


def tf32_from_f32(y: np.ndarray) -> np.ndarray:
    """Round float32 values to 10 mantissa bits (RNE), kept in float32 storage."""
    bits = np.asarray(y, dtype=np.float32).view(np.uint32)  # same itemsize: any layout
    keep = np.uint32(0xFFFFE000)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)
    # Adding 0xFFF + lsb carries into bit 13 exactly when the dropped bits exceed half,
    # or equal half with an odd kept part. A carry out of the mantissa bumps the
    # exponent, which is also right (and gives inf past the largest finite value).
    rounded = (bits + (np.uint32(0xFFF) + lsb)) & keep
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    is_nan = special & ((bits & np.uint32(0x7FFFFF)) != 0)
    quiet = (bits & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
    out = np.where(special, np.where(is_nan, quiet, bits), rounded)
    return out.view(np.float32)


def _float_from_f32(y: np.ndarray, to: DType) -> np.ndarray:
    """RNE from float32 into ``to`` (a float format narrower than f32), saturating."""
    if to.name == "tf32":
        return tf32_from_f32(y)
    if to.name == "e8m0":  # float32 widens to float64 exactly
        return to_e8m0(np.asarray(y, np.float64))
    fmt = to.format
    if fmt.saturating:
        limit = np.float32(fmt.max)
        y = np.clip(y, -limit, limit)  # NaN passes through
    with np.errstate(over="ignore", invalid="ignore"):
        out = y.astype(to.np_dtype)
    if fmt.nan_to_max:
        out = np.where(np.isnan(y), np.array(fmt.max, dtype=to.np_dtype), out)
    return out


def _float_from_f64(x: np.ndarray, to: DType) -> np.ndarray:
    if to.name == "f64":
        return x.astype(np.float64)
    if to.name == "f32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32)  # a hardware RNE cast: one rounding
    if to.name == "e8m0":  # rounded from float64 directly: no float32 range to leave
        return to_e8m0(x)
    return _float_from_f32(round_to_odd_f32(x), to)


def _int_from_float(x: np.ndarray, to: DType) -> np.ndarray:
    info = np.iinfo(to.np_dtype)
    r = np.rint(np.where(np.isnan(x), 0.0, x))  # rint rounds half to even
    too_big = r >= float(info.max)  # float(2**63 - 1) rounds up to 2**63
    r = np.clip(r, float(info.min), float(info.max))
    out = np.where(too_big, 0.0, r).astype(to.np_dtype)
    out[too_big] = info.max
    return out


def real_f64(x: Any, to: Any) -> np.ndarray:
    """``x`` as float64 values on its way to the real format ``to``.

    Complex values are a DTypeError, whatever their imaginary part: NumPy would warn
    (ComplexWarning) and drop it; tessera refuses, like ``convert``."""
    arr = np.asarray(x)
    if arr.dtype.kind == "c":
        raise _complex_to_real(to)
    return arr.astype(np.float64, copy=False)


def _complex_to_real(to: Any) -> DTypeError:
    return DTypeError(f"cannot convert complex values to {to}",
                      hint="take x.real, x.imag or abs(x) first")


def cast_exact(x64: np.ndarray, to: DType) -> np.ndarray:
    """Float64 values to a real format with one RNE rounding and the saturation rules."""
    if to.kind == "float":
        return _float_from_f64(real_f64(x64, to), to)
    if to.kind == "int":
        return _int_from_float(real_f64(x64, to), to)
    raise DTypeError(f"cannot round float values to {to}",
                     hint="compare explicitly (x != 0) to get a bool")


def _int_to_real(x: np.ndarray, to: DType) -> np.ndarray:
    if to.kind == "int":
        info = np.iinfo(to.np_dtype)
        if x.dtype == np.uint64:
            x = np.minimum(x, np.uint64(2**63 - 1)).astype(np.int64)
        return np.clip(x.astype(np.int64), info.min, info.max).astype(to.np_dtype)
    wide = np.abs(x.astype(np.float64)) >= _EXACT_INT
    out = cast_exact(np.where(wide, 0, x).astype(np.float64), to)
    if wide.any():  # int64 beyond 2**53: round the exact integer once
        from tessera.numerics.reductions.rounding import round_fraction

        for i in np.flatnonzero(wide):
            out.flat[i] = round_fraction(Fraction(int(x.flat[i])), to)
    return out


def _real(x: np.ndarray, kind: str, to: DType, sr: tuple[int, int] | None) -> np.ndarray:
    if kind == "bool":
        return x.astype(to.np_dtype) if to.kind != "float" else cast_exact(x.astype(float), to)
    if sr is not None:
        from tessera.numerics.formats.stochastic import stochastic_round_array

        return stochastic_round_array(to_f64(x), to, seed=sr[0], counter_offset=sr[1])
    if kind == "int":
        return _int_to_real(x, to)
    if to.kind == "int":
        return _int_from_float(to_f64(x), to)
    if x.dtype.itemsize <= 4 and to.name not in ("f64", "f32"):
        # float32 and every narrower format widen to float32 exactly.
        return _float_from_f32(x.astype(np.float32), to)
    return _float_from_f64(x.astype(np.float64), to)


def convert(x: Any, to: Any, *, counter_offset: int = 0) -> np.ndarray:
    """Convert an array to the storage format of element ``to``, rounding once.

    ``to`` is anything ``element()`` accepts (a DType, a Policy, a policy class, a
    name). Rounding is RNE, or stochastic when the policy has ``@stochastic_round``
    (random bits from its seed and ``counter_offset`` + element index; the imaginary
    parts of complex arrays use counters offset by ``x.size``). See the module
    docstring for saturation, NaN and error rules.
    """
    with np.errstate(invalid="ignore", over="ignore"):  # signalling NaNs, overflow to inf
        return _convert(np.asarray(x), to, counter_offset)


def _convert(arr: np.ndarray, to: Any, counter_offset: int) -> np.ndarray:
    from tessera.numerics.policy.modifiers import Policy, storage_of

    target = storage_of(to)
    sr = (to.seed, counter_offset) if isinstance(to, Policy) and to.stochastic_round else None
    kind = real_kind(arr.dtype)
    if target.kind == "bool":
        if kind != "bool":
            raise DTypeError(f"cannot convert {kind} values to bool",
                             hint="compare explicitly, e.g. x != 0")
        return arr.astype(np.bool_)
    if target.kind == "complex":
        part = target.component
        re_sr = sr
        im_sr = None if sr is None else (sr[0], sr[1] + arr.size)
        if kind == "complex":
            re, im = arr.real, arr.imag
            real_kind_ = "float"
        else:
            re, im, real_kind_ = arr, np.zeros(arr.shape), kind
        out = np.empty(arr.shape, dtype=target.np_dtype)
        out.real = _real(re, real_kind_, part, re_sr)
        out.imag = _real(np.asarray(im), "float", part, im_sr)
        return out
    if kind == "complex":
        raise _complex_to_real(target)
    return _real(arr, kind, target, sr)


def to_f64(x: Any) -> np.ndarray:
    """Widen a storage array to float64 exactly (complex to complex128).

    int64 values beyond 2**53 have no exact float64 and raise DTypeError.
    """
    arr = np.asarray(x)
    kind = real_kind(arr.dtype)
    if kind == "complex":
        return arr.astype(np.complex128)
    if kind == "int" and arr.dtype.itemsize == 8 and arr.size:
        if np.any(np.abs(arr.astype(np.float64)) >= _EXACT_INT):
            raise DTypeError("int64 values beyond 2**53 are not exact in float64",
                             hint="keep such integers in int64 arithmetic")
    with np.errstate(invalid="ignore"):  # widening a signalling NaN is not an error
        return arr.astype(np.float64)

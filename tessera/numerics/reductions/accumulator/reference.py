"""The reference exact (Kulisch) accumulator: sums of products held exactly as integers.

A Kulisch accumulator (Kulisch and Miranker, "The arithmetic of the digital computer",
SIAM Review 28, 1986; in ExBLAS, Collange, Defour, Graillat and Iakymchuk, "Numerical
reproducibility for the parallel reduction on multi- and many-core architectures",
Parallel Computing 49, 2015) is a fixed-point register wide enough to hold any sum of
products of two floating-point formats without rounding. Here it is an integer count
of the quantum ``2**-SCALE``: every value of a float format of at most 32 bits (f32,
tf32, bf16, f16, the fp8/fp6/fp4 formats) is a multiple of f32's smallest subnormal
``2**-149``, so each product of two such values is a whole number of quanta
``2**-298``, and so is every sum of them, in any order. The integers are Python ints
(any size) in NumPy object arrays, so an accumulator tile has its ordinary shape and
moves through selections and copies like any tile.

Non-finite terms follow the order-independent rule of
:mod:`tessera.numerics.reductions.exact`: NaN if a NaN, an
``inf * 0`` or infinities of both signs occur, else the infinity. Such an element holds
that Python float instead of an int. :func:`round_exact` rounds once, to nearest even
(``round_fraction``); an exact zero rounds to +0 and a NaN is the default quiet NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.numerics.formats.convert import convert
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.rounding import target

#: an accumulator element ``n`` (a Python int) stands for ``n * 2**-SCALE``
SCALE = 298
#: the scale of one operand: products of two operands are then in quanta of 2**-SCALE
OPERAND_SCALE = SCALE // 2

EXACT = np.dtype(object)


def is_exact(x: Any) -> bool:
    """Whether ``x`` is an exact accumulator array (a NumPy object array)."""
    return getattr(x, "dtype", None) == EXACT


def _ints(x: np.ndarray, scale: int) -> np.ndarray:
    """``x * 2**scale`` as Python ints for finite float ``x`` (non-finite elements give 0);
    every finite element must be a multiple of ``2**-scale``."""
    shape = np.shape(x)
    w = np.asarray(x).astype(np.float64).reshape(-1)  # (0-d arrays would become scalars)
    finite = np.isfinite(w)
    frac, expo = np.frexp(np.where(finite, w, 0.0))
    mant = (frac * 2.0**53).astype(np.int64).astype(object)
    shift = expo.astype(np.int64) - 53 + scale
    up = np.left_shift(mant, np.maximum(shift, 0).astype(object))
    out = np.right_shift(up, np.maximum(-shift, 0).astype(object))
    lost = shift < 0
    if lost.any() and (np.left_shift(out[lost], (-shift[lost]).astype(object))
                       != mant[lost]).any():
        raise ValueError(f"a value is not a multiple of 2**-{scale}: it has no exact "
                         "accumulator form")
    return out.reshape(shape)


def to_exact(x: Any) -> np.ndarray:
    """The exact accumulator of the values ``x``: float arrays of formats up to f32 (or
    float64 values that are multiples of ``2**-SCALE``), or an accumulator whose
    elements a selection may have mixed with floats."""
    arr = np.asarray(x)
    if arr.dtype == EXACT:
        if all(type(v) is int for v in arr.flat):
            return arr
        # (np.asarray: on a 0-d array the ufunc returns a bare Python scalar)
        return np.asarray(np.frompyfunc(_element, 1, 1)(arr), dtype=EXACT)
    out = _ints(arr, SCALE)
    special = ~np.isfinite(arr.astype(np.float64))
    if special.any():
        out[special] = arr.astype(np.float64)[special].tolist()
    return out


def _element(v: Any) -> Any:
    if type(v) is int:
        return v
    f = float(v)
    if not math.isfinite(f):
        return f
    return int(_ints(np.array(f), SCALE)[()])


def _add(x: Any, y: Any) -> Any:
    if type(x) is int and type(y) is int:
        return x + y
    return (x if type(x) is float else 0.0) + (y if type(y) is float else 0.0)


add_exact = np.frompyfunc(_add, 2, 1)
add_exact.__doc__ = "The exact sum of two accumulators (elementwise, NumPy broadcasting)."


def exact_products(a: Any, b: Any) -> np.ndarray:
    """The exact ``a @ b`` over the last two axes (leading axes broadcast) of float
    arrays of formats up to f32, as an accumulator.

    Where the operands' exponent range proves the float64 product exact, it is that
    product. Otherwise the operands are cut into slices (:func:`_slices`, Ozaki's
    error-free splitting) whose products are exact in float64, and those products are
    summed as integers; an integer matrix product is the last resort (more slice pairs
    than K)."""
    wa, wb = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    with np.errstate(all="ignore"):
        approx = np.matmul(wa, wb)  # decides the non-finite class, whatever the order
    fa, fb = (np.where(np.isfinite(w), w, 0.0) for w in (wa, wb))
    k = wa.shape[-1]
    if _exact_in_f64(fa, fb):
        out = _ints(np.matmul(fa, fb), SCALE)
    else:
        beta = _slice_bits(k)
        sa, sb = _slices(fa, -1, beta), _slices(fb, -2, beta)
        if len(sa) * len(sb) <= k:
            out = None
            for pa in sa:
                for pb in sb:
                    part = _ints(np.matmul(pa, pb), SCALE)  # exact: see _slice_bits
                    out = part if out is None else out + part
        else:
            out = np.matmul(_ints(fa, OPERAND_SCALE), _ints(fb, OPERAND_SCALE))
    special = ~np.isfinite(approx)
    if special.any():
        out = np.array(out, dtype=EXACT)
        out[special] = approx[special].tolist()
    return np.asarray(out, dtype=EXACT)


def _slice_bits(k: int) -> int:
    """The bits per slice that make every product of slices exact in float64: slice
    entries are integers of magnitude at most ``2**bits + 1`` times one power of two per
    row (of ``a``) or column (of ``b``), so each K sum of products is an integer below
    ``k * (2**bits + 1)**2 <= 2**53`` times a power of two, in any order."""
    bits = 26
    while bits > 1 and k * (2**bits + 1) ** 2 > 2**53:
        bits -= 1
    return bits


def _slices(w: np.ndarray, axis: int, bits: int) -> list[np.ndarray]:
    """Finite float64 ``w`` cut into arrays that sum to it exactly, each a multiple of one
    power of two per line along ``axis`` with integer multipliers of at most
    ``2**bits`` (Rump, Ogita and Oishi's extraction, ``q = fl(r + sigma) - sigma``;
    Ozaki, Ogita, Oishi and Rump, "Error-free transformations of matrix multiplication
    by using fast routines of matrix multiplication", Numer. Algorithms 59, 2012)."""
    out: list[np.ndarray] = []
    rest = w.copy()
    while rest.any():
        top = np.max(np.abs(rest), axis=axis, keepdims=True)
        _, expo = np.frexp(top)  # top < 2**expo
        sigma = np.where(top > 0, np.ldexp(1.0, expo + 53 - bits), 0.0)
        high = (rest + sigma) - sigma  # a multiple of 2**(expo - bits), exactly
        rest = rest - high  # exact
        out.append(high)
        if len(out) > 64:  # (far beyond any float format of at most 32 bits)
            raise ValueError("the slices of an exact product did not converge")
    return out


def _exact_in_f64(wa: np.ndarray, wb: np.ndarray) -> bool:
    """Whether the float64 product is exact in any summation order: every product is a
    multiple of ``2**(qa + qb)`` (the operands' smallest nonzero magnitudes, at 24
    significant bits) and the sums of |products| stay below ``2**(53 + qa + qb)``."""
    if not (np.isfinite(wa).all() and np.isfinite(wb).all()):
        return False
    if wa.size == 0 or wb.size == 0:
        return True  # no products (K = 0 sums nothing: an exact zero)
    qs = []
    for w in (wa, wb):
        mag = np.abs(w[w != 0])
        if mag.size == 0:
            return True  # every product is zero
        qs.append(math.frexp(float(mag.min()))[1] - 24)
    with np.errstate(all="ignore"):
        total = np.matmul(np.abs(wa), np.abs(wb))
    # the float64 sums of |products| are within a factor 1 + K * 2**-52 of exact
    slack = 1 + wa.shape[-1] * 2.0**-50
    return bool((total * slack < math.ldexp(1.0, 53 + qs[0] + qs[1])).all())


def _odd_f64(v: Any) -> float:
    """The exact value ``v * 2**-SCALE`` (a Python int) rounded to float64 *to odd*: the
    nearest float64 when it is exact, else whichever of the two float64 neighbours has
    an odd last bit. (Python's ``float(int)`` rounds to nearest even; the sign of the
    remainder says which neighbour is the other one.)"""
    near = float(v)
    rest = v - int(near)
    if rest and not int(np.float64(near).view(np.int64)) & 1:
        near = float(np.nextafter(near, math.inf if rest > 0 else -math.inf))
    return math.ldexp(near, -SCALE)  # a power of two: exact, no float64 underflow here


def round_exact(x: Any, to: Any) -> np.ndarray:
    """The accumulator ``x`` rounded once, to nearest even, to the format ``to``.

    The exact value is rounded to float64 to odd, then to ``to`` to nearest even: for
    formats of at most 51 significand bits the two roundings are the one correct
    rounding (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
    algorithms using rounding to odd", IEEE Trans. Computers 57, 2008). A float64 target
    is Python's correctly rounded ``float``."""
    fmt: DType = target(to)
    arr = np.asarray(x)
    values = arr.reshape(-1).tolist()
    if fmt.name == "f64":
        wide = [math.ldexp(float(v), -SCALE) if type(v) is int else float(v) for v in values]
    else:
        wide = [_odd_f64(v) if type(v) is int else float(v) for v in values]
    flat = np.array(wide, dtype=np.float64)
    flat[flat != flat] = np.nan  # the default NaN
    return np.asarray(convert(flat, fmt)).reshape(arr.shape)


__all__ = ["EXACT", "OPERAND_SCALE", "SCALE", "add_exact", "exact_products", "is_exact",
           "round_exact", "to_exact"]

"""The operands of a correctly rounded product: widened, measured and kept in place.

Every level of :mod:`tessera.numerics.reductions.matmul` reads the operands through
these: exact float64 copies (:func:`widen`), row and column 2-norms that bound
``|A||B|`` (:func:`two_norms`), the power of two dividing every entry of a line
(:func:`line_quanta`), the prepared right operand (:class:`Columns`) and the parameters
of one product (:class:`ProductPlan`). Work arrays are kept per thread
(:func:`scratch`).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from tessera.numerics.formats.convert import real_kind, to_f64
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.rounding import TINY

# Bit layouts (unsigned view, stored mantissa bits, exponent bias) of the IEEE-style
# storage types whose row and column statistics are read from their bits directly.
_LAYOUTS = {
    np.dtype(np.float16): (np.uint16, 10, 15),
    np.dtype(ml_dtypes.bfloat16): (np.uint16, 7, 127),
    np.dtype(np.float32): (np.uint32, 23, 127),
    np.dtype(np.float64): (np.uint64, 52, 1023),
}
_TABLES: dict[np.dtype, np.ndarray] = {}  # float64 value of every byte, per 8-bit format
_SCRATCH = threading.local()  # per thread: work arrays kept between calls
_SCRATCH_BYTES = 1 << 25  # at most this much kept per thread (32 MiB)


def scratch(name: str, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """A work array (contents undefined) that the calls of one thread share by ``name``.

    Large temporaries come fresh from the OS each time, and fresh memory is slow to
    first touch (0.3-1 GiB/s measured on the 2-core development machine): keeping the
    work arrays of a product between calls saved up to 10% of a 1024^3 product there.
    What does not fit in the per-thread budget is allocated afresh. A name is used by
    one array at a time.
    """
    dt = np.dtype(dtype)
    need = int(np.prod(shape)) * dt.itemsize
    pool: dict[str, np.ndarray] = _SCRATCH.__dict__.setdefault("arrays", {})
    buf = pool.get(name)
    if buf is None or buf.size < need:
        kept = sum(b.size for key, b in pool.items() if key != name)
        if kept + need > _SCRATCH_BYTES:
            return np.empty(shape, dtype=dt)
        buf = pool[name] = np.empty(max(need, 64), dtype=np.uint8)
    return buf[:need].view(dt).reshape(shape)


def precision(dt: np.dtype) -> int:
    """Significand bits needed to hold every value of arrays of dtype ``dt``."""
    kind = real_kind(dt)
    if kind == "bool":
        return 1
    if kind == "int":
        return 8 * dt.itemsize
    if kind == "complex":
        return precision(np.dtype(f"f{dt.itemsize // 2}"))
    return int(ml_dtypes.finfo(dt).nmant) + 1


def two_norms(x: np.ndarray, axis: int, scaled: bool) -> np.ndarray:
    """2-norms along ``axis``, never below the true value beyond the slack in gamma().

    ``scaled`` divides by a power of two near the largest magnitude first, so that
    float64 inputs cannot overflow or underflow the squares; each underflowed square
    loses less than 2**-1074, covered by the added ``2 * n * TINY``.
    """
    if not scaled:
        return np.sqrt(np.einsum("...k,...k->...", np.moveaxis(x, axis, -1),
                                 np.moveaxis(x, axis, -1)))
    peak = np.max(np.abs(x), axis=axis, keepdims=True)
    _, expo = np.frexp(np.where(np.isfinite(peak) & (peak > 0), peak, 1.0))
    scale = np.ldexp(1.0, expo)
    y = x / scale
    n = x.shape[axis]
    sq = np.sum(y * y, axis=axis) + 2 * n * TINY
    return np.sqrt(sq) * np.squeeze(np.where(np.isfinite(peak), scale, np.inf), axis=axis)


def widen(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``x`` as float64, exactly (into ``out`` when given; ``x`` itself if float64).

    8-bit float formats go through a 256-entry table: the same values as their casts,
    several times faster.
    """
    dt = x.dtype
    if dt.itemsize == 1 and real_kind(dt) == "float":
        table = _TABLES.get(dt)
        if table is None:
            with np.errstate(invalid="ignore"):
                table = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)
            _TABLES[dt] = table
        return np.take(table, x.view(np.uint8), out=out, mode="clip")
    if out is None:
        return x if dt == np.float64 else to_f64(x)
    if dt.kind == "f" or real_kind(dt) == "float":
        with np.errstate(invalid="ignore"):  # widening a signalling NaN is not an error
            np.copyto(out, x, casting="unsafe")  # float to float64 is exact
    else:
        out[...] = to_f64(x)  # ints: to_f64 refuses those beyond 2**53
    return out


def line_quanta(x: np.ndarray, axis: int, wide: np.ndarray, prec: int) -> np.ndarray:
    """Per line of ``x`` along ``axis``: q with every entry a multiple of 2**q.

    ``x`` holds values of at most ``prec`` significant bits; ``wide`` is ``x`` as
    float64, used where ``x``'s own bits have no IEEE layout here. A value with
    2**e <= |v| < 2**(e+1) is a multiple of 2**(e - prec + 1); a subnormal of the
    layout a multiple of its smallest subnormal. The smallest nonzero magnitude of a
    line gives the smallest such power. All-zero lines get q = 0.
    """
    layout = _LAYOUTS.get(x.dtype)
    if layout is None:
        x, layout = wide, _LAYOUTS[np.dtype(np.float64)]
    utype, mant, bias = layout
    one = utype(1)
    mag = x.view(utype) & utype((1 << (8 * np.dtype(utype).itemsize - 1)) - 1)
    mag -= one  # zeros wrap around to the top: the minimum skips them
    low = mag.min(axis=axis)
    zero = low == np.iinfo(utype).max
    expo = ((low + one) >> utype(mant)).astype(np.int64)
    q = np.where(expo == 0, 1 - bias - mant, expo - bias - (prec - 1))
    return np.where(zero, 0, q)


class Columns(NamedTuple):
    """The right operand of one 2-D product, prepared once for all row panels."""

    b: np.ndarray  # (K, N) as given
    b64: np.ndarray  # (K, N) float64
    norms: np.ndarray  # (N,) column 2-norms
    finite: bool  # all values finite
    beta: np.ndarray | None  # ||B_j|| / 2**qB_j, when the exactness test is tried
    by_beta: np.ndarray | None  # column indices, largest beta first
    beta_up: np.ndarray | None  # beta in ascending order


def prepare_columns(b2: np.ndarray, products_exact: bool, prove: bool, prec: int) -> Columns:
    """The right operand ``b2`` (K, N) of ``prec``-bit values, prepared: its float64
    copy, column norms and (when ``prove`` asks for the exactness test) the betas."""
    b64 = b2 if b2.dtype == np.float64 else widen(b2, scratch("b", b2.shape))
    with np.errstate(all="ignore"):
        norms = np.sqrt(np.einsum("kj,kj->j", b64, b64)) if products_exact else \
            two_norms(b64, 0, scaled=True)
    finite = bool(np.isfinite(norms).all())
    beta = by_beta = beta_up = None
    if prove and finite:
        beta = np.ldexp(norms, -line_quanta(b2, 0, b64, prec))
        by_beta = np.argsort(beta, kind="stable")[::-1]
        beta_up = beta[by_beta[::-1]]
    return Columns(b2, b64, norms, finite, beta, by_beta, beta_up)


class ProductPlan(NamedTuple):
    """What every panel of one product needs to know."""

    to: DType
    products_exact: bool
    prove: bool  # try the exactness test
    prec_a: int
    prec_b: int
    g: float  # gamma_K + 4u: the interval bound is g * ||A_i|| * ||B_j||
    limit: float  # alpha_i * beta_j below this proves the float64 product exact
    tiny: float  # underflow allowance of inexact products


def transposed(x: np.ndarray) -> np.ndarray:
    """``x.T`` as a C-contiguous array, copied in row blocks (a plain transposing copy
    walks memory with a large stride and is 5x slower)."""
    k, n = x.shape
    out = scratch("b_transposed", (n, k), x.dtype)
    for first in range(0, k, 64):
        # Read whole rows of x, write a column block of the result: the fast direction.
        out[:, first:first + 64] = x[first:first + 64].T
    return out

"""One ``mma``/``wgmma`` step by a float64 matrix product, equal bit for bit to the
golden convention of :func:`tessera.arch.mma.mma`.

The convention sums the K exact products of an output element in float64 in
ascending k, each addition rounded, then adds the accumulator once. When no partial
sum of those products can round, every summation order gives the same, exact sum, so
one ``np.matmul`` (any blocking, with or without fused multiply-adds, but never a
Strassen-like scheme, which no BLAS uses for dgemm) computes the same bits.

That holds when the products' magnitudes and their common quantum are close enough:
each nonzero input element ``x`` with ``frexp`` exponent ``e`` is a multiple of
``2**(e - p)`` for a format of ``p`` significand bits (subnormals included), so every
partial sum of row ``i`` of A times column ``j`` of B is a multiple of
``Q = 2**(min_e(A_i) - pa + min_e(B_j) - pb)`` (the exponents of the smallest nonzero
elements) no larger in magnitude than ``sum_k |A_ik| |B_kj|``, and float64 holds every
multiple of ``Q`` up to ``2**53 * Q`` exactly. Steps where some element fails this
bound, or where an operand holds an infinity or a NaN, take the ascending loop itself
(all of the step: NumPy's loops may give a NaN another sign or payload when the same
operations run on other array shapes).

One more case: a zero sum's sign. Summed in order, exact products give ``-0`` only if
all are ``-0``; BLAS may start from ``+0``. The sign matters only where the
accumulator is ``-0`` too (``C + 0`` is ``C`` otherwise); such a step takes the loop
as well.
"""

from __future__ import annotations

import numpy as np

from tessera.arch.mma import FORMATS, _format, decode_elements
from tessera.arch.mma import mma as golden

#: significand bits (with the implicit bit) of each tensor-core input format
SIGNIFICAND = {"bf16": 8, "f16": 11, "tf32": 11, "e4m3": 4, "e5m2": 3, "s8": 8, "u8": 8}


def _low_exponent(mag: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    """``frexp`` exponent of the smallest nonzero magnitude along ``axis`` (that of 1.0
    for an all-zero vector, whose products are zeros whatever bound they get; 0 for
    one holding a NaN, whose sums are NaN whatever bound they get)."""
    low = np.where(mag == 0, np.inf, mag).min(axis=axis)
    with np.errstate(invalid="ignore"):  # frexp(NaN) warns, and gives 0
        return np.frexp(np.where(np.isinf(low), 1.0, low))[1]


class Operand:
    """One operand of a step: its elements (bit patterns or the format's type), their
    float64 values, and per matrix of the batch the largest magnitude (``top``) and the
    ``frexp`` exponent of the smallest nonzero one (``low``). An operand used by
    several steps (a fragment held in registers) is prepared once."""

    __slots__ = ("elements", "fmt", "low", "top", "values")

    def __init__(self, elements: np.ndarray, fmt: str) -> None:
        self.elements = elements
        self.fmt = _format(fmt)
        # BLAS needs contiguous operands (a strided matmul takes NumPy's slow loop)
        self.values = np.ascontiguousarray(decode_elements(elements, self.fmt))
        if elements.dtype == np.uint16 and self.fmt in ("bf16", "f16"):
            self.top, self.low = _summary_bits(elements, self.fmt)
            return
        mag = np.abs(self.values)
        self.top = mag.max(axis=(-2, -1))
        self.low = _low_exponent(mag, (-2, -1))


def _summary_bits(bits: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """:attr:`Operand.top` and :attr:`Operand.low` of 16-bit bit patterns from the
    patterns: without the sign bit they order as the magnitudes do, so the largest and
    the smallest nonzero magnitude are one integer maximum and minimum each, in a
    quarter of the memory of float64 values. With an infinity or a NaN the results may
    differ from the float path's, but ``top`` is then an infinity or a NaN, and
    :func:`_bounded` fails whatever ``low`` is, as on the float path."""
    mag = bits & np.uint16(0x7FFF)
    top = mag.max(axis=(-2, -1))
    # the smallest nonzero pattern as one minimum over ``mag - 1``: 0 wraps to 0xFFFF,
    # above every magnitude pattern (at most 0x7FFF), with no masked copy to make
    np.subtract(mag, np.uint16(1), out=mag)
    low = mag.min(axis=(-2, -1))
    low = np.where(low == 0xFFFF, low, low + np.uint16(1))
    np_type = FORMATS[fmt][0]
    top_value = top.view(np_type).astype(np.float64)
    low_value = np.where(low == 0xFFFF, np.uint16(0), low).view(np_type).astype(np.float64)
    # no nonzero element, or only infinities: frexp of 1.0, as _low_exponent takes
    low_value = np.where((low == 0xFFFF) | np.isinf(low_value), 1.0, low_value)
    return top_value, np.frexp(low_value)[1]


def _bounded(a: Operand, b: Operand, k: int) -> np.ndarray:
    """Per matrix of the batch, whether no partial sum of any of its output elements
    can round: every partial sum is a multiple of ``Q = 2**(low_e(A) - pa + low_e(B) -
    pb)`` and at most the sum of the product magnitudes, so it is exact when that sum
    is at most ``2**53 * Q``. Tried per matrix first (``K * max|A| * max|B|``, exact in
    float64), then per element for the matrices that fail it (``|A| @ |B|``, allowed a
    relative error of ``2**-40``); either bound proves the matrix exact. A NaN or an
    infinity fails every comparison."""
    pa, pb = SIGNIFICAND[a.fmt], SIGNIFICAND[b.fmt]
    lead = np.broadcast_shapes(a.values.shape[:-2], b.values.shape[:-2])
    q = a.low - pa + b.low - pb
    ok = np.broadcast_to(k * a.top * b.top <= np.ldexp(1.0, 53 + q), lead)
    if ok.all():
        return ok
    va, vb = a.values, b.values
    some = None  # the matrices to bound per element: those that failed (one batch axis)
    if len(lead) == 1 and va.shape[:-2] == lead == vb.shape[:-2]:
        some = np.flatnonzero(~ok)
        va, vb = va[some], vb[some]
    mag_a, mag_b = np.abs(va), np.abs(vb)
    q_rows = _low_exponent(mag_a, -1) - pa  # (..., M)
    q_cols = _low_exponent(mag_b, -2) - pb  # (..., N)
    room = np.ldexp(1.0 - 2.0**-40, 53 + q_rows[..., :, None] + q_cols[..., None, :])
    each = (np.matmul(mag_a, mag_b) <= room).all(axis=(-2, -1))
    if some is None:
        return ok | each
    ok = ok.copy()
    ok[some] = each
    return ok


def mma(a: np.ndarray, b: np.ndarray, c: np.ndarray, fmt: str,
        fmt_b: str | None = None, c_unsigned_zeros: bool = False,
        scratch: dict[tuple[int, ...], np.ndarray] | None = None) -> np.ndarray:
    """``D = C + A @ B`` exactly as :func:`tessera.arch.mma.mma` computes it: A (..., M, K),
    B (..., K, N), C (..., M, N) broadcastable; returns float64 D. ``c_unsigned_zeros``:
    the caller knows that C holds no ``-0`` (a D made from such a C holds none either:
    a sum is ``-0`` only when both terms are), which spares a pass over C; ``scratch``
    as in :func:`mma_operands`."""
    return mma_operands(Operand(a, fmt), Operand(b, fmt_b or fmt), c, c_unsigned_zeros,
                        scratch)


def mma_operands(a: Operand, b: Operand, c: np.ndarray, c_unsigned_zeros: bool = False,
                 scratch: dict[tuple[int, ...], np.ndarray] | None = None) -> np.ndarray:
    """:func:`mma` of prepared operands. With ``scratch`` (arrays kept by shape) the
    caller hands over ``c`` itself, a float64 array it no longer reads: where every
    matrix is exact, D is added into it and the product made in a kept array, so a
    chain of steps takes no new memory (the first touch of new pages, and their
    traffic, cost about as much as the product itself)."""
    k = FORMATS[a.fmt][2]
    av, bv = a.values, b.values
    if FORMATS[b.fmt][2] != k or av.shape[-1] != k or bv.shape[-2] != k:
        return golden(a.elements, b.elements, c, a.fmt, b.fmt)
    exact = _bounded(a, b, k)
    cw = np.asarray(c, np.float64)
    if not exact.all() and not _by_matrix(a, b, cw):
        return golden(a.elements, b.elements, c, a.fmt, b.fmt)
    shape = np.broadcast_shapes(av.shape[:-2], bv.shape[:-2]) + av.shape[-2:-1] + bv.shape[-1:]
    if scratch is not None and cw is c and cw.shape == shape and cw.flags.c_contiguous and \
            exact.all():
        kept = scratch.get(shape)
        if kept is None:
            kept = scratch[shape] = np.empty(shape, np.float64)
        # every partial sum is exact: any order, in any memory, gives the same bits
        acc = np.matmul(av, bv, out=kept)
        if not c_unsigned_zeros and _zero_sign_matters(cw, acc):
            return golden(a.elements, b.elements, c, a.fmt, b.fmt)
        return np.add(cw, acc, out=cw)
    acc = np.matmul(av, bv)
    if not c_unsigned_zeros and _zero_sign_matters(cw, acc):
        return golden(a.elements, b.elements, c, a.fmt, b.fmt)
    out = np.add(cw, acc, out=acc) if acc.shape == np.broadcast_shapes(acc.shape, cw.shape) \
        else cw + acc
    if not exact.all():  # the loop for the matrices no bound proves exact
        loop = np.flatnonzero(~exact)
        out[loop] = golden(a.elements[loop], b.elements[loop], cw[loop], a.fmt, b.fmt)
    return out


def _zero_sign_matters(c: np.ndarray, acc: np.ndarray) -> bool:
    """Whether a ``-0`` of C meets a zero sum of products (whose sign the summation
    order decides: the loop must give it)."""
    negative_zero = c.view(np.int64) == np.int64(-1 << 63)  # -0.0's bit pattern
    return bool(negative_zero.any() and (negative_zero & (acc == 0)).any())


def _by_matrix(a: Operand, b: Operand, c: np.ndarray) -> bool:
    """Whether a step may take the loop for some matrices of its batch only: one batch
    axis that A, B and C share, and finite operands (the loop's NaN signs and payloads
    may depend on the shapes it runs on; finite products and sums do not)."""
    shape = a.values.shape[:-2]
    return len(shape) == 1 and b.values.shape[:-2] == shape and c.shape[:-2] == shape and \
        bool(np.isfinite(a.top).all() and np.isfinite(b.top).all())


__all__ = ["SIGNIFICAND", "Operand", "mma", "mma_operands"]

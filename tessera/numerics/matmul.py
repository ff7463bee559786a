"""The correctly rounded matrix product, independent of BLAS, threads and blocking.

Method (``matmul_rounded``): widen both operands exactly to float64 and multiply with
BLAS. For any summation order, |fl(AB) - AB| <= gamma_K |A||B| (Higham, Accuracy and
Stability of Numerical Algorithms, 2nd ed., sec. 3.1 and 3.5), and Cauchy-Schwarz
gives (|A||B|)_ij <= ||A_i||_2 ||B_j||_2, a bound that costs two norm vectors instead
of a second product. The interval test decides almost every element (for 1024^3
standard normal f32 operands all but 0.07%); the rest get the double-double level
(the products of f32-or-narrower operands are exact in float64; wider operands are
split with Dekker's TwoProduct), and only exact ties reach Fractions.

Costs: a float32 target costs one float64 GEMM plus about as much again; a float64
target can never be decided from a float64 GEMM and always takes the double-double
level, O(M*N*K) NumPy work (about 2 microseconds per element per 256 of K).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.errors import DTypeError, ShapeError
from tessera.numerics.convert import convert, real_kind, to_f64
from tessera.numerics.exact import exact_dot, refine_sum, safe_for_two_product, two_product
from tessera.numerics.formats import DType
from tessera.numerics.rounding import (
    TINY,
    U,
    decide,
    gamma,
    round_fraction,
    round_verified,
    target,
)


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


def _norms(x: np.ndarray, axis: int, scaled: bool) -> np.ndarray:
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


def _f64(x: np.ndarray) -> np.ndarray:
    return x if x.dtype == np.float64 else to_f64(x)


def _transposed_f64(b: np.ndarray) -> np.ndarray:
    """``swapaxes(b, -1, -2)`` as a C-contiguous float64 array, copied in row blocks
    (a plain transposing copy walks memory with a large stride and is 5x slower)."""
    if b.dtype == np.float64 and b.ndim == 2 and b.flags.f_contiguous:
        return b.T
    # NumPy floats widen exactly on assignment; other storage goes through to_f64.
    src = b if b.dtype.kind == "f" else _f64(b)
    out = np.empty((*b.shape[:-2], b.shape[-1], b.shape[-2]), dtype=np.float64)
    for first in range(0, b.shape[-2], 64):
        # Read whole rows of b, write a column block of the result: the fast direction.
        out[..., first:first + 64] = np.swapaxes(src[..., first:first + 64, :], -1, -2)
    return out


def _real_matmul(a: np.ndarray, b: np.ndarray, to: DType, products_exact: bool
                 ) -> np.ndarray:
    """Correctly rounded product of real arrays (any real storage, batch dims allowed)."""
    a64 = _f64(a)
    bt64 = _transposed_f64(b)  # (..., N, K): contiguous columns for the gathers below
    k = a64.shape[-1]
    with np.errstate(all="ignore"):
        approx = np.matmul(a64, np.swapaxes(bt64, -1, -2))  # BLAS reads it transposed
        na = _norms(a64, -1, scaled=not products_exact)
        nb = _norms(bt64, -1, scaled=not products_exact)
    shape = approx.shape
    batch, m, n = shape[:-2], shape[-2], shape[-1]
    na = np.broadcast_to(na, (*batch, m))
    nb = np.broadcast_to(nb, (*batch, n))
    a_src = np.broadcast_to(a64, batch + a64.shape[-2:])
    b_src = np.broadcast_to(bt64, batch + bt64.shape[-2:])
    # gamma_K bounds the error; 4u more covers the rounding of approx -+ bound, since
    # |approx| <= (1 + gamma_K) ||A_i|| ||B_j||, so the interval test need not widen.
    # Inexact (float64) products may also underflow, by up to 2**-1074 each.
    g = gamma(max(k, 1)) + 4 * U
    tiny = 0.0 if products_exact else k * TINY
    # Finite norms mean finite inputs; exact products of those cannot overflow.
    finite = products_exact and bool(np.isfinite(na).all() and np.isfinite(nb).all())
    out = np.empty(shape, dtype=to.np_dtype)
    if out.size == 0:
        return out
    flat_out = out.reshape(-1)
    if to.name == "f64":
        # A float64 result is never decided by the float64 product and its bound: go
        # straight to the double-double level.
        idx = np.arange(out.size)
        flat_out[:] = _undecided(idx, shape, a_src, b_src, na, nb, to, products_exact)
        return out
    pending: list[np.ndarray] = []
    step = max(1, 32768 // max(n, 1))  # blocks of ~32K elements stay in cache
    for bi in np.ndindex(*batch):
        base = int(np.ravel_multi_index((*bi, 0, 0), shape)) if batch else 0
        for first in range(0, m, step):
            last = min(m, first + step)
            chunk = approx[bi][first:last]
            with np.errstate(all="ignore"):
                bound = np.multiply.outer(g * na[bi][first:last], nb[bi])
                if tiny:
                    bound += tiny
            if not products_exact:
                # float64 products and partial sums can overflow depending on the
                # order: decide every non-finite element exactly.
                redo = ~np.isfinite(chunk)
                chunk = np.where(redo, 0.0, chunk)
                bound[redo] = np.inf
            res, todo = decide(chunk, bound, to, widen=False, finite=finite)
            out[bi][first:last] = res
            if todo.size:
                pending.append(base + first * n + todo)
    if pending:
        idx = np.concatenate(pending)
        flat_out[idx] = _undecided(idx, shape, a_src, b_src, na, nb, to, products_exact)
    return out


def _undecided(idx: np.ndarray, shape: tuple[int, ...], a_src: np.ndarray,
               b_src: np.ndarray, na: np.ndarray, nb: np.ndarray, to: DType,
               products_exact: bool) -> np.ndarray:
    """Correctly rounded values of the elements the float64 product left undecided."""
    pos = np.unravel_index(idx, shape)
    batch, i, j = pos[:-2], pos[-2], pos[-1]
    res = np.empty(idx.size, dtype=to.np_dtype)

    def by_fractions(sub: np.ndarray) -> np.ndarray:
        vals = np.empty(sub.size, dtype=to.np_dtype)
        for f, e in enumerate(sub.tolist()):
            at = tuple(p[e] for p in batch)
            val = exact_dot(a_src[(*at, i[e])], b_src[(*at, j[e])],
                            products_exact=products_exact)
            vals[f] = round_fraction(val, to) if not isinstance(val, float) else \
                convert(np.array(val), to)[()]
        return vals

    # Second level: a double-double sum of exact terms, in batches that fit in cache;
    # Fractions only where even that cannot decide. Exact terms are the products
    # themselves, or Dekker's two parts of each product for wider inputs (when their
    # range allows it). Cauchy-Schwarz caps every |term| by the product of the norms.
    if not (products_exact or (safe_for_two_product(a_src) and safe_for_two_product(b_src))):
        return by_fractions(np.arange(idx.size))
    width = a_src.shape[-1] * (1 if products_exact else 2)  # terms per element
    step = max(16, 65536 // max(width, 1))  # ~64K terms per batch: cache-sized
    for first in range(0, idx.size, step):
        sel = slice(first, first + step)
        at = tuple(p[sel] for p in batch)
        with np.errstate(all="ignore"):
            cap = na[(*at, i[sel])] * nb[(*at, j[sel])] * (1 + 2.0**-30)  # norms' rounding
            rows = a_src[(*at, i[sel])]  # fresh (F, K) copies: safe to overwrite
            if products_exact:
                rows *= b_src[(*at, j[sel])]
                terms = rows
            else:
                terms = np.concatenate(two_product(rows, b_src[(*at, j[sel])]), axis=-1)
        approx2, err, eta = refine_sum(terms, cap)
        res[sel] = round_verified(approx2, eta, to,
                                  lambda sub, first=first: by_fractions(sub + first),
                                  offset=err)
    return res


def _int_matmul(a: np.ndarray, b: np.ndarray, to: DType) -> np.ndarray:
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    k = a64.shape[-1]
    peak = int(np.abs(a64).max(initial=0)) * int(np.abs(b64).max(initial=0)) * k
    if peak < 2**63:
        return convert(np.matmul(a64, b64), to)  # exact, then rounded once
    prod = np.matmul(a64.astype(object), b64.astype(object))  # Python ints
    flat = [round_fraction(int(v), to) for v in prod.ravel().tolist()]
    return np.array(flat, dtype=to.np_dtype).reshape(prod.shape)


def _parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x64 = to_f64(x)
    if np.iscomplexobj(x64):
        return np.ascontiguousarray(x64.real), np.ascontiguousarray(x64.imag)
    return x64, np.zeros_like(x64)


def matmul_rounded(a: Any, b: Any, to: Any) -> np.ndarray:
    """The exact product ``a @ b`` rounded once to ``to`` (RNE, convert's saturation).

    ``a`` is (..., M, K), ``b`` (..., K, N); batch dimensions broadcast and 1-D operands
    behave as in ``np.matmul``. Inputs are any real or complex storage arrays. The
    bits do not depend on BLAS, thread count or how K is blocked: the result is a
    function of the exact product only. Integer operands multiply exactly in int64
    (Python ints past 2**63). Complex products round the real part
    ``Re(a)Re(b) - Im(a)Im(b)`` and the imaginary part ``Re(a)Im(b) + Im(a)Re(b)`` each
    exactly once, as dot products of length 2K.
    """
    fmt_to = target(to)
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul operands must have at least one dimension",
                         hint="use an elementwise multiply for scalars")
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    a = a[None, :] if vec_a else a
    b = b[:, None] if vec_b else b
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul of shapes {a.shape} and {b.shape}: contraction sizes "
                         f"{a.shape[-1]} and {b.shape[-2]} differ",
                         hint="the last dim of a must equal the second-to-last dim of b")
    kinds = {real_kind(a.dtype), real_kind(b.dtype)}
    if fmt_to.kind == "bool":
        raise DTypeError("a matmul cannot produce bool", hint="produce an int format")
    if "complex" in kinds or fmt_to.kind == "complex":
        if fmt_to.kind != "complex":
            raise DTypeError(f"the product of complex operands cannot be rounded to {fmt_to}",
                             hint="round to c64 or c128, or take the real part first")
        exact_products = precision(a.dtype) + precision(b.dtype) <= 53
        (ar, ai), (br, bi) = _parts(a), _parts(b)
        part = fmt_to.component
        re = _real_matmul(np.concatenate([ar, -ai], -1), np.concatenate([br, bi], -2),
                          part, exact_products)
        im = _real_matmul(np.concatenate([ar, ai], -1), np.concatenate([bi, br], -2),
                          part, exact_products)
        out = np.empty(re.shape, dtype=fmt_to.np_dtype)
        out.real, out.imag = re, im
    elif kinds <= {"int", "bool"}:
        out = _int_matmul(a, b, fmt_to)
    else:
        exact_products = precision(a.dtype) + precision(b.dtype) <= 53
        out = _real_matmul(a, b, fmt_to, exact_products)
    if vec_a:
        out = out[..., 0, :]
    if vec_b:
        out = out[..., 0]
    return out

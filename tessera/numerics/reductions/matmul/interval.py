"""The first level of a correctly rounded product: a panel of the float64 product decided.

Where the products are exact, the exactness test proves most elements' float64 values
exact (then they are rounded directly, ties included); the interval test
``|fl(AB) - AB| <= gamma_K ||A_i|| ||B_j||`` decides nearly all the rest, first with one
bound per row, then with each element's own bound. What neither decides is returned
for :mod:`.dots`. The method is described in :mod:`tessera.numerics.reductions.matmul`.
"""

from __future__ import annotations

import numpy as np

from tessera.numerics.formats.convert import cast_exact
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.matmul.operands import Columns, ProductPlan
from tessera.numerics.reductions.rounding import decide

_CHUNK = 1 << 15  # elements decided by one set of vector operations


def _exact_into(dst: np.ndarray, x: np.ndarray, to: DType) -> None:
    """``dst[...] = x`` rounded once to ``to``, for exact float64 values ``x`` (where
    ``x`` is an exact zero, ``x + 0.0`` is +0 whatever the sign BLAS gave it)."""
    if to.name in ("f32", "f64"):
        with np.errstate(over="ignore"):  # overflow to inf is the right rounding
            np.add(x, 0.0, out=dst, dtype=np.float64, casting="same_kind")  # one RNE cast
    else:
        dst[...] = cast_exact(x + 0.0, to)


def settle_exact_products(approx: np.ndarray, na: np.ndarray, alpha: np.ndarray | None,
                          cols: Columns, out: np.ndarray, plan: ProductPlan) -> np.ndarray:
    """Decide a panel of finite operands with exact products; return the flat indices
    (into the panel) left for the double-double level."""
    to, (r, n) = plan.to, approx.shape
    whole = np.zeros(r, dtype=bool)
    if alpha is not None:
        # Row i passes the exactness test with every column whose beta is below
        # limit / alpha_i; the margin 2**-48 absorbs the rounding of this threshold, so
        # the columns counted here are the only ones that may fail.
        with np.errstate(divide="ignore"):
            threshold = plan.limit / alpha * (1 - 2.0**-48)
        maybe = n - np.searchsorted(cols.beta_up, threshold, side="left")
        whole = maybe == 0
        total = int(maybe.sum())
        if total <= approx.size // 8:
            # Round everything as exact, then settle the few elements that may not be.
            _exact_into(out, approx, to)
            starts = np.repeat(np.cumsum(maybe) - maybe, maybe)
            cand = np.repeat(np.arange(r) * n, maybe) + \
                cols.by_beta[np.arange(total) - starts]
            return _settle_candidates(cand, approx, na, alpha, cols, out, plan)
    if to.name == "f64" and alpha is None:
        return np.arange(approx.size)  # nothing here can decide a float64 target
    # The interval test with one bound per row: its norm times the largest column norm.
    row_bound = plan.g * na * float(cols.norms.max(initial=0.0))
    sub = max(1, min(r, _CHUNK // n))
    if to.name == "f32":
        high = np.empty((sub, n), dtype=np.float32)
    found: list[np.ndarray] = []
    for first in range(0, r, sub):
        last = min(r, first + sub)
        chunk, dst = approx[first:last], out[first:last]
        if whole[first:last].all():
            _exact_into(dst, chunk, to)
            continue
        if to.name == "f64":
            found.append(np.arange(first * n, last * n))
            continue
        c = row_bound[first:last, None]
        with np.errstate(over="ignore"):  # overflow to inf is the right rounding
            if to.name == "f32":
                # float64 ends, each cast to f32 on the way out (no float64 temporaries)
                high_ = high[:last - first]
                np.subtract(chunk, c, out=dst, dtype=np.float64, casting="same_kind")
                np.add(chunk, c, out=high_, dtype=np.float64, casting="same_kind")
                differ = dst.view(np.uint32) != high_.view(np.uint32)
            else:
                dst[...] = cast_exact(chunk - c, to)
                differ = _bits(dst) != _bits(cast_exact(chunk + c, to))
        cand = np.flatnonzero(differ)
        if cand.size:
            found.append(first * n + cand)
    if not found:
        return np.zeros(0, dtype=np.intp)
    return _settle_candidates(np.concatenate(found), approx, na, alpha, cols, out, plan)


def _settle_candidates(cand: np.ndarray, approx: np.ndarray, na: np.ndarray,
                       alpha: np.ndarray | None, cols: Columns, out: np.ndarray,
                       plan: ProductPlan) -> np.ndarray:
    """The exactness test and the interval test with each element's own bound, for the
    elements ``cand`` (flat, into the panel); returns those still open."""
    to, n = plan.to, approx.shape[1]
    i, j = np.divmod(cand, n)
    vals = approx.reshape(-1)[cand] + 0.0
    flat = out.reshape(-1)
    if alpha is not None:
        ok = alpha[i] * cols.beta[j] < plan.limit
        if ok.any():
            flat[cand[ok]] = round_once(vals[ok], to)
            keep = ~ok
            cand, i, j, vals = cand[keep], i[keep], j[keep], vals[keep]
    if to.name == "f64" or not cand.size:
        return cand
    res, todo = decide(vals, plan.g * na[i] * cols.norms[j], to, widen=False, finite=True)
    flat[cand] = res
    return cand[todo]


def settle_general(approx: np.ndarray, na: np.ndarray, cols: Columns, out: np.ndarray,
                   plan: ProductPlan) -> np.ndarray:
    """Decide a panel by the interval test alone (inexact products, non-finite values)."""
    to, n = plan.to, approx.shape[1]
    if to.name == "f64":
        # A float64 result is never decided by the float64 product and its bound.
        return np.arange(approx.size)
    sub = max(1, _CHUNK // n)
    left: list[np.ndarray] = []
    for first in range(0, approx.shape[0], sub):
        last = min(approx.shape[0], first + sub)
        chunk = approx[first:last]
        with np.errstate(all="ignore"):
            bound = np.multiply.outer(plan.g * na[first:last], cols.norms)
            if plan.tiny:
                bound += plan.tiny  # inexact (float64) products may underflow
        if not plan.products_exact:
            # float64 products and partial sums can overflow depending on the order:
            # decide every non-finite element exactly.
            redo = ~np.isfinite(chunk)
            chunk = np.where(redo, 0.0, chunk)
            bound[redo] = np.inf
        res, todo = decide(chunk, bound, to, widen=False)
        out[first:last] = res
        if todo.size:
            left.append(first * n + todo)
    return np.concatenate(left) if left else np.zeros(0, dtype=np.intp)


def _bits(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.kind in "iub" else x.view(f"u{x.dtype.itemsize}")


def round_once(x: np.ndarray, to: DType) -> np.ndarray:
    """Exact float64 values ``x`` rounded once to ``to`` (a new array)."""
    if to.name == "f32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32)
    return x.copy() if to.name == "f64" else cast_exact(x, to)

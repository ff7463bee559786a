"""The correctly rounded matrix product, independent of BLAS, threads and blocking.

Method (``matmul_rounded``): widen both operands exactly to float64 and multiply with
BLAS, a panel of rows at a time (the panel stays in cache while it is decided). Each
element is then settled by the cheapest of these arguments:

1. **Exactness** (operands whose products are exact in float64 and narrow enough for
   the test to pass: bf16, fp8, fp6, fp4, int8, often f16). Every entry of row i of A
   is a multiple of 2**qA_i (from its smallest nonzero magnitude and the format's
   precision), every entry of column j of B of 2**qB_j, so every product and every
   partial sum of products, in any order, is a multiple of Q_ij = 2**(qA_i + qB_j). If
   ``||A_i||_2 ||B_j||_2`` (Cauchy-Schwarz: at least the sum of |products|) is below
   2**53 Q_ij, each of those partial sums is a float64: BLAS returns the exact value,
   which is rounded directly (exact ties included). With alpha_i = ||A_i|| / 2**qA_i
   and beta_j likewise, the test is alpha_i beta_j < 2**53 (less a margin for the
   norms' rounding): O(MK + KN) statistics, then per row a binary search in the sorted
   beta finds the few columns that may fail, and only those are tested one by one.
2. **Interval**. For any order, |fl(AB) - AB| <= gamma_K |A||B| (Higham, Accuracy and
   Stability of Numerical Algorithms, 2nd ed., sec. 3.1 and 3.5), and Cauchy-Schwarz
   gives (|A||B|)_ij <= ||A_i||_2 ||B_j||_2. Rounding is monotone: when both ends of the
   interval round alike, that is the result. The test runs with one bound per row (the
   row's norm times the largest column norm: no M x N bound array), then with each
   element's own bound for the few left (for 1024^3 standard normal f32 operands
   0.07%).
3. **Pairwise** (exact products, targets narrower than float64): the products of an
   open element summed by a pairwise tree, error at most gamma_{ceil(log2 K)} times the
   sum of |products|, and for narrow inputs exact where the smallest quantum of the
   element's own products proves it.
4. **Double-double** (``_dots``): the exact products (or Dekker's two parts of each
   product, for wider operands) summed by ``exact.refine_sum``; where that is not
   decisive, the same sum with a proof that it is exact, rounded exactly by
   ``round_double_double``; Fractions only for what none of these settles (overflow,
   non-finite values, exponent ranges beyond about 100 bits).

Costs (1024^3, one BLAS thread): a float32 target costs one float64 GEMM (about 2.1x an
sgemm) plus about 40% for f32 operands, 20-30% for bf16, f16 and fp8 ones. A float64
target is decided by the exactness test where it holds and otherwise takes the
double-double level, O(M*N*K) NumPy work (about 2 microseconds per element per 256 of
K). Work arrays up to 16 MiB are kept per thread between calls (``_scratch``).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from tessera.errors import DTypeError, ShapeError
from tessera.numerics.formats.convert import cast_exact, convert, real_kind, to_f64
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.exact import (
    exact_dot,
    min_quantum,
    refine_sum,
    safe_for_two_product,
    two_product,
)
from tessera.numerics.reductions.rounding import (
    TINY,
    U,
    decide,
    gamma,
    round_double_double,
    round_fraction,
    round_verified,
    target,
)

_PANEL = 1 << 19  # float64 elements in one panel of the product (4 MiB)
_CHUNK = 1 << 15  # elements decided by one set of vector operations
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


def _scratch(name: str, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
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


def _widen(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
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


class _Columns(NamedTuple):
    """The right operand of one 2-D product, prepared once for all row panels."""

    b: np.ndarray  # (K, N) as given
    b64: np.ndarray  # (K, N) float64
    norms: np.ndarray  # (N,) column 2-norms
    finite: bool  # all values finite
    beta: np.ndarray | None  # ||B_j|| / 2**qB_j, when the exactness test is tried
    by_beta: np.ndarray | None  # column indices, largest beta first
    beta_up: np.ndarray | None  # beta in ascending order


def _columns(b2: np.ndarray, products_exact: bool, prove: bool, prec: int) -> _Columns:
    b64 = b2 if b2.dtype == np.float64 else _widen(b2, _scratch("b", b2.shape))
    with np.errstate(all="ignore"):
        norms = np.sqrt(np.einsum("kj,kj->j", b64, b64)) if products_exact else \
            _norms(b64, 0, scaled=True)
    finite = bool(np.isfinite(norms).all())
    beta = by_beta = beta_up = None
    if prove and finite:
        beta = np.ldexp(norms, -line_quanta(b2, 0, b64, prec))
        by_beta = np.argsort(beta, kind="stable")[::-1]
        beta_up = beta[by_beta[::-1]]
    return _Columns(b2, b64, norms, finite, beta, by_beta, beta_up)


class _Plan(NamedTuple):
    """What every panel of one product needs to know."""

    to: DType
    products_exact: bool
    prove: bool  # try the exactness test
    prec_a: int
    prec_b: int
    g: float  # gamma_K + 4u: the interval bound is g * ||A_i|| * ||B_j||
    limit: float  # alpha_i * beta_j below this proves the float64 product exact
    tiny: float  # underflow allowance of inexact products


def _real_matmul(a: np.ndarray, b: np.ndarray, to: DType, products_exact: bool,
                 precisions: tuple[int, int] | None = None) -> np.ndarray:
    """Correctly rounded product of real arrays (any real storage, batch dims allowed).

    ``precisions`` are the significand bits of the values of ``a`` and ``b`` (their
    storage's by default; less where float64 arrays hold narrower values).
    """
    prec_a, prec_b = precisions or (precision(a.dtype), precision(b.dtype))
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out = np.empty((*batch, m, n), dtype=to.np_dtype)
    if out.size == 0:
        return out
    if k == 0:
        out[...] = cast_exact(np.zeros(()), to)  # an empty sum is an exact +0
        return out
    # The exactness test cannot pass when even sqrt(K) equal entries would fill 53 bits.
    prove = products_exact and prec_a + prec_b + (k.bit_length() + 1) // 2 < 53
    g = gamma(k) + 4 * U
    # The norms hide their rounding (relative gamma_{K+1} each, squared) and the product
    # of the two scaled norms one more rounding: 8 gamma covers all of it.
    plan = _Plan(to, products_exact, prove, prec_a, prec_b, g,
                 2.0**53 * (1 - 8 * gamma(k + 1)), 0.0 if products_exact else k * TINY)
    a_all = np.broadcast_to(a, (*batch, m, k))
    b_all = np.broadcast_to(b, (*batch, k, n))
    cols, cols_key = None, None
    for bi in np.ndindex(*batch):
        b2 = b_all[bi]
        key = (b2.ctypes.data, b2.strides)  # broadcast batches share one B
        if cols is None or key != cols_key:
            cols, cols_key = _columns(b2, products_exact, prove, prec_b), key
        _product_2d(a_all[bi], cols, out[bi], plan)
    return out


def _product_2d(a2: np.ndarray, cols: _Columns, out2: np.ndarray, plan: _Plan) -> None:
    """``out2 = a2 @ cols.b64`` correctly rounded, for one 2-D product."""
    m, k = a2.shape
    n = out2.shape[1]
    step = max(1, min(m, _PANEL // max(n, k)))
    direct = a2.dtype == np.float64
    a_buf = None if direct else _scratch("a_panel", (step, k))
    p_buf = _scratch("product_panel", (step, n))
    row_norms = np.empty(m)
    pending: list[np.ndarray] = []
    for first in range(0, m, step):
        last = min(m, first + step)
        rows = a2[first:last]
        ap = rows if direct else _widen(rows, a_buf[:last - first])
        with np.errstate(all="ignore"):
            approx = np.matmul(ap, cols.b64, out=p_buf[:last - first])
            na = np.sqrt(np.einsum("ik,ik->i", ap, ap)) if plan.products_exact else \
                _norms(ap, -1, scaled=True)
        row_norms[first:last] = na
        fast = plan.products_exact and cols.finite and bool(np.isfinite(na).all())
        if fast:
            alpha = None
            if cols.beta is not None:
                alpha = np.ldexp(na, -line_quanta(rows, -1, ap, plan.prec_a))
            todo = _settle_exact_products(approx, na, alpha, cols, out2[first:last], plan)
        else:
            todo = _settle_general(approx, na, cols, out2[first:last], plan)
        if todo.size:
            pending.append(first * n + todo)
    if pending:
        idx = np.concatenate(pending)
        out2.reshape(-1)[idx] = _level2(a2, cols, idx // n, idx % n, row_norms, plan)


def _exact_into(dst: np.ndarray, x: np.ndarray, to: DType) -> None:
    """``dst[...] = x`` rounded once to ``to``, for exact float64 values ``x`` (where
    ``x`` is an exact zero, ``x + 0.0`` is +0 whatever the sign BLAS gave it)."""
    if to.name in ("f32", "f64"):
        with np.errstate(over="ignore"):  # overflow to inf is the right rounding
            np.add(x, 0.0, out=dst, dtype=np.float64, casting="same_kind")  # one RNE cast
    else:
        dst[...] = cast_exact(x + 0.0, to)


def _settle_exact_products(approx: np.ndarray, na: np.ndarray, alpha: np.ndarray | None,
                           cols: _Columns, out: np.ndarray, plan: _Plan) -> np.ndarray:
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
                       alpha: np.ndarray | None, cols: _Columns, out: np.ndarray,
                       plan: _Plan) -> np.ndarray:
    """The exactness test and the interval test with each element's own bound, for the
    elements ``cand`` (flat, into the panel); returns those still open."""
    to, n = plan.to, approx.shape[1]
    i, j = np.divmod(cand, n)
    vals = approx.reshape(-1)[cand] + 0.0
    flat = out.reshape(-1)
    if alpha is not None:
        ok = alpha[i] * cols.beta[j] < plan.limit
        if ok.any():
            flat[cand[ok]] = _cast(vals[ok], to)
            keep = ~ok
            cand, i, j, vals = cand[keep], i[keep], j[keep], vals[keep]
    if to.name == "f64" or not cand.size:
        return cand
    res, todo = decide(vals, plan.g * na[i] * cols.norms[j], to, widen=False, finite=True)
    flat[cand] = res
    return cand[todo]


def _settle_general(approx: np.ndarray, na: np.ndarray, cols: _Columns, out: np.ndarray,
                    plan: _Plan) -> np.ndarray:
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


def _cast(x: np.ndarray, to: DType) -> np.ndarray:
    if to.name == "f32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32)
    return x.copy() if to.name == "f64" else cast_exact(x, to)


def _level2(a2: np.ndarray, cols: _Columns, i: np.ndarray, j: np.ndarray,
            row_norms: np.ndarray, plan: _Plan) -> np.ndarray:
    """Correctly rounded values of the elements (i, j) the first level left open.

    Exact products with a target narrower than float64 first get a pairwise sum of the
    products, whose error is at most gamma_d * sum|products| with d = ceil(log2 K)
    (Higham, sec. 4.2) instead of gamma_K: about K / log2(K) times less, so it decides
    nearly all of them. For narrow inputs that sum is moreover exact wherever the
    products' own quantum (the smallest over k, not the row's times the column's)
    proves it, ties included. ``_dots`` takes the rest.
    """
    k, n = a2.shape[1], cols.b64.shape[1]
    tree = plan.products_exact and plan.to.name != "f64"
    width = k if plan.products_exact else 2 * k  # terms per element
    step = max(16, (1 << (17 if tree else 16)) // max(width, 1))  # cache-sized batches
    depth = max(1, (k - 1).bit_length())  # additions on any path of the pairwise tree
    # The pairwise level takes B's columns as stored where NumPy multiplies that type
    # exactly in float64 (half the memory traffic of the float64 copy for f32), sorted
    # so that a batch reads a narrow band of them. The double-double level for many
    # elements (a float64 target: all of them) reads them from a transposed copy.
    src = cols.b if tree and cols.b.dtype.kind == "f" else cols.b64
    bt = _transposed(src) if not tree and i.size >= 2 * n else None
    order = np.arange(i.size) if bt is not None else np.argsort(j, kind="stable")
    res = np.empty(i.size, dtype=plan.to.np_dtype)
    deeper: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for first in range(0, i.size, step):
        pick = order[first:first + step]
        ii, jj = i[pick], j[pick]
        with np.errstate(all="ignore"):
            cap = row_norms[ii] * cols.norms[jj] * (1 + 2.0**-30)  # the norms' rounding
        if tree:
            res[pick], todo, rows, colsT = _tree_batch(a2, src, ii, jj, cap, depth, plan)
            if todo.size:
                deeper.append((pick[todo], rows, colsT, cap[todo]))
            continue
        rows = _widen(a2[ii])  # a fresh (F, K) copy
        colsT = bt[jj] if bt is not None else np.take(src, jj, axis=1).T  # (F, K)
        split_ok = plan.products_exact or (safe_for_two_product(rows)
                                           and safe_for_two_product(colsT))
        res[pick] = _dots(rows, colsT, cap, plan, split_ok, settle=False)
    if deeper:  # what the pairwise sums left open, all at once
        pick, rows, colsT, cap = (np.concatenate(x) for x in zip(*deeper))
        res[pick] = _dots(rows, colsT, cap, plan, True, settle=False)
    return res


def _tree_batch(a2: np.ndarray, src: np.ndarray, ii: np.ndarray, jj: np.ndarray,
                cap: np.ndarray, depth: int, plan: _Plan
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pairwise level for one batch of elements (exact products, target narrower
    than float64): the values, correct except at ``todo``, and ``todo`` with its rows
    of A and columns of B (float64, (F, K) each). ``src`` is B (K, N)."""
    k, f = a2.shape[1], ii.size
    rows = np.take(a2, ii, axis=0, out=_scratch("rows", (f, k), a2.dtype), mode="clip")
    colsT = np.take(src, jj, axis=1, out=_scratch("cols", (k, f), src.dtype), mode="clip")
    # Products in (K, F) layout: the tree then adds contiguous blocks.
    prods = np.multiply(_widen(rows).T if rows.dtype.kind != "f" else rows.T, colsT,
                        out=_scratch("products", (k, f)), dtype=np.float64)
    exact = None
    if plan.prove:
        # Every partial sum is a multiple of 2**q below cap < 2**(53 + q): exact.
        q = min_quantum(prods, plan.prec_a + plan.prec_b, axis=0)
        with np.errstate(over="ignore"):
            exact = cap < np.ldexp(1.0, np.minimum(q, 2000) + 53)
    sums = _pairwise(prods)
    none = np.zeros(0, dtype=np.intp)
    if exact is not None and exact.all():
        return _cast(sums + 0.0, plan.to), none, none, none
    vals, todo = decide(sums, gamma(depth) * cap, plan.to)
    if exact is not None and exact.any():
        vals[exact] = _cast(sums[exact] + 0.0, plan.to)
        todo = todo[~exact[todo]]
    if not todo.size:
        return vals, none, none, none
    return vals, todo, _widen(rows[todo]), _widen(colsT[:, todo].T)


def _transposed(x: np.ndarray) -> np.ndarray:
    """``x.T`` as a C-contiguous array, copied in row blocks (a plain transposing copy
    walks memory with a large stride and is 5x slower)."""
    k, n = x.shape
    out = _scratch("b_transposed", (n, k), x.dtype)
    for first in range(0, k, 64):
        # Read whole rows of x, write a column block of the result: the fast direction.
        out[:, first:first + 64] = x[first:first + 64].T
    return out


def _pairwise(x: np.ndarray) -> np.ndarray:
    """Column sums of ``x`` (K, F) by a pairwise tree: each term passes through at most
    ceil(log2 K) additions. ``x`` is overwritten."""
    width = x.shape[0]
    while width > 1:
        half = width // 2
        x[:half] += x[width - half:width]  # an odd middle row waits a level
        width -= half
    return x[0].copy()


def _dots(rows: np.ndarray, cols: np.ndarray, cap: np.ndarray, plan: _Plan,
          split_ok: bool, settle: bool) -> np.ndarray:
    """Correctly rounded ``sum(rows * cols, -1)``: the double-double level.

    Exact terms are the products themselves, or Dekker's two parts of each product
    for wider inputs (when their range allows it); Cauchy-Schwarz caps every |term| by
    ``cap``. Without ``settle``, the interval test on the double-double sum decides;
    what it leaves is done again with ``settle``: the sum is proven exact where the
    terms' exponent range allows (``refine_sum`` with a quantum) and rounded by
    ``round_double_double``, and only the rest goes to Fractions.
    """
    to = plan.to
    if not split_ok:
        return _by_fractions(rows, cols, plan)
    with np.errstate(all="ignore"):
        if plan.products_exact:
            terms = rows * cols
            bits = plan.prec_a + plan.prec_b
        else:
            terms = np.concatenate(two_product(rows, cols), axis=-1)
            bits = 53
    if not settle:
        approx, err, eta = refine_sum(terms, cap)
        return round_verified(approx, eta, to, lambda sub: _dots(
            rows[sub], cols[sub], cap[sub], plan, split_ok, settle=True), offset=err)
    approx, err, eta = refine_sum(terms, cap, min_quantum(terms, bits))
    out = np.empty(rows.shape[0], dtype=to.np_dtype)
    exact = eta == 0
    if exact.any():
        out[exact] = round_double_double(approx[exact], err[exact], to)
    rest = np.flatnonzero(~exact)
    if rest.size:
        out[rest] = round_verified(approx[rest], eta[rest], to, lambda sub: _by_fractions(
            rows[rest[sub]], cols[rest[sub]], plan), offset=err[rest])
    return out


def _by_fractions(rows: np.ndarray, cols: np.ndarray, plan: _Plan) -> np.ndarray:
    vals = np.empty(rows.shape[0], dtype=plan.to.np_dtype)
    for f in range(rows.shape[0]):
        val = exact_dot(rows[f], cols[f], products_exact=plan.products_exact)
        vals[f] = convert(np.array(val), plan.to)[()] if isinstance(val, float) else \
            round_fraction(val, plan.to)
    return vals


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
    precisions = (precision(a.dtype), precision(b.dtype))
    exact_products = sum(precisions) <= 53
    if "complex" in kinds or fmt_to.kind == "complex":
        if fmt_to.kind != "complex":
            raise DTypeError(f"the product of complex operands cannot be rounded to {fmt_to}",
                             hint="round to c64 or c128, or take the real part first")
        (ar, ai), (br, bi) = _parts(a), _parts(b)
        part = fmt_to.component
        re = _real_matmul(np.concatenate([ar, -ai], -1), np.concatenate([br, bi], -2),
                          part, exact_products, precisions)
        im = _real_matmul(np.concatenate([ar, ai], -1), np.concatenate([bi, br], -2),
                          part, exact_products, precisions)
        out = np.empty(re.shape, dtype=fmt_to.np_dtype)
        out.real, out.imag = re, im
    elif kinds <= {"int", "bool"}:
        out = _int_matmul(a, b, fmt_to)
    else:
        out = _real_matmul(a, b, fmt_to, exact_products, precisions)
    if vec_a:
        out = out[..., 0, :]
    if vec_b:
        out = out[..., 0]
    return out

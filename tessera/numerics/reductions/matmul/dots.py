"""The later levels of a correctly rounded product: dot products of the elements left open.

The elements the first level (:mod:`.interval`) leaves open are settled one dot
product each: a pairwise sum of exact products where that decides, else a
double-double sum (:func:`rounded_dots`), proven exact where the exponent range allows,
and Fractions for what none of these settles. The method is described in
:mod:`tessera.numerics.reductions.matmul`.
"""

from __future__ import annotations

import numpy as np

from tessera.numerics.formats.convert import convert
from tessera.numerics.reductions.exact import (
    exact_dot,
    min_quantum,
    refine_sum,
    safe_for_two_product,
    two_product,
)
from tessera.numerics.reductions.matmul.interval import round_once
from tessera.numerics.reductions.matmul.operands import (
    Columns,
    ProductPlan,
    scratch,
    transposed,
    widen,
)
from tessera.numerics.reductions.rounding import (
    decide,
    gamma,
    round_double_double,
    round_fraction,
    round_verified,
)


def level2(a2: np.ndarray, cols: Columns, i: np.ndarray, j: np.ndarray,
           row_norms: np.ndarray, plan: ProductPlan) -> np.ndarray:
    """Correctly rounded values of the elements (i, j) the first level left open.

    Exact products with a target narrower than float64 first get a pairwise sum of the
    products, whose error is at most gamma_d * sum|products| with d = ceil(log2 K)
    (Higham, sec. 4.2) instead of gamma_K: about K / log2(K) times less, so it decides
    nearly all of them. For narrow inputs that sum is moreover exact wherever the
    products' own quantum (the smallest over k, not the row's times the column's)
    proves it, ties included. ``rounded_dots`` takes the rest.
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
    bt = transposed(src) if not tree and i.size >= 2 * n else None
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
        rows = widen(a2[ii])  # a fresh (F, K) copy
        colsT = bt[jj] if bt is not None else np.take(src, jj, axis=1).T  # (F, K)
        split_ok = plan.products_exact or (safe_for_two_product(rows)
                                           and safe_for_two_product(colsT))
        res[pick] = rounded_dots(rows, colsT, cap, plan, split_ok, settle=False)
    if deeper:  # what the pairwise sums left open, all at once
        pick, rows, colsT, cap = (np.concatenate(x) for x in zip(*deeper))
        res[pick] = rounded_dots(rows, colsT, cap, plan, True, settle=False)
    return res


def _tree_batch(a2: np.ndarray, src: np.ndarray, ii: np.ndarray, jj: np.ndarray,
                cap: np.ndarray, depth: int, plan: ProductPlan
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pairwise level for one batch of elements (exact products, target narrower
    than float64): the values, correct except at ``todo``, and ``todo`` with its rows
    of A and columns of B (float64, (F, K) each). ``src`` is B (K, N)."""
    k, f = a2.shape[1], ii.size
    rows = np.take(a2, ii, axis=0, out=scratch("rows", (f, k), a2.dtype), mode="clip")
    colsT = np.take(src, jj, axis=1, out=scratch("cols", (k, f), src.dtype), mode="clip")
    # Products in (K, F) layout: the tree then adds contiguous blocks.
    prods = np.multiply(widen(rows).T if rows.dtype.kind != "f" else rows.T, colsT,
                        out=scratch("products", (k, f)), dtype=np.float64)
    exact = None
    if plan.prove:
        # Every partial sum is a multiple of 2**q below cap < 2**(53 + q): exact.
        q = min_quantum(prods, plan.prec_a + plan.prec_b, axis=0)
        with np.errstate(over="ignore"):
            exact = cap < np.ldexp(1.0, np.minimum(q, 2000) + 53)
    sums = _pairwise(prods)
    none = np.zeros(0, dtype=np.intp)
    if exact is not None and exact.all():
        return round_once(sums + 0.0, plan.to), none, none, none
    vals, todo = decide(sums, gamma(depth) * cap, plan.to)
    if exact is not None and exact.any():
        vals[exact] = round_once(sums[exact] + 0.0, plan.to)
        todo = todo[~exact[todo]]
    if not todo.size:
        return vals, none, none, none
    return vals, todo, widen(rows[todo]), widen(colsT[:, todo].T)


def _pairwise(x: np.ndarray) -> np.ndarray:
    """Column sums of ``x`` (K, F) by a pairwise tree: each term passes through at most
    ceil(log2 K) additions. ``x`` is overwritten."""
    width = x.shape[0]
    while width > 1:
        half = width // 2
        x[:half] += x[width - half:width]  # an odd middle row waits a level
        width -= half
    return x[0].copy()


def rounded_dots(rows: np.ndarray, cols: np.ndarray, cap: np.ndarray, plan: ProductPlan,
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
        return round_verified(approx, eta, to, lambda sub: rounded_dots(
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


def _by_fractions(rows: np.ndarray, cols: np.ndarray, plan: ProductPlan) -> np.ndarray:
    vals = np.empty(rows.shape[0], dtype=plan.to.np_dtype)
    for f in range(rows.shape[0]):
        val = exact_dot(rows[f], cols[f], products_exact=plan.products_exact)
        vals[f] = convert(np.array(val), plan.to)[()] if isinstance(val, float) else \
            round_fraction(val, plan.to)
    return vals

"""``matmul_rounded``: the exact matrix product rounded once, whatever BLAS and threads do.

The entry point splits complex and integer products off, prepares the operands and
takes a real product a row panel at a time through the levels of
:mod:`tessera.numerics.reductions.matmul` (described there): :mod:`.interval` decides
each panel, :mod:`.dots` the elements it leaves open.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import DTypeError, ShapeError
from tessera.numerics.formats.convert import cast_exact, convert, real_kind, to_f64
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.matmul.dots import level2
from tessera.numerics.reductions.matmul.interval import settle_exact_products, settle_general
from tessera.numerics.reductions.matmul.operands import (
    Columns,
    ProductPlan,
    line_quanta,
    precision,
    prepare_columns,
    scratch,
    two_norms,
    widen,
)
from tessera.numerics.reductions.rounding import TINY, U, gamma, round_fraction, target

_PANEL = 1 << 19  # float64 elements in one panel of the product (4 MiB)


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
    plan = ProductPlan(to, products_exact, prove, prec_a, prec_b, g,
                       2.0**53 * (1 - 8 * gamma(k + 1)), 0.0 if products_exact else k * TINY)
    a_all = np.broadcast_to(a, (*batch, m, k))
    b_all = np.broadcast_to(b, (*batch, k, n))
    cols, cols_key = None, None
    for bi in np.ndindex(*batch):
        b2 = b_all[bi]
        key = (b2.ctypes.data, b2.strides)  # broadcast batches share one B
        if cols is None or key != cols_key:
            cols, cols_key = prepare_columns(b2, products_exact, prove, prec_b), key
        _product_2d(a_all[bi], cols, out[bi], plan)
    return out


def _product_2d(a2: np.ndarray, cols: Columns, out2: np.ndarray, plan: ProductPlan) -> None:
    """``out2 = a2 @ cols.b64`` correctly rounded, for one 2-D product."""
    m, k = a2.shape
    n = out2.shape[1]
    step = max(1, min(m, _PANEL // max(n, k)))
    direct = a2.dtype == np.float64
    a_buf = None if direct else scratch("a_panel", (step, k))
    p_buf = scratch("product_panel", (step, n))
    row_norms = np.empty(m)
    pending: list[np.ndarray] = []
    for first in range(0, m, step):
        last = min(m, first + step)
        rows = a2[first:last]
        ap = rows if direct else widen(rows, a_buf[:last - first])
        with np.errstate(all="ignore"):
            approx = np.matmul(ap, cols.b64, out=p_buf[:last - first])
            na = np.sqrt(np.einsum("ik,ik->i", ap, ap)) if plan.products_exact else \
                two_norms(ap, -1, scaled=True)
        row_norms[first:last] = na
        fast = plan.products_exact and cols.finite and bool(np.isfinite(na).all())
        if fast:
            alpha = None
            if cols.beta is not None:
                alpha = np.ldexp(na, -line_quanta(rows, -1, ap, plan.prec_a))
            todo = settle_exact_products(approx, na, alpha, cols, out2[first:last], plan)
        else:
            todo = settle_general(approx, na, cols, out2[first:last], plan)
        if todo.size:
            pending.append(first * n + todo)
    if pending:
        idx = np.concatenate(pending)
        out2.reshape(-1)[idx] = level2(a2, cols, idx // n, idx % n, row_norms, plan)


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


def matmul_rounded(a: Any, b: Any, to: Any,
                   precisions: tuple[int, int] | None = None) -> np.ndarray:
    """The exact product ``a @ b`` rounded once to ``to`` (RNE, convert's saturation).

    ``a`` is (..., M, K), ``b`` (..., K, N); batch dimensions broadcast and 1-D operands
    behave as in ``np.matmul``. Inputs are any real or complex storage arrays. The
    bits do not depend on BLAS, thread count or how K is blocked: the result is a
    function of the exact product only. Integer operands multiply exactly in int64
    (Python ints past 2**63). Complex products round the real part
    ``Re(a)Re(b) - Im(a)Im(b)`` and the imaginary part ``Re(a)Im(b) + Im(a)Re(b)`` each
    exactly once, as dot products of length 2K. ``precisions`` are the significand
    bits of the values of ``a`` and ``b`` where their storage is wider (float64 arrays
    holding narrower values): the products are then known exact in float64.
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
    if precisions is None:
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

"""``tile.mma`` for all programs at once, folded into as few BLAS calls as possible.

Operands carry program axes. An axis along which only ``a`` varies (a GEMM's ``g0``:
the A tile depends on ``tile_m`` only) is folded into ``a``'s rows, one along which only
``b`` varies into ``b``'s columns, and axes where both vary become a batch. A tiled
GEMM's 256 per-program ``64x32 @ 32x64`` products per K step become one
``1024x32 @ 32x1024`` product: the same dot products, computed by one BLAS call.

Exact mode widens the inputs exactly to float64 and returns the float64 result (a
*wide* value, see :mod:`tessera.interp.tile.numeric`), so the products are exact for
inputs of up to 26 significand bits (every float format up to f32, whose 24 bits make
products of at most 48) and the K sum of one ``mma`` is BLAS's float64 sum of them.
Folding does not change which products are summed. A K loop of
``acc = mma(a, b, acc)`` / ``acc += mma(a, b)`` keeps the running sum in float64 and
rounds once, at the store; when the accumulator feeds nothing else in the loop, the
trips' products are made by one call at the loop's end
(:class:`tessera.interp.tile.fastpaths.pending.PendingMma`).

Residual caveat, honestly: the result is independent of the tile shape whenever the
float64 sums are exact, which holds when the products of one output element span less
than about ``53 - log2(K)`` bits of magnitude (typical bf16 data: always; the tests
check bitwise equality across tilings). Otherwise two tilings differ by float64
roundings of partial sums (relative size ``K * 2**-53``), which change the final f32
rounding only when the exact value lies that close to an f32 rounding boundary —
about ``K * 2**-29`` of elements for random data, and never more than 1 ulp.
Integer inputs multiply exactly in int64. Fast mode multiplies in float32 (BLAS
sgemm): its bits depend on the BLAS build and blocking (labelled non-bitwise).
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from tessera.interp.tile.numeric import F32, F64, Num, widen


def _by_columns(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` stored column by column: BLAS computes ``bᵀ aᵀ`` row by row."""
    return np.swapaxes(np.matmul(np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2)), -1, -2)


def folded_matmul(a: np.ndarray, b: np.ndarray, columns: bool = False) -> np.ndarray:
    """``a @ b`` over the last two axes with NumPy broadcasting of the leading axes,
    folding broadcast axes into the matrix dimensions. ``columns`` lays the folded
    product out column by column (BLAS computes ``bᵀ aᵀ``; the result is its transposed
    view): a tile's row reductions and row broadcasts then run along long contiguous
    columns instead of 64-wide rows."""
    ra, rb = a.ndim - 2, b.ndim - 2
    m, k = a.shape[-2:]
    n = b.shape[-1]
    matmul = _by_columns if columns else np.matmul
    if ra == 0 and rb == 0:
        return matmul(a, b)
    if rb == 0:
        lead = a.shape[:-2]
        return matmul(a.reshape(-1, k), b).reshape((*lead, m, n))
    if ra == 0:
        lead = b.shape[:-2]
        bt = np.moveaxis(b, -2, 0).reshape(k, -1)
        return np.moveaxis(matmul(a, bt).reshape((m, *lead, n)), 0, -2)
    nl = max(ra, rb)
    sa = (1,) * (nl - ra) + a.shape[:-2]
    sb = (1,) * (nl - rb) + b.shape[:-2]
    a = a.reshape((*sa, m, k))
    b = b.reshape((*sb, k, n))
    batch = [i for i in range(nl) if sa[i] > 1 and sb[i] > 1]
    afold = [i for i in range(nl) if sa[i] > 1 and sb[i] == 1]
    bfold = [i for i in range(nl) if sb[i] > 1 and sa[i] == 1]
    if any(sa[i] != sb[i] for i in batch):
        raise ValueError(f"mma program axes {sa} and {sb} do not broadcast")
    nb, na = len(batch), len(afold)
    size = math.prod(sa[i] for i in batch)
    asz = math.prod(sa[i] for i in afold)
    bsz = math.prod(sb[i] for i in bfold)
    ones_a = [i for i in range(nl) if i not in batch and i not in afold]
    ones_b = [i for i in range(nl) if i not in batch and i not in bfold]
    at = a.transpose([*batch, *afold, *ones_a, nl, nl + 1]).reshape(size, asz * m, k)
    bt = b.transpose([*batch, nl, *bfold, *ones_b, nl + 1]).reshape(size, k, bsz * n)
    r = matmul(at, bt).reshape([sa[i] for i in batch] + [sa[i] for i in afold] + [m]
                     + [sb[i] for i in bfold] + [n])
    pos: dict[int, int] = {}
    for j, i in enumerate(batch):
        pos[i] = j
    for j, i in enumerate(afold):
        pos[i] = nb + j
    for j, i in enumerate(bfold):
        pos[i] = nb + na + 1 + j
    present = sorted(pos)
    out = r.transpose([pos[i] for i in present] + [nb + na, r.ndim - 1])
    missing = [i for i in range(nl) if i not in pos]
    return np.expand_dims(out, missing) if missing else out


class Widen:
    """Exact float64 copies of one mma operand, remembering the last: an operand that
    does not change in a loop (flash attention's query tile) is widened once, not once
    per trip. A tile value is never modified in place once made (a shared-memory load
    hands out a view only after marking the storage copy-on-write), so the same array
    object holds the same values."""

    __slots__ = ("src", "wide")

    #: larger operands are not kept (the compiled kernel would hold them between launches)
    MAX_SIZE = 1 << 22

    def __init__(self) -> None:
        self.src: Any = None
        self.wide: Any = None

    def __call__(self, x: Any) -> np.ndarray:
        if x is self.src:
            return self.wide
        wide = widened(x)
        if wide is not x and wide.size <= self.MAX_SIZE:
            self.src, self.wide = x, wide
        return wide


#: the latest exact float64 copies made by :func:`widened`, newest first (weak
#: references to their sources: a dead source never answers for a new array)
_RECENT: list[tuple[weakref.ref[Any], np.ndarray]] = []


def widened(x: Any) -> np.ndarray:
    """An exact float64 copy of the tile value ``x``, shared by the ops that need one:
    flash attention's ``row_sum(p)`` and ``mma(p, v)`` widen ``p`` once. (Tile values
    are never modified in place, see :class:`Widen`.)"""
    for ref, wide in _RECENT:
        if ref() is x:
            return wide
    wide = widen(np.asarray(x), F64)
    if wide is not x and isinstance(x, np.ndarray) and 1024 <= wide.size <= Widen.MAX_SIZE:
        _RECENT.insert(0, (weakref.ref(x), wide))
        del _RECENT[2:]
    return wide


def mma(a: Any, b: Any, c: Any, acc: Num, fast: bool,
        widen: tuple[Any, Any] = (widened, widened), columns: bool = False) -> np.ndarray:
    """``a @ b (+ c)`` accumulated per the module rules; the result has ``acc``'s
    element (float64 while wide in exact mode). ``widen`` makes the exact float64
    operands (:class:`Widen` remembers them); ``columns`` is the layout of
    :func:`folded_matmul` (the values do not depend on it)."""
    if acc.kind in ("int", "bool"):
        r = folded_matmul(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))
        if c is not None:
            r = r + np.asarray(c).astype(np.int64)
        return acc.result(r)
    if fast:
        dt = F32 if acc.sd != F64 else F64
        r = folded_matmul(np.asarray(a).astype(dt, copy=False),
                          np.asarray(b).astype(dt, copy=False), columns)
        if c is not None:
            r = _accumulate(r, acc.narrow(c))
        return acc.result(r)
    r = folded_matmul(widen[0](a), widen[1](b), columns)
    if c is not None:
        r = _accumulate(r, np.asarray(c))
    return r if acc.can_be_wide or acc.sd == F64 else acc.result(r)


def _accumulate(r: np.ndarray, c: Any) -> np.ndarray:
    """``r + c``, in place in the fresh product when the shapes allow (no new array).

    A float64 product plus a smaller float accumulator that holds one finite value
    everywhere (a K loop's ``zeros`` or ``full`` start, broadcast over every program) adds that
    value as a scalar: each element gets the same float64 addition of the same two
    operands (one of them finite, so even a NaN result keeps the product's payload),
    without the per-row casts of a broadcast float32 operand."""
    if r.dtype == F64 and r.flags.writeable and isinstance(c, np.ndarray) \
            and c.dtype.kind == "f" and c.ndim <= r.ndim and 0 < c.size < r.size \
            and r.shape[r.ndim - c.ndim:] == c.shape:
        bits = c.view(f"u{c.itemsize}").reshape(-1)
        first = c.reshape(-1)[0]
        if bits[-1] == bits[0] and np.isfinite(first) and (bits == bits[0]).all():
            return np.add(r, float(first), out=r)
    if np.broadcast_shapes(r.shape, np.shape(c)) == r.shape and r.flags.writeable:
        return np.add(r, c, out=r, casting="unsafe") if r.dtype == F64 or \
            np.result_type(r, c) == r.dtype else r + c
    return r + c


__all__ = ["Widen", "folded_matmul", "mma", "widened"]

"""Row reductions of tile values: the checked-mode float sum (a fixed float64 tree,
fast when exact) and a faster max/min with NumPy's bits.

A tile ``row_sum`` of a float tile (any format of at most 24 significand bits) is
defined as a float64 pairwise tree over the row (:func:`tree_sum_f64`), rounded once to
the element. The tree is the order a GPU reproduces with a per-thread tree and
``shfl.bfly`` across lanes; it is also slow in NumPy (ten strided passes for a row of
1024).

:func:`row_sum_f64` gives the tree's bits faster where the float64 sum is provably
*exact*: then every summation order gives the exact sum, and NumPy's own float64 sum
may be used. Each value of the row is a multiple of ``2^(e_min - 23)`` (``e_min`` the
smallest exponent among its nonzero values; subnormals are multiples of a larger
power), so every partial sum is too, and its magnitude is below ``n * 2^(e_max + 1)``.
All fit in 53 bits when ``e_max - e_min <= 29 - ceil(log2 n)``, which holds when
``max|x| < 2^(29 - ceil(log2 n)) * min|x|``. The rows that fail the test (a zero, an
infinity or NaN, or a wide exponent range) take the tree. The three reductions are
slower than the tree on short contiguous rows, but not on rows whose axis is outer in
memory (a column-layout tile): NumPy reduces those by adding whole rows of the other
axes.

:func:`row_extreme` is ``np.max``/``np.min`` over one axis, which NumPy computes slowly
for short rows (a tile row of 64: 1.4 ns per element). Rows of a power-of-two length
below :data:`LONG` are instead folded in halves with ``np.maximum``/``np.minimum``
down to sixteen columns, which are transposed and reduced along the long axis; a
maximum is one of the values whatever the order, except for the choice between -0.0
and +0.0 and among NaNs, so rows whose result is a zero or a NaN are redone with
``np.max``/``np.min``.
"""

from __future__ import annotations

import numpy as np

F64 = np.dtype(np.float64)
#: contiguous rows shorter than this always take the tree (a row axis that is not the
#: innermost in memory takes the exact shortcut at any length)
SHORT = 128
#: rows at least this long are reduced by ``np.max``/``np.min`` themselves (faster there)
LONG = 256


def tree_sum_f64(x: np.ndarray) -> np.ndarray:
    """The checked-mode float sum over the last axis: pad it with -0.0 to a power of two
    (-0.0 is the exact identity: x + -0.0 == x for every x, +0 and -0 included), then add
    adjacent pairs ``x[2i] + x[2i+1]`` in float64 until one value is left. This is the
    recursive halving tree sum(first half) + sum(second half), which a GPU reproduces
    with a per-thread tree over a contiguous chunk and ``shfl.bfly`` xor 1, 2, 4, ...
    across lanes (IEEE addition commutes bitwise, so every lane gets the same sum)."""
    size = x.shape[-1]
    if size == 0:
        return np.zeros(x.shape[:-1], np.float64)
    width = 1 << (size - 1).bit_length()
    if width != size:
        x = np.concatenate([x.astype(F64, copy=False),
                            np.full((*x.shape[:-1], width - size), -0.0)], axis=-1)
    elif size > 1 and x.dtype != F64:
        x = np.add(x[..., 0::2], x[..., 1::2], dtype=F64)  # widens as it adds: one pass
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def row_sum_f64(x: np.ndarray, wide: np.ndarray | None = None) -> np.ndarray:
    """:func:`tree_sum_f64` of a float32 array (the values of a format of at most 24
    significand bits) over its last axis, by NumPy's float64 sum on the rows whose sum
    is exact (see the module docstring) and by the tree on the others. ``wide``, when
    given, is ``x`` already widened to float64 (shared with another op): the sums and
    the tree read it instead of converting ``x`` again."""
    size = x.shape[-1]
    span = 29 - (size - 1).bit_length()  # 29 - ceil(log2 n)
    # NumPy reduces short rows slowly where they are contiguous: below SHORT the three
    # reductions cost more than the tree's passes (measured). A row axis that is not the
    # innermost in memory (a column-layout tile) is reduced by whole rows of the other
    # axes, fast at any length.
    inner = x.ndim > 0 and abs(x.strides[-1]) <= x.itemsize
    src = x if wide is None else wide
    if (size < SHORT and inner) or span < 1 or x.dtype != np.float32:
        return tree_sum_f64(src)
    limit = np.float32(2.0 ** span)
    lo, hi = x.min(axis=-1), x.max(axis=-1)
    # rows of one sign need no abs; a zero, an infinity or a NaN fails every comparison
    exact = (hi < lo * limit) & (lo > 0) | (-lo < -hi * limit) & (hi < 0)
    mixed = ~exact & (lo < 0) & (hi > 0)
    if mixed.all():
        a = np.abs(x)
        exact = a.max(axis=-1) < a.min(axis=-1) * limit
    elif mixed.any():
        a = np.abs(x[mixed])
        exact[mixed] = a.max(axis=-1) < a.min(axis=-1) * limit
    total = np.add.reduce(src, axis=-1, dtype=F64)
    if not exact.all():
        rest = ~exact
        total[rest] = tree_sum_f64(src[rest])
    return total


def row_extreme(x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """``np.max(x, axis)`` (``kind`` "max") or ``np.min``, with their bits."""
    whole = np.max if kind == "max" else np.min
    size = x.shape[axis] if x.ndim else 0
    if x.dtype.kind != "f" or size < 16 or size >= LONG or size & (size - 1) \
            or abs(x.strides[axis]) > x.itemsize:
        # (a row axis that is not the innermost in memory: NumPy reduces it by whole
        # rows of the other axes, fast)
        return whole(x, axis=axis)
    fold = np.maximum if kind == "max" else np.minimum
    rows = np.moveaxis(x, axis, -1)
    y = rows
    while y.shape[-1] > 16:
        half = y.shape[-1] // 2
        y = fold(y[..., :half], y[..., half:])
    # the last sixteen columns, transposed to rows: one reduce along a long axis
    out = fold.reduce(np.ascontiguousarray(np.moveaxis(y, -1, 0)), axis=0)
    odd = (out == 0) | np.isnan(out)
    if odd.any():
        out[odd] = whole(rows[odd], axis=-1)
    return out


__all__ = ["LONG", "SHORT", "row_extreme", "row_sum_f64", "tree_sum_f64"]

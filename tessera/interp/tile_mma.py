"""``tile.mma`` for all programs at once, folded into as few BLAS calls as possible.

Operands carry program axes. An axis along which only ``a`` varies (a GEMM's ``g0``:
the A tile depends on ``tile_m`` only) is folded into ``a``'s rows, one along which only
``b`` varies into ``b``'s columns, and axes where both vary become a batch. A tiled
GEMM's 256 per-program ``64x32 @ 32x64`` products per K step become one
``1024x32 @ 32x1024`` product: the same dot products, computed by one BLAS call.

Exact mode widens the inputs exactly to float64 and returns the float64 result (a
*wide* value, see :mod:`tessera.interp.tile_numeric`), so the products are exact for
inputs of up to 26 significand bits (bf16, f16, fp8, tf32 — not f32) and the K sum of
one ``mma`` is a float64 sum in ascending k. Folding does not change which products
are summed or their order. A K loop of ``acc = mma(a, b, acc)`` / ``acc += mma(a, b)``
keeps the running sum in float64 and rounds once, at the store.

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

from typing import Any

import numpy as np

from tessera.interp.tile_numeric import F32, F64, Num


def folded_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` over the last two axes with NumPy broadcasting of the leading axes,
    folding broadcast axes into the matrix dimensions."""
    ra, rb = a.ndim - 2, b.ndim - 2
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if ra == 0 and rb == 0:
        return a @ b
    if rb == 0:
        lead = a.shape[:-2]
        return (a.reshape(-1, k) @ b).reshape((*lead, m, n))
    if ra == 0:
        lead = b.shape[:-2]
        bt = np.moveaxis(b, -2, 0).reshape(k, -1)
        return np.moveaxis((a @ bt).reshape((m, *lead, n)), 0, -2)
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
    size = int(np.prod([sa[i] for i in batch], dtype=np.int64))
    asz = int(np.prod([sa[i] for i in afold], dtype=np.int64))
    bsz = int(np.prod([sb[i] for i in bfold], dtype=np.int64))
    ones_a = [i for i in range(nl) if i not in batch and i not in afold]
    ones_b = [i for i in range(nl) if i not in batch and i not in bfold]
    at = a.transpose([*batch, *afold, *ones_a, nl, nl + 1]).reshape(size, asz * m, k)
    bt = b.transpose([*batch, nl, *bfold, *ones_b, nl + 1]).reshape(size, k, bsz * n)
    r = np.matmul(at, bt).reshape([sa[i] for i in batch] + [sa[i] for i in afold] + [m]
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


def mma(a: Any, b: Any, c: Any, acc: Num, fast: bool) -> np.ndarray:
    """``a @ b (+ c)`` accumulated per the module rules; the result has ``acc``'s
    element (float64 while wide in exact mode)."""
    if acc.kind in ("int", "bool"):
        r = folded_matmul(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64))
        if c is not None:
            r = r + np.asarray(c).astype(np.int64)
        return acc.result(r)
    if fast:
        dt = F32 if acc.sd != F64 else F64
        r = folded_matmul(np.asarray(a).astype(dt, copy=False),
                          np.asarray(b).astype(dt, copy=False))
        if c is not None:
            r = _accumulate(r, acc.narrow(c))
        return acc.result(r)
    r = folded_matmul(np.asarray(a).astype(F64, copy=False),
                      np.asarray(b).astype(F64, copy=False))
    if c is not None:
        r = _accumulate(r, np.asarray(c))
    return r if acc.can_be_wide or acc.sd == F64 else acc.result(r)


def _accumulate(r: np.ndarray, c: Any) -> np.ndarray:
    """``r + c``, in place in the fresh product when the shapes allow (no new array)."""
    if np.broadcast_shapes(r.shape, np.shape(c)) == r.shape and r.flags.writeable:
        return np.add(r, c, out=r, casting="unsafe") if r.dtype == F64 or \
            np.result_type(r, c) == r.dtype else r + c
    return r + c


__all__ = ["folded_matmul", "mma"]

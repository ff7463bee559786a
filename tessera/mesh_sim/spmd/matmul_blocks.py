"""Matmul blocks that share an operand block, computed in one call.

The distinct blocks of a 2-D product on a mesh form a grid: those in one row of the
grid share a block of ``a``, those in one column a block of ``b``. Computing a whole
row (or column) in one call prepares the shared block once (the exact product widens
and measures its operands; BLAS works best on wide products) instead of once per block.
The larger operand is the shared one, so it is prepared exactly once.

Exact mode: every element is the correctly rounded value of its own dot product, so
grouping changes no bit. Fast mode (BLAS, labelled non-bitwise) may round differently
than one call per block would, as any change of BLAS blocking may.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tessera.dist.core.tensor import BlockKey, DistTensor

Compute = Callable[[np.ndarray, np.ndarray, tuple[int, int]], np.ndarray]


def _joined(t: DistTensor, keys: Sequence[BlockKey], axis: int) -> np.ndarray:
    """The blocks of ``t`` with these keys side by side along ``axis`` (a view of the
    global array where they are adjacent in it)."""
    regions = [t.region(k) for k in keys]
    if t.backing is not None and all(
            r[axis].start == regions[0][axis].start + sum(
                q[axis].stop - q[axis].start for q in regions[:i])
            and r[1 - axis] == regions[0][1 - axis] for i, r in enumerate(regions)):
        span = [regions[0][0], regions[0][1]]
        span[axis] = slice(regions[0][axis].start, regions[-1][axis].stop)
        return t.backing[tuple(span)]
    blocks = [t.block(k) for k in keys]
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=axis)


def grouped_matmul(a: DistTensor, b: DistTensor, shell: DistTensor, compute: Compute
                   ) -> dict[BlockKey, np.ndarray]:
    """Every block of ``shell`` (the placed product of ``a`` and ``b``), one call of
    ``compute(a_part, b_part, out_shape)`` per block of the larger operand."""
    mesh = shell.mesh
    keys = shell.block_keys()
    by_a = a.block(a.block_key(0)).nbytes >= b.block(b.block_key(0)).nbytes
    shared, other = (a, b) if by_a else (b, a)
    groups: dict[BlockKey, list[BlockKey]] = {}
    for key in keys:
        groups.setdefault(shared.block_key(mesh.index(key)), []).append(key)
    out: dict[BlockKey, np.ndarray] = {}
    for skey, members in groups.items():
        okeys = [other.block_key(mesh.index(k)) for k in members]
        joined = _joined(other, okeys, 0 if by_a is False else 1)
        block = shared.block(skey)
        x, y = (block, joined) if by_a else (joined, block)
        prod = compute(x, y, (x.shape[0], y.shape[1]))
        sizes = [other.block(k).shape[1 if by_a else 0] for k in okeys]
        for k, part in zip(members, np.split(prod, np.cumsum(sizes)[:-1], axis=1 if by_a
                                             else 0)):
            out[k] = part
    return out


__all__ = ["grouped_matmul"]

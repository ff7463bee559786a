"""Point-to-point movement along a mesh axis: ``broadcast``, ``ppermute``, ``send``/``recv``.

These collectives move per-device values without combining them, so they act on the
blocks that differ from device to device along the axis: partial summands, or the
shards of a sharded tensor. Blocks move by reference (the simulator never copies a
block it only forwards); a device that receives nothing holds zeros, as in
``jax.lax.ppermute``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tessera.dist.core.tensor import REPLICATED, SHARDED, BlockKey, DistTensor
from tessera.errors import MeshError, MeshShapeError, PlacementError, user_api
from tessera.mesh_checks import check_perm, check_rank
from tessera.mesh_sim.blocks import collective, derived, single_axis, with_coords


@collective
def broadcast(t: DistTensor, axis: str, root: int = 0) -> DistTensor:
    """Every device along ``axis`` takes the value of rank ``root``.

    Partial -> replicated (the global value becomes rank ``root``'s summand); a tensor
    already replicated over ``axis`` is returned as it is.
    """
    ax = single_axis(t.mesh, axis, "broadcast")
    root = check_rank(root, t.mesh.axis_size(ax), "root")
    state = t.placement(ax)
    if state == REPLICATED:
        return t
    if state == SHARDED:
        raise PlacementError(f"broadcast over {ax!r} of a tensor sharded over {ax!r}",
                             hint="broadcast sends one device's own value; all_gather "
                                  "collects the shards of a sharded tensor")
    partial = [a for a in t.partial_axes if a != ax]
    if t.is_lazy:
        return derived(t, t.dim_axes, partial, None)
    return derived(t, t.dim_axes, partial,
                   lambda key: t.block(with_coords(key, t.mesh, (ax,), root)))


@collective
def ppermute(t: DistTensor, axis: str, perm: Sequence[tuple[int, int]]) -> DistTensor:
    """Move blocks along ``axis``: for each ``(src, dst)`` pair, rank ``dst`` receives
    rank ``src``'s block; ranks that receive nothing hold zeros.

    The placement is kept. A tensor replicated over ``axis`` is returned as it is when
    ``perm`` is a full permutation (every rank receives the same value it had).
    """
    ax = single_axis(t.mesh, axis, "ppermute")
    size = t.mesh.axis_size(ax)
    pairs = check_perm(perm, size)
    state = t.placement(ax)
    dst_of = {d: s for s, d in pairs}
    if state == REPLICATED:
        if len(dst_of) == size:
            return t
        raise PlacementError(f"ppermute over {ax!r} of a replicated tensor leaves ranks "
                             f"{sorted(set(range(size)) - set(dst_of))} with nothing",
                             hint="a replicated value cannot hold zeros on some devices; "
                                  "build per-device values with dist.from_shards(..., "
                                  f"partial={ax!r})")
    if state == SHARDED:
        _check_shapes(t, ax, pairs)
    if t.is_lazy:
        return derived(t, t.dim_axes, t.partial_axes, None)
    zeros: dict[tuple[int, ...], np.ndarray] = {}

    def make(key: BlockKey) -> np.ndarray:
        src = dst_of.get(key[t.mesh.axis_position(ax)])
        if src is not None:
            return t.block(with_coords(key, t.mesh, (ax,), src))
        shape = tuple(s.stop - s.start for s in t.region(key))
        if shape not in zeros:  # one shared zero block per shape
            zeros[shape] = np.zeros(shape, t.dtype.np_dtype)
        return zeros[shape]

    return derived(t, t.dim_axes, t.partial_axes, make)


def _check_shapes(t: DistTensor, ax: str, pairs: Sequence[tuple[int, int]]) -> None:
    key = t.block_key(0)
    for src, dst in pairs:
        a = t.region(with_coords(key, t.mesh, (ax,), src))
        b = t.region(with_coords(key, t.mesh, (ax,), dst))
        sa = tuple(s.stop - s.start for s in a)
        sb = tuple(s.stop - s.start for s in b)
        if sa != sb:
            raise MeshShapeError(f"ppermute over {ax!r} moves a shard of shape {sa} "
                                 f"(rank {src}) to rank {dst}, whose shard is {sb}",
                                 hint="uneven shards cannot trade places; pad the dim to "
                                      "a multiple of the axis size")


def send(t: DistTensor, axis: str, *, src: int, dst: int) -> DistTensor:
    """Rank ``src``'s block goes to rank ``dst``; every other rank holds zeros.

    A matched send/recv pair is one :func:`ppermute` with one pair; ``send`` and
    ``recv`` name the same exchange from either end and return the same tensor.
    """
    return ppermute(t, axis, [(src, dst)])


def recv(t: DistTensor, axis: str, *, src: int, dst: int) -> DistTensor:
    """Rank ``dst`` receives rank ``src``'s block (the same exchange as :func:`send`)."""
    return ppermute(t, axis, [(src, dst)])


@user_api
def shift(t: DistTensor, axis: str, offset: int = 1) -> DistTensor:
    """A ring shift: rank ``r`` receives the block of rank ``(r - offset) % size``."""
    first = t[0] if isinstance(t, (list, tuple)) and t else t
    if not isinstance(first, DistTensor):
        return ppermute(t, axis, [])  # ppermute reports the wrong operand
    size = first.mesh.axis_size(axis)
    if not isinstance(offset, (int, np.integer)) or isinstance(offset, bool):
        raise MeshError(f"shift offset {offset!r} is not an int",
                        hint="rank r receives the block of rank (r - offset) % size")
    return ppermute(t, axis, [(r, (r + offset) % size) for r in range(size)])


__all__ = ["broadcast", "ppermute", "recv", "send", "shift"]

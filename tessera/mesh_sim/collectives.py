"""Collectives on distributed tensors, along named mesh axes, deterministic.

Each collective is a placement change of the global value (see
:mod:`tessera.dist.core.tensor` for the three placements) computed the way the devices
would compute it:

==================  ==========================  ========================================
collective          along ``axis``              value
==================  ==========================  ========================================
``all_gather``      sharded -> replicated       unchanged
``reduce_scatter``  partial -> sharded(dim)     rank-order reduction of the summands
``all_reduce``      partial -> replicated       rank-order reduction of the summands
``all_to_all``      sharded(concat_dim) ->      unchanged
                    sharded(split_dim)
``broadcast``       partial -> replicated       the summand of rank ``root``
``ppermute``        (placement kept)            block of rank ``src`` moves to ``dst``;
                                                ranks that receive nothing hold zeros
==================  ==========================  ========================================

Reductions run left to right in rank order in the element's accumulation format and
round once (:func:`.reduce.reduce_in_order`); for f32 a sum is bit for bit
``functools.reduce(np.add, shards)``. An axis may be a tuple of axes (ranked row-major
in the order given). Every collective also takes a list or tuple of tensors on one
mesh and returns the same kind of sequence. The replicated result of a reduction is one
array shared by all devices of a group, never a copy per device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.dist.core.mesh import AxisSpec
from tessera.dist.core.sharding import ShardSpec
from tessera.dist.core.tensor import PARTIAL, REPLICATED, SHARDED, BlockKey, DistTensor
from tessera.errors import MeshShapeError, PlacementError
from tessera.mesh_checks import NAMED_DIMS, check_dim
from tessera.mesh_sim.blocks import (
    assemble,
    check_cover,
    collective,
    derived,
    flat_offset,
    group_keys,
    relative,
    single_axis,
)
from tessera.mesh_sim.reduce import check_op, reduce_in_order

_WHAT_TO_DO = {
    SHARDED: "it is complete, only split: all_gather it to replicate it",
    REPLICATED: "it is already the same everywhere, so there is nothing to reduce "
                "(summing replicas would count the value once per device); use "
                "dist.relayout(t, ShardSpec(...)) to split it without communication",
}


def _need_partial(t: DistTensor, axes: tuple[str, ...], what: str) -> None:
    for a in axes:
        state = t.placement(a)
        if state != PARTIAL:
            raise PlacementError(f"{what} over {a!r} needs a partial tensor, but {t} is "
                                 f"{state} over {a!r}", hint=_WHAT_TO_DO[state])


def _reduced(t: DistTensor, axes: tuple[str, ...], op: str, dim_axes: Any,
             target_of: Any) -> DistTensor:
    partial = [a for a in t.partial_axes if a not in axes]
    if t.is_lazy:
        return derived(t, dim_axes, partial, None)

    def make(key: BlockKey) -> np.ndarray:
        target = target_of(key)
        summands = []
        for k in group_keys(key, t.mesh, axes):
            rel = relative(target, t.region(k))
            if rel is None:
                raise MeshShapeError(f"the region {target} does not lie inside one shard",
                                     hint="scatter over a dim that no other axis splits "
                                          "unevenly")
            summands.append(t.block(k)[rel])
        return reduce_in_order(summands, t.element, op,
                               counter_offset=flat_offset(target, t.shape))

    return derived(t, dim_axes, partial, make)


@collective
def all_reduce(t: DistTensor, axis: AxisSpec, op: str = "sum") -> DistTensor:
    """Combine the summands of a partial tensor: partial -> replicated over ``axis``.

    ``op`` is ``"sum"`` (the global value is kept), ``"mean"``, ``"max"`` or ``"min"``
    (combining the per-device values elementwise).
    """
    axes = t.mesh.axis_tuple(axis)
    check_op(op)
    _need_partial(t, axes, "all_reduce")
    shell = DistTensor(t.shape, t.element, t.mesh, t.dim_axes,
                       partial=[a for a in t.partial_axes if a not in axes])
    return _reduced(t, axes, op, t.dim_axes, shell.region)


@collective
def reduce_scatter(t: DistTensor, axis: AxisSpec, op: str = "sum",
                   dim: int | str = 0) -> DistTensor:
    """Reduce the summands and split the result: partial -> sharded on ``dim``.

    ``dim`` is ``"row"``, ``"col"``, an int or a dim name. Each device reduces only its
    own piece, in rank order, so the bits equal those of ``all_reduce`` sliced.
    """
    axes = t.mesh.axis_tuple(axis)
    check_op(op)
    _need_partial(t, axes, "reduce_scatter")
    d = _dim_of(t, dim, axes, "reduce_scatter")
    dim_axes = tuple(a + axes if i == d else a for i, a in enumerate(t.dim_axes))
    shell = DistTensor(t.shape, t.element, t.mesh, dim_axes,
                       partial=[a for a in t.partial_axes if a not in axes])
    return _reduced(t, axes, op, dim_axes, shell.region)


def _gather_plan(t: DistTensor, axes: tuple[str, ...]) -> tuple[tuple[str, ...], Any]:
    """The axes that really shard (replicated ones are no-ops) and the new layout."""
    moving = []
    for a in axes:
        state = t.placement(a)
        if state == PARTIAL:
            raise PlacementError(f"all_gather over {a!r} of a tensor that is partial over "
                                 f"{a!r}", hint="sum the summands with all_reduce (or "
                                 "reduce_scatter then all_gather)")
        if state == SHARDED:
            moving.append(a)
    dim_axes = []
    for entry in t.dim_axes:
        gone = [a for a in entry if a in moving]
        if gone and tuple(entry[len(entry) - len(gone):]) != tuple(gone):
            raise PlacementError(f"cannot gather {tuple(gone)} alone out of the axes "
                                 f"{entry} that split one dim",
                                 hint=f"gather the minor axes first, e.g. all_gather(t, "
                                      f"{entry[-1]!r}), or all of {entry} at once")
        dim_axes.append(tuple(a for a in entry if a not in moving))
    return tuple(moving), tuple(dim_axes)


@collective
def all_gather(t: DistTensor, axis: AxisSpec) -> DistTensor:
    """Collect the shards along ``axis``: sharded -> replicated; the value is unchanged.

    Over an axis the tensor is already replicated on, it is returned as it is.
    """
    axes = t.mesh.axis_tuple(axis)
    moving, dim_axes = _gather_plan(t, axes)
    if not moving:
        return t
    return _regroup(t, moving, dim_axes)


def _regroup(t: DistTensor, axes: tuple[str, ...], dim_axes: Any) -> DistTensor:
    shell = DistTensor(t.shape, t.element, t.mesh, dim_axes, partial=t.partial_axes)
    for key in shell.block_keys():  # what real devices could exchange, even for views
        check_cover(shell.region(key), [t.region(k) for k in group_keys(key, t.mesh, axes)])
    if t.is_lazy or t.backing is not None:
        return derived(t, dim_axes, t.partial_axes, None)  # same array, new layout

    def make(key: BlockKey) -> np.ndarray:
        sources = [(t.region(k), t.block(k)) for k in group_keys(key, t.mesh, axes)]
        return assemble(shell.region(key), sources, t.dtype.np_dtype)

    return derived(t, dim_axes, t.partial_axes, make)


@collective
def all_to_all(t: DistTensor, axis: str, split_dim: int | str,
               concat_dim: int | str) -> DistTensor:
    """Re-split along ``axis``: sharded on ``concat_dim`` -> sharded on ``split_dim``.

    Device ``r`` splits its shard along ``split_dim`` into one piece per rank and
    concatenates the pieces it receives along ``concat_dim`` in rank order: the global
    value is unchanged, only the split dim moves (what MoE token routing does).
    """
    ax = single_axis(t.mesh, axis, "all_to_all")
    s = _dim_of(t, split_dim, ax, "all_to_all split_dim")
    c = _dim_of(t, concat_dim, ax, "all_to_all concat_dim")
    if s == c:
        raise PlacementError(f"all_to_all with split_dim == concat_dim == {s}",
                             hint="split one dim and concatenate along another")
    if t.placement(ax) != SHARDED or t.dim_axes[c][-1:] != (ax,):
        raise PlacementError(f"all_to_all over {ax!r} needs a tensor whose dim {c} "
                             f"(concat_dim) is split over {ax!r}; {t} is not",
                             hint="the concat dim is the one the axis splits before the "
                                  "exchange; the split dim is the one it splits after")
    dim_axes = tuple(a[:-1] if i == c else (*a, ax) if i == s else a
                     for i, a in enumerate(t.dim_axes))
    return _regroup(t, (ax,), dim_axes)


def _dim_of(t: DistTensor, dim: int | str, axes: AxisSpec, what: str) -> int:
    """The int dim that ``dim`` ("row", "col", an int, a dim name) names in ``t``."""
    if not isinstance(dim, str) or dim in NAMED_DIMS:
        return check_dim(dim, t.ndim, what)
    spec = ShardSpec((dim,), (axes if isinstance(axes, str) else tuple(axes),))
    return next(i for i, a in enumerate(spec.resolve(t.ndim, None, t.dims)) if a)


@collective
def relayout(t: DistTensor, layout: ShardSpec) -> DistTensor:
    """The same global value under another layout (no reduction; the simulator's
    equivalent of each device slicing or gathering what the new layout asks for)."""
    if t.partial_axes:
        raise PlacementError(f"relayout of a tensor that is partial over {t.partial_axes}",
                             hint="reduce it first with all_reduce or reduce_scatter")
    if not isinstance(layout, ShardSpec):
        raise PlacementError(f"layout must be a ShardSpec, got {type(layout).__name__}",
                             hint='write dist.ShardSpec(partition=("row",), '
                                  'mesh_axes=("tp",))')
    dim_axes = layout.resolve(t.ndim, t.mesh, t.dims)
    if t.is_lazy or t.backing is not None:
        return derived(t, dim_axes, (), None)
    return DistTensor(t.shape, t.element, t.mesh, dim_axes, dims=t.dims,
                      global_array=t.numpy())


__all__ = ["all_gather", "all_reduce", "all_to_all", "reduce_scatter", "relayout"]

"""Moving a DistTensor between layouts without changing its value.

``shard_local`` is what a device does to keep its piece of a replicated value (a
slice, no communication); ``relayout_dims`` gathers the axes a layout drops (the core's
``all_gather``) and then slices the ones it adds. Array-backed tensors only change
their layout: every shard stays a view of the one global array.
"""

from __future__ import annotations

from tessera.dist.core.sharding import DimAxes
from tessera.dist.core.tensor import PARTIAL, SHARDED, BlockKey, DistTensor
from tessera.errors import PlacementError
from tessera.mesh_sim.blocks import derived, relative
from tessera.mesh_sim.collectives import all_gather


def shard_local(t: DistTensor, axes: tuple[str, ...], dim: int) -> DistTensor:
    """Replicated over ``axes`` -> sharded on ``dim`` over them: each device keeps the
    piece of its own block that the new layout gives it."""
    for a in axes:
        if t.placement(a) in (SHARDED, PARTIAL):
            raise PlacementError(f"cannot slice a value {t.placement(a)} over {a!r} into "
                                 "shards", hint="gather or reduce it first")
    dim_axes = tuple(d + axes if k == dim else d for k, d in enumerate(t.dim_axes))
    if t.is_lazy or (t.backing is not None and not t.partial_axes):
        return derived(t, dim_axes, t.partial_axes, None)
    shell = DistTensor(t.shape, t.element, t.mesh, dim_axes, partial=t.partial_axes)

    def make(key: BlockKey) -> object:
        source = t.block_key(t.mesh.index(key))
        rel = relative(shell.region(key), t.region(source))
        assert rel is not None  # the new region lies inside the replicated block
        return t.block(source)[rel]

    return derived(t, dim_axes, t.partial_axes, make)  # type: ignore[arg-type]


def relayout_dims(t: DistTensor, dims: DimAxes) -> DistTensor:
    """The same value laid out with ``dims`` (gathers, then local slices)."""
    for d, have in enumerate(t.dim_axes):
        keep = 0
        while keep < min(len(have), len(dims[d])) and have[keep] == dims[d][keep]:
            keep += 1
        changes = keep < len(have) or keep < len(dims[d])
        if keep and changes and (t.shape[d] % t.mesh.axis_size(have) or
                                 t.shape[d] % t.mesh.axis_size(dims[d])):
            keep = 0  # uneven pieces over several axes do not nest: gather the dim whole
        if have[keep:]:
            t = all_gather(t, have[keep:])
    for d, want in enumerate(dims):
        extra = want[len(t.dim_axes[d]):]
        if extra:
            t = shard_local(t, tuple(extra), d)
    return t


__all__ = ["relayout_dims", "shard_local"]

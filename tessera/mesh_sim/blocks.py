"""Block plumbing shared by the collectives: key arithmetic, assembly, and result tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import wraps
from typing import Any, TypeVar

import numpy as np

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.sharding import DimAxes
from tessera.dist.core.tensor import BlockKey, DistTensor
from tessera.errors import MeshError, MeshShapeError, user_api

Region = tuple[slice, ...]
F = TypeVar("F", bound=Callable[..., Any])


def with_coords(key: BlockKey, mesh: Mesh, axes: Sequence[str], rank: int) -> BlockKey:
    """``key`` moved to ``rank`` of the axis group ``axes`` (row-major over the axes)."""
    k = list(key)
    for a in reversed(axes):
        p = mesh.axis_position(a)
        rank, k[p] = divmod(rank, mesh.shape[p])
    return tuple(k)


def group_keys(key: BlockKey, mesh: Mesh, axes: Sequence[str]) -> list[BlockKey]:
    """The keys of the devices along ``axes`` that share ``key``'s other coordinates,
    in rank order."""
    return [with_coords(key, mesh, axes, r) for r in range(mesh.axis_size(tuple(axes)))]


def single_axis(mesh: Mesh, axis: Any, what: str) -> str:
    """``axis`` checked to be one axis name of ``mesh`` (MeshError otherwise)."""
    names = mesh.axis_tuple(axis)
    if len(names) != 1:
        raise MeshError(f"{what} runs along one axis, got {names}",
                        hint=f"name a single axis, one of {mesh.axes}")
    return names[0]


def relative(inner: Region, outer: Region) -> Region | None:
    """``inner`` in the coordinates of ``outer``, or None when it is not inside."""
    out = []
    for i, o in zip(inner, outer):
        if i.start < o.start or i.stop > o.stop:
            return None
        out.append(slice(i.start - o.start, i.stop - o.start))
    return tuple(out)


def _overlap(a: Region, b: Region) -> tuple[list[int], list[int]]:
    return ([max(x.start, y.start) for x, y in zip(a, b)],
            [min(x.stop, y.stop) for x, y in zip(a, b)])


def check_cover(target: Region, regions: Sequence[Region]) -> None:
    """MeshShapeError unless the disjoint ``regions`` cover ``target`` (an uneven
    ``numpy.array_split`` that nests differently in the two layouts leaves gaps)."""
    size = int(np.prod([s.stop - s.start for s in target], dtype=np.int64))
    filled = 0
    for region in regions:
        lo, hi = _overlap(target, region)
        filled += int(np.prod([max(0, h - a) for a, h in zip(lo, hi)], dtype=np.int64))
    if filled != size:
        raise MeshShapeError(
            f"the shards cannot be regrouped into the region {target}: an uneven "
            "numpy.array_split nests differently in the two layouts",
            hint="collect all axes of the dim at once, or use sizes divisible by the "
                 "number of shards")


def assemble(target: Region, sources: Sequence[tuple[Region, np.ndarray]],
             dtype: np.dtype) -> np.ndarray:
    """The values of ``target`` taken from disjoint ``sources`` (region, array) pairs.

    A source that covers the whole target gives a view (no copy); otherwise a new array
    is filled piece by piece (after :func:`check_cover`).
    """
    for region, arr in sources:
        rel = relative(target, region)
        if rel is not None:
            return arr[rel]
    check_cover(target, [r for r, _ in sources])
    out = np.empty(tuple(s.stop - s.start for s in target), dtype)
    for region, arr in sources:
        lo, hi = _overlap(target, region)
        if any(h <= a for a, h in zip(lo, hi)):
            continue
        dst = tuple(slice(a - t.start, b - t.start) for a, b, t in zip(lo, hi, target))
        src = tuple(slice(a - r.start, b - r.start) for a, b, r in zip(lo, hi, region))
        out[dst] = arr[src]
    return out


def flat_offset(region: Region, shape: tuple[int, ...]) -> int:
    """The linear index of a region's first element (a counter base for stochastic
    rounding, so that different blocks draw different random bits)."""
    if not shape or any(s == 0 for s in shape):
        return 0
    return int(np.ravel_multi_index([min(s.start, n - 1) for s, n in zip(region, shape)],
                                    shape))


def derived(t: DistTensor, dim_axes: DimAxes, partial: Sequence[str],
            make: Callable[[BlockKey], np.ndarray] | None) -> DistTensor:
    """A tensor like ``t`` with a new layout and partial axes.

    ``make`` computes every block now (eagerly, in key order, so that the cost of a
    collective is paid where it is called); None keeps ``t``'s data: its global array
    when it has one, or zeros when ``t`` is lazy.
    """
    kw: dict[str, Any] = {"partial": partial, "dims": t.dims}
    if make is None:
        if not t.is_lazy:
            if t.backing is None:
                raise AssertionError("derived(make=None) needs a lazy or array-backed tensor")
            kw["global_array"] = t.backing
        return DistTensor(t.shape, t.element, t.mesh, dim_axes, **kw)
    shell = DistTensor(t.shape, t.element, t.mesh, dim_axes, partial=partial, dims=t.dims)
    blocks = {key: make(key) for key in shell.block_keys()}
    if len(blocks) == 1 and not partial:  # one block is the global value itself
        return DistTensor(t.shape, t.element, t.mesh, dim_axes, dims=t.dims,
                          global_array=next(iter(blocks.values())))
    return DistTensor(t.shape, t.element, t.mesh, dim_axes, source=blocks.__getitem__, **kw)


def check_tensor(t: Any, what: str) -> DistTensor:
    """``t`` if it is a DistTensor, else MeshError naming the collective."""
    if not isinstance(t, DistTensor):
        raise MeshError(f"{what} takes a DistTensor, got {type(t).__name__}",
                        hint="distribute arrays first: dist.from_numpy(a, mesh=..., "
                             "layout=...)")
    return t


def collective(fn: F) -> F:
    """Make ``fn(t, axis, ...)`` a public collective that also takes a list or tuple of
    tensors on one mesh (applied to each, in order), and reports errors at the user's
    line."""
    from tessera.mesh_sim.profile import observe_collective

    # Under profile() each collective call is recorded with its simulated cost.
    fn = observe_collective(fn)

    @wraps(fn)
    def wrapper(t: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(t, (list, tuple)):
            items = [check_tensor(x, fn.__name__) for x in t]
            meshes = {x.mesh for x in items}
            if len(meshes) > 1:
                raise MeshError(f"{fn.__name__} operands live on different meshes: "
                                f"{sorted(map(repr, meshes))}",
                                hint="put every operand of one collective on one mesh")
            return type(t)(fn(x, *args, **kwargs) for x in items)
        return fn(check_tensor(t, fn.__name__), *args, **kwargs)

    return user_api(wrapper)  # type: ignore[return-value]


__all__ = ["assemble", "check_cover", "check_tensor", "collective", "derived", "flat_offset",
           "group_keys", "relative", "single_axis", "with_coords"]

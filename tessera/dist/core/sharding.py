"""Shard specifications: which tensor dims are split over which mesh axes.

``ShardSpec(partition=("row",), mesh_axes=("tp",))`` splits dim 0 over the ``tp`` axis.
``partition`` entries name tensor dims: ``"row"`` (dim 0), ``"col"`` (dim 1), an int
(negative counts from the end), or an annotation dim name such as ``"K"`` (resolved
against the tensor's dim names); ``mesh_axes[i]`` is the axis, or tuple of axes, that
splits ``partition[i]``. A tuple of axes splits the dim over the product of their sizes,
row-major in the order given. ``None`` on either side of a pair leaves it out. Mesh
axes that the spec does not name replicate. With no ``partition``, ``mesh_axes`` is read
positionally, like a JAX ``PartitionSpec``: entry ``i`` splits dim ``i``.

Uneven splits follow ``numpy.array_split``: with ``n`` elements over ``p`` shards, the
first ``n % p`` shards hold one element more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from tessera.dist.core.mesh import Mesh
from tessera.errors import ShardingError, user_api
from tessera.mesh_checks import MAX_DEVICES, as_tuple

DimRef = Union[str, int, None]  # noqa: UP007 - a runtime alias, also on 3.10
"""A partition entry: ``"row"``, ``"col"``, an int dim, a dim name, or None."""

AxisEntry = Union[str, tuple[str, ...], None]  # noqa: UP007
"""A mesh_axes entry: one axis, a tuple of axes, or None."""

DimAxes = tuple[tuple[str, ...], ...]
"""A resolved layout: for every tensor dim, the axes that split it (empty: unsharded)."""

_NAMED = {"row": 0, "col": 1}


def _entry(e: Any) -> AxisEntry:
    if e is None or isinstance(e, str):
        return e
    if isinstance(e, (tuple, list)) and e and all(isinstance(a, str) for a in e):
        return tuple(e)
    raise ShardingError(f"mesh_axes entry {e!r} is not an axis name or a tuple of names",
                        hint='write mesh_axes=("tp",) or mesh_axes=(("dp", "tp"),)')


def _axes_of(e: AxisEntry) -> tuple[str, ...]:
    return () if e is None else (e,) if isinstance(e, str) else e


@dataclass(frozen=True, init=False)
class ShardSpec:
    """How a tensor is split over a mesh (see the module docstring for the rules)."""

    partition: tuple[DimRef, ...]
    mesh_axes: tuple[AxisEntry, ...]

    # A hand-written __init__, not a generated one: errors raised here must point at the
    # user's line, and generated code has no file of its own to skip.
    @user_api
    def __init__(self, partition: Sequence[DimRef] | DimRef = None,
                 mesh_axes: Sequence[AxisEntry] | str = ()) -> None:
        axes = (mesh_axes,) if isinstance(mesh_axes, str) else as_tuple(
            mesh_axes, "mesh_axes", ShardingError, 'write mesh_axes=("tp",)')
        axes = tuple(_entry(e) for e in axes)
        part: Any = partition
        if part is None:
            part = tuple(range(len(axes)))
        elif isinstance(part, (str, int)):
            part = (part,)
        part = as_tuple(part, "partition", ShardingError, 'write partition=("row",)')
        for p in part:
            if not (p is None or isinstance(p, str) or
                    (isinstance(p, int) and not isinstance(p, bool))):
                raise ShardingError(f"partition entry {p!r} does not name a tensor dim",
                                    hint='use "row", "col", an int dim, a dim name or None')
        if len(part) != len(axes):
            raise ShardingError(
                f"partition {part} has {len(part)} entries but mesh_axes {axes} has "
                f"{len(axes)}", hint="pair every partitioned dim with one mesh axis entry")
        used = [a for p, e in zip(part, axes) if p is not None for a in _axes_of(e)]
        twice = sorted({a for a in used if used.count(a) > 1})
        if twice:
            raise ShardingError(f"mesh axis {twice[0]!r} shards more than one dim in "
                                f"ShardSpec(partition={part}, mesh_axes={axes})",
                                hint="an axis can split one dim only; use another axis")
        object.__setattr__(self, "partition", part)
        object.__setattr__(self, "mesh_axes", axes)

    def __str__(self) -> str:
        return f"ShardSpec(partition={self.partition}, mesh_axes={self.mesh_axes})"

    @classmethod
    def replicated(cls) -> ShardSpec:
        """The spec that splits nothing: the tensor is replicated on every device."""
        return cls((), ())

    @classmethod
    def from_dim_axes(cls, dim_axes: DimAxes) -> ShardSpec:
        """The normal form of a resolved layout: int dims in increasing order."""
        pairs = [(d, a if len(a) > 1 else a[0]) for d, a in enumerate(dim_axes) if a]
        return cls(tuple(d for d, _ in pairs), tuple(a for _, a in pairs))

    @property
    def axes(self) -> tuple[str, ...]:
        """Every mesh axis the spec names, in order of appearance."""
        return tuple(a for p, e in zip(self.partition, self.mesh_axes)
                     if p is not None for a in _axes_of(e))

    def resolve(self, ndim: int, mesh: Mesh | None = None,
                dims: Sequence[str | None] | None = None) -> DimAxes:
        """The axes that split each of ``ndim`` dims, checked against ``mesh``.

        ``dims`` names the tensor's dims (from its annotation) for partition entries that
        are dim names. Raises ShardingError for a dim the tensor does not have, a dim
        split twice, or an axis that ``mesh`` does not have.
        """
        out: list[tuple[str, ...]] = [() for _ in range(ndim)]
        for p, e in zip(self.partition, self.mesh_axes):
            if p is None or e is None:
                continue
            d = self._dim(p, ndim, dims)
            if out[d]:
                raise ShardingError(f"dim {d} is sharded twice by {self}",
                                    hint="list each dim once; split it over several axes "
                                         'with a tuple: mesh_axes=(("dp", "tp"),)')
            out[d] = _axes_of(e)
        if mesh is not None:
            for a in self.axes:
                if a not in mesh.axes:
                    raise ShardingError(f"{self} names axis {a!r}, which {mesh!r} lacks",
                                        hint=f"use the mesh axes {mesh.axes}")
        return tuple(out)

    def _dim(self, p: str | int, ndim: int, dims: Sequence[str | None] | None) -> int:
        if isinstance(p, int):
            d = p + ndim if p < 0 else p
        elif p in _NAMED:
            d = _NAMED[p]
        elif dims is not None and p in list(dims):
            d = list(dims).index(p)
        else:
            known = "" if dims is None else f" (the tensor's dims are {tuple(dims)})"
            raise ShardingError(f"partition entry {p!r} is not a dim of the tensor{known}",
                                hint='use "row", "col" or an int, or pass dims=(...) '
                                     "naming the tensor's dims")
        if not 0 <= d < ndim:
            raise ShardingError(f"{self} partitions dim {p!r} but the tensor has {ndim} "
                                f"dim(s)", hint="partition only dims the tensor has")
        return d


@user_api
def split_offsets(n: int, parts: int) -> list[int]:
    """The ``parts + 1`` boundaries of ``numpy.array_split(range(n), parts)``."""
    for value, what, low in ((n, "n", 0), (parts, "parts", 1)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise ShardingError(f"split_offsets: {what}={value!r} is not an int >= {low}",
                                hint="split_offsets(n, parts) splits n elements into parts "
                                     "pieces")
    if parts > MAX_DEVICES:
        raise ShardingError(f"split_offsets: {parts} parts, more than the {MAX_DEVICES} "
                            "devices a mesh may have", hint="parts counts shards, one per "
                                                            "device along the split")
    return offsets(int(n), int(parts))


def offsets(n: int, parts: int) -> list[int]:
    """:func:`split_offsets` without the checks (the simulator's own calls)."""
    q, r = divmod(n, parts)
    return [k * q + min(k, r) for k in range(parts + 1)]


def device_slices(dim_axes: DimAxes, shape: Sequence[int], mesh: Mesh,
                  index: int) -> tuple[slice, ...]:
    """The region of the global array that device ``index`` holds."""
    out = []
    for n, axes in zip(shape, dim_axes):
        if not axes:
            out.append(slice(0, n))
            continue
        bounds = offsets(n, mesh.axis_size(axes))
        k = mesh.rank_in(axes, index)
        out.append(slice(bounds[k], bounds[k + 1]))
    return tuple(out)


@user_api
def shard_slices(global_shape: Sequence[int], spec: ShardSpec, mesh: Mesh,
                 dims: Sequence[str | None] | None = None) -> list[tuple[slice, ...]]:
    """The global region held by each device, in device-index order."""
    if not isinstance(spec, ShardSpec) or not isinstance(mesh, Mesh):
        raise ShardingError(f"shard_slices takes a ShardSpec and a Mesh, got "
                            f"{type(spec).__name__} and {type(mesh).__name__}",
                            hint="shard_slices((8, 4), dist.ShardSpec(...), mesh)")
    sizes = as_tuple(global_shape, "global_shape", ShardingError,
                     "write a shape such as (8, 4)")
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0
               for n in sizes):
        raise ShardingError(f"global_shape {global_shape!r} is not a shape",
                            hint="write a shape such as (8, 4): non-negative ints")
    global_shape = tuple(int(n) for n in sizes)
    dim_axes = spec.resolve(len(global_shape), mesh, dims)
    return [device_slices(dim_axes, global_shape, mesh, i) for i in range(mesh.size)]


__all__ = ["AxisEntry", "DimAxes", "DimRef", "ShardSpec", "device_slices", "offsets",
           "shard_slices", "split_offsets"]

"""Building distributed tensors: ``tensor``, ``from_numpy`` and ``from_shards``.

Data is converted to the element's storage format once. A tensor built from a global
array serves its shards as views of that one array; devices that hold the same values
share one array object; nothing is copied per device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.sharding import DimAxes, ShardSpec, split_offsets
from tessera.dist.core.tensor import BlockKey, DistTensor
from tessera.errors import MeshError, MeshShapeError, PlacementError, user_api
from tessera.numerics import Element, convert, element, from_numpy_dtype, storage_of


def check_mesh(mesh: Any) -> Mesh:
    """``mesh`` if it is a Mesh, else MeshError."""
    if not isinstance(mesh, Mesh):
        raise MeshError(f"mesh= must be a dist.Mesh, got {type(mesh).__name__}",
                        hint='build one with dist.mesh(devices=..., axes=("tp",))')
    return mesh


def _layout(layout: Any, ndim: int, mesh: Mesh, dims: Sequence[str | None] | None) -> DimAxes:
    if layout is None:
        layout = ShardSpec.replicated()
    if not isinstance(layout, ShardSpec):
        raise MeshError(f"layout= must be a ShardSpec, got {type(layout).__name__}",
                        hint='write layout=dist.ShardSpec(partition=("row",), '
                             'mesh_axes=("tp",))')
    return layout.resolve(ndim, mesh, dims)


def _partial(partial: Any, mesh: Mesh, dim_axes: DimAxes) -> tuple[str, ...]:
    names = mesh.axis_tuple(partial) if partial else ()
    both = [a for a in names if any(a in axes for axes in dim_axes)]
    if both:
        raise PlacementError(f"axis {both[0]!r} cannot both shard a dim and be partial",
                             hint="an axis is sharded, replicated or partial, not two")
    return names


def to_storage(array: Any, elem: Element, *, copy: bool = False) -> np.ndarray:
    """``array`` in the storage format of ``elem``: converted once, or held as is."""
    arr = np.asarray(array)
    storage = storage_of(elem)
    if arr.dtype == storage.np_dtype and storage.name != "tf32":
        return arr.copy() if copy else arr
    return convert(arr, elem)


def _element(dtype: Any, data: Any) -> Element:
    if dtype is not None:
        return element(dtype)
    if data is not None:
        return from_numpy_dtype(np.asarray(data).dtype)
    return element("f32")


@user_api
def tensor(shape: Sequence[int] | None = None, layout: ShardSpec | None = None,
           mesh: Mesh | None = None, dtype: Any = None, data: Any = None, *,
           dims: Sequence[str | None] | None = None, copy: bool = False) -> DistTensor:
    """A distributed tensor of global ``shape`` laid out by ``layout`` on ``mesh``.

    ``dtype`` is any element spelling (``"bf16 @accum(f32)"``, ``ts.f32``); it defaults
    to the data's format, or f32. Without ``data`` nothing is allocated: the tensor's
    value is zeros, and each block is made (as zeros) when a shard is first read or the
    tensor is computed with; ``np.asarray`` of it, or a block, larger than
    ``DistTensor.max_materialize_bytes`` (8 GiB) is a :class:`MaterializeError` that names
    the bytes it would take. With ``data`` (the global value) the
    values are converted to the storage format once and every shard is a view of that
    array. Data already in the storage format is held without a copy unless
    ``copy=True`` (so later writes to it show through, as with ``np.asarray``).
    ``dims`` names the dims, for ShardSpecs that partition by name.
    """
    mesh = check_mesh(mesh)
    elem = _element(dtype, data)
    if data is not None:
        arr = np.asarray(data)
        if shape is not None and tuple(shape) != arr.shape:
            raise MeshShapeError(f"data has shape {arr.shape} but shape={tuple(shape)}",
                                 hint="pass data of the declared global shape")
        shape = arr.shape
    if shape is None:
        raise MeshShapeError("dist.tensor needs shape= or data=", hint="pass shape=(m, n)")
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise MeshShapeError(f"negative size in shape {shape}", hint="sizes are >= 0")
    if dims is not None and len(dims) != len(shape):
        raise MeshShapeError(f"dims {tuple(dims)} name {len(dims)} dims but the shape "
                             f"{shape} has {len(shape)}", hint="name every dim once")
    dim_axes = _layout(layout, len(shape), mesh, dims)
    glob = None if data is None else to_storage(data, elem, copy=copy)
    return DistTensor(shape, elem, mesh, dim_axes, dims=dims, global_array=glob)


@user_api
def from_numpy(array: Any, mesh: Mesh | None = None, layout: ShardSpec | None = None,
               dtype: Any = None, *, dims: Sequence[str | None] | None = None,
               copy: bool = False) -> DistTensor:
    """``array`` (the global value) distributed over ``mesh`` by ``layout``."""
    if array is None:
        raise MeshError("from_numpy needs an array", hint="pass a NumPy array")
    return tensor(layout=layout, mesh=mesh, dtype=dtype, data=array, dims=dims, copy=copy)


@user_api
def from_shards(shards: Sequence[Any] | Mapping[Any, Any], mesh: Mesh | None = None,
                layout: ShardSpec | None = None, dtype: Any = None, *,
                partial: str | Sequence[str] = (), shape: Sequence[int] | None = None,
                dims: Sequence[str | None] | None = None) -> DistTensor:
    """A distributed tensor from each device's local array.

    ``shards`` is a list in device-index order or a mapping from device (id or index) to
    array; a mapping may leave out devices whose values another device already gives
    (replicas). Devices that hold the same block must give equal values (the same
    object is cheapest to check). ``partial`` names the axes along which the shards
    are summands. The global ``shape`` is inferred from the local shapes unless given;
    local shapes must follow ``numpy.array_split`` of it. Arrays already in the storage
    format are held without a copy.
    """
    mesh = check_mesh(mesh)
    given = _by_index(shards, mesh)
    first = next(iter(given.values()))
    elem = _element(dtype, first)
    ndim = first.ndim
    dim_axes = _layout(layout, ndim, mesh, dims)
    names = _partial(partial, mesh, dim_axes)
    skeleton = DistTensor([0] * ndim, elem, mesh, dim_axes, partial=names, dims=dims)
    if shape is None:
        shape = _infer_shape(given, skeleton)
    skeleton = DistTensor(shape, elem, mesh, dim_axes, partial=names, dims=dims)
    blocks: dict[BlockKey, np.ndarray] = {}
    holder: dict[BlockKey, int] = {}
    for i, arr in given.items():
        key = skeleton.block_key(i)
        want = tuple(s.stop - s.start for s in skeleton.region(key))
        if arr.shape != want:
            raise MeshShapeError(f"the shard of device {mesh.devices[i]!r} has shape "
                                 f"{arr.shape}, its region of {tuple(shape)} is {want}",
                                 hint="local shapes follow numpy.array_split of the "
                                      "global shape")
        if key in blocks:
            if arr is not given[holder[key]] and not np.array_equal(arr, given[holder[key]]):
                raise PlacementError(
                    f"devices {mesh.devices[holder[key]]!r} and {mesh.devices[i]!r} hold "
                    "the same block of a replicated layout but different values",
                    hint="give replicas equal values, or mark the axis partial=")
            continue
        blocks[key] = to_storage(arr, elem)
        holder[key] = i
    missing = [k for k in skeleton.block_keys() if k not in blocks]
    if missing:
        raise MeshError(f"no shard given for device {mesh.devices[mesh.index(missing[0])]!r}",
                        hint="give every device (or one device of each replica group)")
    return DistTensor(shape, elem, mesh, dim_axes, partial=names, dims=dims,
                      source=blocks.__getitem__)


def _by_index(shards: Any, mesh: Mesh) -> dict[int, np.ndarray]:
    if isinstance(shards, Mapping):
        out = {mesh.device_index(d): np.asarray(a) for d, a in shards.items()}
    else:
        shards = list(shards)
        if len(shards) != mesh.size:
            raise MeshShapeError(f"{len(shards)} shards for a mesh of {mesh.size} devices",
                                 hint="give one array per device, in device-index order, "
                                      "or a mapping {device: array}")
        out = {i: np.asarray(a) for i, a in enumerate(shards)}
    if not out:
        raise MeshError("no shards given", hint="give one array per device")
    ranks = {a.ndim for a in out.values()}
    if len(ranks) > 1:
        raise MeshShapeError(f"shards of different ranks {sorted(ranks)}",
                             hint="every shard has the rank of the global tensor")
    return dict(sorted(out.items()))


def _infer_shape(given: dict[int, np.ndarray], t: DistTensor) -> tuple[int, ...]:
    mesh = t.mesh
    shape = []
    for d, axes in enumerate(t.dim_axes):
        if not axes:
            shape.append(next(iter(given.values())).shape[d])
            continue
        sizes: dict[int, int] = {}
        for i, arr in given.items():
            sizes.setdefault(mesh.rank_in(axes, i), arr.shape[d])
        parts = mesh.axis_size(axes)
        if len(sizes) != parts:
            raise MeshError(f"dim {d} is split over {axes} but not every rank gave a shard",
                            hint="give a shard for every rank of the sharding axes")
        n = sum(sizes.values())
        bounds = split_offsets(n, parts)
        if [bounds[k + 1] - bounds[k] for k in range(parts)] != [sizes[k] for k in
                                                                range(parts)]:
            raise MeshShapeError(f"local sizes {[sizes[k] for k in range(parts)]} along dim "
                                 f"{d} do not follow numpy.array_split of {n}",
                                 hint="the first n % p shards are one larger, or pass shape=")
        shape.append(n)
    return tuple(shape)


__all__ = ["check_mesh", "from_numpy", "from_shards", "tensor", "to_storage"]

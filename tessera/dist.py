"""``ts.dist`` (``from tessera import dist``): meshes, sharded tensors and collectives.

Build a mesh, lay a tensor out on it, and move it between placements::

    from tessera import dist

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))
    W = dist.tensor(shape=(8192, 8192), mesh=mesh, dtype="bf16 @accum(f32)",
                    layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)))
    W_full = dist.all_gather(W, "tp")          # sharded -> replicated over tp

All devices are virtual devices of the mesh simulator (:mod:`tessera.mesh_sim`), unless
a GPU backend maps them. Collectives reduce in rank order and are bit-reproducible.
``dist.mpi`` holds the same all-reduce spread over MPI ranks (imported on first use).

``dist.tensor`` without ``data`` is lazy: metadata until a shard is read, and zeros
wherever it is read or computed with (``np.asarray``, ``@ts.jit``); making more than
``dist.DistTensor.max_materialize_bytes`` (8 GiB) of it at once is a
``dist.MaterializeError``.

The collectives also take traced values: under ``@ts.jit`` they are placement changes of
global values, in ``dist.index_launch`` bodies they combine the values of all indices
(docs/distributed.md).
"""

from __future__ import annotations

from typing import Any

from tessera.mesh_sim import (
    NVL72_FACTORS,
    PARTIAL,
    REPLICATED,
    SHARDED,
    DistTensor,
    MaterializeError,
    Mesh,
    MeshError,
    MeshShapeError,
    PlacementError,
    ShardingError,
    ShardSpec,
    from_numpy,
    from_shards,
    mesh,
    reduce_in_order,
    relayout,
    shard_slices,
    shift,
    split_offsets,
    tensor,
)
from tessera.mesh_sim.launch import axis_index, index_launch
from tessera.mesh_sim.regions import Region, RegionConflictError, RegionError, read, reduce, write
from tessera.mesh_sim.spmd.api import (  # these also work on traced values (jit, launches)
    all_gather,
    all_reduce,
    all_to_all,
    broadcast,
    ppermute,
    recv,
    reduce_scatter,
    send,
)
from tessera.mesh_sim.spmd.depend import LaunchGraph, launch_graph


def __getattr__(name: str) -> Any:
    # The MPI layer imports mpi4py lazily; ``dist.mpi`` loads it only when asked for.
    if name == "mpi":
        from tessera.mesh_sim import mpi

        return mpi
    raise AttributeError(f"module 'tessera.dist' has no attribute {name!r}")


__all__ = [
    "NVL72_FACTORS", "PARTIAL", "REPLICATED", "SHARDED", "DistTensor", "LaunchGraph",
    "MaterializeError", "Mesh",
    "MeshError", "MeshShapeError", "PlacementError", "Region", "RegionConflictError",
    "RegionError", "ShardSpec", "ShardingError", "all_gather", "all_reduce", "all_to_all",
    "axis_index", "broadcast", "from_numpy", "from_shards", "index_launch", "launch_graph",
    "mesh", "ppermute", "read", "recv", "reduce", "reduce_in_order", "reduce_scatter",
    "relayout", "send", "shard_slices", "shift", "split_offsets", "tensor", "write",
]

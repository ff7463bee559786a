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
"""

from __future__ import annotations

from typing import Any

from tessera.mesh_sim import (
    NVL72_FACTORS,
    PARTIAL,
    REPLICATED,
    SHARDED,
    DistTensor,
    Mesh,
    MeshError,
    MeshShapeError,
    PlacementError,
    ShardingError,
    ShardSpec,
    all_gather,
    all_reduce,
    all_to_all,
    broadcast,
    from_numpy,
    from_shards,
    mesh,
    ppermute,
    recv,
    reduce_in_order,
    reduce_scatter,
    relayout,
    send,
    shard_slices,
    shift,
    split_offsets,
    tensor,
)


def __getattr__(name: str) -> Any:
    # The MPI layer imports mpi4py lazily; ``dist.mpi`` loads it only when asked for.
    if name == "mpi":
        from tessera.mesh_sim import mpi

        return mpi
    raise AttributeError(f"module 'tessera.dist' has no attribute {name!r}")


__all__ = [
    "NVL72_FACTORS", "PARTIAL", "REPLICATED", "SHARDED", "DistTensor", "Mesh", "MeshError",
    "MeshShapeError", "PlacementError", "ShardSpec", "ShardingError", "all_gather",
    "all_reduce", "all_to_all", "broadcast", "from_numpy", "from_shards", "mesh",
    "ppermute", "recv", "reduce_in_order", "reduce_scatter", "relayout", "send",
    "shard_slices", "shift", "split_offsets", "tensor",
]

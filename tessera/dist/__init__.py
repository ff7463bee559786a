"""``ts.dist`` (``from tessera import dist``): meshes, sharded tensors and collectives.

Build a mesh, lay a tensor out on it, and move it between placements::

    from tessera import dist

    mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))
    W = dist.tensor(shape=(8192, 8192), mesh=mesh, dtype="bf16 @accum(f32)",
                    layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)))
    W_full = dist.all_gather(W, "tp")          # sharded -> replicated over tp

All devices are virtual devices of the mesh simulator (:mod:`tessera.mesh_sim`, the
runtime below this API), unless a GPU backend maps them. Collectives reduce in rank
order and are bit-reproducible. ``dist.mpi`` holds the same all-reduce spread over MPI
ranks. Every name is imported on first use, so ``import tessera`` does not load the
simulator.

The package: :mod:`.core` (meshes, shard specs, ``DistTensor`` and its construction,
regions: what the runtime takes and returns), :mod:`.launch` (``index_launch``),
:mod:`.pipeline` (stages and checked schedules: ``from tessera.dist.pipeline import
Pipeline, Stage, gpipe``) and :mod:`.moe` (mixture of experts: ``tessera.dist.moe.MoE``).

``dist.tensor`` without ``data`` is lazy: metadata until a shard is read, and zeros
wherever it is read or computed with (``np.asarray``, ``@ts.jit``); making more than
``dist.DistTensor.max_materialize_bytes`` (8 GiB) of it at once is a
``dist.MaterializeError``.

The collectives also take traced values: under ``@ts.jit`` they are placement changes of
global values, in ``dist.index_launch`` bodies they combine the values of all indices
(docs/distributed.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera import lazy
from tessera.errors import (  # defined below the IR: nothing to load
    MaterializeError,
    MeshError,
    MeshShapeError,
    PlacementError,
    ShardingError,
)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and linters
    from tessera.dist.core.construct import from_numpy, from_shards, tensor
    from tessera.dist.core.mesh import NVL72_FACTORS, Mesh, mesh
    from tessera.dist.core.regions import (
        Region,
        RegionConflictError,
        RegionError,
        read,
        reduce,
        write,
    )
    from tessera.dist.core.sharding import ShardSpec, shard_slices, split_offsets
    from tessera.dist.core.tensor import PARTIAL, REPLICATED, SHARDED, DistTensor
    from tessera.dist.launch import axis_index, index_launch
    from tessera.mesh_sim.collectives import relayout
    from tessera.mesh_sim.p2p import shift
    from tessera.mesh_sim.reduce import reduce_in_order
    from tessera.mesh_sim.spmd.api import (
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

# The rest is imported on first access, one module at a time: ``dist.mesh`` loads the
# mesh, not the simulator's collectives, the pipelines or networkx.
__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.dist.core.mesh", "NVL72_FACTORS", "Mesh", "mesh"),
    **lazy.names("tessera.dist.core.tensor", "PARTIAL", "REPLICATED", "SHARDED", "DistTensor"),
    **lazy.names("tessera.dist.core.sharding", "ShardSpec", "shard_slices", "split_offsets"),
    **lazy.names("tessera.dist.core.construct", "from_numpy", "from_shards", "tensor"),
    **lazy.names("tessera.mesh_sim.reduce", "reduce_in_order"),
    **lazy.names("tessera.mesh_sim.collectives", "relayout"),
    **lazy.names("tessera.mesh_sim.p2p", "shift"),
    **lazy.names("tessera.dist.launch", "axis_index", "index_launch"),
    **lazy.names("tessera.dist.core.regions", "Region", "RegionConflictError", "RegionError",
                 "read", "reduce", "write"),
    # these also work on traced values (jit, launches)
    **lazy.names("tessera.mesh_sim.spmd.api", "all_gather", "all_reduce", "all_to_all",
                 "broadcast", "ppermute", "recv", "reduce_scatter", "send"),
    **lazy.names("tessera.mesh_sim.spmd.depend", "LaunchGraph", "launch_graph"),
    # the MPI layer (it imports mpi4py when a communicator is asked for)
    "mpi": ("tessera.mesh_sim.mpi", None),
})

__all__ = [
    "NVL72_FACTORS", "PARTIAL", "REPLICATED", "SHARDED", "DistTensor", "LaunchGraph",
    "MaterializeError", "Mesh",
    "MeshError", "MeshShapeError", "PlacementError", "Region", "RegionConflictError",
    "RegionError", "ShardSpec", "ShardingError", "all_gather", "all_reduce", "all_to_all",
    "axis_index", "broadcast", "from_numpy", "from_shards", "index_launch", "launch_graph",
    "mesh", "ppermute", "read", "recv", "reduce", "reduce_in_order", "reduce_scatter",
    "relayout", "send", "shard_slices", "shift", "split_offsets", "tensor", "write",
]

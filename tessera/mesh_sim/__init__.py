"""The mesh simulator: a whole device mesh (an NVL72 rack: 72 GPUs) on one CPU.

* :mod:`.mesh` -- :class:`Mesh`, named axes over virtual devices (row-major coordinates);
* :mod:`.sharding` -- :class:`ShardSpec` and ``numpy.array_split`` shard regions;
* :mod:`.tensor` -- :class:`DistTensor`: sharded, replicated or partial along each axis,
  lazily allocated, replicas sharing one array;
* :mod:`.construct` -- ``tensor``, ``from_numpy``, ``from_shards``;
* :mod:`.collectives` and :mod:`.p2p` -- ``all_gather``, ``reduce_scatter``,
  ``all_reduce``, ``all_to_all``, ``broadcast``, ``ppermute``, ``send``/``recv``,
  ``shift``, ``relayout``;
* :mod:`.reduce` -- the rank-order reduction (accumulation format, one rounding);
* :mod:`.mpi` -- the same all-reduce over MPI ranks, bit for bit (needs mpi4py).

Everything is deterministic: a reduction adds in rank order, left to right, so its bits
do not depend on how the simulation is run (one process or any number of MPI ranks).
The user-facing namespace is :mod:`tessera.dist`.
"""

from tessera.mesh_sim.collectives import (
    all_gather,
    all_reduce,
    all_to_all,
    reduce_scatter,
    relayout,
)
from tessera.mesh_sim.construct import from_numpy, from_shards, tensor
from tessera.mesh_sim.errors import MeshError, MeshShapeError, PlacementError, ShardingError
from tessera.mesh_sim.mesh import NVL72_FACTORS, Mesh, mesh
from tessera.mesh_sim.p2p import broadcast, ppermute, recv, send, shift
from tessera.mesh_sim.reduce import reduce_in_order
from tessera.mesh_sim.sharding import ShardSpec, shard_slices, split_offsets
from tessera.mesh_sim.tensor import PARTIAL, REPLICATED, SHARDED, DistTensor

__all__ = [
    "NVL72_FACTORS", "PARTIAL", "REPLICATED", "SHARDED", "DistTensor", "Mesh", "MeshError",
    "MeshShapeError", "PlacementError", "ShardSpec", "ShardingError", "all_gather",
    "all_reduce", "all_to_all", "broadcast", "from_numpy", "from_shards", "mesh",
    "ppermute", "recv", "reduce_in_order", "reduce_scatter", "relayout", "send",
    "shard_slices", "shift", "split_offsets", "tensor",
]

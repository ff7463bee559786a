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
* :mod:`.mpi` -- the same all-reduce over MPI ranks, bit for bit (needs mpi4py);
* :mod:`.pipeline` (with ``pipeline_*``) -- stages over a ``pp`` axis, micro-batches,
  GPipe and 1F1B schedules checked for deadlock;
* :mod:`.moe` -- mixture of experts over an ``ep`` axis with all_to_all;
* :mod:`.topology`, :mod:`.cost` -- NVL72 and H100-node topologies, alpha-beta
  collective costs and device rooflines;
* :mod:`.trace`, :mod:`.profile` -- simulated timelines as Chrome/Perfetto JSON and
  ``profile()``.

Everything is deterministic: a reduction adds in rank order, left to right, so its bits
do not depend on how the simulation is run (one process or any number of MPI ranks).
The user-facing namespace is :mod:`tessera.dist`.

Importing the package loads the mesh, DistTensor and the cost model; the collectives,
pipelines (with networkx), mixture of experts and the SPMD executor load when one of
their names is first used.
"""

from typing import TYPE_CHECKING

from tessera import lazy
from tessera.errors import (
    MaterializeError,
    MeshError,
    MeshShapeError,
    PlacementError,
    ShardingError,
)

# Three public names are also the names of submodules (``mesh``, ``tensor``,
# ``profile``): importing a submodule binds its name on the package, which would shadow
# a lazy function of the same name, so these are imported now (the mesh, DistTensor
# and the cost model: the core every other module needs anyway).
from tessera.mesh_sim.construct import from_numpy, from_shards, tensor
from tessera.mesh_sim.mesh import NVL72_FACTORS, Mesh, mesh
from tessera.mesh_sim.profile import profile

if TYPE_CHECKING:  # what the lazy names are, for type checkers and linters
    from tessera.mesh_sim.collectives import (
        all_gather,
        all_reduce,
        all_to_all,
        reduce_scatter,
        relayout,
    )
    from tessera.mesh_sim.cost import CostModel
    from tessera.mesh_sim.moe import MoE, MoEGrads, MoEOutput
    from tessera.mesh_sim.p2p import broadcast, ppermute, recv, send, shift
    from tessera.mesh_sim.pipeline import (
        DeadlockError,
        Schedule,
        ScheduleError,
        gpipe,
        one_f_one_b,
    )
    from tessera.mesh_sim.pipeline_run import Pipeline, PipelineResult, Stage
    from tessera.mesh_sim.reduce import reduce_in_order
    from tessera.mesh_sim.sharding import ShardSpec, shard_slices, split_offsets
    from tessera.mesh_sim.tensor import PARTIAL, REPLICATED, SHARDED, DistTensor
    from tessera.mesh_sim.topology import H100_NODE, NVL72
    from tessera.mesh_sim.trace import Timeline

# The collectives, pipelines (networkx) and mixture of experts load on first access.
__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.mesh_sim.collectives", "all_gather", "all_reduce", "all_to_all",
                 "reduce_scatter", "relayout"),
    **lazy.names("tessera.mesh_sim.cost", "CostModel"),
    **lazy.names("tessera.mesh_sim.moe", "MoE", "MoEGrads", "MoEOutput"),
    **lazy.names("tessera.mesh_sim.p2p", "broadcast", "ppermute", "recv", "send", "shift"),
    **lazy.names("tessera.mesh_sim.pipeline", "DeadlockError", "Schedule", "ScheduleError",
                 "gpipe", "one_f_one_b"),
    **lazy.names("tessera.mesh_sim.pipeline_run", "Pipeline", "PipelineResult", "Stage"),
    **lazy.names("tessera.mesh_sim.reduce", "reduce_in_order"),
    **lazy.names("tessera.mesh_sim.sharding", "ShardSpec", "shard_slices", "split_offsets"),
    **lazy.names("tessera.mesh_sim.tensor", "PARTIAL", "REPLICATED", "SHARDED", "DistTensor"),
    **lazy.names("tessera.mesh_sim.topology", "H100_NODE", "NVL72"),
    **lazy.names("tessera.mesh_sim.trace", "Timeline"),
})

__all__ = [
    "H100_NODE",
    "NVL72",
    "NVL72_FACTORS",
    "PARTIAL",
    "REPLICATED",
    "SHARDED",
    "CostModel",
    "DeadlockError",
    "DistTensor",
    "MaterializeError",
    "Mesh",
    "MeshError",
    "MeshShapeError",
    "MoE",
    "MoEGrads",
    "MoEOutput",
    "Pipeline",
    "PipelineResult",
    "PlacementError",
    "Schedule",
    "ScheduleError",
    "ShardSpec",
    "ShardingError",
    "Stage",
    "Timeline",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "from_numpy",
    "from_shards",
    "gpipe",
    "mesh",
    "one_f_one_b",
    "ppermute",
    "profile",
    "recv",
    "reduce_in_order",
    "reduce_scatter",
    "relayout",
    "send",
    "shard_slices",
    "shift",
    "split_offsets",
    "tensor",
]

"""The mesh simulator's runtime: a whole device mesh (an NVL72 rack: 72 GPUs) on one CPU.

The user-facing distributed API -- meshes, shard specs, ``DistTensor``, index launches,
regions, pipelines and mixture of experts -- is :mod:`tessera.dist`; this package runs
what it describes:

* :mod:`.blocks` -- the block bookkeeping of collectives (groups along an axis, the
  shared arrays of replicas);
* :mod:`.collectives` and :mod:`.p2p` -- ``all_gather``, ``reduce_scatter``,
  ``all_reduce``, ``all_to_all``, ``broadcast``, ``ppermute``, ``send``/``recv``,
  ``shift``, ``relayout`` on ``DistTensor`` values;
* :mod:`.reduce` -- the rank-order reduction (accumulation format, one rounding);
* :mod:`.mpi` -- the same all-reduce over MPI ranks, bit for bit (needs mpi4py);
* :mod:`.spmd` -- placed Graph IR run SPMD on local shards (``@ts.jit`` and
  ``ts.grad`` of distributed arguments, and the lockstep bodies of index launches);
* :mod:`.topology`, :mod:`.cost` -- NVL72 and H100-node topologies, alpha-beta
  collective costs and device rooflines;
* :mod:`.trace`, :mod:`.profile` -- simulated timelines as Chrome/Perfetto JSON and
  ``profile()``.

Everything is deterministic: a reduction adds in rank order, left to right, so its bits
do not depend on how the simulation is run (one process or any number of MPI ranks).

Importing the package loads the cost model, timelines and ``profile``; the collectives
and the SPMD executor load when one of their names is first used.
"""

from typing import TYPE_CHECKING

from tessera import lazy

# ``profile`` is also the name of a submodule: importing a submodule binds its name on
# the package, which would shadow a lazy function of the same name, so it is imported
# now (with the cost model and timelines it stands on).
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
    from tessera.mesh_sim.p2p import broadcast, ppermute, recv, send, shift
    from tessera.mesh_sim.reduce import reduce_in_order
    from tessera.mesh_sim.topology import H100_NODE, NVL72
    from tessera.mesh_sim.trace import Timeline

# The collectives load on first access.
__getattr__, __dir__ = lazy.attach(__name__, globals(), {
    **lazy.names("tessera.mesh_sim.collectives", "all_gather", "all_reduce", "all_to_all",
                 "reduce_scatter", "relayout"),
    **lazy.names("tessera.mesh_sim.cost", "CostModel"),
    **lazy.names("tessera.mesh_sim.p2p", "broadcast", "ppermute", "recv", "send", "shift"),
    **lazy.names("tessera.mesh_sim.reduce", "reduce_in_order"),
    **lazy.names("tessera.mesh_sim.topology", "H100_NODE", "NVL72"),
    **lazy.names("tessera.mesh_sim.trace", "Timeline"),
})

__all__ = [
    "H100_NODE",
    "NVL72",
    "CostModel",
    "Timeline",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "ppermute",
    "profile",
    "recv",
    "reduce_in_order",
    "reduce_scatter",
    "relayout",
    "send",
    "shift",
]
